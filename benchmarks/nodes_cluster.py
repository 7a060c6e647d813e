"""`nodes check` on the test cluster against the round it is made of (issue 22, acceptance 3).

8 one-GPU nodes of the local test cluster, one of them slowed 4x (the cluster's `node-slow`
fault). Measured as a user runs them (separate CLI processes over HTTP), in interleaved rounds:

- `nodes check` with its default flags (threshold, parallelism) and the engine flags below
  (`-n` from --iters, 20 by default):
  its wall, passes, tests, and which nodes it flagged (the goal: exactly the slowed one);
- the unit it is compared with: 4 `deploy --nodes 2 --gpus-per-node 1` with the same engine
  flags, started at once, timed until the last returns (the "nodes" share this machine's cores,
  so one round of 4 pairs, not one pair, is what a pair test costs here), then removed.

The goal: the check's wall <= 2.5x the median round's of the same run. The output (JSON on
stdout, progress on stderr) says the commit measured and the machine's load around each item.

    python benchmarks/nodes_cluster.py --rounds 3 --out DIR > DIR/nodes-cluster.json
    python benchmarks/nodes_cluster.py --table DIR --write BENCHMARKS.md

Imports nothing of nccl_k8s: the commands run as the user runs them (PYTHONPATH picks the tree).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import commit  # noqa: E402

BEGIN, END = "<!-- nodecheck-tables:begin -->", "<!-- nodecheck-tables:end -->"
NODES = 8
SLOW = "node-5"
FACTOR = 4
#: tests/test_nodes_check_e2e.py's engine flags: gloo sizes whose timing spans many of the
#: node-slow fault's 20 ms duty cycles.
ENGINE = ["--backend", "gloo", "--ops", "all_reduce", "-b", "32M", "-e", "64M", "-f", "2"]
#: Iterations per size (-n), where the e2e test takes 3: with 8 nodes' pods on 2 cores, healthy
#: pairs measured 0.59-1.29 of their median at -n 3 and 0.84-1.13 at -n 20 (-n 60: no tighter,
#: twice as long); benchmarks/data/2026-12-04-nodes-cluster-iters.
ITERS = 20
GOAL = 2.5
#: The share of this machine's CPUs the test nodes get together (the rest: the API server,
#: kubelet, controllers and CLI processes), split evenly among them: nodes of fixed CPUs, as
#: real ones, so that a pair's bandwidth does not depend on what the other pairs run at the
#: time (benchmarks/data/2026-12-04-nodes-cluster-cpus).
NODE_SHARE = 0.8
CLI = "from nccl_k8s.cli.main import main; main()"


def engine(iters: int) -> list[str]:
    return [*ENGINE, "-n", str(iters), "-w", "1", "-c", "0"]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", CLI, *args]


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _unit(
    c: Any, ns: str, tag: str, env: dict[str, str], out: pathlib.Path, flags: list[str]
) -> dict[str, Any]:
    """4 two-node deploys started at once: the wall until the last returns; then removed."""
    rids = [f"{tag}-d{k}" for k in range(NODES // 2)]
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    procs = [
        subprocess.Popen(
            _cli(
                "deploy",
                "-n",
                ns,
                "--run-id",
                rid,
                "--nodes",
                "2",
                "--gpus-per-node",
                "1",
                "--",
                *flags,
            ),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rid in rids
    ]
    ends, texts = [], []
    for p in procs:
        texts.append(p.communicate(timeout=900)[0])
        ends.append(time.monotonic() - t0)
    wall = max(ends)
    placed = {}
    for rid in rids:
        pods, _ = c.store.list("pods", ns, label_selector=f"app.kubernetes.io/instance={rid}")
        placed[rid] = sorted(p["spec"].get("nodeName") or "" for p in pods)
    (out / f"{tag}.txt").write_text(
        "".join(f"$ deploy {r}\n{t}\n" for r, t in zip(rids, texts, strict=True))
    )
    for rid in rids:
        subprocess.run(_cli("cleanup", "-n", ns, "--run", rid), env=env, capture_output=True)
    return {
        "kind": "round",
        "tag": tag,
        "wall_s": round(wall, 2),
        "deploy_s": [round(e, 2) for e in ends],
        "exit_codes": [p.returncode for p in procs],
        "nodes": placed,
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }


def _check(
    ns: str, tag: str, env: dict[str, str], out: pathlib.Path, flags: list[str]
) -> dict[str, Any]:
    """`nodes check` with its default flags: wall, passes, tests, flagged nodes."""
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    proc = subprocess.run(
        _cli("nodes", "check", "-n", ns, "--gpus-per-node", "1", "-o", "json", "--", *flags),
        env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    wall = time.monotonic() - t0
    (out / f"{tag}.txt").write_text(f"$ nodes check\n{proc.stderr}\n{proc.stdout}")
    doc = json.loads(proc.stdout[proc.stdout.index("{") :])
    tests = doc["tests"]
    return {
        "kind": "check",
        "tag": tag,
        "wall_s": round(wall, 2),
        "exit_code": proc.returncode,
        "flagged": sorted(v["node"] for v in doc["nodes"] if v["verdict"] != "good"),
        "verdicts": {v["node"]: v["verdict"] for v in doc["nodes"]},
        "passes": doc["passes"],
        "tests": [
            {k: t.get(k) for k in ("a", "b", "pass_no", "busbw", "error", "seconds", "deploy_s")}
            for t in tests
        ],
        "reference_busbw": doc["reference_busbw"],
        "cut": doc["cut"],
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }


def node_cpus() -> float:
    """Each test node's CPUs: NODE_SHARE of the CPUs this process may run on, split evenly."""
    return round(NODE_SHARE * len(os.sched_getaffinity(0)) / NODES, 3)


def measure(
    rounds: int, out: pathlib.Path, iters: int = ITERS, cpus: float | None = None
) -> dict[str, Any]:
    from tests.cluster.cluster import Cluster

    out.mkdir(parents=True, exist_ok=True)
    items: list[dict[str, Any]] = []
    cluster = Cluster(nodes=NODES, gpus_per_node=1, node_cpus=cpus or None)
    with tempfile.TemporaryDirectory() as tmp, cluster as c:
        ns = "bench"
        c.store.create("namespaces", {"metadata": {"name": ns}})
        env = dict(c.kubectl_env(), NCCL_K8S_RUNS_DIR=str(pathlib.Path(tmp) / "runs"))
        c.faults.node_slow(SLOW, FACTOR)
        for i in range(rounds):
            # Interleaved, and which goes first alternates: a trend in the machine's load
            # falls on both.
            order = ("check", "round") if i % 2 == 0 else ("round", "check")
            for what in order:
                tag = f"{what}{i + 1}"
                _say(f"{tag} (load {os.getloadavg()[0]:.1f}) ...")
                flags = engine(iters)
                if what == "check":
                    item = _check(ns, tag, env, out, flags)
                else:
                    item = _unit(c, ns, tag, env, out, flags)
                _say(f"{tag}: {item['wall_s']} s")
                items.append(item)
        c.faults.node_slow(SLOW, None)
    return {
        "commit": commit(),
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "nodes": NODES,
        "slow": SLOW,
        "factor": FACTOR,
        "node_cpus": cpus or None,
        "engine": engine(iters),
        "items": items,
    }


def render(*folders: pathlib.Path) -> str:
    """The markdown between the markers, from every nodes-cluster*.json of the folders."""
    lines: list[str] = []
    for path in [p for f in folders for p in sorted(f.glob("nodes-cluster*.json"))]:
        doc = json.loads(path.read_text())
        checks = [i for i in doc["items"] if i["kind"] == "check"]
        rounds = [i for i in doc["items"] if i["kind"] == "round"]
        unit = statistics.median(r["wall_s"] for r in rounds)
        loads = [x for i in doc["items"] for x in (i["load_before"], i["load_after"])]
        lines += [
            "",
            f"`{path.relative_to(ROOT)}`: commit `{doc['commit']}`, {doc['cpus']} CPUs"
            + (
                f" ({doc['cpus_usable']} usable)"
                if doc.get("cpus_usable", doc["cpus"]) != doc["cpus"]
                else ""
            )
            + ", "
            f"{doc['nodes']} one-GPU test nodes"
            + (f" of {doc['node_cpus']} CPUs each" if doc.get("node_cpus") else "")
            + f", {doc['slow']} slowed {doc['factor']}x, engine "
            f"`{' '.join(doc['engine'])}`; the machine's 1-minute load average "
            f"{min(loads):.1f}-{max(loads):.1f} around the items (other sessions' work).",
            "",
            "| item | wall | check / median round | passes | tests | bad | unknown | exit |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for i in doc["items"]:
            if i["kind"] == "round":
                codes = ",".join(str(x) for x in i["exit_codes"])
                lines.append(f"| {i['tag']} (4 deploys at once) | {i['wall_s']:.1f} s | | | "
                             f"| | | {codes} |")  # fmt: skip
            else:
                ratio = i["wall_s"] / unit
                bad, unknown = (
                    ", ".join(n for n, v in i["verdicts"].items() if v == what) or "none"
                    for what in ("bad", "unknown")
                )
                lines.append(
                    f"| {i['tag']} | {i['wall_s']:.1f} s | {ratio:.2f}x | {i['passes']} | "
                    f"{len(i['tests'])} | {bad} | {unknown} | {i['exit_code']} |"
                )
        lines.append("")
        for i in checks:
            said = "; ".join(
                f"{t['pass_no']}: {t['a']} + {t['b']} "
                + (f"{t['busbw']:.3g} GB/s" if t["busbw"] is not None else "failed")
                + f", {t['seconds']:.0f} s"
                + (f" (deploy {t['deploy_s']:.0f} s)" if t.get("deploy_s") is not None else "")
                for t in i["tests"]
            )
            lines.append(f"- {i['tag']}'s tests (pass: pair, busbw, time): {said}")
        exact = sum(i["flagged"] == [doc["slow"]] for i in checks)
        worst = max(i["wall_s"] for i in checks) / unit
        lines += [
            "",
            f"Median round {unit:.1f} s. Checks whose flagged nodes (bad or unknown, as `nodes check` counts them) were exactly {doc['slow']}: {exact} of "
            f"{len(checks)}; the slowest check took {worst:.2f}x the median round (goal <= "
            f"{GOAL}x).",
        ]
    return "\n".join(lines) + "\n"


def write(doc_path: pathlib.Path, text: str, generated_by: str) -> None:
    doc = doc_path.read_text()
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    doc_path.write_text(f"{head}{BEGIN}\n<!-- generated by: {generated_by} -->\n{text}{END}{tail}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=ITERS, help="the engine's -n (iterations)")
    ap.add_argument(
        "--node-cpus",
        type=float,
        default=None,
        help=f"each test node's CPUs (default: {NODE_SHARE} of this machine's, split evenly; "
        "0: the nodes share the machine as they come)",
    )
    ap.add_argument("--out", type=pathlib.Path, help="where each item's raw output goes")
    ap.add_argument(
        "--table", type=pathlib.Path, nargs="+", help="render folders of outputs instead"
    )
    ap.add_argument("--write", type=pathlib.Path, help="with --table: replace the block in it")
    args = ap.parse_args()
    if args.table is not None:
        text = render(*(t.resolve() for t in args.table))
        if args.write is None:
            sys.stdout.write(text)
            return
        tables = " ".join(str(t) for t in args.table)
        by = f"python benchmarks/nodes_cluster.py --table {tables} --write {args.write}"
        write(args.write, text, by)
        return
    out = args.out or pathlib.Path(tempfile.mkdtemp(prefix="nodes-cluster-"))
    cpus = node_cpus() if args.node_cpus is None else args.node_cpus
    json.dump(measure(args.rounds, out.resolve(), args.iters, cpus), sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
