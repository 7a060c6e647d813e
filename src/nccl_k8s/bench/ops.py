"""The collectives bound to views of two preallocated buffers, and their inputs and checks.

One `Bound` is one collective at one size and placement: its send/receive views for every
rotation shift, the zero-argument calls the timed loop issues back to back (the collective's
torch.distributed or libnccl calls, from its bench.collectives entry), and how to fill its
inputs and check its output. Views and calls are built before timing so the loop costs only the
collective's own call.

torch.distributed has no out-of-place all_reduce, broadcast or reduce: out of place, those copy
the send buffer into the receive buffer and then run in place. The copy is part of the timed op
(it is what an application using torch would pay); nccl-tests' own out-of-place path has none,
so compare in-place columns when the copy matters (large sizes on GPUs).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from nccl_k8s.bench import data
from nccl_k8s.bench.collectives import (
    COLLECTIVES,
    Call,
    Expected,
    Op,
    Place,
    Spec,
    TorchCall,
    all_gather_of,
    reduce_scatter_of,
)
from nccl_k8s.bench.config import Dtype, RedOp
from nccl_k8s.bench.counts import Counts
from nccl_k8s.bench.memory import Memory, TorchMemory, expected_values
from nccl_k8s.bench.native import Program, native_loop

if TYPE_CHECKING:
    from nccl_k8s.bench.nccl import Communicator


def torch_redop(name: RedOp) -> Any:
    import torch.distributed as dist

    return {
        "sum": dist.ReduceOp.SUM,
        "prod": dist.ReduceOp.PRODUCT,
        "max": dist.ReduceOp.MAX,
        "min": dist.ReduceOp.MIN,
        "avg": dist.ReduceOp.AVG,
    }[name]


def all_gather_fn() -> Any:
    import torch.distributed as dist

    return all_gather_of(dist)


def reduce_scatter_fn() -> Any:
    import torch.distributed as dist

    return reduce_scatter_of(dist)


@dataclasses.dataclass
class Bound:
    """One collective bound to buffers: what the timed loop and the checker need."""

    op: Op
    counts: Counts
    in_place: bool
    calls: list[Call]
    """calls[i % len(calls)] is timed op i (rotating through the buffer)."""
    first: Call
    """Op 0 again, made so that it may block (warm-up, sync and checked ops): with the direct
    driver it releases the GIL, so the watchdog thread can still run if a peer never comes."""
    send0: Any
    """Send view of rotation 0 (the checked op); in place, a view into the receive buffer: a
    torch tensor, or a bench.memory.DevView on the torch-free path."""
    recv0: Any
    """Receive view of rotation 0."""
    native: Program | None = None
    """The same calls as one native timed loop (bench.native), where it is in use."""


class Collectives:
    """Builds Bound ops for one rank over its send and receive buffers."""

    def __init__(
        self,
        *,
        rank: int,
        nranks: int,
        dtype: Dtype,
        redop: RedOp,
        sendbuf: Any,
        recvbuf: Any,
        group: Any = None,
        comm: Communicator | None = None,
        stream: int | None = None,
        memory: Memory | None = None,
    ) -> None:
        self.rank = rank
        self.nranks = nranks
        self.dtype_name = dtype
        self.mem: Memory = memory if memory is not None else TorchMemory(dtype)
        """Views and the data check: torch tensors and bench.data, or device pointers and
        bench.kernels (bench.memory)."""
        self.elt = self.mem.elt
        self.redop_name = redop
        self.redop = torch_redop(redop) if comm is None else None
        self.sendbuf = sendbuf
        self.recvbuf = recvbuf
        self.group = group
        self.comm = comm
        """Direct NCCL communicator (bench.nccl); None runs through torch.distributed."""
        self.stream = stream
        """The CUDA stream direct NCCL calls go to (and graphs capture on)."""
        self.native = native_loop() if comm is not None else None
        """The native timed loop (direct driver, when it is on and builds here), or None."""

    # -- views ---------------------------------------------------------------------------
    def _view(self, buf: Any, byte_offset: int, nelems: int) -> Any:
        return self.mem.view(buf, byte_offset, nelems)

    def views(self, counts: Counts, shift: int, in_place: bool) -> tuple[Any, Any]:
        if in_place:
            send = self._view(
                self.recvbuf, shift + counts.send_inplace_offset * self.rank * self.elt, counts.send
            )
            recv = self._view(
                self.recvbuf, shift + counts.recv_inplace_offset * self.rank * self.elt, counts.recv
            )
        else:
            send = self._view(self.sendbuf, shift, counts.send)
            recv = self._view(self.recvbuf, shift, counts.recv)
        return send, recv

    # -- calls ---------------------------------------------------------------------------
    def call(
        self,
        op: Op,
        send: Any,
        recv: Any,
        counts: Counts,
        root: int,
        in_place: bool,
        *,
        release_gil: bool = False,
    ) -> Call:
        """A zero-argument callable issuing one collective (no host synchronisation): its
        libnccl calls with the direct driver, its torch.distributed call otherwise."""
        if self.comm is not None:
            return self.comm.call(self.specs(op, send, recv, counts, root), release_gil=release_gil)
        import torch.distributed as dist

        n, g = self.nranks, self.group
        return COLLECTIVES[op].torch(
            TorchCall(dist, send, recv, counts, self.rank, n, root, self.redop, g, in_place)
        )

    def specs(self, op: Op, send: Any, recv: Any, counts: Counts, root: int) -> list[Spec]:
        assert self.comm is not None and self.stream is not None
        return self.comm.specs(
            op, send.data_ptr(), recv.data_ptr(), counts.param, counts.param * self.elt,
            self.dtype_name, self.redop_name, root, self.stream,
        )  # fmt: skip

    def bind(self, op: Op, counts: Counts, shifts: list[int], root: int, in_place: bool) -> Bound:
        why = COLLECTIVES[op].refuses(self.nranks)
        if why:
            raise ValueError(f"{op}: {why}")
        calls = []
        native_specs: list[list[Spec]] = []
        for shift in shifts:
            send, recv = self.views(counts, shift, in_place)
            calls.append(self.call(op, send, recv, counts, root, in_place))
            if self.native is not None:
                native_specs.append(self.specs(op, send, recv, counts, root))
        send0, recv0 = self.views(counts, shifts[0], in_place)
        first = self.call(op, send0, recv0, counts, root, in_place, release_gil=True)
        b = Bound(op, counts, in_place, calls, first, send0, recv0)
        if self.native is not None and self.comm is not None and self.stream is not None:
            comm = self.comm
            b.native = self.native.program(
                [[(comm.pointer(name), args) for name, args in op] for op in native_specs],
                names=[[name for name, _ in op] for op in native_specs],
                check=comm.lib.check, stream=self.stream,
                comm=int(comm.comm.value or 0), async_error=comm.pointer("ncclCommGetAsyncError"),
            )  # fmt: skip
        return b

    def graph_program(self, exec_handle: int | None) -> Program | None:
        """The C loop launching a captured CUDA graph on the NCCL stream (None: launch it from
        Python)."""
        if self.native is None or self.comm is None or not self.native.graph_launch:
            return None
        if not exec_handle or self.stream is None:
            return None
        import ctypes

        from nccl_k8s.bench.native import NativeError

        def cuda_check(rc: int, what: str) -> None:
            if rc:
                raise NativeError(f"{what} failed: CUDA error {rc}")

        stream = self.stream
        launch = (self.native.graph_launch, (ctypes.c_void_p(exec_handle), ctypes.c_void_p(stream)))
        return self.native.program(
            [[launch]], names=[["cuGraphLaunch"]], check=cuda_check, stream=stream,
            comm=int(self.comm.comm.value or 0), async_error=self.comm.pointer("ncclCommGetAsyncError"),
        )  # fmt: skip

    # -- data ----------------------------------------------------------------------------
    def pattern(self, op: Op) -> data.Pattern:
        redop = self.redop_name if COLLECTIVES[op].reduces else None
        return data.choose_pattern(redop, self.dtype_name, self.nranks)

    def init(self, b: Bound, root: int, rep: int) -> None:
        """Fill inputs for a checked op; receive buffers get a sentinel out of place."""
        p = self.pattern(b.op)
        if not b.in_place:
            self.mem.sentinel(b.recv0)
        if COLLECTIVES[b.op].root_inputs_only and self.rank != root:
            if b.in_place:
                self.mem.sentinel(b.recv0)
            return
        if b.in_place and b.recv0.numel() > b.send0.numel():
            self.mem.sentinel(b.recv0)  # the other ranks' chunks must be written by the op
        self.mem.fill(b.send0, p, self.rank, rep)

    def expectation(self, b: Bound, root: int) -> Expected | None:
        """What this rank's receive view must hold (bench.collectives), or None."""
        return COLLECTIVES[b.op].expected(Place(self.rank, self.nranks, root, b.counts))

    def expected(self, b: Bound, root: int, rep: int) -> data.ExpectedFn | None:
        """Expected values of this rank's receive view (torch), or None when it holds no result."""
        expected = self.expectation(b, root)
        if expected is None:
            return None
        return expected_values(expected, self.pattern(b.op), rep, b.recv0.device)

    def check(self, b: Bound, root: int, rep: int) -> int:
        e = self.expectation(b, root)
        if e is None or b.recv0.numel() == 0:
            return 0
        return self.mem.count_wrong(b.recv0, e, self.pattern(b.op), rep)


__all__ = [
    "Bound",
    "Call",
    "Collectives",
    "all_gather_fn",
    "reduce_scatter_fn",
    "torch_redop",
]
