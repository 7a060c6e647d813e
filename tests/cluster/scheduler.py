"""The test cluster's scheduler: binds pending pods to nodes the way kube-scheduler decides.

Why a real filter chain rather than "first node": the deployer's `doctor` and our tests depend on
*why* a pod stays Pending, so the filters, their order and their messages follow kube-scheduler's
default profile (NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit,
InterPodAffinity, DynamicResources: tests/cluster/dra.py), each node failing on its first
rejecting plugin, and the FailedScheduling
message is assembled as `FitError.Error()` does: "0/4 nodes are available: 2 Insufficient
nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector." (reasons counted, sorted as
strings, joined with ", "; the preemption postscript is left out, as nothing here preempts).

Only pods whose spec.schedulerName is one of `names` are touched: a pod for an absent scheduler
(hami-scheduler, volcano) stays Pending with no condition and no event, as in a real cluster.

Leader election, as a running scheduler shows itself: each name served holds a Lease in
kube-system (`kube-scheduler` for default-scheduler, as upstream names it; the schedulerName
itself for the others), renewed every few seconds while the scheduler runs.

Event-driven: `store.subscribe` keeps a cache of nodes and bound pods and feeds a queue; one thread
schedules what is due. Unschedulable pods wait until something that could help changes (a node,
a pod ending or going away) instead of being retried on a timer. `set_delay` holds every pod in
the queue for that long first (fault injection: a slow scheduler).
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from tests.cluster import dra
from tests.cluster.errors import ApiError
from tests.cluster.node_common import (
    Obj,
    StoreLike,
    match_expression,
    match_label_selector,
    parse_quantity,
    pod_requests,
    set_condition,
)
from tests.cluster.worker import StoreWorker

log = logging.getLogger(__name__)

_NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
_UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
_HOSTNAME = "kubernetes.io/hostname"
#: How often the schedulers' Leases are renewed (kube-scheduler: every 2 s, 15 s duration).
LEASE_RENEW_S = 5.0
LEASE_DURATION_S = 15


def _micro_time() -> str:
    """A MicroTime, as Leases carry them: RFC 3339 with microseconds."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _lease(name: str, scheduler: str, stamp: str) -> Obj:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "holderIdentity": f"{scheduler}_test-cluster",
            "leaseDurationSeconds": LEASE_DURATION_S,
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": 0,
        },
    }


@dataclass
class _Placed:
    """What the filters need to know about a pod already on a node."""

    node: str
    namespace: str
    labels: dict[str, str]
    requests: dict[str, float]
    anti_terms: list[Obj]
    terminal: bool
    ports: list[tuple[str, str, int]] = field(default_factory=list)  # (hostIP, protocol, port)


@dataclass
class _Queued:
    pod: Obj
    since: float


class Scheduler(StoreWorker):
    """Schedules pods for the schedulerNames in `names`; start() / stop() / set_delay(s)."""

    def __init__(
        self,
        store: StoreLike,
        *,
        names: tuple[str, ...] | list[str] = ("default-scheduler",),
        delay_s: float = 0.0,
    ) -> None:
        super().__init__(store)
        self._names = tuple(names)
        self._delay_s = float(delay_s)
        self._nodes: dict[str, Obj] = {}
        self._placed: dict[str, _Placed] = {}
        self._queue: dict[str, _Queued] = {}
        self._unschedulable: dict[str, Obj] = {}
        self._last_failure: dict[str, tuple[str, float]] = {}
        self.bound = 0  # pods bound so far, for benchmarks and tests

    # ---- public ------------------------------------------------------------------------------

    def _prime(self) -> None:
        for node in self._store.list("nodes")[0]:
            self._on_change("ADDED", "nodes", node)
        for pod in self._store.list("pods")[0]:
            self._on_change("ADDED", "pods", pod)

    def _loops(self) -> list[tuple[str, Callable[[], None]]]:
        return [("scheduler", self._run), ("leases", self._hold_leases)]

    def set_delay(self, s: float) -> None:
        """Hold each pending pod this many seconds before scheduling it (fault injection).

        Applies to pods already waiting too, counted from when they entered the queue."""
        with self._cond:
            self._delay_s = float(s)
            self._cond.notify_all()

    @property
    def delay_s(self) -> float:
        return self._delay_s

    # ---- leader election ----------------------------------------------------------------------

    def _hold_leases(self) -> None:
        """Create, then renew every LEASE_RENEW_S, one Lease per scheduler name served."""
        names = {n: ("kube-scheduler" if n == "default-scheduler" else n) for n in self._names}
        while True:
            stamp = _micro_time()
            for scheduler, lease in names.items():

                def renew(obj: Obj, stamp: str = stamp) -> None:
                    obj.setdefault("spec", {})["renewTime"] = stamp

                try:
                    self._store.mutate("leases", "kube-system", lease, renew)
                except ApiError as e:
                    if e.code != 404:
                        continue
                    with contextlib.suppress(ApiError):
                        self._store.create("leases", _lease(lease, scheduler, stamp))
            with self._cond:
                if self._stopping or self._cond.wait_for(lambda: self._stopping, LEASE_RENEW_S):
                    return

    # ---- cache and queue ---------------------------------------------------------------------

    def _on_change(self, etype: str, resource: str, obj: Obj) -> None:
        if resource == "nodes":
            with self._cond:
                name = obj["metadata"]["name"]
                if etype == "DELETED":
                    self._nodes.pop(name, None)
                else:
                    self._nodes[name] = obj
                self._retry_unschedulable()
            return
        if (resource == "persistentvolumeclaims" and etype == "ADDED") or (
            resource == "resourceclaims" and etype != "DELETED"
        ):
            # A claim made or allocated (DynamicResources' queueing hint) may let pods go.
            with self._cond:
                self._retry_unschedulable()
            return
        if resource != "pods":
            return
        meta, spec = obj["metadata"], obj.get("spec") or {}
        uid = meta["uid"]
        phase = (obj.get("status") or {}).get("phase")
        terminal = phase in ("Succeeded", "Failed")
        with self._cond:
            if etype == "DELETED":
                self._queue.pop(uid, None)
                self._unschedulable.pop(uid, None)
                self._last_failure.pop(uid, None)
                if self._placed.pop(uid, None) is not None:
                    self._retry_unschedulable()
                return
            node = spec.get("nodeName")
            if node:
                self._queue.pop(uid, None)
                self._unschedulable.pop(uid, None)
                old = self._placed.get(uid)
                if old is None or old.terminal != terminal or old.labels != meta.get("labels"):
                    self._placed[uid] = _Placed(
                        node=node,
                        namespace=meta.get("namespace", "default"),
                        labels=dict(meta.get("labels") or {}),
                        requests=pod_requests(obj),
                        anti_terms=_required(spec, "podAntiAffinity"),
                        terminal=terminal,
                        ports=_host_ports(spec),
                    )
                    if old is not None and terminal and not old.terminal:
                        self._retry_unschedulable()
                return
            if (
                spec.get("schedulerName", "default-scheduler") not in self._names
                or meta.get("deletionTimestamp")
                or terminal
            ):
                return
            if uid in self._unschedulable and _claim_statuses(self._unschedulable[uid]) != (
                _claim_statuses(obj)
            ):
                # Its ResourceClaims were made: worth another go (the pod's own update).
                del self._unschedulable[uid]
                self._queue[uid] = _Queued(obj, time.monotonic())
                self._cond.notify_all()
            elif uid in self._unschedulable:
                self._unschedulable[uid] = obj
            elif uid in self._queue:
                self._queue[uid].pod = obj
            else:
                self._queue[uid] = _Queued(obj, time.monotonic())
                self._cond.notify_all()

    def _retry_unschedulable(self) -> None:
        """Something that could make room changed: every waiting pod gets another go (lock held)."""
        if not self._unschedulable:
            return
        now = time.monotonic()
        for uid, pod in self._unschedulable.items():
            self._queue[uid] = _Queued(pod, now)
        self._unschedulable.clear()
        self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    now = time.monotonic()
                    due = [u for u, q in self._queue.items() if q.since + self._delay_s <= now]
                    if due:
                        break
                    wait = None
                    if self._queue:
                        wait = min(q.since for q in self._queue.values()) + self._delay_s - now
                    self._cond.wait(wait)
                if self._stopping:
                    return
                batch = [self._queue.pop(u).pod for u in due]
                batch.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
                snap = self._snapshot()
            for pod in batch:
                try:
                    self._schedule_one(pod, snap)
                except Exception:
                    log.exception("scheduler: scheduling %s failed", pod["metadata"].get("name"))

    def _snapshot(self) -> _Snapshot:
        """Nodes and their usage for one batch (lock held); binds update it as they go."""
        snap = _Snapshot(
            nodes=sorted(self._nodes.values(), key=lambda n: _natural(n["metadata"]["name"]))
        )
        for n in snap.nodes:
            name = n["metadata"]["name"]
            snap.labels[name] = n["metadata"].get("labels") or {}
            allocatable = (n.get("status") or {}).get("allocatable") or {}
            snap.alloc[name] = {k: _quantity(v) for k, v in allocatable.items()}
        for p in self._placed.values():
            if not p.terminal:
                snap.add(p)
        return snap

    # ---- one pod ---------------------------------------------------------------------------

    def _schedule_one(self, pod: Obj, snap: _Snapshot) -> None:
        nodes, usage = snap.nodes, snap.usage
        scheduler = pod.get("spec", {}).get("schedulerName", "default-scheduler")
        missing = self._missing_claim(pod)
        if missing and nodes:
            # VolumeBinding's PreFilter rejects before any node is looked at.
            msg = (
                f'0/{len(nodes)} nodes are available: persistentvolumeclaim "{missing}" not found.'
            )
            self._unschedulable_pod(pod, msg, scheduler)
            return
        claims, waiting, prefilter = dra.pod_claims(self._store, pod)
        if waiting is not None and nodes:
            msg = f"0/{len(nodes)} nodes are available: {waiting}." if prefilter else waiting
            self._unschedulable_pod(pod, msg, scheduler)
            return
        requests = pod_requests(pod)
        ports = _host_ports(pod.get("spec") or {})
        reasons: dict[str, list[str]] = {}
        feasible: list[tuple[float, int, str]] = []
        for i, node in enumerate(nodes):
            name = node["metadata"]["name"]
            why = _filter(pod, requests, ports, node, usage.get(name, {}), snap)
            if not why and claims:
                rejected = dra.claims_reject(claims, node)
                why = [rejected] if rejected else []
            if why:
                reasons[name] = why
            else:
                feasible.append((_score(requests, snap.alloc[name], usage.get(name, {})), i, name))
        meta = pod["metadata"]
        ns, pod_name = meta.get("namespace", "default"), meta["name"]
        if feasible:
            feasible.sort()
            target = feasible[0][2]
            dra.reserve(self._store, claims, pod)  # PreBind
            placed = self._bind(pod, target, requests, scheduler)
            if placed is not None:
                snap.add(placed)
            return
        message = _fit_error(len(nodes), reasons)
        self._unschedulable_pod(pod, message, scheduler)
        log.debug("scheduler: %s/%s unschedulable: %s", ns, pod_name, message)

    def _missing_claim(self, pod: Obj) -> str | None:
        ns = pod["metadata"].get("namespace", "default")
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            if not claim:
                continue
            try:
                self._store.get("persistentvolumeclaims", ns, claim)
            except ApiError:
                return str(claim)
        return None

    def _bind(
        self, pod: Obj, node: str, requests: dict[str, float], scheduler: str
    ) -> _Placed | None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        uid = meta["uid"]

        def bind(obj: Obj) -> None:
            if obj["metadata"].get("uid") != uid or obj.get("spec", {}).get("nodeName"):
                raise _Skip()
            if obj["metadata"].get("deletionTimestamp"):
                raise _Skip()
            obj["spec"]["nodeName"] = node
            conds = obj.setdefault("status", {}).setdefault("conditions", [])
            set_condition(conds, "PodScheduled", "True")

        # Assume first, as kube-scheduler does, so the next pod in the batch sees the room taken.
        placed = _Placed(
            node=node,
            namespace=meta.get("namespace", "default"),
            labels=dict(meta.get("labels") or {}),
            requests=requests,
            anti_terms=_required(spec, "podAntiAffinity"),
            terminal=False,
            ports=_host_ports(spec),
        )
        with self._cond:
            self._placed[uid] = placed
        try:
            bound = self._store.mutate("pods", meta.get("namespace"), meta["name"], bind)
        except (ApiError, _Skip):
            with self._cond:
                current = self._placed.get(uid)
                if current is not None and current.node == node and not spec.get("nodeName"):
                    self._placed.pop(uid, None)
            return None
        self.bound += 1
        self._last_failure.pop(uid, None)
        ns = meta.get("namespace", "default")
        self._store.record_event(
            bound,
            "Scheduled",
            f"Successfully assigned {ns}/{meta['name']} to {node}",
            component=scheduler,
        )
        return placed

    def _unschedulable_pod(self, pod: Obj, message: str, scheduler: str) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        with self._cond:
            if self._stopping:
                return
            self._unschedulable[uid] = pod

        def mark(obj: Obj) -> None:
            conds = obj.setdefault("status", {}).setdefault("conditions", [])
            set_condition(
                conds,
                "PodScheduled",
                "False",
                reason="Unschedulable",
                message=message,
                probe_time=True,
            )

        try:
            current = self._store.mutate(
                "pods", meta.get("namespace"), meta["name"], mark, subresource="status"
            )
        except ApiError:
            with self._cond:
                self._unschedulable.pop(uid, None)
            return
        # One event per distinct reason (and a reminder every 30 s while it lasts), so a busy
        # cluster does not drown the namespace's events in identical copies.
        last = self._last_failure.get(uid)
        now = time.monotonic()
        if last is None or last[0] != message or now - last[1] > 30:
            self._last_failure[uid] = (message, now)
            self._store.record_event(
                current, "FailedScheduling", message, type="Warning", component=scheduler
            )


@dataclass
class _Snapshot:
    """The cluster as one scheduling batch sees it."""

    nodes: list[Obj]
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    alloc: dict[str, dict[str, float]] = field(default_factory=dict)  # parsed once per batch
    usage: dict[str, dict[str, float]] = field(default_factory=dict)
    placed: list[_Placed] = field(default_factory=list)
    with_anti: list[_Placed] = field(default_factory=list)  # pods carrying anti-affinity terms
    ports: dict[str, list[tuple[str, str, int]]] = field(default_factory=dict)

    def add(self, p: _Placed) -> None:
        if p.ports:
            self.ports.setdefault(p.node, []).extend(p.ports)
        u = self.usage.setdefault(p.node, {"pods": 0.0})
        u["pods"] += 1
        for k, v in p.requests.items():
            u[k] = u.get(k, 0.0) + v
        self.placed.append(p)
        if p.anti_terms:
            self.with_anti.append(p)


class _Skip(Exception):
    """The pod changed under us (bound elsewhere, deleted): nothing to do."""


# ---- filters -------------------------------------------------------------------------------


def _filter(
    pod: Obj,
    requests: dict[str, float],
    wanted: list[tuple[str, str, int]],
    node: Obj,
    used: dict[str, float],
    snap: _Snapshot,
) -> list[str]:
    """The reasons `node` rejects `pod`: those of the first plugin that rejects, as upstream."""
    spec = pod.get("spec") or {}
    tolerations = spec.get("tolerations") or []
    node_spec = node.get("spec") or {}
    if node_spec.get("unschedulable") and not _tolerated(tolerations, _UNSCHEDULABLE_TAINT):
        return ["node(s) were unschedulable"]
    taints = list(node_spec.get("taints") or [])
    if not _node_ready(node) and not any(t.get("key") == _NOT_READY_TAINT["key"] for t in taints):
        taints.append(_NOT_READY_TAINT)  # what the node lifecycle controller would add
    for taint in taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(
            tolerations, taint
        ):
            return [
                f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
            ]
    labels = node["metadata"].get("labels") or {}
    if not _node_affinity_ok(spec, labels, node["metadata"]["name"]):
        return ["node(s) didn't match Pod's node affinity/selector"]
    if wanted and _ports_conflict(wanted, snap.ports.get(node["metadata"]["name"], [])):
        return ["node(s) didn't have free ports for the requested pod ports"]
    allocatable = snap.alloc.get(node["metadata"]["name"], {})
    reasons = []
    if used.get("pods", 0) + 1 > allocatable.get("pods", 110.0):
        reasons.append("Too many pods")
    for resource, want in sorted(requests.items()):
        if want <= 0:
            continue
        have = allocatable.get(resource, 0.0)
        if used.get(resource, 0.0) + want > have + 1e-9:
            reasons.append(f"Insufficient {resource}")
    if reasons:
        return reasons
    why = _inter_pod(pod, node["metadata"]["name"], labels, snap)
    return [why] if why else []


def _claim_statuses(pod: Obj) -> list[Obj]:
    return list((pod.get("status") or {}).get("resourceClaimStatuses") or [])


def _host_ports(spec: Obj) -> list[tuple[str, str, int]]:
    """Host ports a pod takes: explicit hostPorts, and with hostNetwork every containerPort."""
    out = []
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        for port in c.get("ports") or []:
            host_port = port.get("hostPort") or (
                port.get("containerPort") if spec.get("hostNetwork") else None
            )
            if host_port:
                out.append(
                    (port.get("hostIP") or "0.0.0.0", port.get("protocol", "TCP"), int(host_port))
                )
    return out


def _ports_conflict(wanted: list[tuple[str, str, int]], used: list[tuple[str, str, int]]) -> bool:
    """NodePorts' rule: same protocol and port, and the same hostIP or either one a wildcard."""
    for ip, proto, port in wanted:
        for uip, uproto, uport in used:
            same_ip = ip == uip or "0.0.0.0" in (ip, uip)
            if port == uport and proto == uproto and same_ip:
                return True
    return False


def _node_ready(node: Obj) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return True  # a node that never reported is taken as ready (A creates them Ready)


def _tolerated(tolerations: list[Obj], taint: Obj) -> bool:
    for tol in tolerations:
        effect = tol.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        op = tol.get("operator", "Equal")
        key = tol.get("key", "")
        if op == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def _node_affinity_ok(spec: Obj, labels: dict[str, str], node_name: str) -> bool:
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or None
    if required is None:
        return True
    for term in required.get("nodeSelectorTerms") or []:
        exprs = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not exprs and not fields:
            continue  # an empty term matches nothing
        if all(match_expression(e, labels) for e in exprs) and all(
            match_expression(f, {"metadata.name": node_name}) for f in fields
        ):
            return True
    return False


def _required(spec: Obj, kind: str) -> list[Obj]:
    terms = ((spec.get("affinity") or {}).get(kind) or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return list(terms or [])


def _term_namespaces(term: Obj, own: str) -> set[str] | None:
    """Namespaces a term looks at; None means all (an empty namespaceSelector)."""
    if term.get("namespaceSelector") == {}:
        return None
    names = set(term.get("namespaces") or [])
    return names or {own}


def _term_matches(term: Obj, own_ns: str, other: _Placed) -> bool:
    spaces = _term_namespaces(term, own_ns)
    if spaces is not None and other.namespace not in spaces:
        return False
    return match_label_selector(term.get("labelSelector") or {}, other.labels)


def _inter_pod(
    pod: Obj,
    node_name: str,
    labels: dict[str, str],
    snap: _Snapshot,
) -> str | None:
    """InterPodAffinity's filter: affinity, then anti-affinity, then existing pods' anti-affinity."""
    spec = pod.get("spec") or {}
    affinity = _required(spec, "podAffinity")
    anti = _required(spec, "podAntiAffinity")
    if not affinity and not anti and not snap.with_anti:
        return None  # the common case, kept O(1) so 1,024 pods schedule in a blink
    placed, node_labels = snap.placed, snap.labels
    meta = pod["metadata"]
    ns = meta.get("namespace", "default")
    pod_labels = meta.get("labels") or {}

    def same_domain(other: _Placed, key: str) -> bool:
        if key == _HOSTNAME and _HOSTNAME not in labels:
            return other.node == node_name
        return key in labels and node_labels.get(other.node, {}).get(key) == labels[key]

    for term in affinity:
        key = term.get("topologyKey", _HOSTNAME)
        matching = [p for p in placed if _term_matches(term, ns, p)]
        if any(same_domain(p, key) for p in matching):
            continue
        # The first pod of a group that selects itself may go anywhere (upstream's special case).
        self_match = match_label_selector(term.get("labelSelector") or {}, pod_labels)
        if matching or not self_match or key not in labels:
            return "node(s) didn't match pod affinity rules"
    for term in anti:
        key = term.get("topologyKey", _HOSTNAME)
        if any(same_domain(p, key) and _term_matches(term, ns, p) for p in placed):
            return "node(s) didn't match pod anti-affinity rules"
    for other in snap.with_anti:
        for term in other.anti_terms:
            key = term.get("topologyKey", _HOSTNAME)
            spaces = _term_namespaces(term, other.namespace)
            if spaces is not None and ns not in spaces:
                continue
            if same_domain(other, key) and match_label_selector(
                term.get("labelSelector") or {}, pod_labels
            ):
                return "node(s) didn't satisfy existing pods anti-affinity rules"
    return None


def _score(
    requests: dict[str, float], allocatable: dict[str, float], used: dict[str, float]
) -> float:
    """Lower is better: least allocated after placement (upstream's default spreads pods)."""
    total = 0.0
    for resource in ("cpu", "memory", "nvidia.com/gpu"):
        have = allocatable.get(resource, 0.0)
        if have > 0:
            total += (used.get(resource, 0.0) + requests.get(resource, 0.0)) / have
    pods = allocatable.get("pods", 110.0) or 110.0
    return total + (used.get("pods", 0.0) + 1) / pods


def _quantity(value: Any) -> float:
    try:
        return parse_quantity(value)
    except ValueError:
        return 0.0


def _fit_error(num_nodes: int, reasons: dict[str, list[str]]) -> str:
    """kube-scheduler's FitError.Error(): "0/N nodes are available: <count reason>, ...."""
    if num_nodes == 0:
        return "no nodes available to schedule pods"
    counts: dict[str, int] = {}
    for why in reasons.values():
        for r in why:
            counts[r] = counts.get(r, 0) + 1
    parts = sorted(f"{n} {r}" for r, n in counts.items())
    return f"0/{num_nodes} nodes are available: {', '.join(parts)}."


def _natural(name: str) -> tuple[str, int]:
    m = re.match(r"^(.*?)(\d+)$", name)
    return (m.group(1), int(m.group(2))) if m else (name, -1)


__all__ = ["Scheduler"]
