"""`nodes check` against an expected floor: is the whole cluster below what a healthy cluster of
its platform reaches?

The evidence rules (nodes._evidence) judge each node against the cluster's own level, so a
cluster whose every link is slow looks healthy to them. The floor is the outside yardstick:
`--floor GBPS` given by the user, else the row of results.floors.FLOORS that applies to the
pair tests (the detected platform and machine type, the first collective, 2 nodes, the GPUs per
node, the largest size, the NCCL algorithm the tests run). When the cluster's level is below
it, that is one finding about the cluster ("the whole cluster is below the floor"), never a
verdict on each node.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nccl_k8s.k8s.nodes._badnodes import Findings
from nccl_k8s.k8s.nodes._level import PairResult
from nccl_k8s.results.floors import Floor, floor_for, no_floor, query
from nccl_k8s.spec import RunSpec

#: How a user gives a floor when none is known (nodes check's own option).
FLOOR_FLAG = "--floor GBPS"


@dataclasses.dataclass(frozen=True)
class FloorVerdict:
    floor_gbps: float
    measured: float | None
    """The cluster's level (Findings.reference), or with no confirmed level the best test's
    busbw; None when no test measured any."""
    below: bool
    """The whole cluster is below the floor: its level (or its best test) did not reach it."""
    row: Floor | None
    """The table's row the floor came from; None when given (--floor)."""

    @property
    def what(self) -> str:
        """Where the floor comes from, in one phrase."""
        if self.row is None:
            return "given by --floor"
        return f"expected for {self.row.condition}: {self.row.source}"

    @property
    def finding(self) -> str:
        got = "no test measured a bus bandwidth" if self.measured is None else (
            f"{self.measured:.3g} GB/s")  # fmt: skip
        if self.below:
            return (
                f"the whole cluster is below the floor: {got} < {self.floor_gbps:g} GB/s "
                f"({self.what})"
            )
        return f"the cluster reaches the floor: {got} >= {self.floor_gbps:g} GB/s ({self.what})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "floor_gbps": self.floor_gbps,
            "measured": self.measured,
            "below": self.below,
            "finding": self.finding,
            "row": None if self.row is None else self.row.to_dict(),
        }


def pair_floor(spec: RunSpec, given: float | None) -> tuple[float, Floor | None] | str:
    """The floor of `spec`'s pair tests: the given one, else the table's row; or why none."""
    if given is not None:
        return given, None
    q = query(spec, nodes=2, smallest=False)
    if q is None:
        return f"no expected floor for the gloo backend; give one: {FLOOR_FLAG}"
    row = floor_for(q)
    return (row.floor_gbps, row) if row is not None else no_floor(q, give=FLOOR_FLAG)


def cluster_floor(
    expected: tuple[float, Floor | None] | str, findings: Findings, results: list[PairResult]
) -> tuple[FloorVerdict | None, str]:
    """The verdict against `expected` (pair_floor's), or none and why not."""
    if isinstance(expected, str):
        return None, expected
    return judge_floor(findings, results, expected), ""


def judge_floor(
    findings: Findings, results: list[PairResult], floor: tuple[float, Floor | None]
) -> FloorVerdict:
    """The cluster against the floor: its level, or without a confirmed level its best test
    (no pair reached the floor: no subset of the cluster does)."""
    gbps, row = floor
    measured = findings.reference
    if measured is None:
        measured = max((r.busbw for r in results if r.ok and r.busbw is not None), default=None)
    below = measured is not None and measured < gbps
    return FloorVerdict(gbps, measured, below, row)


__all__ = ["FLOOR_FLAG", "FloorVerdict", "cluster_floor", "judge_floor", "pair_floor"]
