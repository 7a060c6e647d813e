"""A run on a cluster, from deploy to cleanup: deploy, wait, status, logs, results, cleanup, list.

Every function takes the run's coordinates (client settings, namespace, run id; None means the
latest run in the namespace) and returns plain dataclasses the CLI prints; failures are our own
errors (`RunFailed` names rank, pod, node and reason; `ClusterError`s come translated from
k8s.client, the only module that talks HTTP). The public functions are synchronous (each runs one
asyncio loop); the work inside is concurrent where it pays: log collection from many pods, the pod
and workload watches of `wait`.

Selection is by label only: `app.kubernetes.io/name=nccl-k8s`, `app.kubernetes.io/managed-by=
nccl-k8s` and `app.kubernetes.io/instance=<run-id>`; nothing without them is read, changed or
deleted.

Rank: a pod's rank is its node rank (the Job completion index, the StatefulSet ordinal); its GPUs
are the global ranks rank*G .. rank*G+G-1.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import functools
import re
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from nccl_k8s.errors import (
    ClusterError,
    Conflict,
    Forbidden,
    NotFound,
    ResultsError,
    RunFailed,
    UsageError,
)
from nccl_k8s.k8s.client import ClientSettings, Kind, KubeClient
from nccl_k8s.k8s.manifests import APP_NAME, CONTAINER_NAME, attach_owner, render
from nccl_k8s.k8s.watch import Update, WatchSettings, informer, within
from nccl_k8s.spec import LABEL_INSTANCE, LABEL_MANAGED_BY, LABEL_NAME, RunSpec

Obj = dict[str, Any]
T = TypeVar("T")

PodPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"]
PHASES: tuple[PodPhase, ...] = ("Pending", "Running", "Succeeded", "Failed")

#: Waiting reasons that will not resolve by waiting: the run has failed.
FATAL_WAITING = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "CrashLoopBackOff",
    }
)
_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
_POD_INDEX = "apps.kubernetes.io/pod-index"
_WORKLOADS: tuple[Kind, ...] = ("Job", "StatefulSet")
#: Delete order: the workload first (its pods go with it), then what it used.
_RUN_KINDS: tuple[Kind, ...] = ("Job", "StatefulSet", "Service", "ConfigMap")


# ---- settings ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class WaitSettings:
    """How `deploy --wait` and `cleanup` wait."""

    timeout_s: float | None = None
    """--timeout: give up (exit 1) when the run has not ended by then; None waits for the Job's
    own activeDeadlineSeconds."""
    schedule_timeout_s: float = 60.0
    """Seconds pods may sit with no scheduler touching them (no binding, no PodScheduled
    condition, no scheduling event) before deploy says no scheduler has picked them up. A busy
    default scheduler answers within seconds; a minute is far past that."""
    failure_log_lines: int = 20
    """Last log lines shown for a rank that exited non-zero."""
    failure_settle_s: float = 0.5
    """After the first failure, how long to gather the others (a killed rank takes its peers
    down within moments) before naming them; the first is still named well within 10 s."""
    tick_s: float = 1.0
    """How often the live summary's clock and the deadlines are checked (a local timer, not a
    request: the API is only watched)."""
    watch: WatchSettings = dataclasses.field(default_factory=WatchSettings)
    """The watches' own patience (inactivity, reconnects)."""


# ---- pods as the CLI shows them (pure) -----------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Problem:
    """Why a pod will not succeed."""

    reason: str
    """Kubernetes' word for it: Unschedulable, ErrImagePull, OOMKilled, Error, Evicted ..."""
    message: str
    """What to tell the user (the scheduler's message, the exit code and signal ...)."""
    exit_code: int | None = None
    finished_at: str | None = None


@dataclasses.dataclass(frozen=True)
class PodInfo:
    """One pod, as `status` shows it."""

    name: str
    rank: int | None
    node: str | None
    phase: str
    restarts: int
    created: str | None
    reason: str | None
    """Why it is not (yet) fine: a waiting or terminated reason, Unschedulable, ...; None when
    nothing is wrong."""
    message: str | None
    scheduler: str
    problem: Problem | None = None
    deleting: bool = False

    def age_s(self, now: datetime.datetime | None = None) -> float | None:
        if not self.created:
            return None
        start = _parse_time(self.created)
        now = now or datetime.datetime.now(datetime.timezone.utc)
        return max(0.0, (now - start).total_seconds())

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.pop("problem")
        out["age_s"] = self.age_s()
        out["exit_code"] = self.problem.exit_code if self.problem else None
        return out


def _parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def pod_rank(pod: Obj) -> int | None:
    meta = pod.get("metadata", {})
    for source in (meta.get("annotations") or {}, meta.get("labels") or {}):
        for key in (_COMPLETION_INDEX, _POD_INDEX):
            value = source.get(key)
            if value is not None and str(value).isdigit():
                return int(value)
    return None


def _signal_name(code: int) -> str:
    if code > 128:
        with contextlib.suppress(ValueError):
            return f" ({signal.Signals(code - 128).name})"
    return ""


def pod_problem(pod: Obj) -> Problem | None:
    """Why this pod has failed or cannot start, or None while it may still succeed."""
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        waiting = state.get("waiting") or {}
        reason = waiting.get("reason")
        if reason in FATAL_WAITING:
            message = waiting.get("message") or reason
            last = (cs.get("lastState") or {}).get("terminated") or {}
            if reason == "CrashLoopBackOff" and last.get("exitCode") is not None:
                message = f"restarting after exit code {last['exitCode']}; {message}"
            return Problem(reason, f"{reason}: {message}")
        term = state.get("terminated") or {}
        code = term.get("exitCode")
        if term and (term.get("reason") == "OOMKilled" or (code is not None and code != 0)):
            reason = term.get("reason") or "Error"
            if reason == "OOMKilled":
                text = "OOMKilled: the container used more memory than its limit"
            else:
                text = f"exit code {code}{_signal_name(int(code or 0))}"
            return Problem(reason, text, exit_code=code, finished_at=term.get("finishedAt"))
    if status.get("phase") == "Failed":
        reason = status.get("reason") or "Failed"
        return Problem(reason, f"{reason}: {status.get('message') or 'the pod failed'}")
    for cond in status.get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            return Problem("Unschedulable", cond.get("message") or "no node fits the pod")
    return None


def _pending_reason(pod: Obj) -> tuple[str | None, str | None]:
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return waiting["reason"], waiting.get("message")
    if not (pod.get("spec") or {}).get("nodeName"):
        return "NotScheduled", None
    return None, None


def pod_info(pod: Obj) -> PodInfo:
    meta = pod.get("metadata", {})
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    problem = pod_problem(pod)
    restarts = sum(int(cs.get("restartCount") or 0) for cs in status.get("containerStatuses") or [])
    phase = str(status.get("phase") or "Pending")
    reason: str | None
    message: str | None
    if problem is not None:
        reason, message = problem.reason, problem.message
    elif phase == "Pending":
        reason, message = _pending_reason(pod)
    else:
        reason, message = None, None
    return PodInfo(
        name=str(meta.get("name")),
        rank=pod_rank(pod),
        node=spec.get("nodeName"),
        phase=phase,
        restarts=restarts,
        created=meta.get("creationTimestamp"),
        reason=reason,
        message=message,
        scheduler=str(spec.get("schedulerName") or "default-scheduler"),
        problem=problem,
        deleting=bool(meta.get("deletionTimestamp")),
    )


def _rank_key(p: PodInfo) -> tuple[int, str, str]:
    return (p.rank if p.rank is not None else 1 << 30, p.created or "", p.name)


def latest_per_rank(pods: Iterable[PodInfo]) -> list[PodInfo]:
    """One pod per rank (the newest: a Job replaces a pod lost to a disruption), by rank."""
    best: dict[int | str, PodInfo] = {}
    for p in sorted(pods, key=_rank_key):
        best[p.rank if p.rank is not None else p.name] = p
    return sorted(best.values(), key=_rank_key)


def phase_counts(pods: Iterable[PodInfo]) -> dict[str, int]:
    counts: dict[str, int] = dict.fromkeys(PHASES, 0)
    for p in pods:
        counts[p.phase if p.phase in counts else "Pending"] += 1
    return counts


def _condition(obj: Obj | None, type_: str) -> Obj | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return dict(cond)
    return None


def run_phase(workload: Obj | None, pods: Sequence[PodInfo]) -> str:
    """Pending, Running, Succeeded or Failed for a Job; Pending, Running or Degraded for a
    StatefulSet; Orphaned when the workload is gone but objects remain."""
    if workload is None:
        return "Orphaned"
    if workload.get("kind") == "Job":
        if _condition(workload, "Complete") or _condition(workload, "SuccessCriteriaMet"):
            return "Succeeded"
        if _condition(workload, "Failed") or _condition(workload, "FailureTarget"):
            return "Failed"
        if _condition(workload, "Suspended"):
            return "Suspended"
        current = latest_per_rank(pods)
        problems = [p.problem for p in current if p.problem]
        if problems and all(x.reason == "Unschedulable" for x in problems):
            return "Unschedulable"
        if problems:
            return "Failing"
        if any(p.phase == "Running" for p in current):
            return "Running"
        return "Pending"
    replicas = int((workload.get("spec") or {}).get("replicas") or 0)
    ready = int((workload.get("status") or {}).get("readyReplicas") or 0)
    running = sum(1 for p in latest_per_rank(pods) if p.phase == "Running")
    if replicas and (ready >= replicas or running >= replicas):
        return "Running"
    if any(p.problem for p in pods):
        return "Degraded"
    return "Pending"


# ---- results -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RunStatus:
    run_id: str
    namespace: str
    kind: str | None
    phase: str
    detail: str | None
    created: str | None
    pods: list[PodInfo]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "namespace": self.namespace,
            "workload": self.kind,
            "phase": self.phase,
            "detail": self.detail,
            "created": self.created,
            "pods": [p.to_dict() for p in self.pods],
        }


@dataclasses.dataclass(frozen=True)
class RunSummary:
    run_id: str
    kind: str | None
    phase: str
    created: str | None
    pods: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Progress:
    """What the live summary shows."""

    run_id: str
    namespace: str
    elapsed_s: float
    counts: dict[str, int]
    expected: int
    note: str | None = None


@dataclasses.dataclass(frozen=True)
class Deployed:
    run_id: str
    namespace: str
    objects: list[str]
    """`Kind/name` of every object applied, in order."""
    created_namespace: bool = False


@dataclasses.dataclass(frozen=True)
class WaitOutcome:
    run_id: str
    namespace: str
    phase: str
    elapsed_s: float
    pods: list[PodInfo]


@dataclasses.dataclass(frozen=True)
class Collected:
    run_id: str
    namespace: str
    run: Any
    """The merged nccl_k8s.results Run."""
    results_path: Path
    log_dir: Path
    pods: int
    diagnosis: Any
    """nccl_k8s.results Diagnosis of the pods' NCCL lines (None when there were none)."""
    elapsed_s: float


@dataclasses.dataclass(frozen=True)
class Cleaned:
    namespace: str
    run_ids: list[str]
    deleted: list[str]
    """`Kind/name` of every object deleted."""
    elapsed_s: float


ProgressFn = Callable[[Progress], None]


# ---- plumbing ------------------------------------------------------------------------------


def _run(factory: Callable[[KubeClient], Awaitable[T]], settings: ClientSettings) -> T:
    """Connect (reading the kubeconfig sends nothing), run `factory(client)`, close."""
    client = KubeClient.connect(settings)

    async def main() -> T:
        async with client:
            return await factory(client)

    return asyncio.run(main())


def run_labels(run_id: str | None = None) -> dict[str, str]:
    labels = {LABEL_NAME: APP_NAME, LABEL_MANAGED_BY: APP_NAME}
    if run_id is not None:
        labels[LABEL_INSTANCE] = run_id
    return labels


class _ListWatch:
    """A WatchSource over the client: one kind, one namespace, our labels."""

    def __init__(self, kc: KubeClient, kind: Kind, namespace: str, labels: dict[str, str]):
        self.kc, self.kind, self.namespace, self.labels = kc, kind, namespace, labels

    async def list(self) -> tuple[list[Obj], str]:
        return await self.kc.list(self.kind, namespace=self.namespace, labels=self.labels)

    def watch(self, resource_version: str) -> AsyncIterator[tuple[str, Obj]]:
        return self.kc.watch(
            self.kind,
            namespace=self.namespace,
            labels=self.labels,
            resource_version=resource_version,
            server_timeout_s=300,
        )


async def _namespace(kc: KubeClient, namespace: str | None) -> str:
    return namespace or kc.namespace


async def _runs(kc: KubeClient, namespace: str) -> dict[str, dict[str, Obj]]:
    """run id -> {kind: object} for every labelled object of every run in the namespace."""
    found: dict[str, dict[str, Obj]] = {}
    lists = await asyncio.gather(
        *(kc.list(kind, namespace=namespace, labels=run_labels()) for kind in _RUN_KINDS)
    )
    for kind, (items, _) in zip(_RUN_KINDS, lists, strict=True):
        for obj in items:
            rid = (obj["metadata"].get("labels") or {}).get(LABEL_INSTANCE)
            if rid:
                found.setdefault(rid, {})[kind] = obj
    return found


def _created(objs: dict[str, Obj]) -> str:
    return max(str(o["metadata"].get("creationTimestamp") or "") for o in objs.values())


async def _resolve_run(kc: KubeClient, namespace: str, run_id: str | None) -> str:
    """The given run id, or the latest run in the namespace; NotFound when there is none."""
    if run_id is not None:
        return run_id
    runs = await _runs(kc, namespace)
    if not runs:
        raise NotFound(
            f"no nccl-k8s runs in namespace {namespace} (deploy one, or pass -n/--namespace)",
            namespace=namespace,
            server=kc.server,
        )
    return max(runs, key=lambda rid: (_created(runs[rid]), rid))


async def _workload(kc: KubeClient, namespace: str, run_id: str) -> Obj | None:
    for kind in _WORKLOADS:
        items, _ = await kc.list(kind, namespace=namespace, labels=run_labels(run_id))
        if items:
            return items[0]
    return None


async def _pods(kc: KubeClient, namespace: str, run_id: str) -> list[PodInfo]:
    items, _ = await kc.list("Pod", namespace=namespace, labels=run_labels(run_id))
    return sorted((pod_info(p) for p in items), key=_rank_key)


def _no_run(kc: KubeClient, namespace: str, run_id: str) -> NotFound:
    return NotFound(
        f"no run {run_id} in namespace {namespace} (`nccl-k8s list -n {namespace}` shows the runs)",
        namespace=namespace,
        name=run_id,
        server=kc.server,
    )


# ---- deploy --------------------------------------------------------------------------------


def deploy(
    spec: RunSpec,
    *,
    client: ClientSettings,
    create_namespace: bool = False,
    wait: bool = True,
    wait_settings: WaitSettings | None = None,
    progress: ProgressFn | None = None,
    on_deployed: Callable[[Deployed], None] | None = None,
) -> tuple[Deployed, WaitOutcome | None]:
    """Apply the run's objects; with `wait`, follow it until it ends (RunFailed when it fails)."""

    async def main(kc: KubeClient) -> tuple[Deployed, WaitOutcome | None]:
        deployed = await _deploy(kc, spec, create_namespace=create_namespace)
        if on_deployed is not None:
            on_deployed(deployed)
        if not wait:
            return deployed, None
        outcome = await _wait(
            kc,
            deployed.namespace,
            spec.run_id,
            expected=spec.nodes,
            settings=wait_settings or WaitSettings(),
            progress=progress,
        )
        return deployed, outcome

    return _run(main, client)


async def _deploy(kc: KubeClient, spec: RunSpec, *, create_namespace: bool) -> Deployed:
    namespace = spec.namespace or kc.namespace
    spec = dataclasses.replace(spec, namespace=namespace)
    objs = render(spec)  # pure; same objects `render` prints

    # Everything that can be checked is checked before the first write.
    ns_known = True
    try:
        ns_obj = await kc.get("Namespace", namespace)
    except Forbidden:
        ns_known, ns_obj = False, None  # many users may not read namespaces; apply will tell
    must_create = ns_known and ns_obj is None
    if must_create and not create_namespace:
        raise UsageError(
            f"namespace {namespace} does not exist on {kc.server}: create it (kubectl create "
            "namespace ...) or pass --create-namespace",
            key="--namespace",
        )
    if not must_create:
        taken = await asyncio.gather(
            *(kc.get(o["kind"], o["metadata"]["name"], namespace=namespace) for o in objs)
        )
        clash = [o for o, got in zip(objs, taken, strict=True) if got is not None]
        if clash:
            names = ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in clash)
            raise Conflict(
                f"run {spec.run_id} already exists in namespace {namespace}: use --run-id or "
                f"cleanup ({names})",
                status=409,
                verb="apply",
                namespace=namespace,
                name=spec.run_id,
                server=kc.server,
            )

    created: list[Obj] = []
    created_ns = False
    try:
        if must_create:
            await kc.create_namespace(namespace)
            created_ns = True
        applied: Obj | None = None
        for obj in objs:
            applied = await kc.apply(obj)
            created.append(obj)
        assert applied is not None  # render always ends with the workload
        # The ConfigMap and Service now get an ownerReference to the workload (whose uid only
        # exists now), so deleting the workload cascades to them.
        for obj in attach_owner(objs, applied)[:-1]:
            await kc.apply(obj, force=True)
    except BaseException:
        await _undo(kc, namespace, created, created_ns)
        raise
    return Deployed(
        run_id=spec.run_id,
        namespace=namespace,
        objects=[f"{o['kind']}/{o['metadata']['name']}" for o in objs],
        created_namespace=created_ns,
    )


async def _undo(kc: KubeClient, namespace: str, created: list[Obj], created_ns: bool) -> None:
    """Remove what a failed deploy created, newest first; a failure here must not hide the
    original error, so each delete is best effort."""
    for obj in reversed(created):
        with contextlib.suppress(ClusterError):
            await kc.delete(obj["kind"], obj["metadata"]["name"], namespace=namespace)
    if created_ns:
        with contextlib.suppress(ClusterError):
            await kc.delete("Namespace", namespace)


# ---- wait ----------------------------------------------------------------------------------


def wait_run(
    run_id: str | None = None,
    *,
    client: ClientSettings,
    namespace: str | None = None,
    settings: WaitSettings | None = None,
    progress: ProgressFn | None = None,
) -> WaitOutcome:
    """Follow an existing run until it ends (see `deploy`)."""

    async def main(kc: KubeClient) -> WaitOutcome:
        ns = await _namespace(kc, namespace)
        rid = await _resolve_run(kc, ns, run_id)
        workload = await _workload(kc, ns, rid)
        if workload is None:
            raise _no_run(kc, ns, rid)
        spec = workload.get("spec") or {}
        expected = int(spec.get("completions") or spec.get("replicas") or 0)
        return await _wait(
            kc, ns, rid, expected=expected, settings=settings or WaitSettings(), progress=progress
        )

    return _run(main, client)


async def _pump(name: str, updates: AsyncIterator[Update], queue: asyncio.Queue[Any]) -> None:
    try:
        async with contextlib.aclosing(updates) as it:  # type: ignore[type-var]  # async generator
            async for update in it:
                await queue.put((name, update))
    except Exception as e:  # handed to the waiter, which re-raises it
        await queue.put(("error", e))


async def _wait(
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
                informer(_ListWatch(kc, kind, namespace, labels), settings.watch),
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
            job_failed = workload is not None and _condition(workload, "Failed")
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
        + _keep_note(run_id)
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
    failed.sort(key=lambda p: ((p.problem.finished_at if p.problem else None) or "", _rank_key(p)))
    unschedulable = [p for p in failed if p.problem and p.problem.reason == "Unschedulable"]
    if unschedulable:
        message = await _scheduler_message(kc, namespace, unschedulable[0])
        ranks = ", ".join(f"rank {_r(p)} (pod {p.name})" for p in unschedulable)
        return RunFailed(
            f"run {run_id} cannot be scheduled: {ranks}: Unschedulable: {message} "
            + _keep_note(run_id),
            rank=unschedulable[0].rank,
            pod=unschedulable[0].name,
        )
    if not failed:
        cond = _condition(workload, "Failed") or {}
        return RunFailed(
            f"run {run_id} failed: {workload.get('kind') if workload else 'workload'} "
            f"{cond.get('reason', 'Failed')}: {cond.get('message', 'no message')}"
        )
    first = failed[0]
    assert first.problem is not None
    lines = [
        f"run {run_id} failed: "
        + "; ".join(
            f"rank {_r(p)} (pod {p.name}, node {p.node or 'none'}): "
            f"{p.problem.message if p.problem else ''}"
            for p in failed
        )
        + " "
        + _keep_note(run_id)
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
                lines.append(f"last {settings.failure_log_lines} log lines of rank {_r(first)}:")
                lines += [f"  {line}" for line in tail.rstrip("\n").splitlines()]
    return RunFailed(
        "\n".join(lines),
        rank=first.rank,
        pod=first.name,
        node=first.node,
        exit_status=first.problem.exit_code,
    )


def _keep_note(run_id: str) -> str:
    return (
        f"(the run's objects stay for `nccl-k8s status/logs --run {run_id}`; "
        f"`nccl-k8s cleanup --run {run_id}` removes them)"
    )


def _r(p: PodInfo) -> str:
    return "?" if p.rank is None else str(p.rank)


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


# ---- status and list -----------------------------------------------------------------------


def status(
    run_id: str | None = None, *, client: ClientSettings, namespace: str | None = None
) -> RunStatus:
    async def main(kc: KubeClient) -> RunStatus:
        ns = await _namespace(kc, namespace)
        rid = await _resolve_run(kc, ns, run_id)
        workload, pods = await asyncio.gather(_workload(kc, ns, rid), _pods(kc, ns, rid))
        if workload is None and not pods:
            runs = await _runs(kc, ns)
            if rid not in runs:
                raise _no_run(kc, ns, rid)
        phase = run_phase(workload, pods)
        detail = None
        cond = _condition(workload, "Failed")
        if cond:
            detail = f"{cond.get('reason')}: {cond.get('message')}"
        created = (workload or {}).get("metadata", {}).get("creationTimestamp")
        return RunStatus(
            rid, ns, workload.get("kind") if workload else None, phase, detail, created, pods
        )

    return _run(main, client)


def list_runs(*, client: ClientSettings, namespace: str | None = None) -> list[RunSummary]:
    async def main(kc: KubeClient) -> list[RunSummary]:
        ns = await _namespace(kc, namespace)
        runs, (pods, _) = await asyncio.gather(
            _runs(kc, ns), kc.list("Pod", namespace=ns, labels=run_labels())
        )
        by_run: dict[str, list[PodInfo]] = {}
        for pod in pods:
            rid = (pod["metadata"].get("labels") or {}).get(LABEL_INSTANCE)
            if rid:
                by_run.setdefault(rid, []).append(pod_info(pod))
        out = []
        for rid, objs in runs.items():
            workload = objs.get("Job") or objs.get("StatefulSet")
            infos = by_run.get(rid, [])
            out.append(
                RunSummary(
                    rid,
                    workload.get("kind") if workload else None,
                    run_phase(workload, infos),
                    _created(objs),
                    phase_counts(latest_per_rank(infos)),
                )
            )
        return sorted(out, key=lambda r: (r.created or "", r.run_id))

    return _run(main, client)


# ---- logs ----------------------------------------------------------------------------------

LineFn = Callable[[int | None, str], None]


def logs(
    run_id: str | None = None,
    *,
    client: ClientSettings,
    namespace: str | None = None,
    rank: int | None = None,
    follow: bool = False,
    tail: int | None = None,
    on_line: LineFn,
    concurrency: int = 32,
) -> str:
    """Every pod's log (one pod per rank, the newest), each line handed to `on_line(rank, line)`:
    rank by rank, or interleaved as written with `follow`. Returns the run id."""

    async def main(kc: KubeClient) -> str:
        ns = await _namespace(kc, namespace)
        rid = await _resolve_run(kc, ns, run_id)
        pods = latest_per_rank(await _pods(kc, ns, rid))
        if rank is not None:
            pods = [p for p in pods if p.rank == rank]
            if not pods:
                raise NotFound(f"run {rid} has no pod of rank {rank}", namespace=ns, name=rid)
        if not pods:
            raise NotFound(f"run {rid} has no pods (yet)", namespace=ns, name=rid)
        if follow:
            await asyncio.gather(*(_follow(kc, ns, p, tail, on_line) for p in pods))
        else:
            texts = await _bounded(
                concurrency, [functools.partial(_fetch_or_reason, kc, ns, p, tail) for p in pods]
            )
            for p, text in zip(pods, texts, strict=True):
                for line in text.splitlines():
                    on_line(p.rank, line)
        return rid

    return _run(main, client)


async def _fetch_or_reason(kc: KubeClient, ns: str, pod: PodInfo, tail: int | None) -> str:
    try:
        return await kc.logs(pod.name, namespace=ns, container=CONTAINER_NAME, tail_lines=tail)
    except ClusterError as e:
        if e.status == 400:  # not started yet: say why
            return f"(no log: {pod.reason or pod.phase})"
        raise


async def _follow(kc: KubeClient, ns: str, pod: PodInfo, tail: int | None, on_line: LineFn) -> None:
    try:
        async for line in kc.follow_logs(
            pod.name, namespace=ns, container=CONTAINER_NAME, tail_lines=tail
        ):
            on_line(pod.rank, line.rstrip("\n"))
    except ClusterError as e:
        if e.status != 400:
            raise
        on_line(pod.rank, f"(no log: {pod.reason or pod.phase})")


async def _bounded(limit: int, factories: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
    """Run the coroutines, at most `limit` at a time, results in order."""
    sem = asyncio.Semaphore(limit)

    async def one(f: Callable[[], Awaitable[T]]) -> T:
        async with sem:
            return await f()

    return list(await asyncio.gather(*(one(f) for f in factories)))


# ---- results -------------------------------------------------------------------------------

_NCCL_LINE = re.compile(r"^.*NCCL (?:INFO|WARN).*$", re.MULTILINE)


def collect(
    run_id: str | None = None,
    *,
    client: ClientSettings,
    namespace: str | None = None,
    runs_dir: Path | None = None,
    concurrency: int = 32,
) -> Collected:
    """Fetch every pod's log concurrently (at most `concurrency` at once) into
    `<runs_dir>/<run-id>/logs/`, merge the engine's result lines into `results.json` there, and
    diagnose the NCCL lines. A whole log is in memory only while it is in flight (at most
    `concurrency` of them); afterwards only its result and NCCL lines are kept."""
    from nccl_k8s.results import RESULT_PREFIX, collect_results, diagnose_text
    from nccl_k8s.results.store import runs_dir as default_runs_dir

    result_line = re.compile(f"^.*{re.escape(RESULT_PREFIX)}.*$", re.MULTILINE)

    async def main(kc: KubeClient) -> Collected:
        start = time.monotonic()
        ns = await _namespace(kc, namespace)
        rid = await _resolve_run(kc, ns, run_id)
        pods = latest_per_rank(await _pods(kc, ns, rid))
        if not pods:
            raise _no_run(kc, ns, rid)
        base = (runs_dir if runs_dir is not None else default_runs_dir()) / rid
        log_dir = base / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)

        async def one(p: PodInfo) -> tuple[list[str], list[str]]:
            try:
                text = await kc.logs(p.name, namespace=ns, container=CONTAINER_NAME)
            except ClusterError as e:
                if e.status == 400:  # never started: no log to collect
                    return [], []
                raise
            name = f"rank-{_r(p)}-{p.name}.log"
            await asyncio.to_thread((log_dir / name).write_text, text)
            # Whole-text regexes (C speed) rather than a Python loop over every line.
            results = result_line.findall(text) if RESULT_PREFIX in text else []
            nccl = _NCCL_LINE.findall(text) if "NCCL " in text else []
            return results, nccl

        parts = await _bounded(concurrency, [functools.partial(one, p) for p in pods])
        result_texts = ["\n".join(r) for r, _ in parts if r]
        if not result_texts:
            phase = run_phase(await _workload(kc, ns, rid), pods)
            raise ResultsError(
                f"run {rid} ({phase}): no result lines in the logs of its {len(pods)} pod(s) "
                f"(raw logs in {log_dir}); rank 0 prints them when its sweep ends",
                path=str(log_dir),
            )
        run, path = collect_results(
            result_texts, run_id=rid, out=base / "results.json", origin=f"run {rid}"
        )
        assert path is not None
        nccl_texts = ["\n".join(n) for _, n in parts if n]
        diagnosis = None
        if nccl_texts:
            with contextlib.suppress(ResultsError):
                diagnosis = diagnose_text(nccl_texts)
        return Collected(
            rid, ns, run, path, log_dir, len(pods), diagnosis, time.monotonic() - start
        )

    return _run(main, client)


def nccl_tests_table(run: Any) -> list[str]:
    """The run's rows as nccl-tests prints them: one table per op (and dtype/redop/root), out
    and in placements side by side, then the op's summary."""
    from nccl_k8s.bench.report import Cell, TableRow, footer_lines, row_line, table_header

    def cell(row: Any) -> Cell:
        nan = float("nan")
        return Cell(
            time_us=row.time_us,
            algbw=row.algbw,
            busbw=row.busbw,
            wrong=row.wrong,
            time_us_min=row.time_us_min or nan,
            time_us_max=row.time_us_max or nan,
        )

    out: list[str] = []
    for op in run.ops():
        rows = [r for r in run.rows if r.op == op]
        keys: dict[tuple[Any, ...], dict[str, Any]] = {}
        for r in rows:
            keys.setdefault((r.size_bytes, r.dtype, r.redop, r.root), {})[r.placement] = r
        out.append(f"# {op}")
        out += table_header()
        for (size, dtype, redop, root), places in keys.items():
            o = places.get("out") or places["in"]
            i = places.get("in") or o
            out.append(
                " "
                + row_line(
                    TableRow(
                        op=op,
                        size=size,
                        count=int(o.count or 0),
                        dtype=str(dtype or "-"),
                        redop=str(redop or "-"),
                        root=int(root if root is not None else -1),
                        out=cell(o),
                        inp=cell(i),
                    )
                )
            )
        summary = next((s for s in run.summaries if s.op == op), None)
        if summary is not None and summary.avg_busbw is not None:
            out += footer_lines(
                out_of_bounds=int(summary.out_of_bounds or 0),
                avg_busbw=summary.avg_busbw,
                min_busbw=None,
                program=op,
            )[:2]
        out.append("#")
    return out


# ---- cleanup -------------------------------------------------------------------------------


def cleanup(
    run_id: str | None = None,
    *,
    client: ClientSettings,
    namespace: str | None = None,
    all_runs: bool = False,
    timeout_s: float = 120.0,
    watch: WatchSettings | None = None,
) -> Cleaned:
    """Delete the run's labelled objects (every run's with `all_runs`), workload first, then wait
    by watch until their pods are gone. Objects without our labels are never touched."""

    async def main(kc: KubeClient) -> Cleaned:
        start = time.monotonic()
        ns = await _namespace(kc, namespace)
        runs = await _runs(kc, ns)
        if all_runs:
            rids = sorted(runs)
        else:
            rid = await _resolve_run(kc, ns, run_id)
            pods, _ = await kc.list("Pod", namespace=ns, labels=run_labels(rid))
            if rid not in runs and not pods:
                raise _no_run(kc, ns, rid)
            rids = [rid]
        deleted: list[str] = []
        for rid in rids:
            for kind in _RUN_KINDS:
                obj = runs.get(rid, {}).get(kind)
                if obj is not None:
                    # False: already gone with the workload (ownerReferences cascade).
                    await kc.delete(
                        kind, obj["metadata"]["name"], namespace=ns, propagation="Background"
                    )
                    deleted.append(f"{kind}/{obj['metadata']['name']}")
        labels = run_labels(rids[0]) if len(rids) == 1 else run_labels()
        await _wait_pods_gone(kc, ns, labels, set(rids), deleted, timeout_s, watch)
        return Cleaned(ns, rids, deleted, time.monotonic() - start)

    return _run(main, client)


async def _wait_pods_gone(
    kc: KubeClient,
    ns: str,
    labels: dict[str, str],
    rids: set[str],
    deleted: list[str],
    timeout_s: float,
    watch: WatchSettings | None,
) -> None:
    """Until no pod of the runs is left; pods the garbage collector has not reached (or that
    belong to no workload) are deleted here too."""
    if not rids:
        return
    asked: set[str] = set()

    def ours(pod: Obj) -> bool:
        return (pod["metadata"].get("labels") or {}).get(LABEL_INSTANCE) in rids

    async def until_gone() -> None:
        source = _ListWatch(kc, "Pod", ns, labels)
        async with contextlib.aclosing(informer(source, watch)) as updates:
            async for update in updates:
                left = [p for p in update.objects.values() if ours(p)]
                if not left:
                    return
                for pod in left:
                    name = pod["metadata"]["name"]
                    owned = pod["metadata"].get("ownerReferences")
                    if (
                        name not in asked
                        and not owned
                        and not pod["metadata"].get("deletionTimestamp")
                    ):
                        asked.add(name)
                        if await kc.delete("Pod", name, namespace=ns):
                            deleted.append(f"Pod/{name}")

    try:
        await within(until_gone(), timeout_s)
    except asyncio.TimeoutError:
        raise RunFailed(
            f"the pods of {', '.join(sorted(rids))} are still terminating after {timeout_s:g}s "
            "(a node may be unreachable); their objects are deleted"
        ) from None


__all__ = [
    "Cleaned",
    "Collected",
    "Deployed",
    "PodInfo",
    "Problem",
    "Progress",
    "RunStatus",
    "RunSummary",
    "WaitOutcome",
    "WaitSettings",
    "cleanup",
    "collect",
    "deploy",
    "latest_per_rank",
    "list_runs",
    "logs",
    "nccl_tests_table",
    "phase_counts",
    "pod_info",
    "pod_problem",
    "run_labels",
    "run_phase",
    "status",
    "wait_run",
]
