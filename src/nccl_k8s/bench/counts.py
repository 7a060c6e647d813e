"""Sizes and counts of a collective's buffers, exactly as nccl-tests computes them.

Pure arithmetic, no torch: the size column, the per-rank count column, the in-place offsets, the
buffers to allocate, the rotation shifts. Which layout each collective has, and its bandwidth
formulas, are its entry in bench.collectives. Kept apart from the code that runs the ops so the
numbers can be checked on their own against nccl-tests' published outputs.

For a requested size S and element size E, count = S // E. Collectives that split a buffer
across ranks give each rank `(count // nranks)` elements rounded down to a multiple of 16 bytes;
the size column is then the larger of the send and receive buffers, so it can be smaller than S.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

#: How a split collective lays its per-rank chunks out: same (no split), gather (recv holds n
#: chunks), scatter (send holds n chunks), alltoall (both).
Layout = Literal["same", "gather", "scatter", "alltoall"]
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


def layout_counts(layout: Layout, size_bytes: int, elt_size: int, nranks: int) -> Counts:
    """One rank's counts for a requested size, as nccl-tests' GetCollByteCount computes them."""
    count = size_bytes // elt_size
    if layout == "same":
        return Counts(count, count, count, 0, 0)
    base = (count // nranks) & -(16 // elt_size)
    if layout == "gather":
        return Counts(base, base * nranks, base, base, 0)
    if layout == "scatter":
        return Counts(base * nranks, base, base, 0, base)
    return Counts(base * nranks, base * nranks, base, 0, 0)  # alltoall


def buffer_bytes(counts: Counts, maxbytes: int, elt_size: int, nranks: int) -> tuple[int, int]:
    """(send, recv) buffer bytes to allocate for a collective whose counts at `maxbytes` are
    `counts`: room for the largest size and for rotation.

    Small sizes rotate through the buffer (nccl-tests' cache-avoiding shift), which needs the
    whole `maxbytes`; split collectives may need a little more than that for n chunks.
    """
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


__all__ = [
    "Counts",
    "Layout",
    "buffer_bytes",
    "layout_counts",
    "memory_limit",
    "rotation_shifts",
]
