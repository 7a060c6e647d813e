"""Sizes, counts and bandwidth formulas per collective, exactly as nccl-tests defines them.

Pure arithmetic, no torch: the size column, the per-rank count column, the in-place offsets, and
algbw/busbw. Kept apart from the code that runs the ops so the numbers can be checked on their own
against nccl-tests' published outputs.

For a requested size S and element size E, count = S // E. Collectives that split a buffer
across ranks give each rank `(count // nranks)` elements rounded down to a multiple of 16 bytes;
the size column is then the larger of the send and receive buffers, so it can be smaller than S.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from nccl_k8s.bench.config import Op

#: How a split collective lays its per-rank chunks out: same (no split), gather (recv holds n
#: chunks), scatter (send holds n chunks), alltoall (both).
Layout = Literal["same", "gather", "scatter", "alltoall"]
#: Bus factor: allreduce 2(n-1)/n, ring (n-1)/n, one 1.
Bus = Literal["allreduce", "ring", "one"]
GIB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Counts:
    """Element counts of one collective call on one rank."""

    send: int
    """Elements in the send buffer."""
    recv: int
    """Elements in the receive buffer."""
    param: int
    """The count handed to the collective; nccl-tests' count column."""
    send_inplace_offset: int
    """In place, rank r sends from recvbuf + r * this many elements."""
    recv_inplace_offset: int
    """In place, rank r receives into recvbuf + r * this many elements."""

    def size_bytes(self, elt_size: int) -> int:
        """The size column: the larger of the two buffers, in bytes."""
        return max(self.send, self.recv) * elt_size


@dataclasses.dataclass(frozen=True)
class Shape:
    """How one collective sizes its buffers and how its bandwidth is reported."""

    name: Op
    split: bool
    """Buffers are split into per-rank chunks (rounded down to 16 bytes)."""
    layout: Layout
    bus: Bus
    rooted: bool
    reduces: bool
    """Prints the reduction in the redop column (others print 'none')."""
    inplace_checked: bool
    """nccl-tests checks the in-place result (alltoall and sendrecv print N/A)."""

    def counts(self, size_bytes: int, elt_size: int, nranks: int) -> Counts:
        count = size_bytes // elt_size
        if not self.split:
            return Counts(count, count, count, 0, 0)
        base = (count // nranks) & -(16 // elt_size)
        if self.layout == "gather":
            return Counts(base, base * nranks, base, base, 0)
        if self.layout == "scatter":
            return Counts(base * nranks, base, base, 0, base)
        return Counts(base * nranks, base * nranks, base, 0, 0)  # alltoall

    def alg_bytes(self, counts: Counts, elt_size: int, nranks: int) -> int:
        """Bytes that algbw divides by time: the whole buffer for split collectives."""
        if self.split:
            return counts.param * elt_size * nranks
        return counts.param * elt_size

    def bus_factor(self, nranks: int) -> float:
        if self.bus == "allreduce":
            return 2.0 * (nranks - 1) / nranks
        if self.bus == "ring":
            return (nranks - 1) / nranks
        return 1.0

    def bandwidth(
        self, counts: Counts, elt_size: int, nranks: int, time_s: float
    ) -> tuple[float, float]:
        """(algbw, busbw) in GB/s (1e9 bytes), nccl-tests' formulas."""
        if time_s <= 0:
            return 0.0, 0.0
        algbw = self.alg_bytes(counts, elt_size, nranks) / 1.0e9 / time_s
        return algbw, algbw * self.bus_factor(nranks)


SHAPES: dict[Op, Shape] = {
    s.name: s
    for s in (
        Shape("all_reduce", False, "same", "allreduce", False, True, True),
        Shape("all_gather", True, "gather", "ring", False, False, True),
        Shape("reduce_scatter", True, "scatter", "ring", False, True, True),
        Shape("broadcast", False, "same", "one", True, False, True),
        Shape("reduce", False, "same", "one", True, True, True),
        Shape("alltoall", True, "alltoall", "ring", False, False, False),
        Shape("sendrecv", False, "same", "one", False, True, False),
        Shape("gather", True, "gather", "ring", True, False, True),
        Shape("scatter", True, "scatter", "ring", True, False, True),
    )
}


def buffer_bytes(op: Op, maxbytes: int, elt_size: int, nranks: int) -> tuple[int, int]:
    """(send, recv) buffer bytes to allocate: room for the largest size and for rotation.

    Small sizes rotate through the buffer (nccl-tests' cache-avoiding shift), which needs the
    whole `maxbytes`; split collectives may need a little more than that for n chunks.
    """
    counts = SHAPES[op].counts(maxbytes, elt_size, nranks)
    send = max(maxbytes, counts.send * elt_size)
    recv = max(maxbytes, counts.recv * elt_size)
    # In place, rank r's chunk sits at r * offset inside the receive buffer.
    recv = max(recv, (counts.send_inplace_offset * (nranks - 1) + counts.send) * elt_size)
    recv = max(recv, (counts.recv_inplace_offset * (nranks - 1) + counts.recv) * elt_size)
    return _round16(send), _round16(recv)


def memory_limit(maxbytes: int, memory_bytes: int, *, check: bool) -> int | None:
    """nccl-tests 2.19.6's rule: it reserves 1 GiB per 16 GiB of device memory (at most 4 GiB)
    plus 1 GiB, and the rest must hold the send, receive and (when checking) expected buffers.

    Returns the reduced maximum size, or None when `maxbytes` fits.
    """
    reserve = min(-(-memory_bytes // (16 * GIB)) * GIB, 4 * GIB)
    limit = max(0, (memory_bytes - reserve - GIB) // (3 if check else 2))
    return limit if maxbytes > limit else None


def _round16(n: int) -> int:
    return (n + 15) // 16 * 16


def rotation_shifts(counts: Counts, elt_size: int, maxbytes: int, iters: int) -> list[int]:
    """Byte offsets of the timed iterations: op i uses shift[i % len]. nccl-tests' formula."""
    total = max(counts.send, counts.recv) * elt_size
    steps = maxbytes // total if total else 1
    steps = max(1, min(steps, iters))
    return [total * i for i in range(steps)]


__all__ = ["SHAPES", "Counts", "Shape", "buffer_bytes", "memory_limit", "rotation_shifts"]
