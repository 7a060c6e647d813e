"""Pods as the CLI shows them, and a run's phase from its workload and pods. Pure: no I/O.

Rank: a pod's rank is its node rank (the Job completion index, the StatefulSet ordinal); its
GPUs are the global ranks rank*G .. rank*G+G-1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import signal
from collections.abc import Iterable, Sequence
from typing import Any

from nccl_k8s.errors import CRASH_SIGNALS, FailureReason
from nccl_k8s.k8s.api._types import Obj, PodPhase

PHASES: tuple[PodPhase, ...] = ("Pending", "Running", "Succeeded", "Failed")

#: Waiting reasons of a container that may resolve by waiting: a registry hiccup is normal on a
#: large cluster, and the kubelet retries the pull. A problem, but a patient one (`transient`):
#: deploy waits --pull-timeout for it before it fails the run.
PULL_WAITING = frozenset({"ErrImagePull", "ImagePullBackOff"})
#: Waiting reasons that will not resolve by waiting: the run has failed.
FATAL_WAITING = frozenset(
    {
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "CrashLoopBackOff",
    }
)
#: Pod reasons that mean the pod was taken away, not that the benchmark failed.
LOST_REASONS = frozenset({"NodeLost", "Evicted", "NodeShutdown", "Shutdown", "Terminated"})
#: A container's exit code when a signal ended it is 128 + the signal's number: SIGKILL's (the
#: OOM killer, a user) is 137.
_KILLED_CODE = 128 + signal.SIGKILL
_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
_POD_INDEX = "apps.kubernetes.io/pod-index"


@dataclasses.dataclass(frozen=True)
class Problem:
    """Why a pod will not succeed."""

    reason: str
    """Kubernetes' word for it: Unschedulable, ErrImagePull, OOMKilled, Error, Evicted ..."""
    message: str
    """What to tell the user (the scheduler's message, the exit code and signal ...)."""
    exit_code: int | None = None
    finished_at: str | None = None
    transient: bool = False
    """It may resolve by waiting (Unschedulable: an autoscaler may add a node; an image pull
    error: the kubelet retries), so deploy gives it a bounded patience rather than failing."""
    since: str | None = None
    """When it began, where the pod says (Unschedulable: its PodScheduled condition's
    lastTransitionTime), RFC 3339; None when it does not."""

    @property
    def failure(self) -> FailureReason:
        """The kind of failure, from Kubernetes' reason word and the exit code."""
        code = self.exit_code
        if self.reason == "Unschedulable":
            return FailureReason.UNSCHEDULABLE
        if self.reason in PULL_WAITING:
            return FailureReason.IMAGE_PULL
        if self.reason in FATAL_WAITING:
            return FailureReason.CANNOT_START
        if self.reason == "OOMKilled" or code == _KILLED_CODE:
            return FailureReason.KILLED
        if code is not None and code - 128 in CRASH_SIGNALS:
            return FailureReason.CRASHED
        if code is not None:
            return FailureReason.EXITED
        if self.reason in LOST_REASONS:
            return FailureReason.NODE_LOST
        return FailureReason.CANNOT_START  # the kubelet refused it (OutOfcpu, admission ...)

    def age_s(self, now: datetime.datetime | None = None) -> float | None:
        """Seconds since it began; None when unknown."""
        if not self.since:
            return None
        now = now or datetime.datetime.now(datetime.timezone.utc)
        return max(0.0, (now - _parse_time(self.since)).total_seconds())


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
        if reason in PULL_WAITING:
            message = waiting.get("message") or reason
            return Problem(reason, f"{reason}: {message}", transient=True)
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
            return Problem(
                "Unschedulable",
                cond.get("message") or "no node fits the pod",
                transient=True,
                since=cond.get("lastTransitionTime"),
            )
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


def rank_key(p: PodInfo) -> tuple[int, str, str]:
    return (p.rank if p.rank is not None else 1 << 30, p.created or "", p.name)


def latest_per_rank(pods: Iterable[PodInfo]) -> list[PodInfo]:
    """One pod per rank (the newest: a Job replaces a pod lost to a disruption), by rank."""
    best: dict[int | str, PodInfo] = {}
    for p in sorted(pods, key=rank_key):
        best[p.rank if p.rank is not None else p.name] = p
    return sorted(best.values(), key=rank_key)


def phase_counts(pods: Iterable[PodInfo]) -> dict[str, int]:
    counts: dict[str, int] = dict.fromkeys(PHASES, 0)
    for p in pods:
        counts[p.phase if p.phase in counts else "Pending"] += 1
    return counts


def condition(obj: Obj | None, type_: str) -> Obj | None:
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
        if condition(workload, "Complete") or condition(workload, "SuccessCriteriaMet"):
            return "Succeeded"
        if condition(workload, "Failed") or condition(workload, "FailureTarget"):
            return "Failed"
        if condition(workload, "Suspended"):
            return "Suspended"
        current = latest_per_rank(pods)
        problems = [p.problem for p in current if p.problem]
        if any(not x.transient for x in problems):
            return "Failing"
        if problems and all(x.reason == "Unschedulable" for x in problems):
            return "Unschedulable"
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
