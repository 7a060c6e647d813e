"""`doctor --run ID`: why each pod of an existing run is where it is, in one table.

The same interpretation deploy's monitor uses (run._pods for pod states, run._verdicts and
run._culprit for a failed run's culprit, the controller's FailedCreate wording), applied to what
the API holds now: the scheduler's FailedScheduling message for an unschedulable pod, the
kubelet's words for an image that cannot be pulled, OOMKilled and exit codes with the last log
lines, a node that is NotReady or unreachable, a pod no scheduler has looked at, a Job whose
controller cannot create pods, a Job that Kueue holds suspended.

`gather` reads (the workload, pods, the namespace's events, the pods' nodes, failed pods' log
tails); `rows` is pure.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from nccl_k8s.errors import FailureReason
from nccl_k8s.k8s.api._client import ClientSettings, KubeClient
from nccl_k8s.k8s.api._sync import run_sync
from nccl_k8s.k8s.api._types import Obj, timestamp
from nccl_k8s.k8s.rendering._names import STOPPED_ANNOTATION
from nccl_k8s.k8s.run._culprit import lost, node_trouble, started
from nccl_k8s.k8s.run._logs import waiting_words
from nccl_k8s.k8s.run._plumbing import get_workload, namespace_of, no_run, resolve_run, run_labels
from nccl_k8s.k8s.run._pods import (
    PodInfo,
    condition,
    latest_per_rank,
    pod_info,
    rank_key,
    run_phase,
)
from nccl_k8s.k8s.run._settings import WaitSettings
from nccl_k8s.k8s.run._verdicts import failed_create, gather_verdict, node_objects

#: Last log lines shown for a pod whose container failed.
TAIL_LINES = 3
#: A Pending pod that no scheduler has touched for this long is said to wait for an absent one.
SCHEDULER_SILENT_S = 60


@dataclasses.dataclass(frozen=True)
class PodWhy:
    """One row: a pod (or the workload itself, pod None) and why it is where it is."""

    rank: int | None
    pod: str | None
    node: str | None
    phase: str
    why: str
    culprit: bool = False
    log_tail: list[str] = dataclasses.field(default_factory=list)
    waiting: bool = False
    """It waits with nothing wrong yet (Pending, not scheduled yet, its image being pulled)."""


@dataclasses.dataclass(frozen=True)
class Explained:
    run_id: str
    namespace: str
    kind: str | None
    phase: str
    verdict: str | None
    """The run's verdict in one line when it failed (the culprit, as deploy names it)."""
    rows: list[PodWhy]
    reason: FailureReason | None = None
    """Why the run failed, typed (what deploy's RunFailed carries); None when no verdict
    names it (nothing failed, or nccl-k8s stopped it and only its words remain)."""

    @property
    def ok(self) -> bool:
        """Nothing is wrong: the run succeeded, runs, or waits without a problem."""
        return self.verdict is None and all(
            r.phase in ("Running", "Succeeded") or r.waiting for r in self.rows
        )

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["ok"] = self.ok
        out["reason"] = self.reason.value if self.reason else None
        return out


def _age(since: str | None, now: datetime.datetime) -> float:
    then = timestamp(since)
    return 0.0 if then is None else max(0.0, (now - then).total_seconds())


def _latest(events: Sequence[Obj], name: str, reason: str) -> Obj | None:
    mine = [
        e
        for e in events
        if (e.get("involvedObject") or {}).get("name") == name and e.get("reason") == reason
    ]
    return (
        max(mine, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        if mine
        else None
    )


def _tail(text: str | None, n: int) -> list[str]:
    return [line for line in (text or "").splitlines() if line.strip()][-n:]


def _pod_why(
    pod: Obj,
    info: PodInfo,
    events: Sequence[Obj],
    nodes: Mapping[str, Obj | None],
    now: datetime.datetime,
) -> tuple[str, bool]:
    """Why the pod is where it is, and whether it only waits (nothing wrong yet)."""
    trouble = node_trouble(nodes.get(info.node or "")) if info.node else None
    if trouble is not None and info.phase != "Succeeded":
        return f"its node {info.node} {trouble}", False
    gone = lost(pod) if started(pod) else None
    if gone is not None:
        return f"lost: {gone}", False
    problem = info.problem
    if problem is not None and problem.reason == "Unschedulable":
        event = _latest(events, info.name, "FailedScheduling")
        words = str(event.get("message")) if event else problem.message
        return f"Unschedulable for {_age(info.created, now):.0f}s: {words}", False
    if problem is not None:
        return problem.message, False
    if info.phase == "Pending" and not info.node:
        scheduled = any(
            c.get("type") == "PodScheduled"
            for c in (pod.get("status") or {}).get("conditions") or []
        )
        touched = scheduled or any(
            (e.get("involvedObject") or {}).get("name") == info.name for e in events
        )
        waited = _age(info.created, now)
        if not touched and waited >= SCHEDULER_SILENT_S:
            return (
                f"no scheduler has looked at it for {waited:.0f}s: it asks for schedulerName "
                f"{info.scheduler}; is that scheduler running? (`nccl-k8s doctor --scheduler "
                f"{info.scheduler}`)"
            ), False
        return f"waiting: {waiting_words(info)}", True
    if info.phase == "Pending":
        return f"waiting: {waiting_words(info)}", True
    if info.phase == "Running":
        return "running" + (" (deleting)" if info.deleting else ""), False
    if info.phase == "Succeeded":
        return "completed (exit code 0)", False
    return info.message or info.reason or info.phase, False


def rows(
    run_id: str,
    namespace: str,
    workload: Obj | None,
    pods: Sequence[Obj],
    events: Sequence[Obj],
    nodes: Mapping[str, Obj | None],
    texts: Mapping[str, str],
    *,
    culprit_pod: str | None = None,
    now: datetime.datetime | None = None,
) -> list[PodWhy]:
    """The table: the workload's own trouble first (FailedCreate, suspended), then one row per
    rank's current pod."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    out: list[PodWhy] = []
    if workload is not None:
        kind = str(workload.get("kind"))
        uid = workload["metadata"].get("uid")
        created = [
            e
            for e in events
            if e.get("reason") == "FailedCreate"
            and (e.get("involvedObject") or {}).get("uid") in (uid, None, "")
            and (e.get("involvedObject") or {}).get("name") == workload["metadata"]["name"]
        ]
        current = latest_per_rank(pod_info(p) for p in pods)
        expected = int((workload.get("spec") or {}).get("completions") or 0)
        if created and len(current) < max(expected, 1):
            latest = max(created, key=lambda e: str(e.get("lastTimestamp") or ""))
            why = str(failed_create(run_id, namespace, workload, latest, None))
            out.append(PodWhy(None, None, None, "-", why.removeprefix(f"run {run_id}: ")))
        if (workload.get("spec") or {}).get("suspend"):
            out.append(
                PodWhy(
                    None,
                    None,
                    None,
                    "Suspended",
                    f"the {kind} is suspended: it waits for admission (a Kueue queue) or was "
                    "suspended by hand",
                )
            )
    by_name = {str(p["metadata"]["name"]): p for p in pods}
    for info in latest_per_rank(pod_info(p) for p in pods):
        pod = by_name[info.name]
        tail = _tail(texts.get(info.name), TAIL_LINES) if info.problem is not None else []
        why, waiting = _pod_why(pod, info, events, nodes, now)
        if tail:
            why += "; last log lines: " + " | ".join(tail)
        out.append(
            PodWhy(
                info.rank,
                info.name,
                info.node,
                info.phase + (" (deleting)" if info.deleting else ""),
                why,
                culprit=info.name == culprit_pod,
                log_tail=tail,
                waiting=waiting,
            )
        )
    return out


def table_text(e: Explained) -> str:
    """The table as plain columns (what `doctor --run` prints and a bundle keeps): a headline,
    then RANK, POD, NODE, PHASE, WHY; the culprit's rank is marked `*`."""
    verdict = f": {e.verdict}" if e.verdict else ""
    head = f"run {e.run_id} in {e.namespace} ({e.kind or 'no workload'}): {e.phase}{verdict}"
    table: list[tuple[str, ...]] = [("RANK", "POD", "NODE", "PHASE", "WHY")]
    for r in e.rows:
        rank = "-" if r.rank is None else str(r.rank)
        table.append(
            (rank + ("*" if r.culprit else ""), r.pod or "-", r.node or "-", r.phase, r.why)
        )
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    lines = [
        "  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[4]])
        for row in table
    ]
    return "\n".join([head, *(line.rstrip() for line in lines)]) + "\n"


async def gather(kc: KubeClient, namespace: str, run_id: str) -> Explained:
    workload = await get_workload(kc, namespace, run_id)
    pods, _ = await kc.list("Pod", namespace=namespace, labels=run_labels(run_id))
    if workload is None and not pods:
        raise no_run(kc, namespace, run_id)
    events, _ = await kc.list("Event", namespace=namespace)
    names = {str(p["metadata"]["name"]) for p in pods} | {run_id}
    events = [e for e in events if (e.get("involvedObject") or {}).get("name") in names]
    infos = sorted((pod_info(p) for p in pods), key=rank_key)
    phase = run_phase(workload, infos)
    nodes = await node_objects(kc, {i.node for i in infos if i.node})
    verdict_text: str | None = None
    reason: FailureReason | None = None
    culprit: str | None = None
    texts: dict[str, str] = {}
    stopped = ((workload or {}).get("metadata", {}).get("annotations") or {}).get(
        STOPPED_ANNOTATION
    )
    if phase in ("Failed", "Failing", "Degraded") or stopped:
        verdict, texts = await gather_verdict(kc, namespace, pods, WaitSettings())
        if verdict is not None:
            verdict_text, culprit = verdict.text(), verdict.culprit.pod
            reason = verdict.culprit.reason
        elif stopped:
            verdict_text = f"stopped by nccl-k8s: {stopped}"
        else:
            cond = condition(workload, "Failed") or {}
            verdict_text = f"{cond.get('reason', 'Failed')}: {cond.get('message', 'no message')}"
            reason = FailureReason.WORKLOAD_FAILED
    table = rows(run_id, namespace, workload, pods, events, nodes, texts, culprit_pod=culprit)
    kind = str(workload.get("kind")) if workload else None
    return Explained(run_id, namespace, kind, phase, verdict_text, table, reason)


def explain(
    run_id: str | None = None, *, client: ClientSettings, namespace: str | None = None
) -> Explained:
    """Why each pod of the run (the latest in the namespace without `run_id`) is where it is."""

    async def main(kc: KubeClient) -> Explained:
        ns = await namespace_of(kc, namespace)
        rid = await resolve_run(kc, ns, run_id)
        return await gather(kc, ns, rid)

    return run_sync(main, client)


__all__ = ["Explained", "PodWhy", "explain", "gather", "rows", "table_text"]
