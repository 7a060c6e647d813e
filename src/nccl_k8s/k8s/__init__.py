"""The Kubernetes layer, one facade: render, deploy, wait, status, list_runs, logs, collect, cleanup.

    from nccl_k8s import k8s
    objs = k8s.render(spec)                       # pure: RunSpec -> the objects deploy applies
    deployed, outcome = k8s.deploy(spec, client=k8s.ClientSettings())

Behind it, private modules by concern: `_manifests` (pure RunSpec -> objects) and `_presets`
(NCCL environment, security profiles), `_client` (lightkube; the only module that talks HTTP),
`_watch` (list+watch informer), `_pods` (pure pod-state interpretation), `_deploy`, `_monitor`
(following a run, naming its culprit), `_status`, `_logs`, `_collect`, `_cleanup`, with
`_plumbing` and `_outcomes` (the dataclasses returned) shared by them.

Names load lazily, so `render` works without the API client (lightkube is the `k8s` extra) and
importing this package costs nothing until a name is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nccl_k8s.k8s._cleanup import cleanup
    from nccl_k8s.k8s._collect import collect
    from nccl_k8s.k8s._config import ClientSettings
    from nccl_k8s.k8s._deploy import deploy
    from nccl_k8s.k8s._dump import dump
    from nccl_k8s.k8s._logs import LineFn, logs
    from nccl_k8s.k8s._manifests import render
    from nccl_k8s.k8s._monitor import wait
    from nccl_k8s.k8s._outcomes import (
        Cleaned,
        Collected,
        Deployed,
        Progress,
        RunStatus,
        RunSummary,
        WaitOutcome,
    )
    from nccl_k8s.k8s._pods import PodInfo, Problem
    from nccl_k8s.k8s._progress import progress_line
    from nccl_k8s.k8s._settings import WaitSettings
    from nccl_k8s.k8s._status import list_runs, status
    from nccl_k8s.k8s._types import RunPhase

_WHERE = {
    "cleanup": "_cleanup",
    "ClientSettings": "_config",
    "collect": "_collect",
    "deploy": "_deploy",
    "LineFn": "_logs",
    "logs": "_logs",
    "dump": "_dump",
    "render": "_manifests",
    "WaitSettings": "_settings",
    "wait": "_monitor",
    "Cleaned": "_outcomes",
    "Collected": "_outcomes",
    "Deployed": "_outcomes",
    "Progress": "_outcomes",
    "RunStatus": "_outcomes",
    "RunSummary": "_outcomes",
    "WaitOutcome": "_outcomes",
    "PodInfo": "_pods",
    "Problem": "_pods",
    "progress_line": "_progress",
    "list_runs": "_status",
    "status": "_status",
    "RunPhase": "_types",
}

__all__ = [
    "Cleaned",
    "ClientSettings",
    "Collected",
    "Deployed",
    "LineFn",
    "PodInfo",
    "Problem",
    "Progress",
    "RunPhase",
    "RunStatus",
    "RunSummary",
    "WaitOutcome",
    "WaitSettings",
    "cleanup",
    "collect",
    "deploy",
    "dump",
    "list_runs",
    "logs",
    "progress_line",
    "render",
    "status",
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
