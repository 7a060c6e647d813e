"""Which of the candidate nodes one `nodes check` tests, for checks that run on a schedule:
`--idle-only` (no other pod requests GPUs there), `--skip-checked-within DURATION` (the node's
last verdict, read back from its labels, is younger) and `--max-nodes K` (one run's bound).

A node labelled bad is always due (whatever its age): only a new test clears it. Due nodes go
in this order, so that --max-nodes keeps the ones that most need a test: labelled bad, never
checked (or a checked-at label that does not parse), then oldest check first. A single due
node gets a partner (a test is a pair): an idle candidate left out by the window, freshest
good first. Pure (Node and Pod objects in, names out), but for due_async, which first lists
the live pods of every namespace for --idle-only: one request, whatever the node count (a
field selector on spec.nodeName per node would need the same grant, N times).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping, Sequence

from nccl_k8s.k8s.api._client import KubeClient
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.preflight._domainfit import LIVE_PODS, pod_gpus
from nccl_k8s.k8s.rendering._health import last_check


@dataclasses.dataclass(frozen=True)
class Due:
    nodes: list[str]
    """The nodes to test, in the order above."""
    skipped: dict[str, str]
    """Candidates not tested this time, and why."""


def busy_nodes(pods: Iterable[Obj], resource: str) -> dict[str, str]:
    """Node -> the first live pod on it that requests `resource` (`ns/name`, how many)."""
    busy: dict[str, str] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if not node or phase in ("Succeeded", "Failed") or node in busy:
            continue
        if (n := pod_gpus(pod, resource)) > 0:
            meta = pod.get("metadata") or {}
            busy[node] = f"{meta.get('namespace')}/{meta.get('name')} requests {n:g} {resource}"
    return busy


def _ago(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 60:.0f}m"


def due_nodes(
    candidates: Sequence[str],
    nodes: Iterable[Obj],
    *,
    now: float,
    busy: Mapping[str, str] | None = None,
    within_s: float | None = None,
    max_nodes: int | None = None,
) -> Due:
    """The candidates to test (module docstring); `busy` from busy_nodes with --idle-only."""
    by_name = {str(n["metadata"]["name"]): n for n in nodes}
    skipped: dict[str, str] = {}
    idle = [n for n in candidates if not (busy and n in busy)]
    for n in candidates:
        if busy and n in busy:
            skipped[n] = f"not idle: {busy[n]}"
    due: list[tuple[tuple[int, float], str]] = []
    fresh: list[tuple[float, str]] = []
    for n in idle:
        verdict, at = last_check(by_name.get(n, {}))
        if verdict == "bad":
            due.append(((0, at or 0), n))
        elif verdict is None or at is None:
            due.append(((1, 0), n))
        elif within_s is not None and now - at < within_s:
            skipped[n] = f"checked {verdict} {_ago(now - at)} ago (--skip-checked-within)"
            fresh.append((-at if verdict == "good" else float("inf"), n))
        else:
            due.append(((2, at), n))
    order = [n for _, n in sorted(due, key=lambda x: x[0])]  # stable: candidates' order
    if max_nodes is not None and len(order) > max_nodes:
        for n in order[max_nodes:]:
            skipped[n] = f"over --max-nodes {max_nodes} (due: next run)"
        order = order[:max_nodes]
    if len(order) == 1 and fresh:
        partner = min(fresh)[1]
        del skipped[partner]
        order.append(partner)
    if len(order) < 2:
        for n in order:
            skipped[n] = "due, but no idle node to pair it with"
        order = []
    return Due(order, skipped)


async def due_async(
    kc: KubeClient,
    gpu_resource: str,
    candidates: Sequence[str],
    nodes: Iterable[Obj],
    *,
    idle_only: bool,
    within_s: float | None,
    max_nodes: int | None,
) -> Due:
    """due_nodes, now, with --idle-only's pods listed first."""
    busy = None
    if idle_only:
        pods = (await kc.list("Pod", all_namespaces=True, field_selector=LIVE_PODS))[0]
        busy = busy_nodes(pods, gpu_resource)
    return due_nodes(
        candidates, nodes, now=time.time(), busy=busy, within_s=within_s, max_nodes=max_nodes
    )


__all__ = ["LIVE_PODS", "Due", "busy_nodes", "due_async", "due_nodes", "last_check"]
