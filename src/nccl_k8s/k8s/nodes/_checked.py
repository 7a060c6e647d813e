"""What `nodes check` returns: every pair test it ran (`PairTest`) and its verdicts on the
nodes and on the cluster (`NodesChecked`, whose `to_dict` is `-o json`). nodes._nodecheck runs
the check; these are its results, apart so that the runner's module stays one concern.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nccl_k8s.k8s.nodes._badnodes import Findings, SlowLink
from nccl_k8s.k8s.nodes._domains import DomainLink, matrix
from nccl_k8s.k8s.nodes._floor import FloorVerdict
from nccl_k8s.k8s.nodes._level import PairResult


@dataclasses.dataclass(frozen=True)
class PairTest:
    result: PairResult
    run_id: str
    seconds: float
    """From its deploy to its result (its removal runs on beside the next tests)."""
    culprit_node: str | None = None
    """The node the failed run's message named as its culprit's, when it named one."""
    deploy_s: float | None = None
    """Of `seconds`, the deploy followed to the run's end (the rest: collect)."""


@dataclasses.dataclass(frozen=True)
class Topology:
    """What `nodes check` found by the topology (nodes._domains): set when the candidates span
    two domains or more."""

    levels: tuple[str, ...]
    """The node labels read, coarse to fine."""
    pairing: str
    domains: dict[str, str]
    """node -> its finest domain."""
    links: list[DomainLink]
    """Slow links between two domains: every test across them slow, their nodes good."""
    slow: list[SlowLink]
    """Slow tests across domains between two good nodes that no domain link explains."""


@dataclasses.dataclass(frozen=True)
class NodesChecked:
    candidates: list[str]
    left_out: dict[str, str]
    """GPU nodes that are not candidates, and why (taint, too few GPUs ...)."""
    tests: list[PairTest]
    findings: Findings
    actions: list[str]
    """What --label/--taint did (or, with dry_run, would do)."""
    dry_run: bool
    fixed: dict[str, str] = dataclasses.field(default_factory=dict)
    """What the check set in every pair test's environment (pair_test_spec), not the user."""
    floor: FloorVerdict | None = None  # the cluster against its floor (nodes._floor)
    floor_note: str = ""  # why no floor was judged, when none was
    topology: Topology | None = None

    def matrix(self) -> tuple[list[str], dict[tuple[str, str], float]]:
        """The domains, and (domain, domain) -> the best busbw measured between them."""
        if self.topology is None:
            return [], {}
        return matrix([t.result for t in self.tests], self.topology.domains)

    @property
    def flagged(self) -> list[str]:
        return [v.node for v in self.findings.flagged]

    def to_dict(self) -> dict[str, Any]:
        f = self.findings
        return {
            "threshold": f.threshold,
            "reference_busbw": f.reference,
            "inconclusive": f.inconclusive,
            "noise": f.noise,
            "cut": f.cut,
            "passes": f.passes,
            "flag": f.flag,
            "z": f.z,
            "ran": f.ran,
            "nodes": [dataclasses.asdict(v) for v in f.nodes],
            "slow_links": [dataclasses.asdict(link) for link in f.links],
            "tests": [
                {
                    **dataclasses.asdict(t.result),
                    "run_id": t.run_id,
                    "seconds": round(t.seconds, 1),
                    "deploy_s": None if t.deploy_s is None else round(t.deploy_s, 1),
                    "culprit_node": t.culprit_node,
                }
                for t in self.tests
            ],
            "left_out": self.left_out,
            "actions": self.actions,
            "dry_run": self.dry_run,
            "fixed": self.fixed,
            "floor": None if self.floor is None else self.floor.to_dict(),
            "floor_note": self.floor_note,
            "topology": self._topology_dict(),
        }

    def _topology_dict(self) -> dict[str, Any] | None:
        t = self.topology
        if t is None:
            return None
        names, best = self.matrix()
        return {
            "levels": list(t.levels),
            "pairing": t.pairing,
            "domains": t.domains,
            "slow_domain_links": [dataclasses.asdict(link) for link in t.links],
            "slow_links_across": [dataclasses.asdict(link) for link in t.slow],
            "matrix": [
                {"a": a, "b": b, "busbw": best[(a, b)]}
                for a in names
                for b in names
                if a <= b and (a, b) in best
            ],
        }


__all__ = ["NodesChecked", "PairTest", "Topology"]
