"""cleanup: delete what nccl-k8s created for a run, workload first, and wait by watch until its
pods are gone.

Labels find a run's objects; they do not make them ours (a user's ConfigMap may carry the same
three labels). An object is deleted only when the API server's own records say this tool made
it: a managedFields entry of the field manager `nccl-k8s` (the deployer creates every object
with it), the render mark (`nccl-k8s/rendered-for: <run id>`, on every object `render` prints, so
a run applied with `render | kubectl apply -f -` is cleaned up the same way), or an ownerReference to a workload of the run that nccl-k8s created (the Job's pods).
Everything else is skipped, and the result says what and why. Each delete carries the object's
uid as a precondition, so an object replaced meanwhile under the same name is not touched.

Beyond the workload, Service and ConfigMap, cleanup deletes the run's optional objects (a
--gang's PodGroup, a --pod-monitor's PodMonitor, a --compute-domain's ComputeDomain; custom
kinds a cluster may not serve, which then have nothing to delete) and a rendered run's adoption
objects (ServiceAccount, Role, RoleBinding: rendering._adopt), last. A deployed run's are owned
by its workload and mostly gone with it already; a run applied from `render` (adoption is
opt-in, `--adopt`), or whose adoption failed, has nothing else that deletes them. None of this
needs a token in the run's pods: the labels and the render mark are read by the CLI.
"""

from __future__ import annotations

import asyncio
import time
from typing import cast

from nccl_k8s.errors import Conflict, FailureReason, NotFound, RunFailed, UsageError
from nccl_k8s.k8s.api._client import ClientSettings, KubeClient
from nccl_k8s.k8s.api._sync import run_sync
from nccl_k8s.k8s.api._types import Kind, Obj
from nccl_k8s.k8s.run._outcomes import Cleaned
from nccl_k8s.k8s.run._plumbing import (
    RUN_KINDS,
    WORKLOADS,
    made_by_us,
    namespace_of,
    no_run,
    ours,
    run_labels,
    wait_pods_gone,
)
from nccl_k8s.k8s.run._watch import WatchSettings
from nccl_k8s.spec import CUSTOM_KINDS, LABEL_INSTANCE

#: (kind, apiVersion) of every kind cleanup deletes, in delete order: the workload first (its
#: pods go with it), then what it used (every optional kind a run creates: spec.CUSTOM_KINDS);
#: None: the kind's only version. Custom kinds may not be served (NotFound when listed:
#: nothing of theirs to delete).
DELETED_KINDS: tuple[tuple[Kind, str | None], ...] = (
    *((k, None) for k in RUN_KINDS),
    *((cast(Kind, k.kind), k.api_version) for k in CUSTOM_KINDS if k.created),
    ("RoleBinding", None),
    ("Role", None),
    ("ServiceAccount", None),
)
_CUSTOM = frozenset(k.kind for k in CUSTOM_KINDS if k.created)

_NOT_OURS = (
    "carries the run's labels but nccl-k8s did not create it (no nccl-k8s field manager, no "
    "render mark, no owner reference to the run's workload)"
)


def cleanup(
    run_id: str | None = None,
    *,
    client: ClientSettings,
    namespace: str | None = None,
    all_runs: bool = False,
    timeout_s: float = 120.0,
    watch: WatchSettings | None = None,
) -> Cleaned:
    """`cleanup_async` over a client of its own."""
    _check_which(run_id, all_runs)
    return run_sync(
        lambda kc: cleanup_async(
            kc, run_id, namespace=namespace, all_runs=all_runs, timeout_s=timeout_s, watch=watch
        ),
        client,
    )


def _check_which(run_id: str | None, all_runs: bool) -> None:
    if (run_id is None) == (not all_runs):
        raise UsageError("cleanup: expected a run id or all_runs (not both)", key="--run")


async def cleanup_async(
    kc: KubeClient,
    run_id: str | None = None,
    *,
    namespace: str | None = None,
    all_runs: bool = False,
    timeout_s: float = 120.0,
    watch: WatchSettings | None = None,
) -> Cleaned:
    """Delete what nccl-k8s created for run `run_id` (every run's with `all_runs`), workload
    first, then wait by watch until those pods are gone. Objects that only carry the labels are
    skipped and listed in `Cleaned.skipped`."""
    _check_which(run_id, all_runs)
    start = time.monotonic()
    ns = await namespace_of(kc, namespace)
    labels = run_labels(run_id)
    found = await _labelled(kc, ns, labels)
    rids = sorted(found) if all_runs else [str(run_id)]
    if not all_runs and run_id not in found:
        raise no_run(kc, ns, str(run_id))
    deleted: list[str] = []
    skipped: list[str] = []
    touched: list[str] = []
    uids: set[str] = set()
    for rid in rids:
        before = len(deleted)
        objs = found.get(rid, {})
        workloads = [o for k in WORKLOADS for o in objs.get((k, None), []) if made_by_us(o)]
        run_uids = {str(w["metadata"]["uid"]) for w in workloads}
        uids |= run_uids
        for kind, api_version in (*DELETED_KINDS, ("Pod", None)):
            for obj in objs.get((kind, api_version), []):
                name = str(obj["metadata"]["name"])
                if not ours(obj, run_uids):
                    skipped.append(f"{kind}/{name}: {_why_not(obj)}")
                    continue
                if kind == "Pod":
                    continue  # its workload's deletion takes it (garbage collection)
                try:
                    # False: already gone with the workload (ownerReferences cascade).
                    await kc.delete(
                        kind,
                        name,
                        namespace=ns,
                        propagation="Background",
                        uid=str(obj["metadata"]["uid"]),
                        api_version=api_version,
                    )
                except Conflict:
                    skipped.append(f"{kind}/{name}: replaced by another object meanwhile")
                    continue
                deleted.append(f"{kind}/{name}")
        if len(deleted) > before:
            touched.append(rid)
    left = await wait_pods_gone(
        kc,
        ns,
        set(rids),
        timeout_s=timeout_s,
        watch=watch,
        which=lambda pod: ours(pod, uids),
    )
    if left:
        raise RunFailed(
            f"{len(left)} pod(s) of {', '.join(rids)} are still terminating after "
            f"{timeout_s:g}s ({', '.join(left[:4])}{', ...' if len(left) > 4 else ''}; a "
            "node may be unreachable); their workload is deleted",
            reason=FailureReason.STILL_TERMINATING,
        )
    asked = None if all_runs else str(run_id)
    return Cleaned(ns, touched, deleted, time.monotonic() - start, skipped, asked=asked)


def _why_not(obj: Obj) -> str:
    """Why an object with the run's labels is not deleted."""
    owner = next(iter(obj["metadata"].get("ownerReferences") or []), None)
    if owner is not None:
        return (
            f"owned by {owner.get('kind')}/{owner.get('name')} (uid {owner.get('uid')}), which is "
            "not a workload nccl-k8s created here; its owner's deletion (or the garbage "
            "collector, if that is gone) removes it"
        )
    return _NOT_OURS


_Key = tuple[Kind, str | None]


async def _labelled(
    kc: KubeClient, ns: str, labels: dict[str, str]
) -> dict[str, dict[_Key, list[Obj]]]:
    """run id -> (kind, apiVersion) -> every object with the labels (pods included)."""
    kinds: tuple[_Key, ...] = (*DELETED_KINDS, ("Pod", None))

    async def one(kind: Kind, api_version: str | None) -> list[Obj]:
        try:
            return (await kc.list(kind, namespace=ns, labels=labels, api_version=api_version))[0]
        except NotFound:
            if kind in _CUSTOM:
                return []  # the cluster does not serve the kind: none of them to delete
            raise

    lists = await asyncio.gather(*(one(k, v) for k, v in kinds))
    found: dict[str, dict[_Key, list[Obj]]] = {}
    for key, items in zip(kinds, lists, strict=True):
        for obj in items:
            rid = (obj["metadata"].get("labels") or {}).get(LABEL_INSTANCE)
            if rid:
                found.setdefault(rid, {}).setdefault(key, []).append(obj)
    return found
