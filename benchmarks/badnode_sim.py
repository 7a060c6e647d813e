"""The bad-node finder at scale (issue 22, acceptance 2): the real plan and verdicts
(`nccl_k8s.k8s.nodes._badnodes.plan` and `verdicts`, what `nodes check` runs) over fake
measurements, at 64 to 4,096 nodes with 0, 1, 3 and 8 bad nodes, at 0, 10 and 20% noise; and
(`shares`, issue 35) with 1% and 5% of the nodes bad at 5, 10 and 20% noise, where no healthy
node may be called bad. Per run: `found` (bad nodes called bad), `suspect` (nodes left
`suspect`: a slow test with a partner not shown good; counted as open, like `unknown`).

The model: a healthy node runs at speed 1, a slow node at 0.25 (slowed 4x), and a crashing
node fails every test it is in (the failed run names it as its culprit, as deploy's monitor
does). A test of nodes a and b measures BASE x min(speed a, speed b) x (1 + noise x N(0, 1)),
at least 1% of BASE: Gaussian noise, both ways, relative to the figure. The bad nodes are a
seeded random sample, half of them slow (rounded up), the others crashing.

Wall time: a round's pairs share no node, so with the default parallelism (every pair of a
round at once: what the cluster can place) a round takes one pair test; `wall` is in pair
tests: the rounds, plus the planning time, which is measured (and negligible). `wall_k16` is
the same with at most 16 tests at once. Planning is timed as the process's CPU time (the planner
is one thread): on the shared 2-core machine the sweeps run on, other work at load 11 stretched
its wall-clock time 15x (1.5 s for a 4,096-node run that plans in 0.1 s of CPU).

    python benchmarks/badnode_sim.py > benchmarks/data/DIR/sim.json
    python benchmarks/badnode_sim.py --table benchmarks/data/DIR --write BENCHMARKS.md

With --write, the text between `<!-- badnode-tables:begin -->` and `<!-- badnode-tables:end -->` is
replaced; tests/test_benchmarks_md.py checks the committed file against this script.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import random
import subprocess
import sys
import time
from typing import Any

import nccl_k8s
from nccl_k8s.k8s.nodes._badnodes import MAX_PASSES, PairResult, plan, verdicts
from nccl_k8s.k8s.nodes._level import level

BEGIN, END = "<!-- badnode-tables:begin -->", "<!-- badnode-tables:end -->"
BASE = 100.0
THRESHOLD = 0.9  # nodes check's default
SIZES = (64, 256, 1024, 4096)
BAD = (0, 1, 3, 8)
NOISE = (0.0, 0.1, 0.2)
SEEDS = (1, 2, 3)
#: Issue 35's grid: 1% and 5% of the nodes bad, at 5, 10 and 20% noise (`shares` in the output;
#: its goal: no healthy node `bad` in any run).
SHARES = (0.01, 0.05)
SHARE_NOISE = (0.05, 0.1, 0.2)


def simulate(n: int, bad: int, noise: float, seed: int) -> dict[str, Any]:
    rng = random.Random(seed * 1_000_003 + n * 101 + bad * 7 + int(noise * 100))
    nodes = [f"node-{i}" for i in range(n)]
    chosen = rng.sample(nodes, bad)
    slow = set(chosen[: (bad + 1) // 2])
    crashing = set(chosen[(bad + 1) // 2 :])

    def test(a: str, b: str, pass_no: int) -> PairResult:
        culprit = a if a in crashing else b if b in crashing else None
        if culprit is not None:
            return PairResult(a, b, None, error=f"rank on {culprit} exited 1", pass_no=pass_no,
                              culprit=culprit)  # fmt: skip
        speed = min(0.25 if a in slow else 1.0, 0.25 if b in slow else 1.0)
        bw = max(0.01 * BASE, BASE * speed * (1.0 + noise * rng.gauss(0.0, 1.0)))
        return PairResult(a, b, bw, pass_no=pass_no)

    late: dict[str, int] = {"healthy": 0, "slow": 0, "crashing": 0}
    partners: dict[str, int] = {"0": 0, "1": 0, "2+": 0}
    two_pass: dict[str, int] = {}

    def check(at_once: int | None) -> tuple[list[PairResult], list[int], float]:
        """The runner's passes, `at_once` tests at a time (None: every pair of a round)."""
        results: list[PairResult] = []
        plan_s, rounds = 0.0, []
        for pass_no in range(1, MAX_PASSES + 1):
            start = time.process_time()
            pairs = plan(nodes, results, THRESHOLD, pass_no, at_once)
            plan_s += time.process_time() - start
            if not pairs:
                break
            if pass_no >= 3 and at_once is None:  # who the late pass was for (not controls)
                cleared = level(results, THRESHOLD).cleared
                for node in {x for p in pairs for x in p} - cleared:
                    kind = "slow" if node in slow else "crashing" if node in crashing else "healthy"
                    late[kind] += 1
                    partners[_good_partners(node, results, cleared)] += 1
                if pass_no == 3:
                    two_pass.update(_stopped(nodes, results, slow | crashing))
            rounds.append(len(pairs))
            results += [test(a, b, pass_no) for a, b in pairs]
        return results, rounds, plan_s

    state = rng.getstate()
    results, rounds, plan_s = check(None)
    rng.setstate(state)  # the same measurements, planned as --parallel 16 plans them
    rounds_k16 = check(16)[1]
    start = time.process_time()
    f = verdicts(nodes, results, THRESHOLD)
    plan_s += time.process_time() - start
    flagged_bad = set(f.bad)
    unknown = {v.node for v in f.nodes if v.verdict == "unknown"}
    suspect = {v.node for v in f.nodes if v.verdict == "suspect"}
    truth = slow | crashing
    return {
        "nodes": n,
        "bad": bad,
        "noise": noise,
        "seed": seed,
        "exact": flagged_bad == truth and not unknown and not suspect,
        "good_flagged": len(flagged_bad - truth),
        "bad_called_good": len(truth - flagged_bad - unknown - suspect),
        "found": len(truth & flagged_bad),
        "unknown": len(unknown),
        "suspect": len(suspect),
        "good_suspect": len(suspect - truth),
        "passes": len(rounds),
        "tests": len(results),
        "wall": len(rounds) + plan_s / 60.0,  # in pair tests of a minute: planning counted
        "wall_k16": sum(math.ceil(p / 16) for p in rounds_k16),
        "plan_s": round(plan_s, 4),
        "noise_measured": None if f.noise is None else round(f.noise, 4),
        "cut": f.cut,
        "slow_links": len(f.links),
        "late": late,
        "late_partners": partners,
        "two_pass": two_pass or None,
    }


def _good_partners(node: str, results: list[PairResult], cleared: set[str]) -> str:
    """How many different cleared nodes `node` measured a bus bandwidth with: a node takes one
    test a round, so after two passes at most two, and none from a pass-1 test whose partner
    crashed (the run named it) or was not cleared."""
    got = {r.b if r.a == node else r.a for r in results if node in (r.a, r.b) and r.ok}
    count = len(got & cleared)
    return "2+" if count >= 2 else str(count)


def _stopped(nodes: list[str], results: list[PairResult], truth: set[str]) -> dict[str, int]:
    """The verdicts had the check stopped after pass 2 (the results so far): bad nodes found,
    healthy nodes called bad, and the nodes left open (`unknown` or `suspect`), healthy or
    not. What the third pass buys over them."""
    f = verdicts(nodes, results, THRESHOLD)
    bad = set(f.bad)
    opened = {v.node for v in f.nodes if v.verdict in ("unknown", "suspect")}
    return {
        "found": len(bad & truth),
        "healthy_bad": len(bad - truth),
        "open": len(opened),
        "healthy_open": len(opened - truth),
    }


def commit() -> str:
    """The commit of the nccl_k8s that was imported (a baseline runs another checkout's)."""
    where = pathlib.Path(nccl_k8s.__file__).parent
    try:
        out = subprocess.run(["git", "-C", str(where), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def run_all() -> dict[str, Any]:
    runs = []
    for noise in NOISE:
        for n in SIZES:
            for bad in BAD:
                for seed in SEEDS:
                    runs.append(simulate(n, bad, noise, seed))
                    print(json.dumps(runs[-1]), file=sys.stderr)
    return {"commit": commit(), "threshold": THRESHOLD, "runs": runs, "shares": run_shares()}


def run_shares() -> list[dict[str, Any]]:
    """Issue 35's grid: SHARES of the nodes bad (at least one), at SHARE_NOISE."""
    runs = []
    for noise in SHARE_NOISE:
        for n in SIZES:
            for share in SHARES:
                for seed in SEEDS:
                    runs.append(simulate(n, max(1, round(share * n)), noise, seed))
                    runs[-1]["share"] = share
                    print(json.dumps(runs[-1]), file=sys.stderr)
    return runs


def render(folder: pathlib.Path) -> str:
    doc = json.loads((folder / "sim.json").read_text())
    runs = doc["runs"]
    out = [
        BEGIN,
        f"<!-- generated by: python benchmarks/badnode_sim.py --table {folder.as_posix()} "
        "--write BENCHMARKS.md -->",
        "",
        f"Measured at commit `{doc['commit']}`, threshold {doc['threshold']:g}, "
        f"{len(SEEDS)} seeds per cell. A cell: runs exact (the bad nodes flagged, no other node "
        "flagged or unknown) / runs; the most passes; the longest wall in pair tests at the "
        "default parallelism (every pair of a round at once); the longest planning and judging "
        "time of a run.",
        "",
        "| noise | nodes | 0 bad | 1 bad | 3 bad | 8 bad | good nodes flagged | bad called good "
        "| passes | wall (pair tests) | wall at --parallel 16 | planning |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for noise in NOISE:
        for n in SIZES:
            cell = [r for r in runs if r["noise"] == noise and r["nodes"] == n]
            per_bad = []
            for bad in BAD:
                rs = [r for r in cell if r["bad"] == bad]
                per_bad.append(f"{sum(r['exact'] for r in rs)}/{len(rs)}")
            out.append(
                f"| {noise:.0%} | {n} | {' | '.join(per_bad)} | "
                f"{sum(r['good_flagged'] for r in cell)} | "
                f"{sum(r['bad_called_good'] for r in cell)} | "
                f"{max(r['passes'] for r in cell)} | {max(r['wall'] for r in cell):.2f} | "
                f"{max(r['wall_k16'] for r in cell)} | {max(r['plan_s'] for r in cell):.3f} s |"
            )
    unknown = sum(r["unknown"] for r in runs if r["noise"] == 0.2)
    out += [
        "",
        f"At 20% noise, {unknown} node verdicts in all were `unknown` (inconclusive), which the "
        "goal allows; a good node flagged `bad` is what it does not.",
    ]
    if (folder / "baseline.json").exists():
        out += ["", *against(doc, json.loads((folder / "baseline.json").read_text()))]
    out.append(END)
    return "\n".join(out)


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["nodes"], r["bad"], r["noise"], r["seed"], r.get("share"))


def rises(doc: dict[str, Any], base: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(run, baseline run) of every run, both grids, whose passes rose over the baseline."""
    old = {_key(r): r for r in base["runs"] + base.get("shares", [])}
    return [
        (r, old[_key(r)])
        for r in doc["runs"] + doc.get("shares", [])
        if r["passes"] > old[_key(r)]["passes"]
    ]


def against(doc: dict[str, Any], base: dict[str, Any]) -> list[str]:
    """Issue 35's grid (`shares`) beside the same runs at the baseline commit (the code before
    the evidence rules), and every run of both grids whose passes rose, with whom the third
    pass retested."""
    old = {_key(r): r for r in base["runs"] + base.get("shares", [])}
    out = [
        f"Issue 35's grid (1% and 5% of the nodes bad, at least one; 3 seeds a cell), this "
        f"commit against `{base['commit']}` (before the evidence rules), the same measurements: "
        "a cell is this commit (baseline). Healthy bad: healthy nodes called `bad`, in all; "
        "found: bad nodes called `bad`, of all; passes and walls: the most of a run.",
        "",
        "| noise | nodes | bad | healthy bad | found | passes | wall (pair tests) "
        "| wall at --parallel 16 | runs with more passes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    shares = doc.get("shares", [])
    for noise in SHARE_NOISE:
        for n in SIZES:
            for share in SHARES:
                cell = [
                    r for r in shares if (r["noise"], r["nodes"], r["share"]) == (noise, n, share)
                ]
                was = [old[_key(r)] for r in cell]
                more = sum(r["passes"] > w["passes"] for r, w in zip(cell, was, strict=True))
                out.append(
                    f"| {noise:.0%} | {n} | {share:.0%} ({cell[0]['bad']}) | "
                    f"{sum(r['good_flagged'] for r in cell)} ({sum(w['good_flagged'] for w in was)}) | "
                    f"{sum(r['found'] for r in cell)}/{sum(r['bad'] for r in cell)} "
                    f"({sum(w['found'] for w in was)}) | "
                    f"{max(r['passes'] for r in cell)} ({max(w['passes'] for w in was)}) | "
                    f"{max(r['wall'] for r in cell):.2f} ({max(w['wall'] for w in was):.2f}) | "
                    f"{max(r['wall_k16'] for r in cell)} ({max(w['wall_k16'] for w in was)}) | "
                    f"{more} |"
                )
    every = doc["runs"] + shares
    fewer = sum(1 for r in every if r["found"] < old[_key(r)]["found"])
    healthy = sum(r["good_flagged"] for r in every)
    was_healthy = sum(old[_key(r)]["good_flagged"] for r in every)
    rose = rises(doc, base)
    short = [(r, w) for r, w in rose if (r.get("two_pass") or {}).get("found", 0) < w["found"]]
    out += [
        "",
        f"Both grids, {len(every)} runs: healthy nodes called `bad` {healthy} (baseline "
        f"{was_healthy}); runs that found fewer bad nodes than the baseline: {fewer}; runs whose "
        f"passes rose: {len(rose)}. Each of those ran a third pass for nodes left open after two "
        "(`unknown` or `suspect`): a node takes one test a round, so after two passes it has at "
        "most two tests with good nodes, and none from a pass-1 test whose partner crashed or was "
        "not cleared. With one such test, below the cut (3.5 noise sigmas) but not below the flag "
        "(the sigmas for that many judged nodes, about 4.1 to 4.8 here), or two together below "
        "the flag's sigmas, it cannot be told from a healthy node; the baseline called it `bad` on "
        "one test 3.5 sigmas down (that rule called the healthy nodes above bad). Stopped after "
        "pass 2, the same checks would have left those nodes open and found fewer bad nodes than "
        f"the baseline in {len(short)} of the {len(rose)} runs:",
        "",
        "| nodes | bad | noise | seed | passes | retested in pass 3: healthy / slow "
        "| their good partners after pass 2: 0 / 1 / 2 | stopped after pass 2: found (baseline) "
        "/ open (healthy) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r, w in rose:
        late = r.get("late", {})
        partners = r.get("late_partners") or {}
        two = r.get("two_pass") or {}
        out.append(
            f"| {r['nodes']} | {r['bad']} | {r['noise']:.0%} | {r['seed']} | "
            f"{r['passes']} ({w['passes']}) | {late.get('healthy', 0)} / {late.get('slow', 0)} | "
            f"{partners.get('0', 0)} / {partners.get('1', 0)} / {partners.get('2+', 0)} | "
            f"{two.get('found', 0)} ({w['found']}) / {two.get('open', 0)} "
            f"({two.get('healthy_open', 0)}) |"
        )
    return out


def misses(doc: dict[str, Any]) -> list[str]:
    """The runs that miss issue 22's goals: exact at 0 and 10% noise, no good node flagged and
    no bad node called good at 20%, at most MAX_PASSES passes (two, and a third only for
    nodes whose tests with good nodes were slow within the noise: issue 35), wall at most that
    and a half in pair tests, planning under 1 s; and issue 35's: no healthy node bad in the
    `shares` grid."""
    out = []
    for r in doc["runs"]:
        what = f"{r['nodes']} nodes, {r['bad']} bad, noise {r['noise']:.0%}, seed {r['seed']}"
        if r["noise"] <= 0.10 and not r["exact"]:
            out.append(f"{what}: not exact")
        if r["good_flagged"] or r["bad_called_good"]:
            out.append(f"{what}: {r['good_flagged']} good flagged, {r['bad_called_good']} bad good")
        if r["passes"] > MAX_PASSES or r["wall"] > MAX_PASSES + 0.5:
            out.append(f"{what}: {r['passes']} passes, wall {r['wall']:.2f} pair tests")
        if r["plan_s"] >= 1.0:
            out.append(f"{what}: planning {r['plan_s']:.2f} s")
    for r in doc.get("shares", []):
        what = f"{r['nodes']} nodes, {r['bad']} bad, noise {r['noise']:.0%}, seed {r['seed']}"
        if r["good_flagged"]:
            out.append(f"{what}: {r['good_flagged']} healthy nodes called bad")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", type=pathlib.Path, help="render the table from DIR/sim.json")
    ap.add_argument("--write", type=pathlib.Path, help="replace the table in this file")
    ap.add_argument("--check", action="store_true", help="exit 1 when a run misses a goal")
    args = ap.parse_args()
    if args.table is None:
        doc = run_all()
        if not args.check:
            print(json.dumps(doc, indent=1))
            return
        missed = misses(doc)
        runs = len(doc["runs"]) + len(doc["shares"])
        print("\n".join(missed) or f"all {runs} runs meet the goals")
        raise SystemExit(1 if missed else 0)
    text = render(args.table)
    if args.write is None:
        print(text)
        return
    md = args.write.read_text()
    if BEGIN in md:
        md = md[: md.index(BEGIN)] + text + md[md.index(END) + len(END) :]
    else:
        md = md.rstrip("\n") + "\n\n" + text + "\n"
    args.write.write_text(md)


if __name__ == "__main__":
    main()
