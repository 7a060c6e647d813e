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
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from nccl_k8s.errors import ClusterError, FailureReason, RunFailed
from nccl_k8s.k8s.api._client import ClientSettings, KubeClient
from nccl_k8s.k8s.api._sync import run_sync
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.rendering._names import CONTAINER_NAME, STOPPED_ANNOTATION
from nccl_k8s.k8s.run._culprit import (
    lost,
    started,
)
from nccl_k8s.k8s.run._outcomes import Created, Progress, ProgressFn, WaitOutcome
from nccl_k8s.k8s.run._plumbing import (
    WORKLOADS,
    ListWatch,
    delete_created,
    get_workload,
    namespace_of,
    no_run,
    owned_by,
    resolve_run,
    run_labels,
    wait_pods_gone,
)
from nccl_k8s.k8s.run._pods import (
    PodInfo,
    condition,
    latest_per_rank,
    phase_counts,
    pod_info,
    run_phase,
)
from nccl_k8s.k8s.run._progress import RankZeroLog, pending_reasons, phase_of, stages
from nccl_k8s.k8s.run._settings import WaitSettings
from nccl_k8s.k8s.run._tracing import Phases, span
from nccl_k8s.k8s.run._tracing import enabled as tracing_enabled
from nccl_k8s.k8s.run._verdicts import (
    RunState,
    check_scheduled,
    failed_create,
    failure,
    out_of_patience,
)
from nccl_k8s.k8s.run._watch import Update, informer, within


@dataclasses.dataclass(frozen=True)
class Ending:
    """What follow_run does to a run it has found failed, so that no rank keeps holding GPUs."""

    stop: bool = False
    """Stop the ranks still there: the Job is made to fail (activeDeadlineSeconds), a
    StatefulSet scaled to zero; the objects stay for status and logs."""
    delete: Sequence[Created] | None = None
    """Delete these instead (what this deploy created, each by uid), then wait until the
    run's pods are gone."""
    before: Callable[[Seen], Awaitable[str]] | None = None
    """Called before the run is ended, while all of it is still there (deploy
    --bundle-on-failure writes the debug bundle, and it keeps the measured rows), with what
    the monitor saw; what it returns is added to the message (its first line to the
    headline, its other lines after it)."""


@dataclasses.dataclass(frozen=True)
class Seen:
    """What the monitor saw of a failed run, for `Ending.before`: pods the Job has deleted by
    then (the ones still running when it failed, the culprit among them at times) are here."""

    failure: RunFailed
    tail: list[str]
    """The culprit's last log lines as the failure message quotes them (a header line, then
    the lines indented by two spaces); empty when none were read."""
    pods: dict[str, Obj]
    """Every pod seen, by name, as last seen."""


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
        with span("wait", run_id=rid, namespace=ns):
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
    f = _Follower(kc, namespace, run_id, expected, settings, progress, ending or Ending())
    f.security = security
    labels = run_labels(run_id)
    sources: list[tuple[str, ListWatch, bool]] = [
        (kind, ListWatch(kc, kind, namespace, labels), False)
        for kind in ("Pod", "Job", "StatefulSet")
    ]
    events = ListWatch(kc, "Event", namespace, {}, fields={"involvedObject.name": run_id})
    sources.append(("Event", events, True))
    f.tasks = [
        asyncio.create_task(_pump(name, informer(src, settings.watch), f.queue, optional=opt))
        for name, src, opt in sources
    ]
    f.phases.enter("schedule")
    try:
        while True:
            try:
                source, update = await within(f.queue.get(), settings.tick_s)
            except asyncio.TimeoutError:
                source, update = "tick", None
            if source == "error":
                raise update
            if update is not None:
                f.run.take(source, update)
            outcome = await f.step()
            if outcome is not None:
                return outcome
    except BaseException as e:
        f.phases.close(e)
        raise
    finally:
        f.phases.close()
        for task in f.tasks:
            task.cancel()
        await asyncio.gather(*f.tasks, return_exceptions=True)


class _Follower:
    """follow_run's state between updates, and what it decides on each (`step`)."""

    def __init__(
        self,
        kc: KubeClient,
        namespace: str,
        run_id: str,
        expected: int,
        settings: WaitSettings,
        progress: ProgressFn | None,
        ending: Ending,
    ) -> None:
        self.kc, self.namespace, self.run_id = kc, namespace, run_id
        self.expected, self.settings, self.progress = expected, settings, progress
        self.security: str | None = None
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.tasks: list[asyncio.Task[None]] = []
        self.start = time.monotonic()
        self.run = RunState(run_id)
        self.scheduler_checked = False
        self.failing_since: float | None = None
        self.end = _Ender(kc, namespace, run_id, ending, settings, self.run)
        # Rank 0's log, followed once its container runs (only when someone looks: the live
        # summary or a trace): what it measures, and when the ranks met (the rendezvous phase
        # ends there).
        self.rank0 = RankZeroLog()
        self.want_log = progress is not None or tracing_enabled()
        self.following = False
        self.phases = Phases(run_id=run_id, namespace=namespace)

    async def step(self) -> WaitOutcome | None:
        """Look at the run as it is now: the outcome when it succeeded, None to go on
        waiting; RunFailed (the run ended as `Ending` says) when it failed or patience ran
        out."""
        now = time.monotonic()
        elapsed = now - self.start
        infos = [pod_info(p) for p in self.run.pods.values()]
        current = latest_per_rank(infos)
        workload = self.run.workload()
        counts = phase_counts(current)
        self._observe(current, workload, counts, elapsed)
        if await self._failing(current, workload, now):
            return None  # it is ended once the failure has settled
        phase = run_phase(workload, infos) if workload else "Pending"
        if phase == "Succeeded" or (
            workload is not None and workload.get("kind") == "StatefulSet" and phase == "Running"
        ):
            return WaitOutcome(
                self.run_id, self.namespace, phase, _took(workload, elapsed), current
            )
        await self._check_patience(current, workload, counts, now, elapsed)
        return None

    def _observe(
        self, current: list[PodInfo], workload: Obj | None, counts: dict[str, int], elapsed: float
    ) -> None:
        """Follow rank 0's log once it runs, enter the trace's phase, tell the live summary."""
        first = next((p for p in current if p.rank == 0), None)
        if self.want_log and not self.following and first is not None:
            pod = self.run.pods.get(first.name)
            if pod is not None and started(pod):
                self.following = True
                follow = _follow_rank0(self.kc, self.namespace, first.name, self.rank0, self.queue)
                self.tasks.append(asyncio.create_task(follow))
        self.phases.enter(phase_of(current, self.expected, joined=self.rank0.joined))
        if self.progress is not None:
            self.progress(
                Progress(
                    self.run_id, self.namespace, elapsed, counts, self.expected, _note(workload),
                    stages=stages(current), rank0=self.rank0.text(),
                    pending=pending_reasons(current),
                )
            )  # fmt: skip

    async def _failing(self, current: list[PodInfo], workload: Obj | None, now: float) -> bool:
        """Raise when the run is gone or has failed (a failed rank, a lost member, the Job's
        Failed condition) for `failure_settle_s` (counted from the first failure seen);
        whether it is failing now."""
        gone = self.run.vanished()
        if gone is not None:
            raise RunFailed(gone, reason=FailureReason.DELETED)
        event = self.run.failed_create()
        if event is not None and workload is not None and len(current) < self.expected:
            refused = failed_create(self.run_id, self.namespace, workload, event, self.security)
            raise await self.end(refused, workload, [])
        is_job = workload is not None and workload.get("kind") == "Job"
        failed = [p for p in current if _fatal(p, workload)]
        lost_members = [
            n for n, p in self.run.seen.items() if is_job and started(p) and lost(p) is not None
        ]
        job_failed = workload is not None and condition(workload, "Failed") is not None
        if not (failed or job_failed or lost_members):
            return False
        if self.failing_since is None:
            self.failing_since = now
        if now - self.failing_since >= self.settings.failure_settle_s or job_failed:
            verdict, tail = await failure(self.kc, self.namespace, self.run, self.settings)
            raise await self.end(verdict, workload, tail)
        return True

    async def _check_patience(
        self,
        current: list[PodInfo],
        workload: Obj | None,
        counts: dict[str, int],
        now: float,
        elapsed: float,
    ) -> None:
        """Raise when a patience ran out: a pod's, --timeout's, or no scheduler at all."""
        rid, settings = self.run_id, self.settings
        waited = await out_of_patience(self.kc, self.namespace, self.run, current, now, settings)
        if waited is not None:
            raise await self.end(waited, workload, [])
        if settings.timeout_s is not None and elapsed >= settings.timeout_s:
            raise RunFailed(
                f"run {rid} has not finished after {settings.timeout_s:g}s ("
                + ", ".join(f"{v} {k}" for k, v in counts.items() if v)
                + f"); it keeps running: `nccl-k8s wait --run {rid}` follows it again, "
                f"`nccl-k8s status --run {rid}`, `nccl-k8s cleanup --run {rid}`",
                reason=FailureReason.TIMED_OUT,
            )
        check_at = min(settings.scheduler_check_s, settings.schedule_timeout_s)
        if not self.scheduler_checked and elapsed >= check_at:
            self.scheduler_checked = True
            absent = await check_scheduled(self.kc, self.namespace, rid, workload, current, elapsed)
            if absent is not None:
                raise await self.end(absent, workload, [])


async def _follow_rank0(
    kc: KubeClient, namespace: str, pod: str, log: RankZeroLog, queue: asyncio.Queue[Any]
) -> None:
    """Feed rank 0's log to `log` from its last lines on; a change wakes the waiter. Best
    effort: the summary goes on without it when the stream fails or ends."""
    with contextlib.suppress(Exception):
        async for line in kc.follow_logs(
            pod, namespace=namespace, container=CONTAINER_NAME, tail_lines=RANK0_TAIL_LINES
        ):
            if log.feed(line.rstrip("\n")):
                await queue.put(("log", None))


#: Lines of rank 0's log read when following starts (a `wait` re-attached to a long run).
RANK0_TAIL_LINES = 200


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


class _Ender:
    """Ends a failed run as `Ending` says and words what it did."""

    def __init__(
        self,
        kc: KubeClient,
        namespace: str,
        run_id: str,
        ending: Ending,
        settings: WaitSettings,
        run: RunState,
    ) -> None:
        self.kc, self.namespace, self.run_id = kc, namespace, run_id
        self.ending, self.settings, self.run = ending, settings, run

    async def __call__(
        self, failure: RunFailed, workload: Obj | None, tail: list[str]
    ) -> RunFailed:
        headline = str(failure)
        kept = ""
        if self.ending.before is not None:
            try:
                kept = await self.ending.before(Seen(failure, tail, dict(self.run.seen)))
            except (ClusterError, OSError) as e:
                kept = f"(no debug bundle: {e})"
        try:
            note = await self._end(headline, workload)
        except ClusterError as e:
            note = f"(could not end it: {e}; `nccl-k8s cleanup --run {self.run_id}` removes it)"
        # Last on the first line: a hook's further lines (a verdict each) then follow it.
        first = " ".join(part for part in (headline, note, kept) if part)
        failure.args = ("\n".join([first, *tail]),)
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
