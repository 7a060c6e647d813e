"""Which fabric a run's ranks used, from its pods' NCCL INFO lines, against the fabric of the
platform its pods were rendered for.

A run rendered for a platform (EFA devices, GKE's daemons, RDMA resources) that fell back to
TCP still completes, at a fraction of the bandwidth; only its NCCL lines show it. deploy ends
a followed run that succeeded with this check and fails it (RunFailed, exit 1) naming the ranks
that used another fabric and their hosts; `nodes check` deploys its pair tests the same way.
The pods run with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET unless the user set them
(rendering._presets), which is what the reader (results.nccllog) needs.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from nccl_k8s.errors import ClusterError
from nccl_k8s.k8s.api._client import KubeClient
from nccl_k8s.k8s.rendering._names import CONTAINER_NAME
from nccl_k8s.k8s.rendering._wrapper import BLOCK_END
from nccl_k8s.k8s.run._plumbing import bounded
from nccl_k8s.k8s.run._pods import PodInfo
from nccl_k8s.spec.platforms import Platform

if TYPE_CHECKING:
    from nccl_k8s.results.nccllog import RankReport

_NCCL_LINE = re.compile(r"^.*NCCL (?:INFO|WARN).*$", re.MULTILINE)


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
    expected: str
    used: str | None
    """What the inter-node traffic used (results.fabrics' names; "mixed"), None when the
    logs do not say or no byte had to leave a node."""
    wrong: list[Wrong] = dataclasses.field(default_factory=list)
    fallback: str = ""

    @property
    def ok(self) -> bool:
        return not self.wrong

    def message(self) -> str:
        """`rendered for eks-efa, but ranks 0-15 (hosts a, b) used NET/Socket: <fallback>`."""
        parts = [
            f"ranks {rank_ranges(w.ranks)} (hosts {', '.join(w.hosts) or '?'}) used {w.used}"
            for w in self.wrong
        ]
        why = f": {self.fallback}" if self.fallback else ""
        return f"rendered for {self.platform}, but {'; '.join(parts)}{why}"


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


def judge(platform: Platform, nccl_texts: list[str]) -> FabricCheck:
    """Compare what each rank's NCCL lines say it used with the platform's fabric. Pure.
    Ranks whose lines do not say are not counted against the run (nothing proves them wrong);
    a run on one node needed no fabric."""
    from nccl_k8s.results.diagnose import facts_of
    from nccl_k8s.results.nccllog import LogParser

    parser = LogParser()
    for text in nccl_texts:
        parser.feed(text)
    log = parser.finish()
    if not log.reports:
        return FabricCheck(platform.name, platform.fabric, None)
    facts = facts_of(log)
    if facts.network_needed is False:
        return FabricCheck(platform.name, platform.fabric, None)
    groups: dict[str, tuple[set[int], set[str]]] = {}
    for rep in log.reports:
        fabric = facts.fabrics.get(rep.key)
        if fabric is None or fabric == platform.fabric:
            continue
        ranks, hosts = groups.setdefault(_shown(rep), (set(), set()))
        if rep.rank is not None:
            ranks.add(rep.rank)
        if rep.host:
            hosts.add(rep.host)
    used = sorted({f for f in facts.fabrics.values() if f})
    wrong = [Wrong(k, sorted(r), sorted(h)) for k, (r, h) in sorted(groups.items())]
    return FabricCheck(
        platform.name,
        platform.fabric,
        used[0] if len(used) == 1 else ("mixed" if used else None),
        wrong,
        platform.fallback,
    )


async def _nccl_lines(kc: KubeClient, namespace: str, pod: PodInfo) -> str:
    """One pod's NCCL lines: the wrapper's digest block when there is one (log rotation keeps
    it), else every NCCL line of the log."""
    from nccl_k8s.results.lines import last_block

    try:
        text = await kc.logs(pod.name, namespace=namespace, container=CONTAINER_NAME)
    except ClusterError as e:
        if e.status == 400:  # never started: nothing to read
            return ""
        raise
    block = last_block(text, "nccl") if BLOCK_END in text else None
    return "\n".join(block if block is not None else _NCCL_LINE.findall(text))


async def check_fabric(
    kc: KubeClient, namespace: str, pods: list[PodInfo], platform: Platform, concurrency: int = 32
) -> FabricCheck:
    """Read the pods' NCCL lines (at most `concurrency` at once) and judge them."""
    reads = [functools.partial(_nccl_lines, kc, namespace, p) for p in pods]
    return judge(platform, [t for t in await bounded(concurrency, reads) if t])


__all__ = ["FabricCheck", "Wrong", "check_fabric", "judge", "rank_ranges"]
