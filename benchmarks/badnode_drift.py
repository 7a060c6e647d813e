"""The bad-node finder on a small cluster whose speed moves between passes (issue 22, the false
flag of benchmarks/data/2026-12-04-nodes-cluster-quota): the real plan and verdicts over the
model of benchmarks/badnode_sim.py (one node slowed 4x, Gaussian noise), with every test of
passes 2 and 3 measuring `drift` times what it would in pass 1 (the hosts' load moved).

Prints, per cluster size, noise and drift, in how many of --runs seeded runs a good node was
flagged bad, and the slow node was not called bad.

    python benchmarks/badnode_drift.py > DIR/drift.txt
    git show a34d5f0:src/nccl_k8s/k8s/nodes/_badnodes.py > /tmp/before.py
    python benchmarks/badnode_drift.py --planner /tmp/before.py > DIR/drift-a34d5f0.txt

--planner loads another version of nccl_k8s/k8s/nodes/_badnodes.py (plan, verdicts, PairResult,
MAX_PASSES) from a file, to compare with the one a change replaced.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
from types import ModuleType
from typing import Any

from nccl_k8s.k8s.nodes import _badnodes

THRESHOLD = 0.9
SLOW = "node-5"


def _load(path: str | None) -> ModuleType:
    if path is None:
        return _badnodes
    spec = importlib.util.spec_from_file_location("planner", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _run(mod: ModuleType, n: int, noise: float, drift: float, seed: int) -> dict[str, str]:
    """One check over the model; the nodes not called good."""
    rng = random.Random(seed)
    nodes = [f"node-{i}" for i in range(n)]
    results: list[Any] = []
    for p in range(1, mod.MAX_PASSES + 2):
        pairs = mod.plan(nodes, results, THRESHOLD, p)
        if not pairs:
            break
        for a, b in pairs:
            bw = 100.0 * (0.25 if SLOW in (a, b) else 1.0) * (1.0 + noise * rng.gauss(0.0, 1.0))
            bw *= drift if p > 1 else 1.0
            results.append(mod.PairResult(a, b, max(bw, 1.0), pass_no=p))
    found = mod.verdicts(nodes, results, THRESHOLD)
    return {v.node: v.verdict for v in found.nodes if v.verdict != "good"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--planner", help="another _badnodes.py to run instead of this tree's")
    ap.add_argument("--runs", type=int, default=300)
    args = ap.parse_args()
    mod = _load(args.planner)
    print(f"# {args.planner or 'this tree'}: {args.runs} runs each, node-5 slowed 4x")
    print("| nodes | noise | drift | good node flagged bad | slow node not bad |")
    print("|---|---|---|---|---|")
    for n in (8, 16):
        for noise in (0.03, 0.10):
            for drift in (1.0, 0.85, 1.15):
                good_bad = missed = 0
                for seed in range(args.runs):
                    flagged = _run(mod, n, noise, drift, seed)
                    good_bad += any(v == "bad" for k, v in flagged.items() if k != SLOW)
                    missed += flagged.get(SLOW) != "bad"
                print(f"| {n} | {noise:.0%} | {drift:g} | {good_bad} | {missed} |")


if __name__ == "__main__":
    main()
