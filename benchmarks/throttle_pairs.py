"""How much the test cluster's node faults slow a pair's bandwidth, without Kubernetes.

Pairs of gloo ranks, each rank in a mount namespace of its own (`unshare -m`, as the kubelet's
sandboxes: the throttle helper finds a node's processes by it), run 32 MB all_reduce for
--seconds; the helper (tests/cluster/throttle.py, run as the cluster runs it) holds every rank
as a node of --cpus CPUs (0: the relative node-slow fault alone) and slows the first pair's
second rank --factor times. Prints each pair's bandwidth and the slowed pair's over the median
other pair's: the number a `nodes check` compares with its threshold, and the CPUs the helper
itself used (at real-time priority: taken from the nodes).

    sudo python benchmarks/throttle_pairs.py --cpus 0.2 --factor 4 --pairs 4   # as nodes_cluster
    sudo python benchmarks/throttle_pairs.py --cpus 0 --factor 8 --pairs 1     # as the e2e tests

Needs root (unshare -m) and torch. With one pair there is no other pair: run it with --factor
1 too, and compare.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
HELPER = ROOT / "tests" / "cluster" / "throttle.py"
SIZE = 32_000_000

RANK = """
import sys, time, torch, torch.distributed as dist
rank, port, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
x, more = torch.ones(SIZE // 4), torch.zeros(1)
for _ in range(2):
    dist.all_reduce(x)
start, n = time.monotonic(), 0
while True:
    dist.all_reduce(x)
    n += 1
    more[0] = float(rank == 0 and time.monotonic() - start > seconds)
    dist.all_reduce(more)  # rank 0 says when to stop
    if more[0]:
        break
if rank == 0:
    print(n, time.monotonic() - start)
dist.destroy_process_group()
""".replace("SIZE", str(SIZE))


def _own_namespace(pid: int) -> int:
    """The mount namespace of `unshare -m`'s process once it has its own: until it has made it,
    it is in ours, and the helper would then hold every process of this machine."""
    ours = os.stat("/proc/self/ns/mnt").st_ino
    for _ in range(1000):
        inode = os.stat(f"/proc/{pid}/ns/mnt").st_ino
        if inode != ours:
            return inode
        time.sleep(0.01)
    raise SystemExit(f"process {pid} never left this mount namespace")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpus", type=float, default=0.2, help="each node's CPUs (0: uncapped)")
    ap.add_argument("--factor", type=float, default=4.0)
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--port", type=int, default=29600)
    args = ap.parse_args()
    ranks = []
    for p in range(args.pairs):
        for r in range(2):
            argv = [str(r), str(args.port + p), str(args.seconds)]
            ranks.append(
                subprocess.Popen(
                    ["unshare", "-m", sys.executable, "-c", RANK, *argv],
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
    inodes = [_own_namespace(rank.pid) for rank in ranks]
    state: dict[str, dict[str, object]] = {}
    for i, inode in enumerate(inodes):
        factor = args.factor if i == 1 else 1.0
        if args.cpus or factor > 1:
            state[f"node-{i}"] = {
                "factor": factor,
                "cpus": args.cpus or None,
                "inodes": [inode],
                "exclude": [],
            }
    state[""] = {"inodes": inodes, "exclude": []}
    helper = subprocess.Popen([sys.executable, str(HELPER)], stdin=subprocess.PIPE)
    assert helper.stdin is not None
    started = time.monotonic()
    # The ranks (unshare's exec of python keeps the pid) are in their namespaces from the start;
    # the state is sent again as the cluster does, every 0.2 s, until they end.
    while any(rank.poll() is None for rank in ranks) and time.monotonic() - started < 600:
        helper.stdin.write((json.dumps(state) + "\n").encode())
        helper.stdin.flush()
        time.sleep(0.2)
    helper.stdin.close()
    ran = time.monotonic() - started
    _, status, usage = os.wait4(helper.pid, 0)  # the helper's own CPU: taken from the nodes
    helper.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    gbs = []
    for rank in ranks[::2]:
        n, seconds = rank.communicate()[0].split()
        gbs.append(SIZE * int(n) / float(seconds) / 1e9)
    doc = {
        "cpus": args.cpus,
        "factor": args.factor,
        "pairs": args.pairs,
        "seconds": args.seconds,
        "machine_cpus": len(os.sched_getaffinity(0)),
        "gbs": [round(g, 3) for g in gbs],
        "helper_cpus": round((usage.ru_utime + usage.ru_stime) / ran, 3),
    }
    if len(gbs) > 1:
        doc["slowed_over_median"] = round(gbs[0] / statistics.median(gbs[1:]), 3)
    print(json.dumps(doc))


if __name__ == "__main__":
    main()
