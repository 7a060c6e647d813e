"""Following a run until it ends: pod and workload watches, the live summary, and the one
message that names a failed run's culprit (rank, pod, node, reason, last log lines)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from nccl_k8s.errors import ClusterError, RunFailed
from nccl_k8s.k8s._client import ClientSettings, KubeClient
from nccl_k8s.k8s._manifests import CONTAINER_NAME
from nccl_k8s.k8s._outcomes import Progress, ProgressFn, WaitOutcome
from nccl_k8s.k8s._plumbing import (
    ListWatch,
    get_workload,
    keep_note,
    namespace_of,
    no_run,
    rank_text,
    resolve_run,
    run_labels,
    run_sync,
)
from nccl_k8s.k8s._pods import (
    PodInfo,
    condition,
    latest_per_rank,
    phase_counts,
    pod_info,
    rank_key,
    run_phase,
)
from nccl_k8s.k8s._settings import WaitSettings
from nccl_k8s.k8s._types import Obj
from nccl_k8s.k8s._watch import Update, informer, within


def wait(
    run_id: str | None = None,
    *,
    client: ClientSettings,
    namespace: str | None = None,
    settings: WaitSettings | None = None,
    progress: ProgressFn | None = None,
) -> WaitOutcome:
    """Follow an existing run until it ends (see `deploy`)."""

    async def main(kc: KubeClient) -> WaitOutcome:
        ns = await namespace_of(kc, namespace)
        rid = await resolve_run(kc, ns, run_id)
        workload = await get_workload(kc, ns, rid)
        if workload is None:
            raise no_run(kc, ns, rid)
        spec = workload.get("spec") or {}
        expected = int(spec.get("completions") or spec.get("replicas") or 0)
        return await follow_run(
            kc, ns, rid, expected=expected, settings=settings or WaitSettings(), progress=progress
        )

    return run_sync(main, client)


async def _pump(name: str, updates: AsyncIterator[Update], queue: asyncio.Queue[Any]) -> None:
    try:
        async with contextlib.aclosing(updates) as it:  # type: ignore[type-var]  # async generator
            async for update in it:
                await queue.put((name, update))
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
) -> WaitOutcome:
    labels = run_labels(run_id)
    queue: asyncio.Queue[Any] = asyncio.Queue()
    tasks = [
        asyncio.create_task(
            _pump(
                kind,
                informer(ListWatch(kc, kind, namespace, labels), settings.watch),
                queue,
            )
        )
        for kind in ("Pod", "Job", "StatefulSet")
    ]
    start = time.monotonic()
    pods: dict[str, Obj] = {}
    workloads: dict[str, Obj] = {}
    scheduler_checked = False
    failing_since: float | None = None
    try:
        while True:
            try:
                source, update = await within(queue.get(), settings.tick_s)
            except asyncio.TimeoutError:
                source, update = "tick", None
            if source == "error":
                raise update
            if source == "Pod":
                pods = update.objects
            elif source in ("Job", "StatefulSet") and (update.objects or source == "Job"):
                workloads[source] = next(iter(update.objects.values()), {})
            now = time.monotonic()
            elapsed = now - start
            infos = [pod_info(p) for p in pods.values()]
            current = latest_per_rank(infos)
            workload = workloads.get("Job") or workloads.get("StatefulSet") or None
            counts = phase_counts(current)
            note = _note(workload)
            if progress is not None:
                progress(Progress(run_id, namespace, elapsed, counts, expected, note))

            failed = [p for p in current if _fatal(p, workload)]
            job_failed = workload is not None and condition(workload, "Failed")
            if failed or job_failed:
                if failing_since is None:
                    failing_since = now
                if now - failing_since >= settings.failure_settle_s or job_failed:
                    raise await _failure(kc, namespace, run_id, workload, current, settings)
                continue
            phase = run_phase(workload, infos) if workload else "Pending"
            if phase == "Succeeded" or (
                workload is not None
                and workload.get("kind") == "StatefulSet"
                and phase == "Running"
            ):
                return WaitOutcome(run_id, namespace, phase, elapsed, current)
            if settings.timeout_s is not None and elapsed >= settings.timeout_s:
                raise RunFailed(
                    f"run {run_id} has not finished after {settings.timeout_s:g}s ("
                    + ", ".join(f"{v} {k}" for k, v in counts.items() if v)
                    + f"); it keeps running: `nccl-k8s status --run {run_id}`, `nccl-k8s cleanup "
                    f"--run {run_id}`"
                )
            if (
                not scheduler_checked
                and elapsed >= settings.schedule_timeout_s
                and source in ("tick", "Pod", "Job", "StatefulSet")
            ):
                scheduler_checked = True
                await _check_scheduled(kc, namespace, run_id, workload, current, elapsed)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _fatal(pod: PodInfo, workload: Obj | None) -> bool:
    """A problem that ends the run now. With --backoff-limit > 0 a rank that exited is retried
    by the Job, so only the Job's Failed condition ends the run then."""
    if pod.problem is None:
        return False
    retried = (
        workload is not None
        and workload.get("kind") == "Job"
        and int((workload.get("spec") or {}).get("backoffLimit") or 0) > 0
    )
    return not (retried and pod.problem.exit_code is not None)


def _note(workload: Obj | None) -> str | None:
    if workload is None:
        return "waiting for the workload"
    if (workload.get("spec") or {}).get("suspend"):
        return "suspended (waiting for admission, e.g. a Kueue queue)"
    return None


async def _check_scheduled(
    kc: KubeClient,
    namespace: str,
    run_id: str,
    workload: Obj | None,
    current: list[PodInfo],
    elapsed: float,
) -> None:
    """RunFailed when no scheduler has touched any pod of the run; once, after the timeout."""
    if not current:
        if workload is not None and not (workload.get("spec") or {}).get("suspend"):
            raise RunFailed(
                f"run {run_id}: {workload.get('kind')} {run_id} has created no pods after "
                f"{elapsed:.0f}s: is its controller running? (`kubectl describe "
                f"{str(workload.get('kind')).lower()} {run_id} -n {namespace}`)"
            )
        return
    if any(p.node or p.problem or p.phase != "Pending" for p in current):
        return
    # A scheduler that looked at a pod bound it, set PodScheduled, or at least left an event.
    names = {p.name for p in current}
    events, _ = await kc.list("Event", namespace=namespace, fields={"involvedObject.kind": "Pod"})
    if any((e.get("involvedObject") or {}).get("name") in names for e in events):
        return
    schedulers = sorted({p.scheduler for p in current})
    which = ", ".join(schedulers)
    raise RunFailed(
        f"run {run_id}: no scheduler has picked up its {len(current)} pod(s) after "
        f"{elapsed:.0f}s: none bound, no scheduling event. The pods ask for schedulerName "
        f"{which}: is it installed and running in this cluster? (pods: "
        + ", ".join(p.name for p in current[:4])
        + (", ..." if len(current) > 4 else "")
        + ") "
        + keep_note(run_id)
    )


async def _failure(
    kc: KubeClient,
    namespace: str,
    run_id: str,
    workload: Obj | None,
    current: list[PodInfo],
    settings: WaitSettings,
) -> RunFailed:
    """The RunFailed naming every failed pod: rank, pod, node, reason (and the last log lines of
    the first one that exited non-zero)."""
    failed = [p for p in current if p.problem is not None]
    # The first to fail caused the rest: order by when they ended, unscheduled ones first.
    failed.sort(key=lambda p: ((p.problem.finished_at if p.problem else None) or "", rank_key(p)))
    unschedulable = [p for p in failed if p.problem and p.problem.reason == "Unschedulable"]
    if unschedulable:
        message = await _scheduler_message(kc, namespace, unschedulable[0])
        ranks = ", ".join(f"rank {rank_text(p)} (pod {p.name})" for p in unschedulable)
        return RunFailed(
            f"run {run_id} cannot be scheduled: {ranks}: Unschedulable: {message} "
            + keep_note(run_id),
            rank=unschedulable[0].rank,
            pod=unschedulable[0].name,
        )
    if not failed:
        cond = condition(workload, "Failed") or {}
        return RunFailed(
            f"run {run_id} failed: {workload.get('kind') if workload else 'workload'} "
            f"{cond.get('reason', 'Failed')}: {cond.get('message', 'no message')}"
        )
    first = failed[0]
    assert first.problem is not None
    lines = [
        f"run {run_id} failed: "
        + "; ".join(
            f"rank {rank_text(p)} (pod {p.name}, node {p.node or 'none'}): "
            f"{p.problem.message if p.problem else ''}"
            for p in failed
        )
        + " "
        + keep_note(run_id)
    ]
    if first.problem.exit_code not in (None, 0) or first.problem.reason == "OOMKilled":
        with contextlib.suppress(ClusterError):
            tail = await kc.logs(
                first.name,
                namespace=namespace,
                container=CONTAINER_NAME,
                tail_lines=settings.failure_log_lines,
            )
            if tail.strip():
                lines.append(
                    f"last {settings.failure_log_lines} log lines of rank {rank_text(first)}:"
                )
                lines += [f"  {line}" for line in tail.rstrip("\n").splitlines()]
    return RunFailed(
        "\n".join(lines),
        rank=first.rank,
        pod=first.name,
        node=first.node,
        exit_status=first.problem.exit_code,
    )


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
