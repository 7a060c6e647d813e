"""Following a run until it ends (`deploy --wait`, `wait`): pod, workload and event watches, the
live summary, the one message that names a failed run's culprit, and ending a failed run so no
rank keeps holding GPUs.

What ends the wait, checked on every change and once a tick:
- the run's workload disappears (cleanup from another shell, kubectl delete, its TTL): say so
  at once, exit 1 (nothing left to end);
- the workload's controller cannot create pods (a FailedCreate event: Pod Security admission,
  a quota): named with the controller's words within seconds;
- a rank failed (a container ended non-zero, a crash loop), the Job failed, or the gang lost a
  member (a started pod lost with its node, evicted or preempted: torchrun's rendezvous is
  static, a replacement pod can never join): the culprit is named (`_culprit`);
- patience ran out: a pod Unschedulable longer than --schedule-timeout (autoscalers make the
  first FailedScheduling normal), an image not pulled after --pull-timeout (the kubelet
  retries), no scheduler touching the pods at all;
- success (the Job completed; a StatefulSet has every replica running);
- --timeout: the wait gives up and says the run goes on.

A failed run is then ended as `Ending` says: deploy deletes what it created (by uid) and waits
until the pods are gone, or with --keep-on-failure (and `wait`, which created nothing) stops the
ranks and keeps the objects for status and logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from nccl_k8s.errors import ClusterError, RunFailed
from nccl_k8s.k8s._client import ClientSettings, KubeClient
from nccl_k8s.k8s._culprit import (
    Verdict,
    attribute,
    lost,
    parse_faults,
    parse_rendezvous,
    started,
)
from nccl_k8s.k8s._manifests import CONTAINER_NAME
from nccl_k8s.k8s._outcomes import Created, Progress, ProgressFn, WaitOutcome
from nccl_k8s.k8s._plumbing import (
    WORKLOADS,
    ListWatch,
    delete_created,
    get_workload,
    namespace_of,
    no_run,
    owned_by,
    rank_text,
    resolve_run,
    run_labels,
    run_sync,
    wait_pods_gone,
)
from nccl_k8s.k8s._pods import (
    PodInfo,
    condition,
    latest_per_rank,
    phase_counts,
    pod_info,
    run_phase,
)
from nccl_k8s.k8s._settings import WaitSettings
from nccl_k8s.k8s._types import Obj
from nccl_k8s.k8s._watch import Update, informer, within

#: The annotation a stopped Job carries: why nccl-k8s stopped it (its Failed condition then says
#: DeadlineExceeded, which is how it was stopped, not why).
STOPPED_ANNOTATION = "nccl-k8s/stopped-because"
_PSA = re.compile(r'violates PodSecurity "([a-z]+)(?::[^"]*)?"')


@dataclasses.dataclass(frozen=True)
class Ending:
    """What follow_run does to a run it has found failed, so that no rank keeps holding GPUs."""

    stop: bool = False
    """Stop the ranks still there: the Job is made to fail (activeDeadlineSeconds), a
    StatefulSet scaled to zero; the objects stay for status and logs."""
    delete: Sequence[Created] | None = None
    """Delete these instead (what this deploy created, each by uid), then wait until the
    run's pods are gone."""


def wait(
    run_id: str | None = None,
    *,
    client: ClientSettings,
    namespace: str | None = None,
    settings: WaitSettings | None = None,
    progress: ProgressFn | None = None,
) -> WaitOutcome:
    """Follow an existing run until it ends, as `deploy --wait` does; a failed run's ranks are
    stopped, its objects kept (this command created none of them)."""

    async def main(kc: KubeClient) -> WaitOutcome:
        ns = await namespace_of(kc, namespace)
        rid = await resolve_run(kc, ns, run_id)
        workload = await get_workload(kc, ns, rid)
        if workload is None:
            raise no_run(kc, ns, rid)
        spec = workload.get("spec") or {}
        expected = int(spec.get("completions") or spec.get("replicas") or 0)
        return await follow_run(
            kc,
            ns,
            rid,
            expected=expected,
            settings=settings or WaitSettings(),
            progress=progress,
            ending=Ending(stop=True),
        )

    return run_sync(main, client)


async def _pump(
    name: str, updates: AsyncIterator[Update], queue: asyncio.Queue[Any], *, optional: bool = False
) -> None:
    try:
        async with contextlib.aclosing(updates) as it:  # type: ignore[type-var]  # async generator
            async for update in it:
                # A snapshot: the informer goes on changing its own dict while this waits.
                await queue.put((name, Update(update.type, update.obj, dict(update.objects))))
    except ClusterError as e:
        if optional and e.status == 403:
            return  # events are a help, not a need: many users may not read them
        await queue.put(("error", e))
    except Exception as e:  # handed to the waiter, which re-raises it
        await queue.put(("error", e))


class _Run:
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


async def follow_run(
    kc: KubeClient,
    namespace: str,
    run_id: str,
    *,
    expected: int,
    settings: WaitSettings,
    progress: ProgressFn | None,
    ending: Ending | None = None,
    security: str | None = None,
) -> WaitOutcome:
    """Follow the run until it succeeds (the outcome), fails (RunFailed naming the culprit,
    after `ending`), or `settings.timeout_s` passes (RunFailed: it keeps running). `security`
    is the run's --security profile, named when Pod Security admission refuses its pods."""
    ending = ending or Ending()
    labels = run_labels(run_id)
    queue: asyncio.Queue[Any] = asyncio.Queue()
    sources: list[tuple[str, ListWatch, bool]] = [
        (kind, ListWatch(kc, kind, namespace, labels), False)
        for kind in ("Pod", "Job", "StatefulSet")
    ]
    sources.append(
        (
            "Event",
            ListWatch(kc, "Event", namespace, {}, fields={"involvedObject.name": run_id}),
            True,
        )
    )
    tasks = [
        asyncio.create_task(_pump(name, informer(src, settings.watch), queue, optional=opt))
        for name, src, opt in sources
    ]
    start = time.monotonic()
    run = _Run(run_id)
    scheduler_checked = False
    failing_since: float | None = None
    end = _Ender(kc, namespace, run_id, ending, settings)
    try:
        while True:
            try:
                source, update = await within(queue.get(), settings.tick_s)
            except asyncio.TimeoutError:
                source, update = "tick", None
            if source == "error":
                raise update
            if update is not None:
                run.take(source, update)
            now = time.monotonic()
            elapsed = now - start
            infos = [pod_info(p) for p in run.pods.values()]
            current = latest_per_rank(infos)
            workload = run.workload()
            counts = phase_counts(current)
            if progress is not None:
                progress(Progress(run_id, namespace, elapsed, counts, expected, _note(workload)))

            gone = run.vanished()
            if gone is not None:
                raise RunFailed(gone)
            event = run.failed_create()
            if event is not None and workload is not None and len(current) < expected:
                raise await end(
                    _failed_create(run_id, namespace, workload, event, security), workload, []
                )

            is_job = workload is not None and workload.get("kind") == "Job"
            failed = [p for p in current if _fatal(p, workload)]
            lost_members = [
                n for n, p in run.seen.items() if is_job and started(p) and lost(p) is not None
            ]
            job_failed = workload is not None and condition(workload, "Failed") is not None
            if failed or job_failed or lost_members:
                if failing_since is None:
                    failing_since = now
                if now - failing_since >= settings.failure_settle_s or job_failed:
                    headline, tail, fields = await _failure(kc, namespace, run, settings)
                    raise await end(RunFailed(headline, **fields), workload, tail)
                continue

            phase = run_phase(workload, infos) if workload else "Pending"
            if phase == "Succeeded" or (
                workload is not None
                and workload.get("kind") == "StatefulSet"
                and phase == "Running"
            ):
                return WaitOutcome(run_id, namespace, phase, _took(workload, elapsed), current)

            waited = await _out_of_patience(kc, namespace, run, current, now, settings)
            if waited is not None:
                raise await end(waited, workload, [])
            if settings.timeout_s is not None and elapsed >= settings.timeout_s:
                raise RunFailed(
                    f"run {run_id} has not finished after {settings.timeout_s:g}s ("
                    + ", ".join(f"{v} {k}" for k, v in counts.items() if v)
                    + f"); it keeps running: `nccl-k8s wait --run {run_id}` follows it again, "
                    f"`nccl-k8s status --run {run_id}`, `nccl-k8s cleanup --run {run_id}`"
                )
            check_at = min(settings.scheduler_check_s, settings.schedule_timeout_s)
            if not scheduler_checked and elapsed >= check_at:
                scheduler_checked = True
                absent = await _check_scheduled(kc, namespace, run_id, workload, current, elapsed)
                if absent is not None:
                    raise await end(absent, workload, [])
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _took(workload: Obj | None, elapsed: float) -> float:
    """The run's own duration when the Job says it (a re-attached `wait` saw only the end),
    else how long this command followed it."""
    status = (workload or {}).get("status") or {}
    began, ended = status.get("startTime"), status.get("completionTime")
    if isinstance(began, str) and isinstance(ended, str):
        import datetime

        try:
            a = datetime.datetime.fromisoformat(began.replace("Z", "+00:00"))
            b = datetime.datetime.fromisoformat(ended.replace("Z", "+00:00"))
            return max(elapsed, (b - a).total_seconds())
        except ValueError:
            pass
    return elapsed


def _fatal(pod: PodInfo, workload: Obj | None) -> bool:
    """A problem that ends the run now. Patient problems (Unschedulable, image pulls) wait for
    their timeouts. With --backoff-limit > 0 a rank that exited is retried by the Job, so only
    the Job's Failed condition ends the run then."""
    if pod.problem is None or pod.problem.transient:
        return False
    retried = (
        workload is not None
        and workload.get("kind") == "Job"
        and int((workload.get("spec") or {}).get("backoffLimit") or 0) > 0
    )
    return not (retried and pod.problem.exit_code is not None)


def _note(workload: Obj | None) -> str | None:
    if workload is not None and (workload.get("spec") or {}).get("suspend"):
        return "suspended (waiting for admission, e.g. a Kueue queue)"
    return None


def _failed_create(
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
    return RunFailed(text)


async def _out_of_patience(
    kc: KubeClient,
    namespace: str,
    run: _Run,
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
                rank=p.rank,
                pod=p.name,
                node=p.node,
            )
    if unschedulable and waited >= settings.schedule_timeout_s:
        first = unschedulable[0]
        message = await _scheduler_message(kc, namespace, first)
        ranks = ", ".join(f"rank {rank_text(p)} (pod {p.name})" for p in unschedulable)
        return RunFailed(
            f"run {run.run_id} cannot be scheduled: {ranks}: Unschedulable for "
            f"{settings.schedule_timeout_s:g}s (--schedule-timeout): {message}",
            rank=first.rank,
            pod=first.name,
        )
    return None


async def _check_scheduled(
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
                f"-n {namespace}`)"
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
        + ")"
    )


async def _failure(
    kc: KubeClient, namespace: str, run: _Run, settings: WaitSettings
) -> tuple[str, list[str], dict[str, Any]]:
    """(headline, the culprit's last log lines, RunFailed fields) of a failed run."""
    pods = list(run.seen.values())
    verdict, texts = await gather_verdict(kc, namespace, pods, settings)
    workload = run.workload()
    if verdict is None:
        cond = condition(workload, "Failed") or {}
        kind = workload.get("kind") if workload else "workload"
        return (
            f"run {run.run_id} failed: {kind} {cond.get('reason', 'Failed')}: "
            f"{cond.get('message', 'no message')}",
            [],
            {},
        )
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
    fields = {
        "rank": c.rank,
        "pod": c.pod,
        "node": c.node,
        "exit_status": c.exit_code,
        "global_rank": c.global_rank,
    }
    return f"run {run.run_id} failed: {verdict.text()}", tail, fields


async def gather_verdict(
    kc: KubeClient, namespace: str, pods: list[Obj], settings: WaitSettings
) -> tuple[Verdict | None, dict[str, str]]:
    """Read the evidence (the first failed pods' log tails for fault lines, the nodes the pods
    ran on) and attribute; also the log texts read, by pod."""
    by_name = {str(p["metadata"]["name"]): p for p in pods}
    infos = {n: pod_info(p) for n, p in by_name.items()}
    troubled = [n for n, i in infos.items() if i.problem is not None or lost(by_name[n])]
    troubled.sort(key=lambda n: str(_finished(infos[n]) or "~"))
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
        _nodes(kc, {i.node for i in infos.values() if i.node and i.phase != "Succeeded"}),
    )
    texts = {n: t for n, t in logs if t is not None}
    faults = [f for n, t in texts.items() for f in parse_faults(t, n)]
    rdzv = next((r for t in texts.values() if (r := parse_rendezvous(t))), None)
    return attribute(pods, faults=faults, nodes=nodes, rendezvous=rdzv), texts


def _finished(info: PodInfo) -> str | None:
    return info.problem.finished_at if info.problem else None


async def _nodes(kc: KubeClient, names: set[str]) -> dict[str, Obj | None]:
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


async def _scheduler_message(kc: KubeClient, namespace: str, pod: PodInfo) -> str:
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


class _Ender:
    """Ends a failed run as `Ending` says and words what it did."""

    def __init__(
        self,
        kc: KubeClient,
        namespace: str,
        run_id: str,
        ending: Ending,
        settings: WaitSettings,
    ) -> None:
        self.kc, self.namespace, self.run_id = kc, namespace, run_id
        self.ending, self.settings = ending, settings

    async def __call__(
        self, failure: RunFailed, workload: Obj | None, tail: list[str]
    ) -> RunFailed:
        headline = str(failure)
        try:
            note = await self._end(headline, workload)
        except ClusterError as e:
            note = f"(could not end it: {e}; `nccl-k8s cleanup --run {self.run_id}` removes it)"
        failure.args = ("\n".join([f"{headline} {note}".rstrip(), *tail]),)
        return failure

    async def _end(self, why: str, workload: Obj | None) -> str:
        rid, ns = self.run_id, self.namespace
        if self.ending.delete is not None:
            gone = await delete_created(self.kc, ns, self.ending.delete)
            workloads = {c.uid for c in self.ending.delete if c.kind in WORKLOADS}
            left = await wait_pods_gone(
                self.kc,
                ns,
                {rid},
                timeout_s=self.settings.end_timeout_s,
                watch=self.settings.watch,
                which=lambda pod: owned_by(pod, workloads),  # not a stranger's labelled pod
            )
            what = ", ".join(gone) if gone else "nothing (it was gone already)"
            pods = (
                "its pods are gone"
                if not left
                else f"{len(left)} pod(s) still terminating after "
                f"{self.settings.end_timeout_s:g}s ({', '.join(left[:4])})"
            )
            return (
                f"(deleted what this deploy created: {what}; {pods}. --keep-on-failure keeps a "
                "failed run's objects)"
            )
        keep = (
            f"its objects stay for `nccl-k8s status/logs --run {rid}`; `nccl-k8s cleanup --run "
            f"{rid}` removes them"
        )
        if not self.ending.stop or workload is None:
            return f"({keep})"
        name = str(workload["metadata"]["name"])
        if workload.get("kind") == "StatefulSet":
            await self.kc.patch("StatefulSet", name, {"spec": {"replicas": 0}}, namespace=ns)
            return f"(scaled StatefulSet {name} to 0, its GPUs released; {keep})"
        if condition(workload, "Failed") or condition(workload, "Complete"):
            return f"(the Job has ended and stopped its pods; {keep})"
        await self.kc.patch(
            "Job",
            name,
            {
                "metadata": {"annotations": {STOPPED_ANNOTATION: why.splitlines()[0][:1000]}},
                "spec": {"activeDeadlineSeconds": 1},
            },
            namespace=ns,
        )
        return f"(stopped its ranks: Job {name} is failed and deletes its pods; {keep})"
