"""Why a followed run failed, in one message: the culprit's rank, pod and node (from
run._culprit's attribution), the scheduler's or the Job controller's words, the last log lines
of the rank that broke. What run._monitor raises once it decides a run has failed."""

from __future__ import annotations

import asyncio
import contextlib
import re

from nccl_k8s.errors import ClusterError, FailureReason, RunFailed
from nccl_k8s.k8s.api._client import KubeClient
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.rendering._names import CONTAINER_NAME
from nccl_k8s.k8s.run._culprit import (
    Verdict,
    attribute,
    lost,
    parse_faults,
    parse_rendezvous,
    started,
)
from nccl_k8s.k8s.run._plumbing import (
    rank_text,
    run_labels,
)
from nccl_k8s.k8s.run._pods import (
    PodInfo,
    condition,
    pod_info,
)
from nccl_k8s.k8s.run._settings import WaitSettings
from nccl_k8s.k8s.run._torchrun import parse_root_cause
from nccl_k8s.k8s.run._watch import Update


#: The annotation a stopped Job carries: why nccl-k8s stopped it (its Failed condition then says
#: DeadlineExceeded, which is how it was stopped, not why).
class RunState:
    """What the watches have shown of the run so far."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.pods: dict[str, Obj] = {}
        self.seen: dict[str, Obj] = {}
        """Every pod ever seen, as last seen (deleted ones too: a lost pod's replacement
        hides it from the current set, and the Job deletes the survivors of a failure)."""
        self.workloads: dict[str, Obj | None] = {}
        self.synced: set[str] = set()
        self.uid: str | None = None
        self.kind = "workload"
        self.events: dict[str, Obj] = {}
        self.since: dict[tuple[str, str], float] = {}

    def take(self, source: str, update: Update) -> None:
        if source == "Pod":
            self.pods = update.objects
            for name, pod in update.objects.items():
                self.seen[name] = pod
            if update.type == "DELETED" and update.obj is not None:
                self.seen[str(update.obj["metadata"]["name"])] = update.obj
        elif source in ("Job", "StatefulSet"):
            self.synced.add(source)
            self.workloads[source] = next(
                (o for o in update.objects.values() if o["metadata"].get("name") == self.run_id),
                None,
            )
            workload = self.workload()
            if workload is not None and self.uid is None:
                self.uid = str(workload["metadata"].get("uid"))
                self.kind = str(workload.get("kind") or "workload")
        elif source == "Event":
            self.events = update.objects

    def workload(self) -> Obj | None:
        return self.workloads.get("Job") or self.workloads.get("StatefulSet")

    def vanished(self) -> str | None:
        """Why the wait is over because the run is gone, or None."""
        if not {"Job", "StatefulSet"} <= self.synced:
            return None
        workload = self.workload()
        if workload is None or str(workload["metadata"].get("uid")) != self.uid:
            kind = self.kind
            again = " and made again" if workload is not None else ""
            return (
                f"run {self.run_id} was deleted while this command waited for it: its {kind} "
                f"is gone{again} (`nccl-k8s cleanup`, `kubectl delete` or its --ttl); nothing "
                "of it is left running"
            )
        return None

    def failed_create(self) -> Obj | None:
        """The workload controller's newest FailedCreate event about this workload."""
        events = [
            e
            for e in self.events.values()
            if e.get("reason") == "FailedCreate"
            and (e.get("involvedObject") or {}).get("uid") in (self.uid, None, "")
        ]
        if not events:
            return None
        return max(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))

    def patience(self, key: tuple[str, str], now: float) -> float:
        """Seconds since this command first saw `key` (pod, what it waits for)."""
        return now - self.since.setdefault(key, now)


_PSA = re.compile(r'violates PodSecurity "([a-z]+)(?::[^"]*)?"')


def failed_create(
    run_id: str, namespace: str, workload: Obj, event: Obj, security: str | None
) -> RunFailed:
    """The controller cannot create the pods: its own words, and what to change."""
    kind = str(workload.get("kind") or "workload")
    message = str(event.get("message") or "FailedCreate")
    text = f"run {run_id}: the {kind} cannot create its pods: {message}"
    psa = _PSA.search(message)
    if psa is not None:
        profile = f"--security {security}" if security else "the run's --security profile"
        text += (
            f". Namespace {namespace} enforces Pod Security level {psa.group(1)!r} "
            "(label pod-security.kubernetes.io/enforce) and the pods of "
            f"{profile} violate it: deploy with a --security profile that level admits "
            "(docs/deploy.md lists the level each needs), or have an admin relax the label"
        )
    elif "exceeded quota" in message:
        text += f". A ResourceQuota of namespace {namespace} is full: ask for a smaller run or more quota"
    return RunFailed(text, reason=FailureReason.CREATE_REFUSED)


async def out_of_patience(
    kc: KubeClient,
    namespace: str,
    run: RunState,
    current: list[PodInfo],
    now: float,
    settings: WaitSettings,
) -> RunFailed | None:
    """A RunFailed when a pod has waited too long to be scheduled or to pull its image."""
    unschedulable: list[PodInfo] = []
    waited = 0.0
    for p in current:
        if p.problem is None or not p.problem.transient:
            continue
        if p.problem.reason == "Unschedulable":
            waited = max(waited, run.patience((p.name, "schedule"), now))
            unschedulable.append(p)
            continue
        if run.patience((p.name, "pull"), now) >= settings.pull_timeout_s:
            return RunFailed(
                f"run {run.run_id}: rank {rank_text(p)} (pod {p.name}, node {p.node or 'none'}) "
                f"could not pull its image for {settings.pull_timeout_s:g}s (--pull-timeout): "
                f"{p.problem.message}",
                reason=FailureReason.IMAGE_PULL,
                rank=p.rank,
                pod=p.name,
                node=p.node,
            )
    if unschedulable and waited >= settings.schedule_timeout_s:
        first = unschedulable[0]
        message = await scheduler_message(kc, namespace, first)
        ranks = ", ".join(f"rank {rank_text(p)} (pod {p.name})" for p in unschedulable)
        return RunFailed(
            f"run {run.run_id} cannot be scheduled: {ranks}: "
            f"{_unschedulable_for(unschedulable, waited, settings)}: {message}",
            reason=FailureReason.UNSCHEDULABLE,
            rank=first.rank,
            pod=first.name,
        )
    return None


def _unschedulable_for(pods: list[PodInfo], waited: float, settings: WaitSettings) -> str:
    """How long the pods have been Unschedulable: the patience of this command, or, when they
    were long before it watched them (`wait` on an old run), since their PodScheduled condition
    says so."""
    timeout = f"{settings.schedule_timeout_s:g}s"
    ages = (p.problem.age_s() if p.problem else None for p in pods)
    since = max((a for a in ages if a is not None), default=0.0)
    if since > waited + 5:  # 5 s: a clock's and a watch's slack
        return f"Unschedulable for {since:.0f}s ({timeout} of it watched, --schedule-timeout)"
    return f"Unschedulable for {timeout} (--schedule-timeout)"


async def check_scheduled(
    kc: KubeClient,
    namespace: str,
    run_id: str,
    workload: Obj | None,
    current: list[PodInfo],
    elapsed: float,
) -> RunFailed | None:
    """A RunFailed when no scheduler (or no controller) has touched the run; once."""
    if not current:
        if workload is not None and not (workload.get("spec") or {}).get("suspend"):
            return RunFailed(
                f"run {run_id}: {workload.get('kind')} {run_id} has created no pods after "
                f"{elapsed:.0f}s and no FailedCreate event says why: is its controller "
                f"running? (`kubectl describe {str(workload.get('kind')).lower()} {run_id} "
                f"-n {namespace}`)",
                reason=FailureReason.NO_PODS,
            )
        return None
    if any(p.node or p.problem or p.phase != "Pending" for p in current):
        return None
    # A scheduler that looked at a pod bound it, set PodScheduled, or at least left an event.
    names = {p.name for p in current}
    with contextlib.suppress(ClusterError):
        events, _ = await kc.list(
            "Event", namespace=namespace, fields={"involvedObject.kind": "Pod"}
        )
        if any((e.get("involvedObject") or {}).get("name") in names for e in events):
            return None
    which = ", ".join(sorted({p.scheduler for p in current}))
    return RunFailed(
        f"run {run_id}: no scheduler has picked up its {len(current)} pod(s) after "
        f"{elapsed:.0f}s: none bound, no scheduling event. The pods ask for schedulerName "
        f"{which}: is it installed and running in this cluster? (pods: "
        + ", ".join(p.name for p in current[:4])
        + (", ..." if len(current) > 4 else "")
        + ")",
        reason=FailureReason.NO_SCHEDULER,
    )


async def failure(
    kc: KubeClient, namespace: str, run: RunState, settings: WaitSettings
) -> tuple[RunFailed, list[str]]:
    """A failed run's RunFailed (its culprit's rank, pod, node and reason) and the culprit's
    last log lines."""
    pods = list(run.seen.values())
    verdict, texts = await gather_verdict(kc, namespace, pods, settings)
    workload = run.workload()
    if verdict is None and condition(workload, "Failed") is not None:
        # The Job's Failed condition can arrive before the event of the pod that failed it (a
        # busy API server or client): read the pods again before taking the Job's own words.
        with contextlib.suppress(ClusterError):
            fresh, _ = await kc.list("Pod", namespace=namespace, labels=run_labels(run.run_id))
            run.seen.update((str(pod["metadata"]["name"]), pod) for pod in fresh)
            pods = list(run.seen.values())
            verdict, texts = await gather_verdict(kc, namespace, pods, settings)
    if verdict is None:
        cond = condition(workload, "Failed") or {}
        kind = workload.get("kind") if workload else "workload"
        words = f"{kind} {cond.get('reason', 'Failed')}: {cond.get('message', 'no message')}"
        return RunFailed(
            f"run {run.run_id} failed: {words}", reason=FailureReason.WORKLOAD_FAILED
        ), []
    c = verdict.culprit
    tail: list[str] = []
    started_pods = {str(p["metadata"]["name"]) for p in pods if started(p)}
    if c.pod is not None and c.pod in started_pods:
        text = texts.get(c.pod)
        if text is None:
            with contextlib.suppress(ClusterError):
                text = await kc.logs(
                    c.pod,
                    namespace=namespace,
                    container=CONTAINER_NAME,
                    tail_lines=settings.failure_log_lines,
                )
        lines = (text or "").rstrip("\n").splitlines()[-settings.failure_log_lines :]
        if any(line.strip() for line in lines):
            rank = "?" if c.rank is None else str(c.rank)
            tail = [f"last {settings.failure_log_lines} log lines of rank {rank}:"]
            tail += [f"  {line}" for line in lines]
    return RunFailed(
        f"run {run.run_id} failed: {verdict.text()}",
        reason=c.reason,
        rank=c.rank,
        pod=c.pod,
        node=c.node,
        exit_status=c.exit_code,
        global_rank=c.global_rank,
    ), tail


async def gather_verdict(
    kc: KubeClient, namespace: str, pods: list[Obj], settings: WaitSettings
) -> tuple[Verdict | None, dict[str, str]]:
    """Read the evidence (the first failed pods' log tails for fault lines, the nodes the pods
    ran on) and attribute; also the log texts read, by pod."""
    by_name = {str(p["metadata"]["name"]): p for p in pods}
    infos = {n: pod_info(p) for n, p in by_name.items()}
    troubled = [n for n, i in infos.items() if i.problem is not None or lost(by_name[n])]
    troubled.sort(key=lambda n: str(finished(infos[n]) or "~"))
    readable = [n for n in troubled if started(by_name[n])][: settings.fault_pods]

    async def tail(name: str) -> tuple[str, str | None]:
        try:
            return name, await kc.logs(
                name,
                namespace=namespace,
                container=CONTAINER_NAME,
                tail_lines=settings.fault_log_lines,
            )
        except ClusterError:
            return name, None

    logs, nodes = await asyncio.gather(
        asyncio.gather(*(tail(n) for n in readable)),
        node_objects(kc, {i.node for i in infos.values() if i.node and i.phase != "Succeeded"}),
    )
    texts = {n: t for n, t in logs if t is not None}
    faults = [f for n, t in texts.items() for f in parse_faults(t, n)]
    rdzv = next((r for t in texts.values() if (r := parse_rendezvous(t))), None)
    causes = {n: c for n, t in texts.items() if (c := parse_root_cause(t))}
    verdict = attribute(
        pods, faults=faults, nodes=nodes, rendezvous=rdzv, causes=causes, logs=texts
    )
    return verdict, texts


def finished(info: PodInfo) -> str | None:
    return info.problem.finished_at if info.problem else None


async def node_objects(kc: KubeClient, names: set[str]) -> dict[str, Obj | None]:
    """The nodes by name (None for one that could not be read: many users may not read nodes,
    and the pods' own words remain). A few by name; for a large run one list."""
    if not names:
        return {}
    try:
        if len(names) > 32:
            items, _ = await kc.list("Node")
            return {n: o for o in items if (n := str(o["metadata"]["name"])) in names}
        got = await asyncio.gather(*(kc.get("Node", n) for n in sorted(names)))
    except ClusterError:
        return {}
    return dict(zip(sorted(names), got, strict=True))


async def scheduler_message(kc: KubeClient, namespace: str, pod: PodInfo) -> str:
    """The scheduler's FailedScheduling event message (the pod condition's when none)."""
    fallback = pod.problem.message if pod.problem else ""
    with contextlib.suppress(ClusterError):
        events, _ = await kc.list(
            "Event",
            namespace=namespace,
            fields={"involvedObject.name": pod.name, "reason": "FailedScheduling"},
        )
        if events:
            latest = max(events, key=lambda e: str(e.get("lastTimestamp") or ""))
            return str(latest.get("message") or fallback)
    return fallback
