"""A log against a platform: the fabric gate a deploy for that platform applies, offline too.

A run rendered for a platform (EFA devices, GKE's daemons, RDMA resources) that fell back to TCP
still completes, at a fraction of the bandwidth; only its NCCL lines show it. The deploy judges a
followed run's pods' NCCL lines here (k8s.run._fabric reads them), and `diagnose --platform P
LOG...` judges any log the same way: both call `judge`, which applies the one fabric rule
(`rules.gates.fabric_gate`) with the platform's fabric from the fabric table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING

from nccl_k8s.errors import UsageError
from nccl_k8s.fabrics import Fabric
from nccl_k8s.results.findings import Facts
from nccl_k8s.results.nccllog import RankReport
from nccl_k8s.results.rules.gates import GateStatus, fabric_gate

if TYPE_CHECKING:
    from nccl_k8s.spec.platforms import Platform


@dataclasses.dataclass(frozen=True)
class Wrong:
    """Ranks that used another fabric than the platform's, grouped by what they used."""

    used: str
    """As NCCL names it: `NET/Socket`, `NET/IB` ..."""
    ranks: list[int]
    hosts: list[str]


@dataclasses.dataclass(frozen=True)
class FabricCheck:
    platform: str
    expected: Fabric | None
    used: str | None
    """What the inter-node traffic used (the fabric table's names; "mixed"), None when the
    logs do not say or no byte had to leave a node."""
    wrong: list[Wrong] = dataclasses.field(default_factory=list)
    fallback: str = ""
    status: GateStatus | None = None
    """The gate's verdict; None: the platform expects no fabric (generic)."""
    why: str = ""
    """Why the logs cannot confirm the fabric (status unconfirmed)."""
    advice: str = "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET"
    """What would let the logs confirm it (status unconfirmed)."""

    @property
    def ok(self) -> bool:
        return self.status in (None, GateStatus.CONFIRMED)

    def message(self) -> str:
        """`rendered for eks-efa, but ranks 0-15 (hosts a, b) used NET/Socket: <fallback>`."""
        if self.status is GateStatus.UNCONFIRMED:
            return (
                f"rendered for {self.platform}, but the NCCL logs cannot confirm "
                f"{self.expected}: {self.why}; {self.advice}"
            )
        parts = [
            f"ranks {rank_ranges(w.ranks)} (hosts {', '.join(w.hosts) or '?'}) used {w.used}"
            for w in self.wrong
        ]
        why = f": {self.fallback}" if self.fallback else ""
        return f"rendered for {self.platform}, but {'; '.join(parts)}{why}"

    def to_dict(self) -> dict[str, object]:
        return {
            "platform": self.platform,
            "expected": self.expected,
            "used": self.used,
            "status": self.status,
            "ok": self.ok,
            "message": None if self.ok else self.message(),
        }


def rank_ranges(ranks: Iterable[int]) -> str:
    """`0-3, 8, 10-11`."""
    out: list[str] = []
    for r in sorted(set(ranks)):
        if out and out[-1].split("-")[-1] == str(r - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{r}"
        else:
            out.append(str(r))
    return ", ".join(out)


def _shown(rep: RankReport) -> str:
    """What a rank used as NCCL names it: its connections' `NET/<network>`, else the network
    it selected."""
    nets = [t for t in rep.transports if t.startswith("NET/")]
    if nets:
        return "/".join(nets[0].split("/")[:2])
    return f"NET/{rep.network}" if rep.network else "another fabric"


def judge(platform: Platform, facts: Facts | None) -> FabricCheck:
    """The platform's fabric gate on a log's facts (`results.diagnose.facts_of`; None: the logs
    hold no NCCL line at all). Pure."""
    want = platform.fabric
    if want is None:
        return FabricCheck(platform.name, None, None)
    if facts is None:
        return FabricCheck(
            platform.name,
            want,
            None,
            fallback=platform.fallback,
            status=GateStatus.UNCONFIRMED,
            why="the pods' logs hold no NCCL INFO line",
        )
    gate = fabric_gate(want, facts)
    groups: dict[str, tuple[set[int], set[str]]] = {}
    if gate.status is GateStatus.WRONG:
        for rep in gate.wrong:
            ranks, hosts = groups.setdefault(_shown(rep), (set(), set()))
            if rep.rank is not None:
                ranks.add(rep.rank)
            if rep.host:
                hosts.add(rep.host)
    used = sorted({f for f in facts.fabrics.values() if f})
    return FabricCheck(
        platform.name,
        want,
        None
        if facts.network_needed is False
        else (used[0] if len(used) == 1 else ("mixed" if used else None)),
        [Wrong(k, sorted(r), sorted(h)) for k, (r, h) in sorted(groups.items())],
        platform.fallback,
        gate.status,
        gate.why,
        gate.advice,
    )


def platform_named(name: str) -> Platform:
    """The platform of `--platform NAME` (the platform table's names), or a usage error."""
    from nccl_k8s.spec.platforms import PLATFORMS

    try:
        return PLATFORMS[name.strip()]
    except KeyError:
        raise UsageError(
            f"--platform {name!r}: expected one of {', '.join(PLATFORMS)}", key="platform"
        ) from None


__all__ = ["FabricCheck", "Wrong", "judge", "platform_named", "rank_ranges"]
