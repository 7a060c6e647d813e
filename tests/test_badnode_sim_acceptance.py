"""Issue 35, acceptance 2, on a subset of benchmarks/badnode_sim.py's grid in seconds: the real
plan and verdicts over the simulation's fake measurements, 1% and 5% of the nodes bad at 5, 10
and 20% noise. In every run no healthy node is `bad`; bad nodes are found at least as often as
at the commit before the evidence rules (its results committed beside the full sweep, same
measurements); passes and walls are no worse, but in the runs the sweep lists as needing a third
pass. Those are held to why (BENCHMARKS.md): the third pass was for nodes left open after two (a
node takes one test a round, so no schedule of pass 2 gives it a second test with a good node),
and stopping after pass 2 would have found fewer bad nodes than the baseline or left a healthy
node open. Each run also matches the committed sweep, so the figures in BENCHMARKS.md are
today's."""

from __future__ import annotations

import importlib.util
import json
import pathlib
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data" / "2026-12-07-badnode-sim-35"


def _sim() -> Any:
    spec = importlib.util.spec_from_file_location(
        "badnode_sim", ROOT / "benchmarks" / "badnode_sim.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SIM = _sim()
SWEEP = json.loads((DATA / "sim.json").read_text())
BASE = json.loads((DATA / "baseline.json").read_text())
ROSE = {SIM._key(r) for r, _ in SIM.rises(SWEEP, BASE)}
#: All of the grid at 64 and 256 nodes (one run there needs a third pass), and at 1,024 the
#: cells with a run that needs one (a healthy node and a slow node within the noise), and one
#: at 4,096 (seven slow nodes within the noise).
SUBSET = [
    (n, share, noise, seed)
    for noise in SIM.SHARE_NOISE
    for n in (64, 256)
    for share in SIM.SHARES
    for seed in SIM.SEEDS
] + [(1024, 0.01, 0.05, 3), (1024, 0.05, 0.2, 2), (1024, 0.05, 0.1, 1), (4096, 0.05, 0.2, 1)]


def _find(doc: list[dict[str, Any]], key: tuple[Any, ...]) -> dict[str, Any]:
    return next(r for r in doc if SIM._key(r) == key)


@pytest.mark.parametrize(("n", "share", "noise", "seed"), SUBSET)
def test_no_healthy_node_bad_and_no_worse_than_before_the_evidence_rules(
    n: int, share: float, noise: float, seed: int
) -> None:
    run = SIM.simulate(n, max(1, round(share * n)), noise, seed)
    run["share"] = share
    key = SIM._key(run)
    base = _find(BASE["shares"], key)
    assert run["good_flagged"] == 0
    assert run["found"] >= base["found"]
    if key in ROSE:  # the listed trade: one more pass for nodes open after two
        assert run["passes"] == base["passes"] + 1
        late = run["late"]["healthy"] + run["late"]["slow"]
        two = run["two_pass"]
        assert 0 < late <= two["open"] and two["healthy_bad"] == 0
        # what pass 3 buys: without it, fewer found than the baseline, or a healthy node open
        assert two["found"] < base["found"] or two["healthy_open"] > 0
        # BENCHMARKS.md's partner counts cover every node the third pass retested
        assert sum(run["late_partners"].values()) == late
    else:
        assert run["passes"] <= base["passes"]
        assert run["wall_k16"] <= base["wall_k16"]
    swept = _find(SWEEP["shares"], key)
    fields = ("found", "passes", "tests", "late", "late_partners", "two_pass")
    assert [run[f] for f in fields] == [swept.get(f) for f in fields], (
        "benchmarks/data/2026-12-07-badnode-sim-35/sim.json is stale: rerun the sweep"
    )
