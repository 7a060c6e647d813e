"""The Kubernetes layer, one facade: render, deploy, wait, status, list_runs, logs, collect, cleanup,
doctor, explain (doctor --run), bundle, nodes_check, node_history, rbac_objects (what to grant a user).

    from nccl_k8s import k8s
    objs = k8s.render(spec)                       # pure: RunSpec -> the objects deploy applies
    deployed, outcome = k8s.deploy(spec, client=k8s.ClientSettings())

Behind it, subpackages by concern, each importing only those below it (import-linter checks):
    nodes      the bad-node finder (`nodes check`): composes deploy, collect and cleanup
    run        a run's lifecycle: deploy, the monitor and its culprit, watch, status, logs,
               collect, cleanup, explain (doctor --run), the debug bundle
    preflight  doctor: will a run deploy and start (deploy consults it when refused)
    rendering  pure RunSpec -> objects, and the names other modules read off them
    api        the API client: the only code that imports lightkube or the HTTP client

Names load lazily, so `render` works without the API client (lightkube is the `k8s` extra) and
importing this package costs nothing until a name is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nccl_k8s.k8s.api._config import ClientSettings
    from nccl_k8s.k8s.api._types import RunPhase
    from nccl_k8s.k8s.nodes._domains import PAIRINGS
    from nccl_k8s.k8s.nodes._metrics import push_url, push_verdicts
    from nccl_k8s.k8s.nodes._nodecheck import NodesChecked, nodes_check
    from nccl_k8s.k8s.nodes._pairspec import scheduled_check
    from nccl_k8s.k8s.nodes._timeline import NodeHistory, node_history
    from nccl_k8s.k8s.nodes._unschedule import Unscheduled, cleanup_schedule
    from nccl_k8s.k8s.preflight._doctor import Doctored, doctor
    from nccl_k8s.k8s.rendering._dump import dump
    from nccl_k8s.k8s.rendering._manifests import render
    from nccl_k8s.k8s.rendering._rbac import Subject, rbac_objects, rbac_text, subject_of
    from nccl_k8s.k8s.rendering._schedule import (
        Schedule,
        cron_arg,
        schedule_objects,
        schedule_text,
    )
    from nccl_k8s.k8s.run._bundle import Bundled, bundle, bundle_path
    from nccl_k8s.k8s.run._cleanup import cleanup
    from nccl_k8s.k8s.run._collect import collect
    from nccl_k8s.k8s.run._deploy import deploy
    from nccl_k8s.k8s.run._explain import Explained, explain, table_text
    from nccl_k8s.k8s.run._logs import LineFn, logs
    from nccl_k8s.k8s.run._monitor import wait
    from nccl_k8s.k8s.run._outcomes import (
        Cleaned,
        Collected,
        Deployed,
        Progress,
        RunStatus,
        RunSummary,
        WaitOutcome,
    )
    from nccl_k8s.k8s.run._pods import PodInfo, Problem
    from nccl_k8s.k8s.run._progress import PlainProgress, progress_line
    from nccl_k8s.k8s.run._settings import NODES_CHECK_ENGINE_ARGS, WaitSettings
    from nccl_k8s.k8s.run._status import list_runs, status

_WHERE = {
    "Bundled": "run._bundle",
    "bundle": "run._bundle",
    "bundle_path": "run._bundle",
    "NODES_CHECK_ENGINE_ARGS": "run._settings",
    "Doctored": "preflight._doctor",
    "doctor": "preflight._doctor",
    "Explained": "run._explain",
    "explain": "run._explain",
    "table_text": "run._explain",
    "NodesChecked": "nodes._nodecheck",
    "PAIRINGS": "nodes._domains",
    "scheduled_check": "nodes._pairspec",
    "nodes_check": "nodes._nodecheck",
    "NodeHistory": "nodes._timeline",
    "node_history": "nodes._timeline",
    "push_url": "nodes._metrics",
    "push_verdicts": "nodes._metrics",
    "cleanup": "run._cleanup",
    "Unscheduled": "nodes._unschedule",
    "cleanup_schedule": "nodes._unschedule",
    "ClientSettings": "api._config",
    "collect": "run._collect",
    "deploy": "run._deploy",
    "LineFn": "run._logs",
    "logs": "run._logs",
    "dump": "rendering._dump",
    "render": "rendering._manifests",
    "Schedule": "rendering._schedule",
    "cron_arg": "rendering._schedule",
    "schedule_objects": "rendering._schedule",
    "schedule_text": "rendering._schedule",
    "Subject": "rendering._rbac",
    "rbac_objects": "rendering._rbac",
    "rbac_text": "rendering._rbac",
    "subject_of": "rendering._rbac",
    "WaitSettings": "run._settings",
    "wait": "run._monitor",
    "Cleaned": "run._outcomes",
    "Collected": "run._outcomes",
    "Deployed": "run._outcomes",
    "Progress": "run._outcomes",
    "RunStatus": "run._outcomes",
    "RunSummary": "run._outcomes",
    "WaitOutcome": "run._outcomes",
    "PodInfo": "run._pods",
    "Problem": "run._pods",
    "progress_line": "run._progress",
    "PlainProgress": "run._progress",
    "list_runs": "run._status",
    "status": "run._status",
    "RunPhase": "api._types",
}

__all__ = [
    "NODES_CHECK_ENGINE_ARGS",
    "PAIRINGS",
    "Bundled",
    "Cleaned",
    "ClientSettings",
    "Collected",
    "Deployed",
    "Doctored",
    "Explained",
    "LineFn",
    "NodeHistory",
    "NodesChecked",
    "PlainProgress",
    "PodInfo",
    "Problem",
    "Progress",
    "RunPhase",
    "RunStatus",
    "RunSummary",
    "Schedule",
    "Subject",
    "Unscheduled",
    "WaitOutcome",
    "WaitSettings",
    "bundle",
    "bundle_path",
    "cleanup",
    "cleanup_schedule",
    "collect",
    "cron_arg",
    "deploy",
    "doctor",
    "dump",
    "explain",
    "list_runs",
    "logs",
    "node_history",
    "nodes_check",
    "progress_line",
    "push_url",
    "push_verdicts",
    "rbac_objects",
    "rbac_text",
    "render",
    "schedule_objects",
    "schedule_text",
    "scheduled_check",
    "status",
    "subject_of",
    "table_text",
    "wait",
]


if not TYPE_CHECKING:  # mypy reads the imports above, so a wrong name is still an error

    def __getattr__(name: str) -> Any:
        module = _WHERE.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return list(__all__)
