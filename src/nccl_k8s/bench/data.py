"""Inputs whose correct result is exact, and the check that counts wrong elements.

Every rank r fills element j of its input with f((r + j + rep) % k), small integers that every
dtype holds exactly. Because the values depend on r only through a shift, the reduction over
ranks of element j depends only on how many ranks land on each residue, which is known in closed
form; so each rank computes its expected output without seeing the others' data, in O(k) passes
over its own buffer, for any world size.

k and f are chosen per (redop, dtype, world size) so that no sum, product or partial result ever
leaves the range where the dtype is exact: then the correct answer does not depend on the order
in which NCCL or gloo reduce, and any difference is a real error. Averages are the exception
(NCCL multiplies by 1/n before summing), so `avg` gives every rank the same values and allows
rounding of a few units in the last place.

Work goes in chunks so that checking a 4 GB buffer never needs 32 GB of int64 scratch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: Elements per chunk when generating or checking (bounded scratch memory).
CHUNK = 1 << 24

#: Largest integer each float dtype represents exactly (2^(mantissa bits + 1)).
_EXACT = {
    "half": 2048,
    "bfloat16": 256,
    "float": 1 << 24,
    "double": 1 << 53,
    "f8e4m3": 16,
    "f8e5m2": 8,
    "int8": 127,
    "uint8": 255,
    "int32": (1 << 31) - 1,
    "int64": (1 << 63) - 1,
}
#: Most doublings a product may hold without overflow.
_DOUBLINGS = {
    "half": 15,
    "bfloat16": 100,
    "float": 100,
    "double": 1000,
    "f8e4m3": 8,
    "f8e5m2": 15,
    "int8": 6,
    "uint8": 7,
    "int32": 30,
    "int64": 62,
}
#: Expected int64 values of a received buffer: fn(start, n) for elements [start, start + n).
ExpectedFn = Callable[[int, int], "torch.Tensor"]

#: A value no pattern produces, written into receive buffers so an op that writes nothing shows.
SENTINEL = -1


def torch_dtype(name: str) -> torch.dtype:
    import torch

    return {
        "int8": torch.int8,
        "uint8": torch.uint8,
        "int32": torch.int32,
        "int64": torch.int64,
        "half": torch.float16,
        "float": torch.float32,
        "double": torch.float64,
        "bfloat16": torch.bfloat16,
        "f8e4m3": torch.float8_e4m3fn,
        "f8e5m2": torch.float8_e5m2,
    }[name]


def is_float(dtype: str) -> bool:
    return dtype not in ("int8", "uint8", "int32", "int64")


@dataclasses.dataclass(frozen=True)
class Pattern:
    """value(r, j) = f((r + j + rep) % k); f is 'ident' (t), 'spike' (t == 0) or 'double' (2 if t == 0 else 1)."""

    k: int
    f: str
    same_on_all_ranks: bool = False

    def fvals(self) -> list[int]:
        if self.f == "ident":
            return list(range(self.k))
        if self.f == "spike":
            return [1] + [0] * (self.k - 1)
        return [2] + [1] * (self.k - 1)


def choose_pattern(redop: str | None, dtype: str, nranks: int) -> Pattern:
    """The pattern for a collective: redop None for the ones that only move data."""
    exact = _EXACT[dtype]
    if redop is None or redop in ("max", "min"):
        return Pattern(min(16, exact + 1), "ident")
    if redop == "sum":
        if exact // nranks >= 1:
            return Pattern(min(16, exact // nranks + 1), "ident")
        return Pattern(math.ceil(nranks / exact), "spike")
    if redop == "prod":
        return Pattern(max(1, math.ceil(nranks / _DOUBLINGS[dtype])), "double")
    # avg: identical inputs, so the average is the value itself.
    return Pattern(min(16, max(1, exact // nranks) + 1), "ident", same_on_all_ranks=True)


def _values(
    pattern: Pattern, rank: int, start: int, n: int, rep: int, device: torch.device
) -> torch.Tensor:
    """int64 values of elements [start, start + n) on `rank`."""
    import torch

    shift = 0 if pattern.same_on_all_ranks else rank
    idx = torch.arange(
        start + shift + rep, start + shift + rep + n, device=device, dtype=torch.int64
    )
    idx.remainder_(pattern.k)
    table = torch.tensor(pattern.fvals(), device=device, dtype=torch.int64)
    return table[idx]


def _cast(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    import torch

    if dtype.is_floating_point and dtype.itemsize == 1:
        return values.to(torch.float32).to(dtype)
    return values.to(dtype)


def fill(buf: torch.Tensor, pattern: Pattern, rank: int, rep: int, *, start: int = 0) -> None:
    """Write value(rank, start + j) into buf[j] for every j."""
    for lo in range(0, buf.numel(), CHUNK):
        n = min(CHUNK, buf.numel() - lo)
        buf[lo : lo + n].copy_(
            _cast(_values(pattern, rank, start + lo, n, rep, buf.device), buf.dtype)
        )


def fill_sentinel(buf: torch.Tensor) -> None:
    import torch

    if buf.numel():
        buf.copy_(
            _cast(
                torch.full((1,), SENTINEL, dtype=torch.int64, device=buf.device), buf.dtype
            ).expand_as(buf)
        )


def _reduced(
    pattern: Pattern, redop: str, nranks: int, start: int, n: int, rep: int, device: torch.device
) -> torch.Tensor:
    """Exact reduction over all ranks of elements [start, start + n), as int64 (or float64 for avg)."""
    import torch

    if pattern.same_on_all_ranks:
        return _values(pattern, 0, start, n, rep, device)
    k = pattern.k
    q, rem = divmod(nranks, k)
    m = torch.arange(start + rep, start + rep + n, device=device, dtype=torch.int64).remainder_(k)
    fv = pattern.fvals()
    acc: torch.Tensor | None = None
    for t in range(k):
        # How many ranks r in [0, n) have (r + m) % k == t.
        cnt = ((t - m).remainder_(k) < rem).to(torch.int64) + q
        if redop == "sum":
            term = cnt * fv[t]
            acc = term if acc is None else acc + term
        elif redop == "prod":
            term = torch.pow(torch.full_like(cnt, fv[t]), cnt)
            acc = term if acc is None else acc * term
        else:
            big = torch.iinfo(torch.int64).max
            present = torch.where(
                cnt > 0,
                torch.full_like(cnt, fv[t]),
                torch.full_like(cnt, -big if redop == "max" else big),
            )
            if acc is None:
                acc = present
            else:
                acc = torch.maximum(acc, present) if redop == "max" else torch.minimum(acc, present)
    assert acc is not None
    return acc


def count_wrong(
    got: torch.Tensor,
    expected_fn: ExpectedFn,
    *,
    tolerance_ulps: float = 0.0,
) -> int:
    """Elements of `got` that differ from expected_fn(start, n) (int64 values), chunk by chunk."""
    import torch

    wrong = 0
    for lo in range(0, got.numel(), CHUNK):
        n = min(CHUNK, got.numel() - lo)
        exp = _cast(expected_fn(lo, n), got.dtype)
        if got.dtype.is_floating_point:
            a = got[lo : lo + n].to(torch.float64)
            b = exp.to(torch.float64)
            if tolerance_ulps:
                eps = torch.finfo(got.dtype).eps
                bad = (a - b).abs() > (b.abs().clamp(min=1.0) * eps * tolerance_ulps)
            else:
                bad = a != b
        else:
            bad = got[lo : lo + n] != exp
        wrong += int(bad.sum().item())
    return wrong


def expected_values(
    pattern: Pattern, rank: int, start: int, n: int, rep: int, device: torch.device
) -> torch.Tensor:
    return _values(pattern, rank, start, n, rep, device)


def expected_reduced(
    pattern: Pattern, redop: str, nranks: int, start: int, n: int, rep: int, device: torch.device
) -> torch.Tensor:
    return _reduced(pattern, redop, nranks, start, n, rep, device)


__all__ = [
    "CHUNK",
    "SENTINEL",
    "ExpectedFn",
    "Pattern",
    "choose_pattern",
    "count_wrong",
    "expected_reduced",
    "expected_values",
    "fill",
    "fill_sentinel",
    "is_float",
    "torch_dtype",
]
