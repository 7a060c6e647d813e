"""Direct calls into libnccl, for the timed loop on GPUs.

Measured on an H200 (BENCHMARKS.md), torch.distributed costs 14-20 µs of host time per
collective, three to forty times what nccl-tests measures at small sizes: the benchmark would
measure torch, not NCCL. So with the NCCL backend the engine calls libnccl itself through ctypes
(about a microsecond per call), with real out-of-place buffers and the same calls nccl-tests
makes (grouped send/recv for alltoall, sendrecv, gather and scatter), on a communicator
bootstrapped through the rendezvous store (bench.store). libnccl comes from the nvidia-nccl
wheel (the one torch ships, where torch is installed) or NCCL_K8S_LIBNCCL; torch itself is not
needed (bench.direct). `--driver torch` keeps the torch.distributed path for comparison.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from nccl_k8s.bench.collectives import COLLECTIVES, NcclCall, Op, Spec
from nccl_k8s.bench.config import RedOp
from nccl_k8s.bench.dtypes import DTYPE_FACTS, Dtype

#: ncclDataType_t values (nccl.h).
NCCL_DTYPES: dict[Dtype, int] = {name: facts.nccl for name, facts in DTYPE_FACTS.items()}
#: ncclRedOp_t values.
NCCL_OPS: dict[RedOp, int] = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
_UNIQUE_ID_BYTES = 128
#: nccl.h (2.27+): a window every rank registers for symmetric-memory collectives.
_NCCL_WIN_COLL_SYMMETRIC = 0x01


class NcclError(RuntimeError):
    """An NCCL call failed; the message is NCCL's own error string."""


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * _UNIQUE_ID_BYTES)]


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def _path_of(fn: Any) -> str | None:
    """The file a loaded function comes from (dladdr), e.g. .../nvidia/nccl/lib/libnccl.so.2."""
    try:
        libc = ctypes.CDLL(None)
        info = _DlInfo()
        if libc.dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info)) and info.dli_fname:
            return str(os.path.realpath(info.dli_fname.decode(errors="replace")))
    except (OSError, AttributeError):
        pass
    return None


def _candidates() -> list[str]:
    """Where libnccl is looked for, in order: NCCL_K8S_LIBNCCL alone when set; else the copy
    already in the process (torch's, when torch was imported: loading a second libnccl beside it
    would split NCCL's state), then the nvidia-nccl wheel's (or torch's own) on sys.path, and the
    system's last. The wheel comes before the system library because it is the NCCL that torch
    and nccl-tests built against it use on the same image: without torch in the process, a bare
    `libnccl.so.2` found an image's older /usr/lib copy (2.28.3 beside the wheel's 2.28.9 on the
    H200's image, benchmarks/data/2026-12-05-h200x1-small-ab), so the same command measured a
    different NCCL with and without torch installed."""
    override = os.environ.get("NCCL_K8S_LIBNCCL")
    if override:
        return [override]
    found = []
    for base in sys.path:
        found += sorted(glob.glob(os.path.join(base, "nvidia", "nccl", "lib", "libnccl.so*")))
        found += sorted(glob.glob(os.path.join(base, "torch", "lib", "libnccl.so*")))
    return [*found, "libnccl.so.2"]


def _already_loaded() -> ctypes.CDLL | None:
    """The libnccl this process already has (RTLD_NOLOAD: nothing new is loaded)."""
    if os.environ.get("NCCL_K8S_LIBNCCL"):
        return None
    try:
        return ctypes.CDLL("libnccl.so.2", mode=ctypes.RTLD_GLOBAL | os.RTLD_NOLOAD)
    except OSError:
        return None


class Library:
    """libnccl's functions with their C signatures."""

    def __init__(self) -> None:
        errors = []
        lib = _already_loaded()
        for path in [] if lib is not None else _candidates():
            try:
                lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                break
            except OSError as exc:
                errors.append(f"{path}: {exc}")
        if lib is None:
            raise NcclError("cannot load libnccl (set NCCL_K8S_LIBNCCL): " + "; ".join(errors[:3]))
        self.lib = lib
        self._pylib: Any = None
        p, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        sig: dict[str, list[Any]] = {
            "ncclGetVersion": [ctypes.POINTER(i)],
            "ncclGetUniqueId": [ctypes.POINTER(_UniqueId)],
            "ncclCommInitRank": [ctypes.POINTER(p), i, _UniqueId, i],
            "ncclCommDestroy": [p],
            "ncclCommAbort": [p],
            "ncclCommGetAsyncError": [p, ctypes.POINTER(i)],
            "ncclAllReduce": [p, p, sz, i, i, p, p],
            "ncclBroadcast": [p, p, sz, i, i, p, p],
            "ncclReduce": [p, p, sz, i, i, i, p, p],
            "ncclAllGather": [p, p, sz, i, p, p],
            "ncclReduceScatter": [p, p, sz, i, i, p, p],
            "ncclSend": [p, sz, i, i, p, p],
            "ncclRecv": [p, sz, i, i, p, p],
            "ncclGroupStart": [],
            "ncclGroupEnd": [],
        }
        for name, args in sig.items():
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = i
        # ncclMemAlloc (2.19+): the allocation nccl-tests uses, which NCCL can register for
        # zero-copy transfers when ops are captured in CUDA graphs.
        self.mem_alloc = getattr(lib, "ncclMemAlloc", None)
        self.mem_free = getattr(lib, "ncclMemFree", None)
        if self.mem_alloc is not None and self.mem_free is not None:
            self.mem_alloc.argtypes, self.mem_alloc.restype = [ctypes.POINTER(p), sz], i
            self.mem_free.argtypes, self.mem_free.restype = [p], i
        # NCCL 2.28 added these as collectives of their own; nccl-tests uses them when present.
        self.native: dict[str, Any] = {}
        for name, args in {
            "ncclAlltoAll": [p, p, sz, i, p, p],
            "ncclGather": [p, p, sz, i, i, p, p],
            "ncclScatter": [p, p, sz, i, i, p, p],
        }.items():
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.argtypes = args
                fn.restype = i
                self.native[name] = fn
        # The timed loop calls these through pointers without argtypes, with arguments already
        # converted to ctypes values: 30-40 % less Python per call (benchmarks/ctypes_overhead.py).
        self.raw = {name: self._raw(name) for name in (*sig, *self.native)}
        # The same through the CDLL handle: the GIL is released during the call, for calls that
        # may block (first use of a connection), so the watchdog thread keeps running.
        self.raw_nogil = {name: self._raw_nogil(name) for name in (*sig, *self.native)}
        self.path = _path_of(lib.ncclGetVersion)
        lib.ncclGetErrorString.argtypes = [i]
        lib.ncclGetErrorString.restype = ctypes.c_char_p

    def _raw(self, name: str) -> Any:
        # Through a PyDLL handle: the call keeps the GIL instead of releasing and retaking it
        # (~0.15 us); these calls never call back into Python and no other thread of ours waits.
        if self._pylib is None:
            self._pylib = ctypes.PyDLL(self.lib._name, mode=ctypes.RTLD_GLOBAL)
        fn = self._pylib._FuncPtr((name, self._pylib))
        fn.restype = ctypes.c_int
        return fn

    def _raw_nogil(self, name: str) -> Any:
        fn = self.lib._FuncPtr((name, self.lib))
        fn.restype = ctypes.c_int
        return fn

    def check(self, rc: int, what: str) -> None:
        if rc:
            text = self.lib.ncclGetErrorString(rc).decode(errors="replace")
            raise NcclError(f"{what} failed: {text} (ncclResult {rc})")

    def version_code(self) -> int:
        """ncclGetVersion of the loaded library: major*10000 + minor*100 + patch (2.9+)."""
        v = ctypes.c_int()
        self.check(self.lib.ncclGetVersion(ctypes.byref(v)), "ncclGetVersion")
        return int(v.value)


def version_string(code: int) -> str:
    """2.28.9 from 22809 (and NCCL < 2.9's major*1000 codes)."""
    major, rest = divmod(code, 10000) if code >= 10000 else divmod(code, 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def loaded_version() -> tuple[int, str | None]:
    """(version code, file) of the libnccl this process uses; the direct driver loads the same."""
    lib = Library()
    return lib.version_code(), lib.path


class Communicator:
    """One rank's NCCL communicator and the calls the timed loop makes on it."""

    def __init__(
        self, rank: int, nranks: int, store: Any, *, key: str = "nccl_k8s/unique_id"
    ) -> None:
        self.lib = Library()
        self.rank, self.nranks = rank, nranks
        uid = _UniqueId()
        if rank == 0:
            self.lib.check(self.lib.lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
            store.set(key, bytes(uid.internal))
        else:
            raw = store.get(key)
            ctypes.memmove(ctypes.addressof(uid), raw, _UNIQUE_ID_BYTES)
        comm = ctypes.c_void_p()
        self.lib.check(
            self.lib.lib.ncclCommInitRank(ctypes.byref(comm), nranks, uid, rank), "ncclCommInitRank"
        )
        self.comm = comm
        self._allocs: list[ctypes.c_void_p] = []
        self._registered: list[tuple[bool, ctypes.c_void_p]] = []

    def async_error(self) -> None:
        err = ctypes.c_int()
        self.lib.check(
            self.lib.lib.ncclCommGetAsyncError(self.comm, ctypes.byref(err)),
            "ncclCommGetAsyncError",
        )
        self.lib.check(err.value, "asynchronous NCCL operation")

    def wait(self, stream: int) -> None:
        """Poll the stream as nccl-tests does, watching NCCL's async errors (the collective
        timeout is the watchdog's: bench.watch)."""
        from nccl_k8s.bench.cuda import query

        while not query(stream):
            self.async_error()
            os.sched_yield()

    def alloc_ptr(self, nbytes: int) -> int | None:
        """`nbytes` of device memory from ncclMemAlloc, or None where NCCL has none (or
        NCCL_K8S_ALLOC=cuda asks for plain cuMemAlloc); `free_all` gives it back."""
        lib = self.lib
        if lib.mem_alloc is None or os.environ.get("NCCL_K8S_ALLOC") in ("torch", "cuda"):
            return None
        ptr = ctypes.c_void_p()
        lib.check(lib.mem_alloc(ctypes.byref(ptr), max(nbytes, 1)), "ncclMemAlloc")
        self._allocs.append(ptr)
        return int(ptr.value or 0)

    def alloc_tensor(self, nbytes: int) -> Any:
        """A uint8 CUDA tensor over ncclMemAlloc'd memory, or None (the torch data path)."""
        import torch

        ptr = self.alloc_ptr(nbytes)
        if ptr is None:
            return None
        holder = _CudaArray(ptr, max(nbytes, 1))
        return torch.as_tensor(holder, device=f"cuda:{torch.cuda.current_device()}")[:nbytes]

    def free_all(self) -> None:
        while self._allocs:
            ptr = self._allocs.pop()
            if self.lib.mem_free is not None:
                self.lib.mem_free(ptr)

    def abort(self) -> None:
        if self.comm:
            self.lib.lib.ncclCommAbort(self.comm)
            self.comm = ctypes.c_void_p()

    def destroy(self) -> None:
        if self.comm:
            self._deregister()
            self.lib.lib.ncclCommDestroy(self.comm)
            self.comm = ctypes.c_void_p()
        self.free_all()

    # -- the calls ------------------------------------------------------------------------
    def specs(
        self,
        op: Op,
        send: int,
        recv: int,
        count: int,
        chunk_bytes: int,
        dtype: Dtype,
        redop: RedOp,
        root: int,
        stream: int,
    ) -> list[Spec]:
        """The libnccl calls one collective makes, with their arguments as ctypes values: one
        call, or groups of calls (ncclGroupStart, the sends and receives, ncclGroupEnd), as
        nccl-tests makes them (bench.collectives)."""
        return COLLECTIVES[op].nccl(
            NcclCall(
                send=send, recv=recv, count=count, chunk_bytes=chunk_bytes,
                dtype=NCCL_DTYPES[dtype], redop=NCCL_OPS[redop], root=root,
                rank=self.rank, nranks=self.nranks, comm=self.comm, stream=stream,
                native=self.lib.native,
            )
        )  # fmt: skip

    def call(self, specs: list[Spec], *, release_gil: bool = False) -> Callable[[], None]:
        """A zero-argument callable making `specs`' calls (raw pointers, no sync)."""
        raw = self.lib.raw_nogil if release_gil else self.lib.raw
        check = self.lib.check
        if len(specs) == 1:
            name, args = specs[0]
            fn = raw[name]

            def single() -> None:
                rc = fn(*args)
                if rc:
                    check(rc, name)

            return single
        start, end = raw["ncclGroupStart"], raw["ncclGroupEnd"]
        groups = [
            _grouped(start, end, check, [(raw[name], args) for name, args in p2p])
            for p2p in _groups(specs)
        ]
        if len(groups) == 1:
            return groups[0]

        def several() -> None:  # a collective made of steps: one group after the other
            for group in groups:
                group()

        return several

    def group(self, calls: Sequence[Callable[[], None]]) -> Callable[[], None]:
        """`calls` in one NCCL group (nccl-tests' -m aggregation; NCCL allows groups in groups)."""
        start, end, check = (
            self.lib.raw["ncclGroupStart"],
            self.lib.raw["ncclGroupEnd"],
            self.lib.check,
        )

        def aggregated() -> None:
            check(start(), "ncclGroupStart")
            try:
                for call in calls:
                    call()
            finally:
                check(end(), "ncclGroupEnd")

        return aggregated

    def register(self, ptr: int, nbytes: int, *, symmetric: bool) -> None:
        """-R: register a buffer with the communicator, as nccl-tests does: ncclCommRegister
        (NCCL 2.19+), or a symmetric window with ncclCommWindowRegister (2.27+, collective: every
        rank registers the same buffers in the same order). Undone by destroy()."""
        name = "ncclCommWindowRegister" if symmetric else "ncclCommRegister"
        fn = getattr(self.lib.lib, name, None)
        if fn is None:
            need = "2.27" if symmetric else "2.19"
            raise NcclError(f"-R {2 if symmetric else 1}: {name} needs NCCL {need} or later")
        handle = ctypes.c_void_p()
        p = ctypes.c_void_p
        if symmetric:
            fn.argtypes = [p, p, ctypes.c_size_t, ctypes.POINTER(p), ctypes.c_int]
            rc = fn(self.comm, p(ptr), nbytes, ctypes.byref(handle), _NCCL_WIN_COLL_SYMMETRIC)
        else:
            fn.argtypes = [p, p, ctypes.c_size_t, ctypes.POINTER(p)]
            rc = fn(self.comm, p(ptr), nbytes, ctypes.byref(handle))
        fn.restype = ctypes.c_int
        self.lib.check(rc, name)
        self._registered.append((symmetric, handle))

    def _deregister(self) -> None:
        while self._registered:
            symmetric, handle = self._registered.pop()
            name = "ncclCommWindowDeregister" if symmetric else "ncclCommDeregister"
            fn = getattr(self.lib.lib, name)
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            fn(self.comm, handle)

    def pointer(self, name: str) -> int:
        """The address of a libnccl function (for the native timed loop)."""
        return int(ctypes.cast(getattr(self.lib.lib, name), ctypes.c_void_p).value or 0)


def _groups(specs: list[Spec]) -> list[list[Spec]]:
    """The calls between each ncclGroupStart and its ncclGroupEnd; `specs` holds only groups."""
    groups: list[list[Spec]] = []
    current: list[Spec] | None = None
    for name, args in specs:
        if name == "ncclGroupStart" and current is None:
            current = []
        elif name == "ncclGroupEnd" and current is not None:
            groups.append(current)
            current = None
        elif current is not None:
            current.append((name, args))
        else:
            raise ValueError(f"{name} outside an NCCL group: {[n for n, _ in specs]}")
    if current is not None:
        raise ValueError(f"an NCCL group left open: {[n for n, _ in specs]}")
    return groups


def _grouped(
    start: Any, end: Any, check: Callable[[int, str], None], p2p: list[tuple[Any, tuple[Any, ...]]]
) -> Callable[[], None]:
    """One group's calls through raw pointers; a failing call still closes the group."""

    def grouped() -> None:
        check(start(), "ncclGroupStart")
        for fn, args in p2p:
            rc = fn(*args)
            if rc:
                end()
                check(rc, "ncclSend/ncclRecv")
        check(end(), "ncclGroupEnd")

    return grouped


class _CudaArray:
    """Just enough of __cuda_array_interface__ for torch.as_tensor to wrap a device pointer."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (ptr, False),
            "version": 3,
            "strides": None,
        }


__all__ = [
    "NCCL_DTYPES",
    "NCCL_OPS",
    "Communicator",
    "Library",
    "NcclError",
    "Spec",
    "loaded_version",
    "version_string",
]
