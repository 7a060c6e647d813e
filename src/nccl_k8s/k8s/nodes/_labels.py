"""The verdicts written to the nodes (`nodes check --label/--taint`): our labels with the
verdict, its time, the node's measured busbw and the check's run id, our NoSchedule taint on a
bad node, every other label and taint left as it is. The keys have one home, in rendering
(where rbac's admission policy names them); these public names are what the readers of the
labels import (`--skip-checked-within`, and the users of the verdicts)."""

from __future__ import annotations

import time

from nccl_k8s.errors import ClusterError, Conflict
from nccl_k8s.k8s.api._client import KubeClient
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.nodes._badnodes import DECIDED, Findings
from nccl_k8s.k8s.rendering._nodepolicy import (
    NODE_BUSBW_KEY,
    NODE_CHECKED_AT_KEY,
    NODE_LABEL_KEY,
    NODE_RUN_KEY,
    NODE_TAINT_KEY,
)

#: `good` or `bad`: the last decided verdict (suspect and unknown are not written).
LABEL_KEY = NODE_LABEL_KEY
#: When the verdict was written, unix seconds (`1765000000`).
CHECKED_AT_KEY = NODE_CHECKED_AT_KEY
#: The node's measured bus bandwidth, GB/s, three significant digits (`42.1`); absent when none.
BUSBW_KEY = NODE_BUSBW_KEY
#: The run id of the check that wrote the verdict.
RUN_KEY = NODE_RUN_KEY
TAINT_KEY = NODE_TAINT_KEY
TAINT: Obj = {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}


def busbw_value(score: float | None) -> str | None:
    """A busbw as a label value, three significant digits (`42.1`, `387`, `0.0362`; `1234`
    whole: a label value holds no `+` of an exponent); None for none (the label is then
    removed: an older check's number beside a new verdict would mislead)."""
    if score is None:
        return None
    return f"{score:.0f}" if score >= 1000 else f"{score:.3g}"


def verdict_labels(verdict: str, score: float | None, *, at: int, run_id: str) -> Obj:
    """The labels one verdict writes (None removes a key, as a merge patch does)."""
    labels: Obj = {LABEL_KEY: verdict, CHECKED_AT_KEY: str(at), BUSBW_KEY: busbw_value(score)}
    labels[RUN_KEY] = run_id or None
    return labels


async def write_verdicts(
    kc: KubeClient,
    findings: Findings,
    *,
    label: bool,
    taint: bool,
    dry_run: bool,
    run_id: str = "",
    at: int | None = None,
) -> list[str]:
    """Label (and taint) the nodes with a verdict, its time (`at`, unix seconds: now when not
    given), busbw and run id; what was done, one line each."""
    done: list[str] = []
    would = "would " if dry_run else ""
    when = int(time.time()) if at is None else at
    for v in findings.nodes:
        if v.verdict not in DECIDED:  # unknown, suspect: nothing to write yet
            continue
        try:
            if label:
                did = f"{would}label node {v.node} {LABEL_KEY}={v.verdict}"
                if not dry_run:  # the action line says the verdict; its time, busbw, run beside
                    labels = verdict_labels(v.verdict, v.score, at=when, run_id=run_id)
                    await kc.patch("Node", v.node, {"metadata": {"labels": labels}})
                done.append(did)
            if taint:
                change = await set_taint(kc, v.node, v.verdict == "bad", dry_run=dry_run)
                if change:
                    done.append(f"{would}{change}")
        except ClusterError as e:  # the verdicts stand; say what could not be written
            done.append(f"could not write the verdict to node {v.node}: {e}")
    return done


async def set_taint(kc: KubeClient, node: str, on: bool, *, dry_run: bool) -> str | None:
    """Add or remove our taint, leaving every other taint as it is; None when nothing changes."""
    for _ in range(5):
        obj = await kc.get("Node", node)
        if obj is None:
            return None
        taints = list((obj.get("spec") or {}).get("taints") or [])
        has = any(t.get("key") == TAINT_KEY for t in taints)
        if has == on:
            return None
        what = f"taint node {node} {TAINT_KEY}=true:NoSchedule" + ("" if on else "-")
        if dry_run:
            return what
        new = [*taints, dict(TAINT)] if on else [t for t in taints if t.get("key") != TAINT_KEY]
        patch = {
            "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
            "spec": {"taints": new},
        }
        try:
            await kc.patch("Node", node, patch)
        except Conflict:
            continue  # the node changed meanwhile: read it again
        return what
    raise ClusterError(f"node {node} kept changing: its taint {TAINT_KEY} was not written")


__all__ = [
    "BUSBW_KEY",
    "CHECKED_AT_KEY",
    "LABEL_KEY",
    "RUN_KEY",
    "TAINT",
    "TAINT_KEY",
    "busbw_value",
    "set_taint",
    "verdict_labels",
    "write_verdicts",
]
