"""Inputs whose correct result is exact, and the check that counts wrong elements.

Every element's value comes from a 32-bit hash of (rank, index, repetition), so no two places in
a buffer, no two ranks and no two checks share a pattern: a chunk shifted inside itself, two
ranks' chunks swapped or a stale buffer from an earlier check all read as wrong elements, as in
nccl-tests (whose generator this follows in idea, not in code). Values are small integers (or,
for `avg`, short binary fractions) that every dtype holds exactly.

How each reduction stays exact whatever order NCCL or gloo reduce in:

- sum: each element draws a target y in [B/2, B] (B the largest integer the dtype holds
  exactly) and splits it over the ranks, q = y // n to every rank and one more to the m = y % n
  ranks an element-wise random permutation puts first. Every partial sum lies in [0, y], so it
  is exact; the expected value is y, computed by any rank in O(1) per element. Below n <= B/2
  every rank adds at least 1 to every element, so a missing or doubled rank changes them all.
- prod: the same split of a target exponent; each rank contributes 2**x, the product is 2**y.
- max/min: the rank the permutation puts first holds the target; the others draw values on the
  near side of it.
- avg: k ranks per element (tiled so that every rank contributes once per n/k elements) give
  values in [L, 2L) with b random low bits; the others give 0. The mean is known exactly; NCCL
  premultiplies by 1/n and gloo divides the sum, so the result may be off by a few roundings,
  and k is small enough per dtype that the tolerance, 2(k + 1) units of rounding, stays far below
  L/n, the least that a missing, doubled or substituted rank changes (test_check_blind_spots).
- data movement: values are the hash itself, reduced to an alphabet of 8 to 2**20 symbols.

Work goes in chunks so that checking a 4 GB buffer never needs 32 GB of scratch.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from nccl_k8s.bench.config import Dtype, RedOp
from nccl_k8s.bench.dtypes import DTYPE_FACTS

if TYPE_CHECKING:
    import torch

#: Elements per chunk when generating or checking (bounded scratch memory).
CHUNK = 1 << 22

#: What a reducing collective does with the ranks' inputs; "move" for collectives that only copy.
Kind = Literal["move", "sum", "prod", "max", "min", "avg", "avg_int"]

# Each type's limits, from its entry in bench.dtypes (the one home of the types).
#: Largest B such that every integer in [0, B] is exact in the dtype.
EXACT: dict[Dtype, int] = {name: f.exact for name, f in DTYPE_FACTS.items()}
#: Largest power of two each dtype holds (products are 2**y with y <= this).
DOUBLINGS: dict[Dtype, int] = {name: f.doublings for name, f in DTYPE_FACTS.items()}
#: Floating types: explicit mantissa bits and the smallest normal number.
FLOAT_LAYOUT: dict[Dtype, tuple[int, float]] = {
    name: f.float_layout for name, f in DTYPE_FACTS.items() if f.float_layout is not None
}
#: Ranks that contribute to one element of an `avg`, per floating dtype (DtypeFacts says why).
AVG_CONTRIBUTORS: dict[Dtype, int] = {
    name: f.avg_contributors for name, f in DTYPE_FACTS.items() if f.floating
}
#: Largest symbol of the data-movement alphabet (kept clear of the sentinel).
_MOVE_MAX = 1 << 20
#: Expected values of a received buffer: fn(start, n) for elements [start, start + n).
ExpectedFn = Callable[[int, int], "torch.Tensor"]


#: A value no pattern produces, written into receive buffers so an op that writes nothing shows.
SENTINEL = -1

_M32 = 0xFFFFFFFF
# Two odd multipliers below 2**31, so x * C never leaves int64 for x < 2**32.
_C1 = 0x7FEB352D
_C2 = 0x2C1B3C6D
_GOLDEN = 0x1E3779B9
_TAGS = {"move": 1, "sum": 2, "prod": 3, "max": 4, "min": 5, "avg": 6, "avg_int": 2}


def mix32(x: int) -> int:
    """The element hash on one Python int (for salts): a 32-bit avalanche mix."""
    x &= _M32
    x ^= x >> 16
    x = (x * _C1) & _M32
    x ^= x >> 15
    x = (x * _C2) & _M32
    x ^= x >> 16
    return x


def _mix(x: torch.Tensor) -> torch.Tensor:
    """mix32 on an int64 tensor of values in [0, 2**32), in place where it can."""
    x = x ^ (x >> 16)
    x.mul_(_C1).bitwise_and_(_M32)
    x.bitwise_xor_(x >> 15)
    x.mul_(_C2).bitwise_and_(_M32)
    x.bitwise_xor_(x >> 16)
    return x


def _salt(*parts: int) -> int:
    h = 0x9E3779B9
    for p in parts:
        h = mix32(h ^ (p & _M32) ^ ((p >> 32) * _GOLDEN))
    return h


def _hashed(start: int, n: int, salt: int, device: torch.device) -> torch.Tensor:
    """32-bit hashes of indices [start, start + n) under `salt` (int64 tensor)."""
    import torch

    idx = torch.arange(start, start + n, device=device, dtype=torch.int64)
    if start + n > _M32:  # buffers past 4 Gi elements: fold the high bits in
        idx = (idx & _M32) ^ (((idx >> 32) * _GOLDEN) & _M32)
    return _mix(idx.bitwise_xor_(salt))


@functools.lru_cache(maxsize=64)
def rank_units(n: int) -> tuple[int, ...]:
    """Multipliers a with gcd(a, n) = 1: r -> (a r + s) mod n permutes the ranks."""
    return tuple(a for a in range(max(n, 1)) if math.gcd(a, n) == 1) or (0,)


def torch_dtype(name: Dtype) -> torch.dtype:
    import torch

    dtype: torch.dtype = getattr(torch, DTYPE_FACTS[name].torch)
    return dtype


def is_float(dtype: Dtype) -> bool:
    return dtype in FLOAT_LAYOUT


@dataclasses.dataclass(frozen=True)
class Pattern:
    """How the inputs of one collective are generated and what its output must be."""

    kind: Kind
    dtype: Dtype
    nranks: int

    @property
    def budget(self) -> int:
        """sum/avg_int: the largest target; prod: the largest exponent; move/max/min: alphabet."""
        if self.kind == "prod":
            return DOUBLINGS[self.dtype]
        # An unsigned type's largest value is the sentinel (-1 stored as uint8 is 255).
        exact = EXACT[self.dtype] - (0 if DTYPE_FACTS[self.dtype].signed else 1)
        if self.kind in ("sum", "avg_int"):
            return min(exact, 1 << 31)
        return min(exact, _MOVE_MAX)

    @property
    def contributors(self) -> int:
        """avg: ranks with a non-zero value per element."""
        return min(self.nranks, AVG_CONTRIBUTORS.get(self.dtype, 1))

    @property
    def avg_bits(self) -> int:
        return min(FLOAT_LAYOUT[self.dtype][0], 6)

    @property
    def avg_base(self) -> float:
        """L: a power of two with L/n a normal number, so premultiplied terms keep their bits."""
        _, tiny = FLOAT_LAYOUT[self.dtype]
        need = max(1 << self.avg_bits, self.nranks * tiny)
        return float(2.0 ** math.ceil(math.log2(need)))

    @property
    def tolerance(self) -> float:
        """Relative error allowed: 2(k + 1) unit roundoffs for avg, 0 (exact) otherwise."""
        if self.kind != "avg":
            return 0.0
        u = 2.0 ** -(FLOAT_LAYOUT[self.dtype][0] + 1)
        return 2.0 * (self.contributors + 1) * u

    @property
    def min_change(self) -> float:
        """avg: the least a missing, doubled or substituted rank moves an element (L/n)."""
        return self.avg_base / self.nranks


def choose_pattern(redop: RedOp | None, dtype: Dtype, nranks: int) -> Pattern:
    """The pattern for a collective: redop None for the ones that only move data."""
    if redop is None:
        return Pattern("move", dtype, nranks)
    if redop == "avg":
        return Pattern("avg" if is_float(dtype) else "avg_int", dtype, nranks)
    return Pattern(redop, dtype, nranks)


# -- per-element draws shared by every rank ------------------------------------------------------
def _element(p: Pattern, start: int, n: int, rep: int, device: torch.device) -> torch.Tensor:
    """A rank-independent hash per element (the same on every rank)."""
    return _hashed(start, n, _salt(_TAGS[p.kind], rep, 0x5EED), device)


def _target(p: Pattern, e: torch.Tensor) -> torch.Tensor:
    """sum/prod: y in [B/2, B]; max: y in [V/2, V]; min: y in [0, V/2]."""
    b = p.budget
    if p.kind == "min":
        return e % (b // 2 + 1)
    lo = b // 2
    return e % (b - lo + 1) + lo


def _position(p: Pattern, e: torch.Tensor, rank: int | torch.Tensor) -> torch.Tensor:
    """Rank's place in an element-wise random permutation of the ranks: (a r + s) mod n."""
    import torch

    n = p.nranks
    units = rank_units(n)
    e2 = _mix(e ^ 0x2545F491)
    a = torch.tensor(units, dtype=torch.int64, device=e.device)[e2 % len(units)]
    s = _mix(e2 ^ 0x68E31DA4) % n
    return (a * rank + s) % n


def _avg_position(
    p: Pattern, start: int, n: int, rep: int, rank: int | torch.Tensor, device: torch.device
) -> torch.Tensor:
    """avg: rank's place among the contributors of each element, tiled so that in any n/k
    consecutive elements every rank is one of the k (a random affine order per repetition)."""
    import torch

    world, k = p.nranks, p.contributors
    units = rank_units(world)
    h = _salt(_TAGS["avg"], rep, 0xA7)
    a, s = units[h % len(units)], mix32(h) % world
    t = (a * rank + s) % world
    j = torch.arange(start, start + n, device=device, dtype=torch.int64)
    return (t - j * k) % world


def _avg_values(p: Pattern, e: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """avg: value of contributor `pos` (< k) of each element, in [L, 2L)."""
    import torch

    bits = p.avg_bits
    r = _mix(e ^ ((pos * _GOLDEN) & _M32)) & ((1 << bits) - 1)
    return (r.to(torch.float64) / (1 << bits) + 1.0) * p.avg_base


def inputs(
    p: Pattern, rank: int | torch.Tensor, start: int, n: int, rep: int, device: torch.device
) -> torch.Tensor:
    """float64 values of `rank`'s input elements [start, start + n) (exact in the dtype).

    For the reductions `rank` may be a column of ranks (shape [R, 1]): then one row per rank,
    which is how the unit tests simulate thousands of ranks.
    """
    import torch

    if p.kind == "move":
        if not isinstance(rank, int):
            raise TypeError("data movement draws one rank at a time")
        return (_hashed(start, n, _salt(_TAGS["move"], rep, rank), device) % (p.budget + 1)).to(
            torch.float64
        )
    e = _element(p, start, n, rep, device)
    if p.kind == "avg":
        pos = _avg_position(p, start, n, rep, rank, device)
        vals = _avg_values(p, e, pos)
        return torch.where(pos < p.contributors, vals, torch.zeros_like(vals))
    y = _target(p, e)
    pos = _position(p, e, rank)
    if p.kind in ("sum", "prod", "avg_int"):
        x = y // p.nranks + (pos < y % p.nranks).to(torch.int64)
        return torch.exp2(x.to(torch.float64)) if p.kind == "prod" else x.to(torch.float64)
    # max / min: the rank in first place holds the target, the others stay on its near side.
    r = _mix(e ^ ((pos * _GOLDEN) & _M32))
    other = r % (y + 1) if p.kind == "max" else y + r % (p.budget - y + 1)
    return torch.where(pos == 0, y, other).to(torch.float64)


def reduced(p: Pattern, start: int, n: int, rep: int, device: torch.device) -> torch.Tensor:
    """float64 result of reducing every rank's elements [start, start + n)."""
    import torch

    e = _element(p, start, n, rep, device)
    if p.kind == "avg":
        total = torch.zeros(n, dtype=torch.float64, device=device)
        for i in range(p.contributors):
            total += _avg_values(p, e, torch.full_like(e, i))
        return total / p.nranks
    y = _target(p, e)
    if p.kind == "prod":
        return torch.exp2(y.to(torch.float64))
    if p.kind == "avg_int":
        return (y // p.nranks).to(torch.float64)
    return y.to(torch.float64)


def _cast(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    import torch

    if dtype.is_floating_point and dtype.itemsize == 1:
        return values.to(torch.float32).to(dtype)
    return values.to(dtype)


def fill(buf: torch.Tensor, p: Pattern, rank: int, rep: int, *, start: int = 0) -> None:
    """Write rank's input element start + j into buf[j] for every j."""
    for lo in range(0, buf.numel(), CHUNK):
        n = min(CHUNK, buf.numel() - lo)
        buf[lo : lo + n].copy_(_cast(inputs(p, rank, start + lo, n, rep, buf.device), buf.dtype))


def fill_sentinel(buf: torch.Tensor) -> None:
    if buf.numel():
        import torch

        # An unsigned type's largest value (-1's bits), which the patterns avoid (budget).
        unsigned = not (buf.dtype.is_floating_point or buf.dtype.is_signed)
        buf.fill_(torch.iinfo(buf.dtype).max if unsigned else SENTINEL)


def wrong_mask(got: torch.Tensor, expected: torch.Tensor, *, rel_tol: float = 0.0) -> torch.Tensor:
    """True where `got` (any dtype) is not `expected` (float64), element by element.

    Exact patterns compare after rounding the expectation to the dtype (a no-op: the values are
    exact); `rel_tol` > 0 (avg) allows |got - expected| <= rel_tol * |expected|. NaN is wrong.
    """
    import torch

    a = got.to(torch.float64)
    if rel_tol:
        return ~((a - expected).abs() <= expected.abs() * rel_tol)
    return a != _cast(expected, got.dtype).to(torch.float64)


def count_wrong(got: torch.Tensor, expected_fn: ExpectedFn, *, rel_tol: float = 0.0) -> int:
    """Elements of `got` that differ from expected_fn(start, n), chunk by chunk."""
    wrong = 0
    for lo in range(0, got.numel(), CHUNK):
        n = min(CHUNK, got.numel() - lo)
        wrong += int(wrong_mask(got[lo : lo + n], expected_fn(lo, n), rel_tol=rel_tol).sum().item())
    return wrong


__all__ = [
    "AVG_CONTRIBUTORS",
    "CHUNK",
    "DOUBLINGS",
    "EXACT",
    "SENTINEL",
    "ExpectedFn",
    "Kind",
    "Pattern",
    "choose_pattern",
    "count_wrong",
    "fill",
    "fill_sentinel",
    "inputs",
    "is_float",
    "mix32",
    "rank_units",
    "reduced",
    "torch_dtype",
    "wrong_mask",
]
