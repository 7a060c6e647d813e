"""Issue 35, acceptance 1: a series of `nodes check` runs on the test cluster, quiet and beside
CPU hogs, and each node's verdict counts.

6 one-GPU nodes of the local test cluster (tests/cluster). As tests/test_nodes_check_e2e.py does,
every node's link carries FABRIC bytes a second (the cluster's `node-link` fault, held in wall
time), so a pair test measures its link and not the machine's load; node-2's link carries a
quarter of it (SLOW, slowed 4x) and node-4 crashes every container (CRASH). Then `--runs`
checks as a user runs them (a separate CLI process over HTTP, `-o json`), quiet, and (unless
`--quiet-only`) `--runs` more beside `--hogs` CPU hogs: busy-looping processes this script
starts before each such check and kills by their PIDs after it.

The goal (issue 35): no healthy node is ever `bad`; node-2 and node-4 are `bad` in at least 4 of
5 quiet runs and never `good`.

    python benchmarks/nodes_series.py --runs 5 --out benchmarks/data/DIR   # the full series
    python benchmarks/nodes_series.py --runs 1 --quiet-only --out DIR      # one quiet run

Writes DIR/nodes-series.json (every run's verdicts, tests, wall, the machine's load) and each
check's output (DIR/<phase><n>.txt); prints the verdict counts per node and phase on stdout.
Imports nothing of nccl_k8s: the checks run as the user runs them (PYTHONPATH picks the tree).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import commit  # noqa: E402

NODES = [f"node-{i}" for i in range(6)]
SLOW = "node-2"
CRASH = "node-4"
#: Every node's link in bytes a second, and node-2's: tests/test_nodes_check_e2e.py's FABRIC
#: (a healthy pair measures about 0.036 GB/s however loaded the machine), and a quarter of it.
FABRIC = 40e6
LINK = FABRIC / 4
#: The engine flags of tests/test_nodes_check_e2e.py: gloo, one 4M size, 2 iterations (the
#: 2026-12-07 series ran its earlier 4M-8M, 3 iterations; each series' JSON records its flags).
ENGINE = ["--backend", "gloo", "--ops", "all_reduce", "-b", "4M", "-e", "4M"]
ENGINE += ["-n", "2", "-w", "1", "-c", "0"]
CHECK_S = 1800
CLI = "from nccl_k8s.cli.main import main; main()"
HOG = "while True: pass"


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def start_hogs(count: int) -> list[subprocess.Popen[bytes]]:
    """`count` busy-looping processes, each in its own session (killed by PID, not by name)."""
    return [
        subprocess.Popen([sys.executable, "-c", HOG], start_new_session=True) for _ in range(count)
    ]


def stop_hogs(hogs: list[subprocess.Popen[bytes]]) -> None:
    for p in hogs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
        p.wait()


def one_check(
    ns: str, tag: str, env: dict[str, str], out: pathlib.Path, flags: list[str]
) -> dict[str, Any]:
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", CLI, "nodes", "check", "-n", ns, "--gpus-per-node", "1",
         "-o", "json", *flags, "--", *ENGINE],
        env=env, capture_output=True, text=True, timeout=CHECK_S,
    )  # fmt: skip
    wall = time.monotonic() - t0
    (out / f"{tag}.txt").write_text(f"$ nodes check\n{proc.stderr}\n{proc.stdout}")
    item: dict[str, Any] = {
        "tag": tag,
        "wall_s": round(wall, 2),
        "exit_code": proc.returncode,
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }
    if "{" not in proc.stdout:
        item["error"] = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        item["verdicts"] = {}
        return item
    doc = json.loads(proc.stdout[proc.stdout.index("{") :])
    item.update(
        verdicts={v["node"]: v["verdict"] for v in doc["nodes"]},
        why={v["node"]: v.get("why") for v in doc["nodes"]},
        passes=doc.get("passes"),
        inconclusive=doc.get("inconclusive"),
        tests=[
            {k: t.get(k) for k in ("a", "b", "pass_no", "busbw", "error", "seconds")}
            for t in doc.get("tests", [])
        ],
    )
    return item


def series(
    runs: int, quiet_only: bool, hogs: int, out: pathlib.Path, flags: list[str]
) -> dict[str, Any]:
    from tests.cluster.cluster import Cluster

    out.mkdir(parents=True, exist_ok=True)
    phases = ["quiet"] if quiet_only else ["quiet", "hogs"]
    items: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, Cluster(nodes=len(NODES), gpus_per_node=1) as c:
        ns = "series"
        c.store.create("namespaces", {"metadata": {"name": ns}})
        env = dict(c.kubectl_env(), NCCL_K8S_RUNS_DIR=str(pathlib.Path(tmp) / "runs"))
        for node in NODES:
            c.faults.node_link(node, LINK if node == SLOW else FABRIC)
        c.faults.node_crash(CRASH, True)
        for phase in phases:
            for i in range(runs):
                tag = f"{phase}{i + 1}"
                started = start_hogs(hogs) if phase == "hogs" else []
                _say(f"{tag}: hogs {[p.pid for p in started]}, load {os.getloadavg()[0]:.1f} ...")
                try:
                    item = one_check(ns, tag, env, out, flags)
                finally:
                    stop_hogs(started)
                item.update(phase=phase, hog_pids=[p.pid for p in started])
                _say(f"{tag}: {item['wall_s']} s, exit {item['exit_code']}, {item['verdicts']}")
                items.append(item)
    return {
        "commit": commit(),
        "cpus": os.cpu_count(),
        "nodes": NODES,
        "slow": SLOW,
        "slow_link_bytes_per_s": LINK,
        "link_bytes_per_s": FABRIC,
        "crashing": CRASH,
        "hogs": hogs,
        "check_flags": flags,
        "engine": ENGINE,
        "items": items,
    }


def counts(doc: dict[str, Any]) -> str:
    """Per phase, each node's verdict counts over its runs, and each run's verdicts."""
    lines = []
    for phase in dict.fromkeys(i["phase"] for i in doc["items"]):
        mine = [i for i in doc["items"] if i["phase"] == phase]
        lines.append(f"{phase} ({len(mine)} runs):")
        for node in doc["nodes"]:
            got = Counter(i["verdicts"].get(node, "none") for i in mine)
            said = ", ".join(
                f"{v} {got[v]}" for v in ("bad", "suspect", "unknown", "good", "none") if got[v]
            )
            role = (
                " (slowed)"
                if node == doc["slow"]
                else " (crashing)"
                if node == doc["crashing"]
                else ""
            )
            lines.append(f"  {node}{role}: {said}")
        for i in mine:
            lines.append(
                f"  {i['tag']}: exit {i['exit_code']}, {i['wall_s']} s, passes {i.get('passes')}: "
                + " ".join(f"{n}={v}" for n, v in i["verdicts"].items())
            )
    healthy_bad = sum(
        1
        for i in doc["items"]
        for n, v in i["verdicts"].items()
        if v == "bad" and n not in (doc["slow"], doc["crashing"])
    )
    lines.append(f"healthy nodes called bad, in all runs: {healthy_bad}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="checks per phase (default 5)")
    ap.add_argument("--quiet-only", action="store_true", help="no runs beside the CPU hogs")
    ap.add_argument("--hogs", type=int, default=2, help="CPU hogs beside the second phase")
    ap.add_argument(
        "--check-flags",
        default="--threshold 0.4 --parallel 1",
        help="nodes check's own flags (default: tests/test_nodes_check_e2e.py's)",
    )
    ap.add_argument("--out", type=pathlib.Path, help="where the raw JSON and outputs go")
    args = ap.parse_args()
    if args.runs < 1 or args.hogs < 0:
        ap.error(f"--runs {args.runs} --hogs {args.hogs}: expected --runs >= 1, --hogs >= 0")
    out = (args.out or pathlib.Path(tempfile.mkdtemp(prefix="nodes-series-"))).resolve()
    doc = series(args.runs, args.quiet_only, args.hogs, out, args.check_flags.split())
    (out / "nodes-series.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(counts(doc))
    print(f"raw: {out / 'nodes-series.json'}")


if __name__ == "__main__":
    main()
