"""Host cost of one ctypes call shaped like ncclAllReduce, by how the call is made.

    python benchmarks/ctypes_overhead.py

Compiles a do-nothing C function with seven arguments (gcc) and times 200,000 calls each way.
The engine's timed loop uses the cheapest: arguments converted to ctypes values once, function
pointer without argtypes (src/nccl_k8s/bench/nccl.py).
"""

from __future__ import annotations

import ctypes
import functools
import pathlib
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

N = 200_000


def _bench(name: str, call: Callable[[], Any]) -> None:
    t = time.perf_counter()
    for _ in range(N):
        call()
    print(f"{name:40s} {(time.perf_counter() - t) / N * 1e9:6.0f} ns/call")


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        src = pathlib.Path(d, "f.c")
        src.write_text(
            "int f7(const void* a, void* b, unsigned long c, int d, int e, void* g, void* h) { return 0; }\n"
        )
        so = pathlib.Path(d, "libf.so")
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
        lib = ctypes.CDLL(str(so))
        p, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        typed = lib.f7
        typed.argtypes = [p, p, sz, i, i, p, p]
        typed.restype = i
        raw = lib._FuncPtr(("f7", lib))
        raw.restype = i
        ints = (140000000000, 140000001000, 1024, 7, 0, 94000000, 95000000)
        pre = (p(ints[0]), p(ints[1]), sz(ints[2]), i(ints[3]), i(ints[4]), p(ints[5]), p(ints[6]))
        _bench("argtypes, Python ints", lambda: typed(*ints))
        _bench("argtypes, ctypes values", lambda: typed(*pre))
        _bench("no argtypes, ctypes values", lambda: raw(*pre))
        _bench("no argtypes, ctypes values, partial", functools.partial(raw, *pre))


if __name__ == "__main__":
    main()
