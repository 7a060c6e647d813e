"""A timed loop in C, for the direct driver: the ops issued and timed without Python between them.

At world size 1 on an H200 an eager small collective costs NCCL a few microseconds of host time,
and the Python loop with a ctypes call adds one to two more (BENCHMARKS.md). nccl-tests' loop is
C. The loop below ships with the engine, built for x86_64 and aarch64 (bench/loops/, by
tools/build_loops.py: `make loops`), so pods run it in stock PyTorch images, which have no C
compiler. Before it is loaded its bytes are checked against the sha256 digest bench._loops
holds (the engine's own code, which a pod gets in the zipapp whose digest the wrapper checks):
nothing of the node's is trusted, and a library whose digest differs is refused, said on
stderr. The checked bytes are loaded from an anonymous in-memory file (memfd), so what is
loaded is what was checked; without one, from a private cache file checked again once written.
Elsewhere (another machine, or the shipped one refused) the machine's C compiler (cc, gcc or
clang) builds it once per machine and version into the cache (`cache_dir`: NCCL_K8S_CACHE_DIR,
~/.cache/nccl-k8s, or the temp dir; private to the user, and one another user could write is
refused: `unsafe`), named by its text, the machine, the compiler and our version; with neither,
the Python loop runs. It is loaded with ctypes and handed the addresses of the
libnccl functions and their arguments. `nk_timed` takes the clock, issues `iters` ops (rotating
through the buffer exactly as the Python loop does), polls the stream with the driver's
cuStreamQuery and ncclCommGetAsyncError until the work is done, as nccl-tests does, and takes the
clock again: the span nccl-tests times, with nothing of Python's inside it. With -G it launches
the captured graph G times the same way (cuGraphLaunch).

NCCL_K8S_NATIVE_LOOP=0 turns it off (the Python loop), 1 or unset uses it where it loads or
builds; the header and meta line say which ran (`timer=c-shipped`, `c-built` or `python`).
BENCHMARKS.md has the figures that decided it."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import pkgutil
import platform
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

MAX_ARGS = 8
_SOURCE = r"""
#include <sched.h>
#include <stdint.h>
#include <time.h>
typedef int (*fn8)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);
typedef int (*query_t)(void *);
typedef int (*async_t)(void *, int *);
struct nk_call { void *fn; uint64_t a[8]; };

/* Op i of the loop makes calls[first[i % m] .. first[i % m + 1]). Every libnccl and cudart
   argument used here is a pointer, a size_t or an int, all passed in integer registers or
   8-byte stack slots, so one eight-argument signature calls them all (the callee reads what it
   declared). Returns 0, or (call index + 1) << 8 | the result code of the first call that failed. */
int nk_loop(const struct nk_call *calls, const int *first, int m, int iters) {
    for (int i = 0; i < iters; i++) {
        int o = i % m;
        for (int c = first[o]; c < first[o + 1]; c++) {
            const struct nk_call *k = &calls[c];
            int rc = ((fn8)k->fn)(k->a[0], k->a[1], k->a[2], k->a[3], k->a[4], k->a[5], k->a[6], k->a[7]);
            if (rc) return ((c + 1) << 8) | (rc & 0xff);
        }
    }
    return 0;
}

/* The clock, nk_loop, then wait for `stream` (cudaStreamQuery: 0 done, 600 not ready), checking
   NCCL's asynchronous error now and then; elapsed nanoseconds in *ns. Returns nk_loop's code,
   or -1 (query failed, its code in *ns) or -2 (NCCL async error, its code in *ns). */
int nk_timed(const struct nk_call *calls, const int *first, int m, int iters, void *query,
             void *stream, void *async_error, void *comm, int64_t *ns) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = nk_loop(calls, first, m, iters);
    if (rc) return rc;
    for (unsigned n = 0;; n++) {
        int q = ((query_t)query)(stream);
        if (q == 0) break;
        if (q != 600) { *ns = q; return -1; }
        if (async_error && comm && (n & 1023) == 1023) {
            int err = 0;
            ((async_t)async_error)(comm, &err);
            if (err) { *ns = err; return -2; }
        }
        sched_yield();
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *ns = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
    return 0;
}
"""

#: One call for the loop: the function's address and its arguments as ctypes values.
Call = tuple[int, Sequence[Any]]


class _Call(ctypes.Structure):
    _fields_ = [("fn", ctypes.c_void_p), ("a", ctypes.c_uint64 * MAX_ARGS)]


class NativeError(RuntimeError):
    """The native loop's wait failed (a CUDA error, or NCCL's asynchronous error)."""


class Program:
    """A rotation of ops as the C loop's call table, with what it waits on."""

    def __init__(
        self,
        loop: NativeLoop,
        ops: Sequence[Sequence[Call]],
        *,
        names: Sequence[Sequence[str]],
        check: Callable[[int, str], None],
        stream: int = 0,
        comm: int = 0,
        async_error: int = 0,
    ) -> None:
        flat = [call for op in ops for call in op]
        self.names = [name for op in names for name in op]
        self.calls = (_Call * max(1, len(flat)))()
        for k, (fn, args) in enumerate(flat):
            self.calls[k].fn = fn
            for j, arg in enumerate(args):
                value = arg.value if hasattr(arg, "value") else arg
                self.calls[k].a[j] = int(value or 0) & 0xFFFFFFFFFFFFFFFF
        bounds = [0]
        for op in ops:
            bounds.append(bounds[-1] + len(op))
        self.first = (ctypes.c_int * len(bounds))(*bounds)
        self.m = len(ops)
        self._loop, self._check = loop, check
        self._stream, self._comm, self._async = stream, comm, async_error

    def _raise(self, rc: int) -> None:
        self._check(rc & 0xFF, self.names[(rc >> 8) - 1])

    def run(self, iters: int) -> None:
        """Issue `iters` ops (op i is entry i % m); raises as the Python loop does."""
        rc = self._loop.loop(self.calls, self.first, self.m, iters)
        if rc:
            self._raise(rc)

    def timed(self, iters: int) -> float:
        """Seconds from before the first op is issued until the stream has finished them all."""
        query = self._loop.stream_query
        if not query:
            raise NativeError("cudaStreamQuery not found")
        ns = ctypes.c_int64(0)
        rc = self._loop.timed(
            self.calls, self.first, self.m, iters, query, self._stream, self._async or None,
            self._comm or None, ctypes.byref(ns),
        )  # fmt: skip
        if rc == -1:
            raise NativeError(f"cudaStreamQuery failed: CUDA error {ns.value}")
        if rc == -2:
            self._check(int(ns.value), "asynchronous NCCL operation")
        if rc:
            self._raise(rc)
        return ns.value / 1e9


class NativeLoop:
    def __init__(self, path: str, origin: str = "built") -> None:
        self.origin = origin
        """Where the library came from: "shipped" (bench/loops/) or "built" (the compiler)."""
        self.lib = ctypes.CDLL(path)
        self.loop = self.lib.nk_loop
        self.loop.argtypes = [
            ctypes.POINTER(_Call),
            ctypes.POINTER(ctypes.c_int),
            ctypes.c_int,
            ctypes.c_int,
        ]
        self.loop.restype = ctypes.c_int
        self.timed = self.lib.nk_timed
        vp = ctypes.c_void_p
        self.timed.argtypes = [ctypes.POINTER(_Call), ctypes.POINTER(ctypes.c_int), ctypes.c_int,
                               ctypes.c_int, vp, vp, vp, vp, ctypes.POINTER(ctypes.c_int64)]  # fmt: skip
        self.timed.restype = ctypes.c_int
        # The driver's entry points (libcuda): the runtime's cudaStreamQuery and cudaGraphLaunch
        # are thin wrappers of these, and a torch-free process has no runtime loaded.
        self.stream_query = _driver_address("cuStreamQuery")
        self.graph_launch = _driver_address("cuGraphLaunch")

    def program(self, ops: Sequence[Sequence[Call]], **kwargs: Any) -> Program:
        return Program(self, ops, **kwargs)


def _driver_address(name: str) -> int:
    """A CUDA driver function's address; 0 where there is no driver (the loop still issues)."""
    from nccl_k8s.bench import cuda

    try:
        return cuda.address(name)
    except (OSError, AttributeError):
        return 0


def unsafe(path: str) -> str:
    """Why compiled code at `path` (a cache directory or a file in it) may not be trusted: owned
    by another user, or writable by its group or by everyone, so that another user could plant a
    library of the right name; "" when it may."""
    try:
        st = os.stat(path)
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if st.st_uid != os.getuid():
        return f"owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    if st.st_mode & 0o022:
        return f"writable by its group or by everyone (mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


_REFUSED: set[str] = set()


def _say(line: str) -> None:
    """One line on stderr, as the engine's own."""
    sys.stderr.write(f"nccl-k8s: {line}\n")


def _refuse(path: str, why: str) -> None:
    """Say once per path, on stderr, that a cache directory is not used and why."""
    if path not in _REFUSED:
        _REFUSED.add(path)
        _say(f"not using the cache directory {path}: {why}")


def cache_dir() -> str | None:
    """Where compiled code is kept between runs: NCCL_K8S_CACHE_DIR, else
    $XDG_CACHE_HOME/nccl-k8s or ~/.cache/nccl-k8s, else a per-user folder in the temp dir
    (pods often have a read-only home); None where nothing can be written. Each is created with
    mode 0700; one owned by another user or writable by others is refused (said on stderr) and
    the next tried: a predictable folder in the temp dir could be someone else's."""
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    choices = [os.environ.get("NCCL_K8S_CACHE_DIR"), os.path.join(home, "nccl-k8s"),
               os.path.join(tempfile.gettempdir(), f"nccl-k8s-cache-{os.getuid()}")]  # fmt: skip
    for path in choices:
        if not path:
            continue
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError:
            continue
        why = unsafe(path)
        if why:
            _refuse(path, why)
        elif os.access(path, os.W_OK):
            return path
    return None


def cached(path: str | None) -> bool:
    """Whether a cache file exists and may be loaded (unsafe: no)."""
    return path is not None and os.path.exists(path) and not unsafe(path)


def cache_path(name: str) -> str | None:
    """A file in the cache; names carry what they were built from (text, machine, versions)."""
    folder = cache_dir()
    return os.path.join(folder, name) if folder else None


def write_atomic(path: str, payload: bytes) -> None:
    """Write a cache file so that a concurrent reader (another rank) sees all of it or none."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(payload)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _compiler() -> str | None:
    return next(
        (c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None
    )


def build_shared(source: str, stem: str) -> str | None:
    """`source` compiled once per machine and version into a cached shared library; None
    without a compiler (or when it fails)."""
    return _build(source, stem)[0]


def _build(source: str, stem: str) -> tuple[str | None, str | None, str | None]:
    """build_shared's library, the compiler it used (None: none found) and, when that compiler
    failed, the last line it printed."""
    from nccl_k8s import __version__

    cc = _compiler()
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    if cc is None:
        return None, None, None
    name = f"{stem}-{__version__}-{platform.machine()}-{os.path.basename(cc)}-{digest}.so"
    out = cache_path(name) or os.path.join(tempfile.mkdtemp(prefix="nccl-k8s-"), name)
    if cached(out):
        return out, cc, None
    with tempfile.TemporaryDirectory(prefix="nccl-k8s-cc-") as tmp:
        src = os.path.join(tmp, f"{stem}.c")
        with open(src, "w", encoding="utf-8") as f:
            f.write(source)
        built = os.path.join(tmp, f"{stem}.so")
        try:
            proc = subprocess.run(
                [cc, "-O2", "-shared", "-fPIC", "-x", "c", "-o", built, src],
                capture_output=True, check=False,
            )  # fmt: skip
        except OSError as e:
            return None, cc, str(e)
        if proc.returncode != 0:
            said = proc.stderr.decode(errors="replace").strip().splitlines()
            return None, cc, (said[-1][:200] if said else f"exit status {proc.returncode}")
        with open(built, "rb") as f:
            write_atomic(out, f.read())
    return (out, cc, None) if os.path.exists(out) else (None, cc, f"{out} is missing")


def source_sha256() -> str:
    """sha256 of the loop's text, as bench._loops records the text its libraries were built from."""
    return hashlib.sha256(_SOURCE.encode()).hexdigest()


def shipped_name(machine: str) -> str:
    """The shipped library's file name in bench/loops/ for a platform.machine()."""
    return f"loop-{machine}.so"


def shipped_bytes() -> bytes | None:
    """This machine's shipped library once its digest is checked; None where none ships for
    it, or where it is refused (`native_loop` says why)."""
    return _shipped()[0]


def _shipped() -> tuple[bytes | None, str | None]:
    """shipped_bytes's library, else None and why it is refused (None where none ships for this
    machine: nothing to refuse): its bytes or the text it was built from are not the ones
    bench._loops records, or it is missing."""
    from nccl_k8s.bench import _loops

    machine = platform.machine()
    name, want = shipped_name(machine), _loops.SHA256.get(machine)
    if want is None:
        return None, None
    if source_sha256() != _loops.SOURCE_SHA256:
        return None, (
            f"not loading the shipped timing loop loops/{name}: "
            "it was built from another text of the loop"
        )
    try:
        data = pkgutil.get_data(__package__ or "nccl_k8s.bench", f"loops/{name}")
    except OSError:
        data = None
    if data is None:
        return None, f"the shipped timing loop loops/{name} is missing"
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        return (
            None,
            f"refusing the shipped timing loop loops/{name}: its sha256 is {got}, not {want}",
        )
    return data, None


def _load_checked(data: bytes) -> NativeLoop:
    """The checked bytes loaded as they are: from a memfd only this process holds, else from a
    private cache file whose digest is checked again after it is written (OSError: neither)."""
    digest = hashlib.sha256(data).hexdigest()
    with contextlib.suppress(AttributeError, OSError):
        fd = os.memfd_create("nccl-k8s-loop", os.MFD_CLOEXEC)
        try:
            with os.fdopen(fd, "wb", closefd=False) as f:
                f.write(data)
            return NativeLoop(f"/proc/self/fd/{fd}", origin="shipped")
        finally:
            os.close(fd)
    path = cache_path(f"loop-shipped-{platform.machine()}-{digest[:16]}.so")
    if path is None:
        raise OSError("no private folder to load the shipped loop from")
    write_atomic(path, data)
    with open(path, "rb") as f:
        if unsafe(path) or hashlib.sha256(f.read()).hexdigest() != digest:
            raise OSError(f"{path} changed after it was written")
    return NativeLoop(path, origin="shipped")


@functools.lru_cache(maxsize=1)
def native_loop() -> NativeLoop | None:
    """The loop unless NCCL_K8S_NATIVE_LOOP=0: the shipped one where it is this machine's and its
    digest holds, else one the machine's compiler builds; None where neither (the Python loop)."""
    if os.environ.get("NCCL_K8S_NATIVE_LOOP", "1") == "0":
        return None
    data, refused = _shipped()
    if data is not None:
        with contextlib.suppress(OSError):
            return _load_checked(data)
    try:
        path, cc, failed = _build(_SOURCE, "loop")
    except OSError as e:  # no folder to build in
        path, cc, failed = None, _compiler(), str(e)
    if refused:
        # What runs instead, said once it is known: a compiler found may still fail (one
        # named by CC whose assembler is not on PATH, as on a machine with a bare PATH).
        if path:
            instead = f"the loop is built here with {cc}"
        elif cc:
            instead = (
                f"the Python loop times the ops (building the loop here with {cc} failed: {failed})"
            )
        else:
            instead = "the Python loop times the ops"
        _say(f"{refused}; {instead}")
    return NativeLoop(path, origin="built") if path else None


__all__ = [
    "Call",
    "NativeError",
    "NativeLoop",
    "Program",
    "build_shared",
    "cache_dir",
    "cache_path",
    "cached",
    "native_loop",
    "shipped_bytes",
    "shipped_name",
    "source_sha256",
    "unsafe",
    "write_atomic",
]
