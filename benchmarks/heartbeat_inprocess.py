"""Does the heartbeat thread slow the timed loop down? An in-process A/B through the engine.

    python benchmarks/heartbeat_inprocess.py [--rounds 12] [engine flags...] > out.txt

Separate processes on the GPU machine differ by up to ~20 % in small-op times (where the main
and NCCL threads land), as large as the effect looked for (BENCHMARKS.md, point 8). So this
keeps one process, one communicator and one set of buffers, and runs the engine's own sweep
(`Engine.run`, the same timed loops, world size 1) in rounds that alternate a watchdog beating
every 0.1 s (ten times the default rate) to a real TCPStore, and no watchdog thread at all
(NCCL_K8S_HEARTBEAT_S=0, no -T). The order flips every round (on/off, off/on). It prints, per
size, the median out-of-place time of each mode over the rounds and their ratio on/off.
Default flags: all_reduce 8 B-64 KB x4, 100 iterations, 10 warm-up, checking off.
"""

from __future__ import annotations

import argparse
import io
import os
import socket
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from nccl_k8s.bench.config import parse_args
from nccl_k8s.bench.engine import Engine, Printer
from nccl_k8s.bench.rank import Rank, resolve_backend
from nccl_k8s.bench.watch import Watchdog
from nccl_k8s.results.nccltests import parse_text

DEFAULT_FLAGS = ["-b", "8", "-e", "64K", "-f", "4", "-n", "100", "-w", "10", "-c", "0"]


def sweep(rank: Rank, flags: list[str], beating: bool) -> dict[int, float]:
    """One engine sweep; out-of-place time (µs) per size."""
    os.environ["NCCL_K8S_HEARTBEAT_S"] = "0.1" if beating else "0"
    wd = Watchdog(rank.rank, rank.world, host=socket.gethostname(), timeout_s=0).start()
    assert (wd._thread is not None) == beating  # the A/B must be what it says
    out = io.StringIO()
    try:
        Engine(parse_args(flags), rank, Printer(True, out, False), wd).run()
    finally:
        wd.stop()
    run = parse_text(out.getvalue(), origin="heartbeat A/B")
    return {r.size_bytes: r.time_us for r in run.rows if r.placement == "out"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=12)
    args, flags = ap.parse_known_args()
    flags = flags or DEFAULT_FLAGS
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    cfg = parse_args(flags)
    rank = Rank(resolve_backend(cfg.backend), 0, driver=cfg.driver)
    times: dict[bool, dict[int, list[float]]] = {True: {}, False: {}}
    print(f"# flags: {' '.join(flags)}; backend {rank.backend}; rounds {args.rounds}")
    try:
        sweep(rank, flags, False)  # warm the process (first sweep pays one-time costs)
        for k in range(args.rounds):
            for beating in (True, False) if k % 2 == 0 else (False, True):
                for size, t in sweep(rank, flags, beating).items():
                    times[beating].setdefault(size, []).append(t)
    finally:
        rank.close()
    print(f"{'size (B)':>10} {'on (us)':>9} {'off (us)':>9} {'on/off':>7}")
    ratios = []
    for size in sorted(times[True]):
        on, off = statistics.median(times[True][size]), statistics.median(times[False][size])
        ratios.append(on / off)
        print(f"{size:>10} {on:>9.2f} {off:>9.2f} {on / off:>7.3f}")
    print(f"median on/off over sizes {statistics.median(ratios):.3f}"
          f" (min {min(ratios):.3f}, max {max(ratios):.3f})")  # fmt: skip


if __name__ == "__main__":
    main()
