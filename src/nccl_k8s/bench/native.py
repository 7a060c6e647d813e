"""A timed loop in C, for the direct driver: the ops issued without Python between them.

At world size 1 on an H200 an eager small collective costs NCCL a few microseconds of host
time, and the Python loop with a ctypes call adds about one more (BENCHMARKS.md). nccl-tests'
loop is C. This module compiles a twenty-line C loop with the machine's C compiler (cc, gcc or
clang; stock PyTorch runtime images have none, and then nothing changes), loads it with ctypes
and hands it the addresses of the libnccl functions and their arguments: it issues `iters` ops,
rotating through the buffer exactly as the Python loop does, and returns. The caller waits for
the stream as before, so what is timed is the same span as nccl-tests times.

NCCL_K8S_NATIVE_LOOP=1 turns it on, 0 (the default) off; see BENCHMARKS.md for the figures that
decided the default.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nccl_k8s.bench.nccl import Communicator, Spec

MAX_ARGS = 8
_SOURCE = r"""
#include <stdint.h>
typedef int (*fn8)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);
struct nk_call { void *fn; uint64_t a[8]; };
/* Op i of the loop makes calls[first[i % m] .. first[i % m + 1]). Every libnccl argument is a
   pointer, a size_t or an int, all passed in integer registers or 8-byte stack slots, so one
   eight-argument signature calls them all (the callee reads what it declared). Returns 0, or
   (call index + 1) << 8 | the ncclResult of the first call that failed. */
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
"""


class _Call(ctypes.Structure):
    _fields_ = [("fn", ctypes.c_void_p), ("a", ctypes.c_uint64 * MAX_ARGS)]


class Program:
    """Every rotation of one bound op, as the C loop's call table."""

    def __init__(self, loop: NativeLoop, comm: Communicator, ops: list[list[Spec]]) -> None:
        flat = [spec for op in ops for spec in op]
        self.names = [name for name, _ in flat]
        self.calls = (_Call * max(1, len(flat)))()
        for k, (name, args) in enumerate(flat):
            self.calls[k].fn = comm.pointer(name)
            for j, arg in enumerate(args):
                self.calls[k].a[j] = int(arg.value or 0) & 0xFFFFFFFFFFFFFFFF
        bounds = [0]
        for op in ops:
            bounds.append(bounds[-1] + len(op))
        self.first = (ctypes.c_int * len(bounds))(*bounds)
        self.m = len(ops)
        self._loop = loop
        self._check = comm.lib.check

    def run(self, iters: int) -> None:
        """Issue `iters` ops (op i is rotation i % m); raises NcclError as the Python loop does."""
        rc = self._loop.fn(self.calls, self.first, self.m, iters)
        if rc:
            self._check(rc & 0xFF, self.names[(rc >> 8) - 1])


class NativeLoop:
    def __init__(self, path: str) -> None:
        self.lib = ctypes.CDLL(path)
        self.fn = self.lib.nk_loop
        self.fn.argtypes = [
            ctypes.POINTER(_Call),
            ctypes.POINTER(ctypes.c_int),
            ctypes.c_int,
            ctypes.c_int,
        ]
        self.fn.restype = ctypes.c_int

    def program(self, comm: Communicator, ops: list[list[Spec]]) -> Program:
        return Program(self, comm, ops)


def _build() -> str | None:
    """Compile the loop once per source text (cached in the temp dir); None without a compiler."""
    cc = next(
        (c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None
    )
    if cc is None:
        return None
    digest = hashlib.sha256(_SOURCE.encode()).hexdigest()[:16]
    out = os.path.join(tempfile.gettempdir(), f"nccl_k8s_loop_{digest}_{os.getuid()}.so")
    if os.path.exists(out):
        return out
    with tempfile.TemporaryDirectory(prefix="nccl-k8s-cc-") as tmp:
        src = os.path.join(tmp, "loop.c")
        with open(src, "w", encoding="utf-8") as f:
            f.write(_SOURCE)
        built = os.path.join(tmp, "loop.so")
        proc = subprocess.run(
            [cc, "-O2", "-shared", "-fPIC", "-o", built, src], capture_output=True, check=False
        )
        if proc.returncode != 0:
            return None
        os.replace(built, out)
    return out


@functools.lru_cache(maxsize=1)
def native_loop() -> NativeLoop | None:
    """The loop when NCCL_K8S_NATIVE_LOOP=1 and a compiler builds it; else None (Python loop)."""
    if os.environ.get("NCCL_K8S_NATIVE_LOOP", "0") != "1":
        return None
    path = _build()
    return NativeLoop(path) if path else None


__all__ = ["NativeLoop", "Program", "native_loop"]
