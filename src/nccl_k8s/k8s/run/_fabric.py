"""Which fabric a run's ranks used, from its pods' NCCL INFO lines, against the fabric of the
platform its pods were rendered for.

A run rendered for a platform (EFA devices, GKE's daemons, RDMA resources) that fell back to
TCP still completes, at a fraction of the bandwidth; only its NCCL lines show it. deploy ends
a followed run that succeeded with this check and fails it (RunFailed, exit 1) naming the ranks
that used another fabric and their hosts; `nodes check` deploys its pair tests the same way.
The judgement is results.platform_gate's, the one `diagnose --platform` applies to any log:
this module only reads the pods' lines.
The pods run with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET unless the user set them
(rendering._presets), which is what the reader (results.nccllog) needs.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

from nccl_k8s.errors import ClusterError
from nccl_k8s.k8s.api._client import KubeClient
from nccl_k8s.k8s.rendering._names import CONTAINER_NAME
from nccl_k8s.k8s.rendering._wrapper import BLOCK_END
from nccl_k8s.k8s.run._plumbing import bounded
from nccl_k8s.k8s.run._pods import PodInfo
from nccl_k8s.spec.platforms import Platform

if TYPE_CHECKING:  # the results readers load when a gate runs, not with deploy's imports
    from nccl_k8s.results.platform_gate import FabricCheck

_NCCL_LINE = re.compile(r"^.*NCCL (?:INFO|WARN).*$", re.MULTILINE)


def judge(platform: Platform, nccl_texts: list[str]) -> FabricCheck:
    """The platform's fabric gate (results.platform_gate.judge, the rule `diagnose --platform`
    applies) on the pods' NCCL lines. Pure."""
    from nccl_k8s.results.diagnose import facts_of, log_reader
    from nccl_k8s.results.platform_gate import judge as judge_facts

    reader = log_reader()
    for text in nccl_texts:
        reader.feed(text)
    log = reader.finish()
    return judge_facts(platform, facts_of(log, platform.fabric) if log.reports else None)


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


__all__ = ["check_fabric", "judge"]
