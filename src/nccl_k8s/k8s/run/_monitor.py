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

from nccl_k8s.errors import ClusterError, RunFailed
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
from nccl_k8s.k8s.run._progress import RankZeroLog, phase_of, stages
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
    before: Callable[[], Awaitable[str]] | None = None
    """Called before the run is ended, while all of it is still there (deploy
    --bundle-on-failure writes the debug bundle); what it returns is added to the message."""


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
    run = RunState(run_id)
    scheduler_checked = False
    failing_since: float | None = None
    end = _Ender(kc, namespace, run_id, ending, settings)
    # Rank 0's log, followed once its container runs (only when someone looks: the live summary
    # or a trace): what it measures, and when the ranks met (the rendezvous phase ends there).
    rank0 = RankZeroLog()
    want_log = progress is not None or tracing_enabled()
    following = False
    phases = Phases(run_id=run_id, namespace=namespace)
    phases.enter("schedule")
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
            first = next((p for p in current if p.rank == 0), None)
            if want_log and not following and first is not None:
                pod = run.pods.get(first.name)
                if pod is not None and started(pod):
                    following = True
                    tasks.append(
                        asyncio.create_task(_follow_rank0(kc, namespace, first.name, rank0, queue))
                    )
            phases.enter(phase_of(current, expected, joined=rank0.joined))
            if progress is not None:
                progress(
                    Progress(
                        run_id, namespace, elapsed, counts, expected, _note(workload),
                        stages=stages(current), rank0=rank0.text(),
                    )
                )  # fmt: skip

            gone = run.vanished()
            if gone is not None:
                raise RunFailed(gone)
            event = run.failed_create()
            if event is not None and workload is not None and len(current) < expected:
                raise await end(
                    failed_create(run_id, namespace, workload, event, security), workload, []
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
                    headline, tail, fields = await failure(kc, namespace, run, settings)
                    raise await end(RunFailed(headline, **fields), workload, tail)
                continue

            phase = run_phase(workload, infos) if workload else "Pending"
            if phase == "Succeeded" or (
                workload is not None
                and workload.get("kind") == "StatefulSet"
                and phase == "Running"
            ):
                return WaitOutcome(run_id, namespace, phase, _took(workload, elapsed), current)

            waited = await out_of_patience(kc, namespace, run, current, now, settings)
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
                absent = await check_scheduled(kc, namespace, run_id, workload, current, elapsed)
                if absent is not None:
                    raise await end(absent, workload, [])
    except BaseException as e:
        phases.close(e)
        raise
    finally:
        phases.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


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
    ) -> None:
        self.kc, self.namespace, self.run_id = kc, namespace, run_id
        self.ending, self.settings = ending, settings

    async def __call__(
        self, failure: RunFailed, workload: Obj | None, tail: list[str]
    ) -> RunFailed:
        headline = str(failure)
        kept = ""
        if self.ending.before is not None:
            try:
                kept = await self.ending.before()
            except (ClusterError, OSError) as e:
                kept = f"(no debug bundle: {e})"
        try:
            note = await self._end(headline, workload)
        except ClusterError as e:
            note = f"(could not end it: {e}; `nccl-k8s cleanup --run {self.run_id}` removes it)"
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
