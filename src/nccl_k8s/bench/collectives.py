"""The collectives the engine runs: one entry per collective, the one home of its facts.

An entry says how the collective lays out its buffers (bench.counts' layouts), how nccl-tests
turns its time into bandwidth (the bytes algbw counts, the bus factor), whether it has a root,
whether it combines the ranks' data with the reduction and whether its table prints one,
whether nccl-tests checks its in-place result, what each rank must hold afterwards (what the
checker compares with), which world sizes it runs at, and how it is called: through
torch.distributed, and through libnccl as nccl-tests calls it. The engine (sizes, timing,
checks, the direct NCCL driver) and the results reader (results.collectives) read this table;
a new collective is a new entry and its name in `Op`.

No torch here, not even for types: results and the spec read this table on machines without
torch. The torch calls are built on the torch.distributed module bench.ops hands them; the
expected results are descriptions that bench.ops turns into values; libnccl is called by
bench.nccl with the argument lists built here.
"""

from __future__ import annotations

import ctypes
import dataclasses
from collections.abc import Callable, Collection, Sequence
from typing import Any, Literal

from nccl_k8s.bench.counts import Counts, Layout, buffer_bytes, layout_counts

#: A collective the engine knows; `--ops all` runs them in this order (COLLECTIVES' order).
Op = Literal[
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "alltoall",
    "sendrecv",
    "gather",
    "scatter",
    "hypercube",
]
#: A zero-argument callable issuing one collective (no host synchronisation).
Call = Callable[[], Any]
#: One libnccl call: the function's name and its arguments as ctypes values.
Spec = tuple[str, tuple[Any, ...]]


# -- what a rank must hold afterwards ----------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Place:
    """Where one rank stands in one call: what its expected result depends on."""

    rank: int
    nranks: int
    root: int
    counts: Counts


@dataclasses.dataclass(frozen=True)
class Reduced:
    """Element j holds the reduction of every rank's input element `start + j`."""

    start: int = 0


@dataclasses.dataclass(frozen=True)
class InputOf:
    """Element j holds rank `src`'s input element `start + j`."""

    src: int
    start: int = 0


@dataclasses.dataclass(frozen=True)
class Chunks:
    """Chunk i (`size` elements) holds rank i's input elements from `start` on."""

    size: int
    start: int = 0


#: What a rank's receive view must hold; None where the rank holds no result.
Expected = Reduced | InputOf | Chunks


# -- the torch.distributed calls ---------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TorchCall:
    """What one torch.distributed call is built from."""

    dist: Any
    """The torch.distributed module (its functions are looked up when the call runs)."""
    send: Any
    """The send view (a torch.Tensor)."""
    recv: Any
    """The receive view (a torch.Tensor)."""
    counts: Counts
    rank: int
    nranks: int
    root: int
    redop: Any
    """torch.distributed.ReduceOp."""
    group: Any
    in_place: bool

    @property
    def same(self) -> bool:
        """Send and receive are one buffer: the ops that only run in place need no copy."""
        return self.in_place or bool(self.send.data_ptr() == self.recv.data_ptr())


def all_gather_of(dist: Any) -> Any:
    """torch >= 2.12 names it all_gather_single and deprecates all_gather_into_tensor."""
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def reduce_scatter_of(dist: Any) -> Any:
    return getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


# torch.distributed has no out-of-place all_reduce, broadcast or reduce: out of place, those
# copy the send buffer into the receive buffer and then run in place (module docstring of
# bench.ops). Each call looks dist's function up when it runs, as a patched dist expects.
def _torch_all_reduce(a: TorchCall) -> Call:
    dist = a.dist
    send, recv, redop, g = a.send, a.recv, a.redop, a.group
    if a.same:
        return lambda: dist.all_reduce(recv, op=redop, group=g)
    return lambda: (recv.copy_(send), dist.all_reduce(recv, op=redop, group=g))


def _torch_broadcast(a: TorchCall) -> Call:
    dist = a.dist
    send, recv, root, g = a.send, a.recv, a.root, a.group
    if a.same or a.rank != root:
        return lambda: dist.broadcast(recv, src=root, group=g)
    return lambda: (recv.copy_(send), dist.broadcast(recv, src=root, group=g))


def _torch_reduce(a: TorchCall) -> Call:
    dist = a.dist
    send, recv, root, redop, g = a.send, a.recv, a.root, a.redop, a.group
    if a.same:
        return lambda: dist.reduce(recv, dst=root, op=redop, group=g)
    return lambda: (recv.copy_(send), dist.reduce(recv, dst=root, op=redop, group=g))


def _torch_all_gather(a: TorchCall) -> Call:
    send, recv, g = a.send, a.recv, a.group
    all_gather = all_gather_of(a.dist)
    return lambda: all_gather(recv, send, group=g)


def _torch_reduce_scatter(a: TorchCall) -> Call:
    send, recv, redop, g = a.send, a.recv, a.redop, a.group
    reduce_scatter = reduce_scatter_of(a.dist)
    return lambda: reduce_scatter(recv, send, op=redop, group=g)


def _torch_alltoall(a: TorchCall) -> Call:
    dist = a.dist
    send, recv, g = a.send, a.recv, a.group
    return lambda: dist.all_to_all_single(recv, send, group=g)


def _torch_sendrecv(a: TorchCall) -> Call:
    dist = a.dist
    send, recv, rank, n, g = a.send, a.recv, a.rank, a.nranks, a.group
    if n == 1 and dist.get_backend(g) == "gloo":
        # gloo has no pair from a rank to itself ("Pair is not connected"); at world size 1
        # the send to self is the copy NCCL would make.
        return lambda: recv.copy_(send)
    ops = [
        dist.P2POp(dist.isend, send, (rank + 1) % n, group=g),
        dist.P2POp(dist.irecv, recv, (rank - 1) % n, group=g),
    ]

    def sendrecv() -> None:
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    return sendrecv


def _torch_gather(a: TorchCall) -> Call:
    dist = a.dist
    send, recv, root, n, g = a.send, a.recv, a.root, a.nranks, a.group
    chunks = list(recv.chunk(n)) if a.counts.param else [recv[:0] for _ in range(n)]
    glist = chunks if a.rank == root else None
    return lambda: dist.gather(send, glist, dst=root, group=g)


def _torch_scatter(a: TorchCall) -> Call:
    dist = a.dist
    send, recv, root, n, g = a.send, a.recv, a.root, a.nranks, a.group
    chunks = list(send.chunk(n)) if a.counts.param else [send[:0] for _ in range(n)]
    slist = chunks if a.rank == root else None
    return lambda: dist.scatter(recv, slist, src=root, group=g)


# nccl-tests' hypercube_perf is an all_gather made of point-to-point steps: the rank's own chunk
# into its place, then, for each dimension d of the hypercube (n a power of two), an exchange with
# rank ^ 2**d of the 2**d chunks each side holds so far.
def _hypercube_steps(rank: int, nranks: int) -> list[tuple[int, int, int, int]]:
    """(peer, first chunk sent, first chunk received, chunks) of each exchange, in order."""
    steps = []
    mask = 1
    while mask < nranks:
        held = rank & ~(mask - 1)  # the first of the `mask` chunks this rank holds now
        steps.append((rank ^ mask, held, held ^ mask, mask))
        mask <<= 1
    return steps


def _torch_hypercube(a: TorchCall) -> Call:
    dist, send, recv, g, chunk = a.dist, a.send, a.recv, a.group, a.counts.param
    own = recv[a.rank * chunk : (a.rank + 1) * chunk]
    copy = chunk > 0 and own.data_ptr() != send.data_ptr()  # in place it is already there
    steps = [
        [
            dist.P2POp(dist.isend, recv[sent * chunk : (sent + k) * chunk], peer, group=g),
            dist.P2POp(dist.irecv, recv[got * chunk : (got + k) * chunk], peer, group=g),
        ]
        for peer, sent, got, k in (_hypercube_steps(a.rank, a.nranks) if chunk else ())
    ]

    def hypercube() -> None:
        if copy:
            own.copy_(send)
        for ops in steps:
            for work in dist.batch_isend_irecv(ops):
                work.wait()

    return hypercube


def _power_of_two(n: int) -> str | None:
    if n > 0 and n & (n - 1) == 0:
        return None
    return f"expected a power-of-two number of ranks (1, 2, 4, 8, ...), this run has {n}"


# -- the libnccl calls -------------------------------------------------------------------------
@dataclasses.dataclass
class NcclCall:
    """What one collective's libnccl calls are built from, and the ctypes values they pass."""

    send: int
    """Address of the send view."""
    recv: int
    """Address of the receive view."""
    count: int
    chunk_bytes: int
    """Bytes of one rank's chunk (count x element size)."""
    dtype: int
    """ncclDataType_t."""
    redop: int
    """ncclRedOp_t."""
    root: int
    rank: int
    nranks: int
    comm: Any
    """The ncclComm_t (a ctypes.c_void_p)."""
    stream: int
    native: Collection[str]
    """libnccl's own collectives beyond the first five that this library has (NCCL 2.28+)."""

    def __post_init__(self) -> None:
        vp, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        self.s, self.r, self.cnt = vp(self.send), vp(self.recv), sz(self.count)
        self.dt, self.rop, self.iroot = i(self.dtype), i(self.redop), i(self.root)
        self.strm = vp(self.stream)

    def p2p(self, name: str, ptr: int, peer: int, count: int | None = None) -> Spec:
        """ncclSend or ncclRecv of `count` elements (default: the collective's) at `ptr`."""
        cnt = self.cnt if count is None else ctypes.c_size_t(count)
        return (
            name,
            (ctypes.c_void_p(ptr), cnt, self.dt, ctypes.c_int(peer), self.comm, self.strm),
        )

    @staticmethod
    def group(p2p: Sequence[Spec]) -> list[Spec]:
        """Calls made as one NCCL group."""
        return [("ncclGroupStart", ()), *p2p, ("ncclGroupEnd", ())]


def _nccl_all_reduce(a: NcclCall) -> list[Spec]:
    return [("ncclAllReduce", (a.s, a.r, a.cnt, a.dt, a.rop, a.comm, a.strm))]


def _nccl_broadcast(a: NcclCall) -> list[Spec]:
    return [("ncclBroadcast", (a.s, a.r, a.cnt, a.dt, a.iroot, a.comm, a.strm))]


def _nccl_reduce(a: NcclCall) -> list[Spec]:
    return [("ncclReduce", (a.s, a.r, a.cnt, a.dt, a.rop, a.iroot, a.comm, a.strm))]


def _nccl_all_gather(a: NcclCall) -> list[Spec]:
    return [("ncclAllGather", (a.s, a.r, a.cnt, a.dt, a.comm, a.strm))]


def _nccl_reduce_scatter(a: NcclCall) -> list[Spec]:
    return [("ncclReduceScatter", (a.s, a.r, a.cnt, a.dt, a.rop, a.comm, a.strm))]


# NCCL 2.28 added alltoall, gather and scatter as collectives of their own; nccl-tests uses them
# when present, and grouped sends and receives before.
def _nccl_alltoall(a: NcclCall) -> list[Spec]:
    if "ncclAlltoAll" in a.native:
        return [("ncclAlltoAll", (a.s, a.r, a.cnt, a.dt, a.comm, a.strm))]
    p2p: list[Spec] = []
    for peer in range(a.nranks) if a.count else ():
        p2p.append(a.p2p("ncclSend", a.send + peer * a.chunk_bytes, peer))
        p2p.append(a.p2p("ncclRecv", a.recv + peer * a.chunk_bytes, peer))
    return a.group(p2p)


def _nccl_sendrecv(a: NcclCall) -> list[Spec]:
    return a.group(
        [
            a.p2p("ncclSend", a.send, (a.rank + 1) % a.nranks),
            a.p2p("ncclRecv", a.recv, (a.rank - 1) % a.nranks),
        ]
    )


def _nccl_gather(a: NcclCall) -> list[Spec]:
    if "ncclGather" in a.native:
        return [("ncclGather", (a.s, a.r, a.cnt, a.dt, a.iroot, a.comm, a.strm))]
    p2p: list[Spec] = []
    if a.count:
        p2p.append(a.p2p("ncclSend", a.send, a.root))
        for peer in range(a.nranks) if a.rank == a.root else ():
            p2p.append(a.p2p("ncclRecv", a.recv + peer * a.chunk_bytes, peer))
    return a.group(p2p)


def _nccl_scatter(a: NcclCall) -> list[Spec]:
    if "ncclScatter" in a.native:
        return [("ncclScatter", (a.s, a.r, a.cnt, a.dt, a.iroot, a.comm, a.strm))]
    p2p: list[Spec] = []
    if a.count:
        for peer in range(a.nranks) if a.rank == a.root else ():
            p2p.append(a.p2p("ncclSend", a.send + peer * a.chunk_bytes, peer))
        p2p.append(a.p2p("ncclRecv", a.recv, a.root))
    return a.group(p2p)


def _nccl_hypercube(a: NcclCall) -> list[Spec]:
    """nccl-tests copies the own chunk with cudaMemcpyAsync on the stream; here a send to self
    (libnccl has no copy call), in a group of its own so the first exchange reads it done."""
    if not a.count:
        return []
    own = a.recv + a.rank * a.chunk_bytes
    copy = [a.p2p("ncclSend", a.send, a.rank), a.p2p("ncclRecv", own, a.rank)]
    specs = a.group(copy) if own != a.send else []  # in place it is already there
    for peer, sent, got, k in _hypercube_steps(a.rank, a.nranks):
        send = a.p2p("ncclSend", a.recv + sent * a.chunk_bytes, peer, a.count * k)
        recv = a.p2p("ncclRecv", a.recv + got * a.chunk_bytes, peer, a.count * k)
        specs += a.group([send, recv])
    return specs


# -- bandwidth ---------------------------------------------------------------------------------
def _allreduce_bus(n: int) -> float:
    return 2.0 * (n - 1) / n


def _ring_bus(n: int) -> float:
    return (n - 1) / n


def _one_bus(_n: int) -> float:
    return 1.0


def _runs_at_any_size(_n: int) -> str | None:
    return None


# -- the registry ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class Collective:
    """One collective: its shape, its formulas, its result and its calls."""

    name: Op
    layout: Layout
    bus_factor: Callable[[int], float]
    """busbw / algbw at n ranks (nccl-tests' GetBw)."""
    rooted: bool
    """Has a root (-r; the table's root column is >= 0)."""
    prints_redop: bool
    """The table's redop column names the reduction (-o); "none" otherwise."""
    reduces: bool
    """Combines the ranks' inputs with the reduction; otherwise it only moves data."""
    inplace_checked: bool
    """nccl-tests checks the in-place result (else its in-place #wrong is N/A)."""
    expected: Callable[[Place], Expected | None]
    """What a rank's receive view must hold after the call (None: no result on that rank)."""
    torch: Callable[[TorchCall], Call]
    nccl: Callable[[NcclCall], list[Spec]]
    """The libnccl calls of one collective: one call, or one or more groups of calls."""
    root_inputs_only: bool = False
    """Only the root's send buffer is an input (the other ranks' are not read)."""
    alg_chunks: Callable[[int], int] | None = None
    """How many `count`-element chunks algbw counts at n ranks; None: 1, or n when split."""
    refuses: Callable[[int], str | None] = _runs_at_any_size
    """Why the collective cannot run at n ranks (one line), or None."""

    @property
    def split(self) -> bool:
        """Buffers hold per-rank chunks; the count column is per rank."""
        return self.layout != "same"

    def counts(self, size_bytes: int, elt_size: int, nranks: int) -> Counts:
        return layout_counts(self.layout, size_bytes, elt_size, nranks)

    def buffer_bytes(self, maxbytes: int, elt_size: int, nranks: int) -> tuple[int, int]:
        """(send, recv) bytes to allocate for sizes up to `maxbytes` (bench.counts)."""
        return buffer_bytes(self.counts(maxbytes, elt_size, nranks), maxbytes, elt_size, nranks)

    def alg_bytes(self, counts: Counts, elt_size: int, nranks: int) -> int:
        """Bytes that algbw divides by time."""
        if self.alg_chunks is not None:
            return counts.param * elt_size * self.alg_chunks(nranks)
        return counts.param * elt_size * (nranks if self.split else 1)

    def bandwidth(
        self, counts: Counts, elt_size: int, nranks: int, time_s: float
    ) -> tuple[float, float]:
        """(algbw, busbw) in GB/s (1e9 bytes), nccl-tests' formulas."""
        if time_s <= 0:
            return 0.0, 0.0
        algbw = self.alg_bytes(counts, elt_size, nranks) / 1.0e9 / time_s
        return algbw, algbw * self.bus_factor(nranks)


COLLECTIVES: dict[Op, Collective] = {
    c.name: c
    for c in (
        Collective(
            name="all_reduce", layout="same", bus_factor=_allreduce_bus, rooted=False,
            prints_redop=True, reduces=True, inplace_checked=True,
            expected=lambda w: Reduced(),
            torch=_torch_all_reduce, nccl=_nccl_all_reduce,
        ),
        Collective(
            name="all_gather", layout="gather", bus_factor=_ring_bus, rooted=False,
            prints_redop=False, reduces=False, inplace_checked=True,
            expected=lambda w: Chunks(w.counts.param),
            torch=_torch_all_gather, nccl=_nccl_all_gather,
        ),
        Collective(
            name="reduce_scatter", layout="scatter", bus_factor=_ring_bus, rooted=False,
            prints_redop=True, reduces=True, inplace_checked=True,
            expected=lambda w: Reduced(w.rank * w.counts.recv),
            torch=_torch_reduce_scatter, nccl=_nccl_reduce_scatter,
        ),
        Collective(
            name="broadcast", layout="same", bus_factor=_one_bus, rooted=True,
            prints_redop=False, reduces=False, inplace_checked=True, root_inputs_only=True,
            expected=lambda w: InputOf(w.root),
            torch=_torch_broadcast, nccl=_nccl_broadcast,
        ),
        Collective(
            name="reduce", layout="same", bus_factor=_one_bus, rooted=True,
            prints_redop=True, reduces=True, inplace_checked=True,
            expected=lambda w: Reduced() if w.rank == w.root else None,
            torch=_torch_reduce, nccl=_nccl_reduce,
        ),
        Collective(
            name="alltoall", layout="alltoall", bus_factor=_ring_bus, rooted=False,
            prints_redop=False, reduces=False, inplace_checked=False,
            expected=lambda w: Chunks(w.counts.param, w.rank * w.counts.param),
            torch=_torch_alltoall, nccl=_nccl_alltoall,
        ),
        # nccl-tests prints sendrecv's -o (it reduces nothing) and leaves its in-place N/A.
        Collective(
            name="sendrecv", layout="same", bus_factor=_one_bus, rooted=False,
            prints_redop=True, reduces=False, inplace_checked=False,
            expected=lambda w: InputOf((w.rank - 1) % w.nranks),
            torch=_torch_sendrecv, nccl=_nccl_sendrecv,
        ),
        Collective(
            name="gather", layout="gather", bus_factor=_ring_bus, rooted=True,
            prints_redop=False, reduces=False, inplace_checked=True,
            expected=lambda w: Chunks(w.counts.param) if w.rank == w.root else None,
            torch=_torch_gather, nccl=_nccl_gather,
        ),
        Collective(
            name="scatter", layout="scatter", bus_factor=_ring_bus, rooted=True,
            prints_redop=False, reduces=False, inplace_checked=True, root_inputs_only=True,
            expected=lambda w: InputOf(w.root, w.rank * w.counts.recv),
            torch=_torch_scatter, nccl=_nccl_scatter,
        ),
        # algbw counts the n - 1 chunks a rank receives; busbw is algbw (nccl-tests' GetBw).
        Collective(
            name="hypercube", layout="gather", bus_factor=_one_bus, rooted=False,
            prints_redop=False, reduces=False, inplace_checked=True,
            alg_chunks=lambda n: n - 1, refuses=_power_of_two,
            expected=lambda w: Chunks(w.counts.param),
            torch=_torch_hypercube, nccl=_nccl_hypercube,
        ),
    )
}  # fmt: skip
#: Every collective, in `--ops all` order.
ALL_OPS: tuple[Op, ...] = tuple(COLLECTIVES)
ROOTED_OPS: frozenset[Op] = frozenset(op for op, c in COLLECTIVES.items() if c.rooted)
REDUCING_OPS: frozenset[Op] = frozenset(op for op, c in COLLECTIVES.items() if c.reduces)


def refused(ops: Sequence[Op], nranks: int) -> str | None:
    """One line naming the first of `ops` that cannot run at `nranks` ranks, or None."""
    for op in ops:
        why = COLLECTIVES[op].refuses(nranks)
        if why:
            return f"--ops {op}: {why}"
    return None


__all__ = [
    "ALL_OPS",
    "COLLECTIVES",
    "REDUCING_OPS",
    "ROOTED_OPS",
    "Call",
    "Chunks",
    "Collective",
    "Expected",
    "InputOf",
    "NcclCall",
    "Op",
    "Place",
    "Reduced",
    "Spec",
    "TorchCall",
    "all_gather_of",
    "reduce_scatter_of",
    "refused",
]
