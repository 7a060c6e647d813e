"""The verdicts written to the nodes (`nodes check --label/--taint`): our label with the
verdict and its time, our NoSchedule taint on a bad node, every other label and taint left as
it is. The keys have one home, in rendering (where rbac's admission policy names them)."""

from __future__ import annotations

import time

from nccl_k8s.errors import ClusterError, Conflict
from nccl_k8s.k8s.api._client import KubeClient
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.nodes._badnodes import DECIDED, Findings
from nccl_k8s.k8s.rendering._nodepolicy import NODE_CHECKED_AT_KEY, NODE_LABEL_KEY, NODE_TAINT_KEY

LABEL_KEY = NODE_LABEL_KEY
CHECKED_AT_KEY = NODE_CHECKED_AT_KEY
TAINT_KEY = NODE_TAINT_KEY
TAINT: Obj = {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}


async def write_verdicts(
    kc: KubeClient, findings: Findings, *, label: bool, taint: bool, dry_run: bool
) -> list[str]:
    """Label (and taint) the nodes with a verdict; what was done, one line each."""
    done: list[str] = []
    would = "would " if dry_run else ""
    for v in findings.nodes:
        if v.verdict not in DECIDED:  # unknown, suspect: nothing to write yet
            continue
        try:
            if label:
                did = f"{would}label node {v.node} {LABEL_KEY}={v.verdict}"
                if not dry_run:  # the verdict and its time (the action line: the verdict)
                    at = str(int(time.time()))
                    patch = {"metadata": {"labels": {LABEL_KEY: v.verdict, CHECKED_AT_KEY: at}}}
                    await kc.patch("Node", v.node, patch)
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


__all__ = ["CHECKED_AT_KEY", "LABEL_KEY", "TAINT", "TAINT_KEY", "set_taint", "write_verdicts"]
