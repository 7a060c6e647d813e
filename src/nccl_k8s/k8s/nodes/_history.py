"""The namespace's history of node checks (issue 38): each `nodes check --label` appends its
per-node verdicts and busbw, its time and its run id to one ConfigMap, `nccl-k8s-node-history`,
which `nodes history` reads back.

One object, owned by the tool: it carries `app.kubernetes.io/name` and `managed-by: nccl-k8s`
but no `app.kubernetes.io/instance`, so `cleanup`, `list` and `status` (which select runs by
that label) never take it for a run; a ConfigMap of that name without our managed-by label is
someone else's and is never written. Bounded: the newest MAX_CHECKS checks, fewer when their
JSON passes MAX_BYTES (the oldest go first), far under the 1 MiB an object may hold. Written
with optimistic concurrency: read, append, patch with the read's resourceVersion; a 409 (a
concurrent check wrote meanwhile) reads again. A check already in it (a patch retried after a
lost answer) is not appended twice.

The checker already holds configmaps create, get and patch in its namespace (its pair tests'
ConfigMaps carry the engine): the history needs no grant beyond those (api._access).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from typing import Any

from nccl_k8s.errors import ClusterError, Conflict, NotFound
from nccl_k8s.k8s.api._client import KubeClient
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.nodes._badnodes import Findings
from nccl_k8s.k8s.nodes._labels import write_verdicts
from nccl_k8s.k8s.rendering._names import APP_NAME
from nccl_k8s.spec import LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_NAME

HISTORY_NAME = f"{APP_NAME}-node-history"
HISTORY_KEY = "checks.json"
#: Checks kept: 30 days of a check every 6 hours (the schedule's example), 5 days of hourly ones.
MAX_CHECKS = 120
#: The kept checks' JSON at most: half of the 1 MiB (1,048,576 bytes) an object's data may
#: hold, leaving room for its metadata. A node costs about 35 bytes in a check, so 120 checks
#: of up to ~120 nodes fit whole; larger checks keep fewer (at least the newest one).
MAX_BYTES = 512 * 1024
#: Reads and writes tried before giving up when other checks keep writing meanwhile: of n
#: checks that write at once, one lands per round, so up to 8 at once all land.
ATTEMPTS = 8


@dataclasses.dataclass(frozen=True)
class Check:
    """One recorded check: its run id, when it ended (unix seconds) and, per node it tested,
    the verdict and the measured busbw (GB/s; None when none of its tests measured one)."""

    run_id: str
    at: int
    nodes: dict[str, tuple[str, float | None]]

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run_id, "at": self.at,
                "nodes": {n: [v, b] for n, (v, b) in self.nodes.items()}}  # fmt: skip


def check_of(findings: Findings, run_id: str, at: int) -> Check:
    """The record of one check: every node it gave a verdict (suspect and unknown included)."""
    nodes = {
        v.node: (str(v.verdict), None if v.score is None else round(v.score, 3))
        for v in findings.nodes
    }
    return Check(run_id, at, nodes)


def dump(checks: Sequence[Check]) -> str:
    return json.dumps([c.to_json() for c in checks], separators=(",", ":"))


def load(text: str) -> list[Check]:
    """The checks of the ConfigMap's data, newest first; ValueError when it does not parse."""
    try:
        out = []
        for c in json.loads(text):
            nodes = {}
            for node, (verdict, busbw) in c["nodes"].items():
                nodes[str(node)] = (str(verdict), None if busbw is None else float(busbw))
            out.append(Check(str(c["run"]), int(c["at"]), nodes))
    except (TypeError, KeyError, ValueError, AttributeError) as e:
        raise ValueError(f"{HISTORY_KEY} does not parse: {e}") from e
    return sorted(out, key=lambda c: -c.at)


def bounded(checks: Sequence[Check]) -> list[Check]:
    """The newest MAX_CHECKS checks, the oldest dropped while their JSON passes MAX_BYTES
    (the newest is always kept)."""
    kept = list(checks[:MAX_CHECKS])
    sizes = [len(json.dumps(c.to_json(), separators=(",", ":"))) + 1 for c in kept]
    total = sum(sizes) + 1  # the list's brackets, and a comma for each but one
    while len(kept) > 1 and total > MAX_BYTES:
        kept.pop()
        total -= sizes.pop()
    return kept


def _ours(obj: Obj) -> bool:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_MANAGED_BY) == APP_NAME


def history_object(namespace: str, checks: Sequence[Check]) -> Obj:
    labels = {LABEL_NAME: APP_NAME, LABEL_MANAGED_BY: APP_NAME, LABEL_COMPONENT: "node-history"}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": HISTORY_NAME, "namespace": namespace, "labels": labels},
            "data": {HISTORY_KEY: dump(checks)}}  # fmt: skip


def _checks_of(obj: Obj, namespace: str) -> list[Check]:
    where = f"configmap {HISTORY_NAME} in namespace {namespace}"
    if not _ours(obj):
        raise ClusterError(
            f"{where} is not nccl-k8s's (no {LABEL_MANAGED_BY}={APP_NAME} label): left as it is"
        )
    try:
        return load(str((obj.get("data") or {}).get(HISTORY_KEY) or "[]"))
    except ValueError as e:
        raise ClusterError(f"{where}: {e} (delete it to start a new history)") from e


async def append_check(kc: KubeClient, namespace: str, check: Check) -> int:
    """Append `check` to the namespace's history; how many checks it holds now."""
    for _ in range(ATTEMPTS):
        obj = await kc.get("ConfigMap", HISTORY_NAME, namespace=namespace)
        if obj is None:
            try:
                await kc.create(history_object(namespace, [check]))
            except Conflict:
                continue  # another check made it meanwhile: append to theirs
            return 1
        checks = _checks_of(obj, namespace)
        if any(c.run_id == check.run_id for c in checks):
            return len(checks)  # written already (a retried patch whose answer was lost)
        kept = bounded(sorted([check, *checks], key=lambda c: -c.at))
        patch = {
            "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
            "data": {HISTORY_KEY: dump(kept)},
        }
        try:
            await kc.patch("ConfigMap", HISTORY_NAME, patch, namespace=namespace)
        except Conflict:
            continue  # written meanwhile: read it again
        return len(kept)
    raise ClusterError(
        f"configmap {HISTORY_NAME} in namespace {namespace} kept changing: the check was not "
        "added to the history"
    )


async def record_history(
    kc: KubeClient, namespace: str, findings: Findings, run_id: str, at: int
) -> str:
    """Append the check to the history; the action line (what could not be written, too: the
    verdicts stand)."""
    if not findings.nodes:
        return "no verdict to add to the history"
    try:
        kept = await append_check(kc, namespace, check_of(findings, run_id, at))
    except ClusterError as e:
        return f"could not add the check to the history: {e}"
    return f"added check {run_id} to configmap {HISTORY_NAME} ({kept} checks kept)"


async def record_check(
    kc: KubeClient,
    namespace: str,
    findings: Findings,
    run_id: str,
    *,
    label: bool,
    taint: bool,
    dry_run: bool,
) -> list[str]:
    """What `nodes check --label/--taint` writes at its end: the verdicts on the nodes and,
    with `label`, the check in the history, both with one time; the action lines."""
    at = int(time.time())
    actions = await write_verdicts(
        kc, findings, label=label, taint=taint, dry_run=dry_run, run_id=run_id, at=at
    )
    if label and dry_run:
        actions.append(f"would add check {run_id} to configmap {HISTORY_NAME}")
    elif label:
        actions.append(await record_history(kc, namespace, findings, run_id, at))
    return actions


async def read_history_async(kc: KubeClient, namespace: str) -> list[Check]:
    """The namespace's checks, newest first; NotFound when none was ever recorded."""
    obj = await kc.get("ConfigMap", HISTORY_NAME, namespace=namespace)
    if obj is None:
        raise NotFound(
            f"no node check history in namespace {namespace} (configmap {HISTORY_NAME}): "
            "`nodes check --label` writes it",
            namespace=namespace,
        )
    return _checks_of(obj, namespace)


__all__ = [
    "HISTORY_KEY",
    "HISTORY_NAME",
    "MAX_BYTES",
    "MAX_CHECKS",
    "Check",
    "append_check",
    "bounded",
    "check_of",
    "dump",
    "history_object",
    "load",
    "read_history_async",
    "record_check",
    "record_history",
]
