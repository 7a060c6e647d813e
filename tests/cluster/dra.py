"""Dynamic Resource Allocation (resource.k8s.io/v1, as Kubernetes 1.34 serves it), generically.

What a pod with `spec.resourceClaims` goes through on a real cluster, and here:

1. kube-controller-manager's resourceclaim controller makes a ResourceClaim for every entry that
   names a `resourceClaimTemplateName`: named `<pod>-<entry>-<5 chars>`, the template's
   `spec.spec`, the annotation `resource.kubernetes.io/pod-claim-name`, owned by the pod
   (controller), and records it in the pod's `status.resourceClaimStatuses`. A template that does
   not exist (yet) is a Warning `FailedResourceClaimCreation` on the pod ("PodResourceClaim
   <entry>: resource claim template ..."); upstream retries with back-off, this one when the
   template appears. (`ResourceClaimController`.)
2. kube-scheduler's DynamicResources plugin keeps the pod Pending until its claims exist
   (`pod "<ns>/<name>": ResourceClaim not created yet`, or `waiting for dynamic resource
   controller to create the resourceclaim "<claim>"`) and are allocated, and places it only on
   nodes its allocations' nodeSelector selects (`resourceclaim not available on the node`); when
   no node will do, the message reads `0/4 nodes are available: 4 cannot allocate all claims.`
   (`pod_claims`, `claims_reject`). Binding adds the pod to each claim's `status.reservedFor`
   (`reserve`), as its PreBind does.

Not modelled: the scheduler's own allocation from ResourceSlices (DeviceClass selectors are CEL,
which nothing here evaluates). Allocation is the test's: acting as the driver (and the allocator),
it writes `status.allocation` with `allocate()`. ResourceSlices and DeviceClasses are stored and
served, not read by the scheduler; the kubelet does not call a driver's NodePrepareResources.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

from tests.cluster.errors import ApiError
from tests.cluster.node_common import Obj, StoreLike, match_expression, pod_terminal
from tests.cluster.worker import StoreWorker

log = logging.getLogger(__name__)

#: The annotation the resourceclaim controller puts on a claim it made for a pod.
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"

CANNOT_ALLOCATE = "cannot allocate all claims"
NOT_ON_NODE = "resourceclaim not available on the node"


# ---- the scheduler's side ----------------------------------------------------------------------


def claim_name(pod: Obj, entry: Obj) -> str | None:
    """The ResourceClaim a pod's entry stands for; None when its claim is not created yet."""
    if entry.get("resourceClaimName"):
        return str(entry["resourceClaimName"])
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if status.get("name") == entry.get("name"):
            return str(status.get("resourceClaimName") or "") or None
    return None


def pod_claims(store: StoreLike, pod: Obj) -> tuple[list[Obj], str | None, bool]:
    """(the pod's claims, why it cannot be scheduled yet, whether that why is a PreFilter
    failure, worded per node as "0/N nodes are available: ...") for the pod's resourceClaims."""
    meta = pod["metadata"]
    ns = meta.get("namespace", "default")
    claims: list[Obj] = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = claim_name(pod, entry)
        if name is None:
            return [], f'pod "{ns}/{meta["name"]}": ResourceClaim not created yet', False
        try:
            claim = store.get("resourceclaims", ns, name)
        except ApiError:
            if entry.get("resourceClaimName"):
                return [], f'resourceclaim "{name}" not found', True
            why = f'waiting for dynamic resource controller to create the resourceclaim "{name}"'
            return [], why, True
        if claim["metadata"].get("deletionTimestamp"):
            return [], f'resourceclaim "{name}" is being deleted', True
        claims.append(claim)
    return claims, None, False


def _selects(selector: Obj | None, node: Obj) -> bool:
    """A NodeSelector (terms ORed, expressions ANDed) against a node; None selects every node."""
    if selector is None:
        return True
    labels = node["metadata"].get("labels") or {}
    fields = {"metadata.name": node["metadata"]["name"]}
    for term in selector.get("nodeSelectorTerms") or []:
        exprs, matched = term.get("matchExpressions") or [], term.get("matchFields") or []
        if not exprs and not matched:
            continue
        if all(match_expression(e, labels) for e in exprs) and all(
            match_expression(f, fields) for f in matched
        ):
            return True
    return False


def claims_reject(claims: list[Obj], node: Obj) -> str | None:
    """DynamicResources' Filter for one node: None when every claim can be used there."""
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation is None:
            return CANNOT_ALLOCATE
        if not _selects(allocation.get("nodeSelector"), node):
            return NOT_ON_NODE
    return None


def reserve(store: StoreLike, claims: list[Obj], pod: Obj) -> None:
    """PreBind: the pod is a consumer of each of its claims (`status.reservedFor`)."""
    meta = pod["metadata"]
    ref = {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}

    def add(obj: Obj) -> None:
        reserved = obj.setdefault("status", {}).setdefault("reservedFor", [])
        if not any(r.get("uid") == ref["uid"] for r in reserved):
            reserved.append(dict(ref))

    for claim in claims:
        m = claim["metadata"]
        try:
            store.mutate("resourceclaims", m.get("namespace"), m["name"], add, subresource="status")
        except ApiError as e:
            log.debug("dra: cannot reserve %s for %s: %s", m["name"], meta["name"], e)


# ---- the driver's side (a test's) ---------------------------------------------------------------


def allocate(
    store: StoreLike,
    namespace: str,
    name: str,
    *,
    node: str | None,
    driver: str,
    device: str,
    pool: str | None = None,
) -> Obj:
    """Allocate claim `name` as a DRA driver's devices are allocated: one result per request of
    the claim (device `device` of pool `pool`, the node's name by default), restricted to `node`
    (None: a device every node reaches). Returns the claim."""

    def write(obj: Obj) -> None:
        requests = ((obj.get("spec") or {}).get("devices") or {}).get("requests") or []
        results = [
            {
                "request": r["name"],
                "driver": driver,
                "pool": pool or node or driver,
                "device": device,
            }
            for r in requests
        ]
        allocation: Obj = {"devices": {"results": results}}
        if node is not None:
            allocation["nodeSelector"] = {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            }
        obj.setdefault("status", {})["allocation"] = allocation

    return store.mutate("resourceclaims", namespace, name, write, subresource="status")


# ---- kube-controller-manager's resourceclaim controller ----------------------------------------


class ResourceClaimController(StoreWorker):
    """Creates the ResourceClaims of pods' template entries (see the module); start() / stop()."""

    component = "resource_claim"

    def __init__(self, store: StoreLike) -> None:
        super().__init__(store)
        self._queue: dict[tuple[str, str], None] = {}
        self._waiting: dict[tuple[str, str], set[tuple[str, str]]] = {}  # template -> pods

    def _prime(self) -> None:
        for pod in self._store.list("pods")[0]:
            self._on_change("ADDED", "pods", pod)

    def _loops(self) -> list[tuple[str, Callable[[], None]]]:
        return [("resourceclaims", self._run)]

    def _on_change(self, etype: str, resource: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace", "default"), meta.get("name", ""))
        if resource == "resourceclaimtemplates" and etype != "DELETED":
            with self._cond:
                for pod in self._waiting.pop(key, set()):
                    self._queue[pod] = None
                self._cond.notify_all()
            return
        if resource != "pods" or etype == "DELETED" or not _needs_claims(obj):
            return
        with self._cond:
            self._queue[key] = None
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopping or bool(self._queue))
                if self._stopping:
                    return
                key = next(iter(self._queue))
                del self._queue[key]
            try:
                self._sync(*key)
            except Exception:
                log.exception("resourceclaim controller: syncing pod %s/%s failed", *key)

    def _sync(self, ns: str, name: str) -> None:
        try:
            pod = self._store.get("pods", ns, name)
        except ApiError:
            return
        if pod["metadata"].get("deletionTimestamp") or not _needs_claims(pod):
            return
        made: list[Obj] = []
        for entry in pod["spec"].get("resourceClaims") or []:
            template_name = entry.get("resourceClaimTemplateName")
            if not template_name or claim_name(pod, entry) is not None:
                continue
            try:
                template = self._store.get("resourceclaimtemplates", ns, template_name)
            except ApiError:
                with self._cond:
                    self._waiting.setdefault((ns, template_name), set()).add((ns, name))
                message = (  # the controller's words, its lister's NotFound
                    f"PodResourceClaim {entry['name']}: resource claim template "
                    f'"{template_name}": resourceclaimtemplate.resource.k8s.io '
                    f'"{template_name}" not found'
                )
                self._store.record_event(
                    pod,
                    "FailedResourceClaimCreation",
                    message,
                    type="Warning",
                    component="resourceclaim-controller",
                )
                break
            claim = self._store.create("resourceclaims", _claim_for(pod, entry, template))
            made.append({"name": entry["name"], "resourceClaimName": claim["metadata"]["name"]})
        if made:

            def record(obj: Obj) -> None:
                statuses = obj.setdefault("status", {}).setdefault("resourceClaimStatuses", [])
                statuses.extend(made)

            self._store.mutate("pods", ns, name, record, subresource="status")


def _needs_claims(pod: Obj) -> bool:
    if pod_terminal(pod):
        return False
    entries = (pod.get("spec") or {}).get("resourceClaims") or []
    return any(e.get("resourceClaimTemplateName") and claim_name(pod, e) is None for e in entries)


def _claim_for(pod: Obj, entry: Obj, template: Obj) -> Obj:
    meta = pod["metadata"]
    body = template.get("spec") or {}
    claim_meta: dict[str, Any] = copy.deepcopy(body.get("metadata") or {})
    claim_meta.update(
        {
            "generateName": f"{meta['name']}-{entry['name']}-",
            "namespace": meta.get("namespace", "default"),
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }
    )
    claim_meta.setdefault("annotations", {})[POD_CLAIM_NAME] = entry["name"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": claim_meta,
        "spec": copy.deepcopy(body.get("spec") or {}),
    }


__all__ = [
    "CANNOT_ALLOCATE",
    "NOT_ON_NODE",
    "POD_CLAIM_NAME",
    "ResourceClaimController",
    "allocate",
    "claim_name",
    "claims_reject",
    "pod_claims",
    "reserve",
]
