"""What the run functions return: plain dataclasses the CLI prints (or dumps as JSON)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nccl_k8s.k8s.api._types import Kind
from nccl_k8s.k8s.run._pods import PodInfo


@dataclasses.dataclass(frozen=True)
class RunStatus:
    run_id: str
    namespace: str
    kind: str | None
    phase: str
    detail: str | None
    created: str | None
    pods: list[PodInfo]
    last_sweep: dict[str, Any] | None = None
    """A run of sweeps (StatefulSet): rank 0's last sweep line (sweep, ok, failed_ops, time,
    duration_s, wrong_ranks) and the pod it came from; None before the first sweep ends."""
    pod_sweeps: dict[str, str] = dataclasses.field(default_factory=dict)
    """Pod name -> its part in the last sweep, in words."""

    def to_dict(self) -> dict[str, Any]:
        pods = []
        for p in self.pods:
            d = p.to_dict()
            if self.last_sweep is not None:
                d["last_sweep"] = self.pod_sweeps.get(p.name)
            pods.append(d)
        out: dict[str, Any] = {
            "run_id": self.run_id,
            "namespace": self.namespace,
            "workload": self.kind,
            "phase": self.phase,
            "detail": self.detail,
            "created": self.created,
            "pods": pods,
        }
        if self.kind == "StatefulSet":
            out["last_sweep"] = self.last_sweep
        return out


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
    stages: dict[str, int] = dataclasses.field(default_factory=dict)
    """Pods per stage (_progress.STAGES): Pending split into unscheduled and pulling/creating."""
    rank0: str | None = None
    """What rank 0's log says it measures (`all_reduce up to 64 KiB`); None before the ranks
    met, or when its log is not followed."""
    pending: tuple[str, ...] = ()
    """Why pods wait, one entry per reason: `2 Unschedulable: 0/4 nodes are available: ...`."""


@dataclasses.dataclass(frozen=True)
class Created:
    """One object a deploy created, by uid: what its roll-back (or a failed run's ending) may
    delete, and nothing else of that name."""

    kind: Kind
    name: str
    uid: str
    api_version: str | None = None
    """Needed for custom kinds (a PodGroup of Volcano or of scheduler-plugins)."""

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


@dataclasses.dataclass(frozen=True)
class Deployed:
    run_id: str
    namespace: str
    objects: list[str]
    """`Kind/name` of every object created, in order."""
    created_namespace: bool = False
    created: list[Created] = dataclasses.field(default_factory=list)
    """What this deploy created (the namespace first when it made one), with uids."""
    platform: str = "generic"
    """The platform the pods were rendered for (what --platform auto chose, or the one named)."""
    platform_note: str = ""
    """Why: `platform eks-efa: node ip-10-1-2-3 has vpc.amazonaws.com/efa: 32, instance type
    p5.48xlarge`; empty when the spec named the platform and its devices."""


@dataclasses.dataclass(frozen=True)
class WaitOutcome:
    run_id: str
    namespace: str
    phase: str
    elapsed_s: float
    pods: list[PodInfo]


@dataclasses.dataclass(frozen=True)
class CollectedSweep:
    """One complete sweep of a run of several, as `results --all-sweeps` stores it."""

    index: int | None
    """The engine's sweep number (None: a run of one sweep)."""
    run: Any
    """Its nccl_k8s.results Run."""
    path: Path | None
    """Where it was written (`sweep-<index>.json`), None until then."""

    @property
    def ok(self) -> bool:
        """Whether the sweep passed: no op's footer said its check FAILED."""
        return all(s.ok is not False for s in self.run.summaries)

    def to_dict(self) -> dict[str, Any]:
        """One sweep as `results --all-sweeps -o json` shows it."""
        meta = self.run.meta
        return {
            "sweep": meta.sweep,
            "time": meta.time,
            "ok": self.ok,
            "avg_busbw": {x.op: x.avg_busbw for x in self.run.summaries},
            "path": str(self.path),
        }


@dataclasses.dataclass(frozen=True)
class Collected:
    run_id: str
    namespace: str
    run: Any
    """The merged nccl_k8s.results Run (of the chosen sweep: the latest by default)."""
    results_path: Path
    log_dir: Path
    pods: int
    diagnosis: Any
    """nccl_k8s.results Diagnosis of the pods' NCCL lines (None when there were none)."""
    elapsed_s: float
    sweeps: list[CollectedSweep] = dataclasses.field(default_factory=list)
    """With all_sweeps: every complete sweep in the log, oldest first."""
    still_running: str | None = None
    """The Job's phase when it has not ended (Pending, Running, Failing ...): what was written
    is a snapshot, marked partial; None once it has ended (and for continuous runs)."""

    def snapshot_failure(self, *, snapshot: bool) -> str | None:
        """Why `results` of a run still going fails (unless a snapshot was asked for), or None."""
        if self.still_running is None or snapshot:
            return None
        return (
            f"run {self.run_id} is still {self.still_running}: the {len(self.run.rows)} rows "
            f"written to {self.results_path} are a partial snapshot (marked partial); wait for "
            f"it (`nccl-k8s wait --run {self.run_id}`) or pass --snapshot"
        )

    def sweeps_to_dict(self) -> dict[str, Any]:
        """`results --all-sweeps -o json`: the run id and each sweep's verdict and averages."""
        return {"run_id": self.run_id, "sweeps": [s.to_dict() for s in self.sweeps]}


@dataclasses.dataclass(frozen=True)
class Cleaned:
    namespace: str
    run_ids: list[str]
    deleted: list[str]
    """`Kind/name` of every object deleted."""
    elapsed_s: float
    skipped: list[str] = dataclasses.field(default_factory=list)
    """`Kind/name: why` of every object that carries a run's labels but that nccl-k8s did not
    create (no nccl-k8s field manager, no render mark, no owner reference to the run's
    workload): untouched."""
    asked: str | None = None
    """The run id cleanup was asked for (None: --all)."""

    def failure(self) -> str | None:
        """Why a cleanup of one named run failed: it deleted nothing (every object with the run's
        labels was someone else's); None when it deleted something, or for --all."""
        if self.asked is None or self.run_ids:
            return None
        return (
            f"cleanup --run {self.asked}: nothing deleted in {self.namespace}: the "
            f"{len(self.skipped)} object(s) with its labels were not created by nccl-k8s "
            "(listed above); delete them yourself if they are yours to delete"
        )


ProgressFn = Callable[[Progress], None]
