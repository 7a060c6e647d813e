"""Does the heartbeat thread slow the timed loop down? An in-process A/B on the CPU.

    python benchmarks/heartbeat_overhead.py > benchmarks/data/<date>-heartbeat-cpu/out.txt

Separate processes differ by up to ~20 % in small-op times on the GPU machine (CPU placement of
the main and NCCL threads), which hides a small effect; so this measures inside one process:
the engine's kind of timed loop (back-to-back ctypes calls through a PyDLL pointer, holding the
GIL, as the Python timer does; and a loop that releases the GIL, as the C timer does), in
rounds alternating the watchdog on (heartbeat every 0.1 s, ten times the default rate, to a real
TCPStore) and off, with `Watchdog.timed()` around each loop as the engine has it.
"""

from __future__ import annotations

import ctypes
import datetime
import os
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from nccl_k8s.bench.watch import Watchdog

LOOPS, CALLS, ROUNDS = 50, 2000, 10


def main() -> None:
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = TCPStore("127.0.0.1", port, is_master=True, timeout=datetime.timedelta(seconds=10))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    libc = ctypes.PyDLL(None)
    getpid = libc._FuncPtr(("getpid", libc))  # a C call that keeps the GIL, like the engine's
    cdll = ctypes.CDLL(None)
    nogil = cdll._FuncPtr(("getpid", cdll))  # the same call, releasing the GIL

    def run(wd: Watchdog, fn: object, arg: tuple[int, ...]) -> float:
        times = []
        for _ in range(LOOPS):
            with wd.timed():
                t0 = time.perf_counter()
                for _ in range(CALLS):
                    fn(*arg)  # type: ignore[operator]
                times.append((time.perf_counter() - t0) / CALLS)
            wd.progress("between loops")
        return statistics.median(times)

    print(f"{'loop':>14} {'round':>5} {'on (ns/call)':>13} {'off (ns/call)':>14}")
    for name, fn, arg in (("gil-held", getpid, ()), ("gil-released", nogil, ())):
        ratios = []
        for k in range(ROUNDS):
            on = Watchdog(0, 1, host="h", timeout_s=0, interval_s=0.1).start()
            t_on = run(on, fn, arg)
            on.stop()
            off = Watchdog(0, 1, host="h", timeout_s=0, interval_s=-1).start()
            t_off = run(off, fn, arg)
            ratios.append(t_on / t_off)
            print(f"{name:>14} {k:5d} {t_on * 1e9:13.1f} {t_off * 1e9:14.1f}")
        print(
            f"{name:>14} median on/off {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})"
        )
    del server


if __name__ == "__main__":
    main()
