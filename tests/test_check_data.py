"""The data check alone, with simulated ranks: exact results in every dtype and reduction order,
and no blind spot for a dropped, doubled or substituted rank at 132, 1,024 and 4,096 ranks.

The reductions here are done the way NCCL and gloo do them (in the dtype, rank by rank, in two
orders; `avg` premultiplied by 1/n as NCCL does, or summed then divided as gloo does), on the
very inputs `data.inputs` gives the ranks; the expected values are what the check compares with.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch

from nccl_k8s.bench import data
from nccl_k8s.bench.config import Dtype, RedOp

CPU = torch.device("cpu")
REP = 7


def _all_inputs(p: data.Pattern, n_elems: int, block: int = 512) -> torch.Tensor:
    """Every rank's input as float64, one row per rank (the values `fill` writes)."""
    rows = []
    for lo in range(0, p.nranks, block):
        ranks = torch.arange(lo, min(lo + block, p.nranks), dtype=torch.int64)[:, None]
        rows.append(data.inputs(p, ranks, 0, n_elems, REP, CPU).expand(len(ranks), n_elems))
    return torch.cat(rows)


def _in_dtype(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round to `dtype` and back to a float wide enough to hold it exactly, for arithmetic
    (CPU has no float8 adds; float32 cannot hold every int32 or double)."""
    wide = torch.float64 if dtype in (torch.float64, torch.int32, torch.int64) else torch.float32
    return x.to(wide).to(dtype).to(wide)


def _reduce(terms: torch.Tensor, dtype: torch.dtype, redop: str, order: Any) -> torch.Tensor:
    """Reduce rows in `order`, rounding every partial result to `dtype` (as a ring does)."""
    fns: dict[str, Callable[..., torch.Tensor]] = {
        "sum": torch.add, "prod": torch.mul, "max": torch.maximum, "min": torch.minimum,
    }  # fmt: skip
    fn = fns[redop]
    order = list(order)
    acc = _in_dtype(terms[order[0]], dtype)
    for r in order[1:]:
        acc = _in_dtype(fn(acc, _in_dtype(terms[r], dtype)), dtype)
    return acc


def _premultiplied(x: torch.Tensor, dtype: torch.dtype, n: int) -> torch.Tensor:
    """NCCL's avg: each rank's value times 1/n, both in the dtype."""
    inv = _in_dtype(torch.tensor(1.0 / n, dtype=torch.float64), dtype)
    return _in_dtype(_in_dtype(x, dtype) * inv, dtype)


SMALL_DTYPES: list[Dtype] = ["float", "half", "bfloat16", "double", "int8", "uint8", "int32", "int64", "f8e4m3", "f8e5m2"]  # fmt: skip


@pytest.mark.parametrize("nranks", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("redop", ["sum", "prod", "max", "min", "avg"])
def test_every_dtype_reduces_exactly_in_any_order(nranks: int, redop: RedOp) -> None:
    for name in SMALL_DTYPES:
        if redop == "avg" and not data.is_float(name):
            continue  # integer avg is NCCL's sum then divide: checked below
        p = data.choose_pattern(redop, name, nranks)
        dtype = data.torch_dtype(name)
        x = _all_inputs(p, 512)
        assert torch.equal(_in_dtype(x, dtype).to(torch.float64), x), (name, redop)  # exact inputs
        expected = data.reduced(p, 0, 512, REP, CPU)
        for order in (range(nranks), reversed(range(nranks))):
            if redop == "avg":
                got = _reduce(_premultiplied(x, dtype, nranks), dtype, "sum", order).to(dtype)
            else:
                got = _reduce(x, dtype, redop, order).to(dtype)
            wrong = data.wrong_mask(got, expected, rel_tol=p.tolerance)
            assert not wrong.any(), (name, redop, nranks, got[wrong][:4], expected[wrong][:4])
        if redop == "avg":  # gloo: sum in the dtype, then divide
            total = _reduce(_in_dtype(x, dtype), dtype, "sum", range(nranks))
            got = _in_dtype(total / nranks, dtype).to(dtype)
            assert not data.wrong_mask(got, expected, rel_tol=p.tolerance).any(), (name, nranks)


def test_integer_avg_is_the_truncated_mean() -> None:
    p = data.choose_pattern("avg", "int32", 7)
    x = _all_inputs(p, 256)
    expected = data.reduced(p, 0, 256, REP, CPU)
    assert torch.equal(torch.div(x.sum(0), 7, rounding_mode="trunc"), expected)


@pytest.mark.parametrize("dtype", ["float", "bfloat16", "int8", "f8e5m2"])
def test_data_movement_values_have_no_short_period(dtype: Dtype) -> None:
    """Shifted by 16 (or any small amount) within a rank, or another rank's data: mostly different."""
    p = data.choose_pattern(None, dtype, 4)
    mine = data.inputs(p, 1, 0, 4096, REP, CPU)
    for shift in (1, 2, 16, 64, 1024):
        same = (mine[shift:] == mine[:-shift]).float().mean().item()
        assert same < 0.2, (dtype, shift, same)
    for other in (0, 2, 3):
        assert (mine == data.inputs(p, other, 0, 4096, REP, CPU)).float().mean().item() < 0.2
    assert (mine == data.inputs(p, 1, 0, 4096, REP + 1, CPU)).float().mean().item() < 0.2


def test_a_never_written_buffer_is_all_wrong() -> None:
    for redop in (None, "sum", "avg", "max", "min", "prod"):
        for name in ("float", "bfloat16", "uint8", "int8"):
            if redop == "avg" and not data.is_float(name):
                continue
            p = data.choose_pattern(redop, name, 3)
            exp = (
                data.reduced(p, 0, 256, REP, CPU) if redop else data.inputs(p, 0, 0, 256, REP, CPU)
            )
            buf = torch.empty(256, dtype=data.torch_dtype(name))
            data.fill_sentinel(buf)
            assert data.wrong_mask(buf, exp, rel_tol=p.tolerance).all(), (redop, name)
            if redop not in (None, "min"):  # 0 is a valid data/min value; never a sum or mean
                zeros = torch.zeros(256, dtype=buf.dtype)
                assert data.wrong_mask(zeros, exp, rel_tol=p.tolerance).all(), (redop, name)


BLIND_SPOT_CASES = [
    (n, name, redop)
    for n, name, redop in itertools.product((132, 1024, 4096), ("bfloat16", "half", "float"), ("sum", "avg"))
]  # fmt: skip
ELEMENTS = {132: 1024, 1024: 2048, 4096: 4096}
BLOCK = 512  # ranks whose sabotaged results are checked at once


@pytest.mark.parametrize(("nranks", "name", "redop"), BLIND_SPOT_CASES)
def test_no_blind_spot_for_a_dropped_doubled_or_substituted_rank(
    nranks: int, name: Dtype, redop: RedOp
) -> None:
    """For every rank d: the result without d, with d twice, or with d's input in place of its
    neighbour's (and of a far rank's) fails the check in some element; the clean result passes."""
    n_elems = ELEMENTS[nranks]
    p = data.choose_pattern(redop, name, nranks)
    dtype = data.torch_dtype(name)
    x = _all_inputs(p, n_elems)
    terms = _premultiplied(x, dtype, nranks) if redop == "avg" else _in_dtype(x, dtype)
    clean = _reduce(terms, dtype, "sum", range(nranks))
    expected = data.reduced(p, 0, n_elems, REP, CPU)
    assert not data.wrong_mask(clean.to(dtype), expected, rel_tol=p.tolerance).any()

    if redop == "avg":  # the tolerance is far below the least change one rank makes
        assert float((expected * p.tolerance).max()) <= p.min_change / 8

    # Rank by rank in blocks (all four sabotages of 4,096 ranks at once held 2 GB).
    base = clean.to(torch.float64)[None, :]
    nears = torch.roll(terms, shifts=-1, dims=0)  # rank d + 1's term
    fars = torch.roll(terms, shifts=-(nranks // 2 + 1), dims=0)
    blind: dict[str, list[int]] = {}
    for lo in range(0, nranks, BLOCK):
        ranks = torch.arange(lo, min(lo + BLOCK, nranks))
        t, near, far = (x[lo : lo + BLOCK].to(torch.float64) for x in (terms, nears, fars))
        sabotaged = {
            "dropped": base - t,
            "doubled": base + t,
            "d's input instead of d+1's": base - near + t,
            "d's input instead of a far rank's": base - far + t,
        }
        for what, got in sabotaged.items():
            wrong = data.wrong_mask(got.to(dtype), expected[None, :], rel_tol=p.tolerance)
            per_rank = wrong.sum(dim=1)
            blind.setdefault(what, []).extend((ranks[per_rank == 0]).tolist())
    for what, ranks_blind in blind.items():
        assert not ranks_blind, (
            f"{what}: ranks {ranks_blind[:10]} change no element ({name} {redop} n={nranks})"
        )
