"""The Kubernetes layer, one facade: render, deploy, wait, status, list_runs, logs, collect, cleanup,
doctor, explain (doctor --run), bundle, nodes_check.

    from nccl_k8s import k8s
    objs = k8s.render(spec)                       # pure: RunSpec -> the objects deploy applies
    deployed, outcome = k8s.deploy(spec, client=k8s.ClientSettings())

Behind it, private modules by concern: `_manifests` (pure RunSpec -> objects) and `_presets`
(NCCL environment, security profiles), `_client` (lightkube; the only module that talks HTTP),
`_watch` (list+watch informer), `_pods` (pure pod-state interpretation), `_deploy`, `_monitor`
(following a run, naming its culprit), `_status`, `_logs`, `_collect`, `_cleanup`, with
`_plumbing` and `_outcomes` (the dataclasses returned) shared by them; `_doctor` (preflight:
pure checks in `_preflight`, `_nodechecks`, `_nodefit`), `_explain` (doctor --run), `_bundle`,
`_nodecheck` (the bad-node finder; its pure plan and verdicts in `_badnodes`).

Names load lazily, so `render` works without the API client (lightkube is the `k8s` extra) and
importing this package costs nothing until a name is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nccl_k8s.k8s._bundle import Bundled, bundle, bundle_path
    from nccl_k8s.k8s._cleanup import cleanup
    from nccl_k8s.k8s._collect import collect
    from nccl_k8s.k8s._config import ClientSettings
    from nccl_k8s.k8s._deploy import deploy
    from nccl_k8s.k8s._doctor import Doctored, doctor
    from nccl_k8s.k8s._dump import dump
    from nccl_k8s.k8s._explain import Explained, explain, table_text
    from nccl_k8s.k8s._logs import LineFn, logs
    from nccl_k8s.k8s._manifests import render
    from nccl_k8s.k8s._monitor import wait
    from nccl_k8s.k8s._nodecheck import NodesChecked, nodes_check
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
    from nccl_k8s.k8s._settings import NODES_CHECK_ENGINE_ARGS, WaitSettings
    from nccl_k8s.k8s._status import list_runs, status
    from nccl_k8s.k8s._types import RunPhase

_WHERE = {
    "Bundled": "_bundle",
    "bundle": "_bundle",
    "bundle_path": "_bundle",
    "NODES_CHECK_ENGINE_ARGS": "_settings",
    "Doctored": "_doctor",
    "doctor": "_doctor",
    "Explained": "_explain",
    "explain": "_explain",
    "table_text": "_explain",
    "NodesChecked": "_nodecheck",
    "nodes_check": "_nodecheck",
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
    "NODES_CHECK_ENGINE_ARGS",
    "Bundled",
    "Cleaned",
    "ClientSettings",
    "Collected",
    "Deployed",
    "Doctored",
    "Explained",
    "LineFn",
    "NodesChecked",
    "PodInfo",
    "Problem",
    "Progress",
    "RunPhase",
    "RunStatus",
    "RunSummary",
    "WaitOutcome",
    "WaitSettings",
    "bundle",
    "bundle_path",
    "cleanup",
    "collect",
    "deploy",
    "doctor",
    "dump",
    "explain",
    "list_runs",
    "logs",
    "nodes_check",
    "progress_line",
    "render",
    "status",
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
