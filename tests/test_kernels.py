"""The torch-free data path writes what bench.data writes and counts the wrong elements it counts.

bench.kernels' CUDA kernels are compiled from one C text (bench._kernel_source); here the very
same text is compiled by the machine's C compiler and run on the CPU, against bench.data on
torch: the same bytes for every dtype, kind, rank count and offset (past 2**32 elements too),
and the same wrong-element counts on correct results and on sabotaged ones (a shifted chunk, a
stale repetition, a missing or substituted rank, a NaN, a buffer never written). The GPU run of
the compiled kernels against torch on the device is tests/test_gpu_direct.py.
"""

from __future__ import annotations

import ctypes
import shutil

import pytest
import torch

from nccl_k8s.bench import data, kernels
from nccl_k8s.bench._kernel_source import SOURCE
from nccl_k8s.bench.collectives import Chunks, InputOf, Reduced
from nccl_k8s.bench.config import Dtype
from nccl_k8s.bench.dtypes import DTYPE_FACTS
from nccl_k8s.bench.memory import expected_values
from nccl_k8s.bench.native import build_shared

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

#: Every type: the kernels have each one (uint32 and uint64 since issue 39).
DTYPES: list[Dtype] = list(DTYPE_FACTS)
CPU = torch.device("cpu")


class Host:
    """The kernels' text compiled for the CPU: nk_fill, nk_sentinel and nk_check on host memory."""

    def __init__(self) -> None:
        path = build_shared(SOURCE, "kernels-host")
        assert path is not None, "cc could not build the kernels' text"
        self.lib = ctypes.CDLL(path)
        self._units: dict[int, ctypes.Array[ctypes.c_int64]] = {}

    def pattern(self, p: data.Pattern) -> kernels.PatternStruct:
        table = self._units.setdefault(
            p.nranks, (ctypes.c_int64 * len(kernels.units(p.nranks)))(*kernels.units(p.nranks))
        )
        return kernels.pattern_struct(p, ctypes.addressof(table), len(table))

    def fill(self, t: torch.Tensor, dtype: Dtype, p: data.Pattern, rank: int, rep: int, start: int) -> None:  # fmt: skip
        self.lib.nk_fill(
            ctypes.c_void_p(t.data_ptr()), ctypes.c_int64(t.numel()), kernels.TYPES[dtype],
            self.pattern(p), ctypes.c_int64(rank), ctypes.c_int64(rep), ctypes.c_int64(start),
        )  # fmt: skip

    def sentinel(self, t: torch.Tensor, dtype: Dtype) -> None:
        self.lib.nk_sentinel(
            ctypes.c_void_p(t.data_ptr()), ctypes.c_int64(t.numel()), kernels.TYPES[dtype]
        )

    def count_wrong(
        self, t: torch.Tensor, dtype: Dtype, p: data.Pattern, rep: int, e: object
    ) -> int:
        mode, a, b = kernels.expectation(e)
        wrong = ctypes.c_uint64(0)
        self.lib.nk_check(
            ctypes.c_void_p(t.data_ptr()), ctypes.c_int64(t.numel()), kernels.TYPES[dtype],
            self.pattern(p), ctypes.c_int64(rep), ctypes.c_int(mode), ctypes.c_int64(a),
            ctypes.c_int64(b), ctypes.c_double(p.tolerance), ctypes.byref(wrong),
        )  # fmt: skip
        return int(wrong.value)


@pytest.fixture(scope="module")
def host() -> Host:
    return Host()


def _kinds(dtype: Dtype) -> list[str | None]:
    return [None, "sum", "prod", "max", "min", "avg"]


def _empty(dtype: Dtype, n: int) -> torch.Tensor:
    return torch.empty(n, dtype=data.torch_dtype(dtype))


def _bytes(t: torch.Tensor) -> bytes:
    return bytes(t.view(torch.uint8).numpy().tobytes())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("nranks", [1, 3, 8])
def test_fill_writes_the_same_bytes_as_bench_data(host: Host, dtype: Dtype, nranks: int) -> None:
    n = 3000
    for redop in _kinds(dtype):
        p = data.choose_pattern(redop, dtype, nranks)  # type: ignore[arg-type]
        for rank in sorted({0, nranks // 2, nranks - 1}):
            for start, rep in ((0, 1), (12345, 7), ((1 << 32) - 1000, 3), (5 << 32, 11)):
                ours, theirs = _empty(dtype, n), _empty(dtype, n)
                host.fill(ours, dtype, p, rank, rep, start)
                data.fill(theirs, p, rank, rep, start=start)
                assert _bytes(ours) == _bytes(theirs), (p, rank, start, rep)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sentinel_is_bench_datas(host: Host, dtype: Dtype) -> None:
    ours, theirs = _empty(dtype, 64), _empty(dtype, 64)
    host.sentinel(ours, dtype)
    data.fill_sentinel(theirs)
    assert _bytes(ours) == _bytes(theirs)


def _reduce(p: data.Pattern, dtype: Dtype, n: int, rep: int, ranks: list[int]) -> torch.Tensor:
    """What a reducing collective leaves: the ranks' inputs, cast to the dtype, reduced in float64
    in rank order and cast back (avg: sum, then the division NCCL premultiplies or gloo makes)."""
    tdt = data.torch_dtype(dtype)
    parts = [data._cast(data.inputs(p, r, 0, n, rep, CPU), tdt).to(torch.float64) for r in ranks]
    stack = torch.stack(parts)
    if p.kind in ("sum", "avg", "avg_int"):
        out = stack.sum(0)
        if p.kind == "avg":
            out = out / p.nranks
        elif p.kind == "avg_int":
            out = torch.div(out, p.nranks, rounding_mode="floor")
    elif p.kind == "prod":
        out = stack.prod(0)
    elif p.kind == "max":
        out = stack.max(0).values
    else:
        out = stack.min(0).values
    return data._cast(out, tdt)


def _both(host: Host, t: torch.Tensor, dtype: Dtype, p: data.Pattern, rep: int, e: object) -> tuple[int, int]:  # fmt: skip
    theirs = data.count_wrong(t, expected_values(e, p, rep, CPU), rel_tol=p.tolerance)  # type: ignore[arg-type]
    return host.count_wrong(t, dtype, p, rep, e), theirs


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("redop", ["sum", "prod", "max", "min", "avg"])
def test_reductions_are_checked_alike_and_sabotage_caught(
    host: Host, dtype: Dtype, redop: str
) -> None:
    nranks, n, rep = 4, 2048, 5
    p = data.choose_pattern(redop, dtype, nranks)  # type: ignore[arg-type]
    e = Reduced(0)
    good = _reduce(p, dtype, n, rep, list(range(nranks)))
    assert _both(host, good, dtype, p, rep, e) == (0, 0)
    sabotaged = {
        "shift": torch.roll(good, 16),
        "stale": _reduce(p, dtype, n, rep - 1, list(range(nranks))),
        "missing rank": _reduce(p, dtype, n, rep, [0, 2, 3]),
        "substituted rank": _reduce(p, dtype, n, rep, [0, 0, 2, 3]),
        "never written": data._cast(torch.full((n,), -1.0, dtype=torch.float64), good.dtype),
    }
    if good.dtype.is_floating_point:
        nan = good.clone()
        nan[100:110] = float("nan")
        sabotaged["nan"] = nan
    for what, got in sabotaged.items():
        ours, theirs = _both(host, got, dtype, p, rep, e)
        assert ours == theirs, what
        if what in ("shift", "stale", "never written", "nan"):
            assert ours > 0, what
    # A missing or substituted rank changes every element where its contribution is seen:
    # both checks agree on how many (the blind-spot analysis is test_check_data's).
    assert _both(host, sabotaged["missing rank"], dtype, p, rep, e)[0] > 0 or p.kind in (
        "max",
        "min",
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_data_movement_is_checked_alike(host: Host, dtype: Dtype) -> None:
    nranks, n, rep = 4, 1024, 9
    p = data.choose_pattern(None, dtype, nranks)
    tdt = data.torch_dtype(dtype)
    chunk = n // nranks
    cases = [
        (InputOf(2, 100), data._cast(data.inputs(p, 2, 100, n, rep, CPU), tdt)),
        (Chunks(chunk, 7), torch.cat([data._cast(data.inputs(p, r, 7, chunk, rep, CPU), tdt) for r in range(nranks)])),
    ]  # fmt: skip
    for e, good in cases:
        assert _both(host, good, dtype, p, rep, e) == (0, 0)
        swapped = good.clone()
        swapped[:chunk], swapped[chunk : 2 * chunk] = good[chunk : 2 * chunk], good[:chunk]
        for what, got in {"shift": torch.roll(good, 16), "swap": swapped,
                          "wrong source": data._cast(data.inputs(p, 1, 100, n, rep, CPU), tdt)}.items():  # fmt: skip
            ours, theirs = _both(host, got, dtype, p, rep, e)
            assert ours == theirs, (e, what)
            assert ours > 0, (e, what)


def test_a_planted_formula_change_is_caught(host: Host) -> None:
    """The comparison can fail: one constant changed in the C text changes the bytes."""
    path = build_shared(SOURCE.replace("0x5EED", "0x5EEE"), "kernels-host-broken")
    assert path is not None
    broken = Host.__new__(Host)
    broken.lib, broken._units = ctypes.CDLL(path), {}
    p = data.choose_pattern("sum", "float", 4)
    ours, theirs = _empty("float", 256), _empty("float", 256)
    broken.fill(ours, "float", p, 1, 3, 0)
    data.fill(theirs, p, 1, 3)
    assert _bytes(ours) != _bytes(theirs)


@pytest.mark.parametrize("dtype", ["uint32", "uint64"])
def test_unsigned_words_are_nccl_tests_types_with_a_sentinel_no_pattern_writes(
    host: Host, dtype: Dtype
) -> None:
    """Issue 39 item 8: uint32 and uint64 as nccl-tests 2.19.6 has them (src/common.cu's type
    list, common.h's wordSize 4 and 8, ncclUint32 3 and ncclUint64 5 from nccl.h; checked
    exactly, as its verifier checks integral types): the kernels store and load unsigned words
    of that size, and the sentinel is the all-ones word (2**64 - 1 is no double: stored as
    bits), a value no fill of any reduction's pattern writes, so an element never written is
    counted wrong. The values the fills write are bench.data's (tests above, byte for byte)."""
    facts = DTYPE_FACTS[dtype]
    assert (facts.size, facts.nccl, facts.signed) == ({"uint32": 4, "uint64": 8}[dtype],
                                                      {"uint32": 3, "uint64": 5}[dtype], False)  # fmt: skip
    assert f"T_{dtype.upper()}" in SOURCE and kernels.TYPES[dtype] == facts.kernel
    ones = _empty(dtype, 16)
    host.sentinel(ones, dtype)
    assert _bytes(ones) == b"\xff" * 16 * facts.size
    top = (1 << (8 * facts.size)) - 1
    for redop in _kinds(dtype):
        p = data.choose_pattern(redop, dtype, 4)  # type: ignore[arg-type]
        for rank in range(4):
            buf = _empty(dtype, 4096)
            host.fill(buf, dtype, p, rank, 3, 0)
            words = [int(v) & top for v in buf.view(_signed(dtype)).tolist()]
            assert max(words) < top, (redop, rank)
        # Nothing written: every element is wrong, whatever the reduction.
        assert host.count_wrong(ones, dtype, p, 3, Reduced(0)) == 16, redop


def _signed(dtype: Dtype) -> torch.dtype:
    return torch.int32 if dtype == "uint32" else torch.int64
