"""In-memory object store of the test cluster: the part of kube-apiserver + etcd the tests need.

Every object is a plain dict shaped as the Kubernetes API shapes it. The store owns what the real
API server owns and what every other part relies on being consistent: resourceVersions (one global
counter, as etcd's revision), creation defaults, optimistic concurrency, selectors, watch history
with 410 Gone, graceful pod deletion and garbage collection by ownerReferences. The HTTP layer
(apiserver.py) only translates; the scheduler, controllers and kubelet call this module directly.

Ordering guarantee: watchers and subscribers see events in resourceVersion order, because events
are queued under the lock and delivered by whichever thread drains the queue (never two at once).
"""

from __future__ import annotations

import copy
import logging
import re
import secrets
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TypeVar

from tests.cluster import crds, errors
from tests.cluster.errors import ApiError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
_T = TypeVar("_T")
Selector = str | Mapping[str, Any] | None


@dataclass(frozen=True)
class ResourceInfo:
    """What discovery and the REST paths need to know about one resource."""

    plural: str
    kind: str
    group: str  # "" for the core group
    version: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )
    storage_key: str = ""
    """The store's name for it when the plural alone is ambiguous (custom resources:
    `<plural>.<group>`, as two groups may both serve `podgroups`)."""
    schema: Any = field(default=None, compare=False, hash=False)
    """A custom resource's structural schema (openAPIV3Schema), None for built-in kinds."""

    @property
    def key(self) -> str:
        """The resource name store methods take."""
        return self.storage_key or self.plural

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()


RESOURCES: dict[str, ResourceInfo] = {
    r.plural: r
    for r in (
        ResourceInfo("pods", "Pod", "", "v1", True, ("po",), ("status", "log")),
        ResourceInfo("nodes", "Node", "", "v1", False, ("no",), ("status",)),
        ResourceInfo("namespaces", "Namespace", "", "v1", False, ("ns",), ("status",)),
        ResourceInfo("services", "Service", "", "v1", True, ("svc",), ("status",)),
        ResourceInfo("endpoints", "Endpoints", "", "v1", True, ("ep",)),
        ResourceInfo("configmaps", "ConfigMap", "", "v1", True, ("cm",)),
        ResourceInfo("secrets", "Secret", "", "v1", True),
        ResourceInfo("serviceaccounts", "ServiceAccount", "", "v1", True, ("sa",)),
        ResourceInfo(
            "persistentvolumeclaims", "PersistentVolumeClaim", "", "v1", True, ("pvc",), ("status",)
        ),
        ResourceInfo("events", "Event", "", "v1", True, ("ev",)),
        # Stored and served, not enforced: what doctor reads to predict admission.
        ResourceInfo("resourcequotas", "ResourceQuota", "", "v1", True, ("quota",), ("status",)),
        ResourceInfo("limitranges", "LimitRange", "", "v1", True, ("limits",)),
        ResourceInfo("leases", "Lease", "coordination.k8s.io", "v1", True),
        ResourceInfo("jobs", "Job", "batch", "v1", True, (), ("status",)),
        # Stored and served, no controller: `nodes schedule`'s CronJob, which `cleanup
        # --schedule` deletes (tests make the Jobs a CronJob controller would, owned by it).
        ResourceInfo("cronjobs", "CronJob", "batch", "v1", True, ("cj",), ("status",)),
        # Dynamic Resource Allocation as Kubernetes 1.34 serves it (tests/cluster/dra.py).
        ResourceInfo(
            "resourceclaims", "ResourceClaim", "resource.k8s.io", "v1", True, (), ("status",)
        ),
        ResourceInfo(
            "resourceclaimtemplates", "ResourceClaimTemplate", "resource.k8s.io", "v1", True
        ),
        ResourceInfo("deviceclasses", "DeviceClass", "resource.k8s.io", "v1", False),
        ResourceInfo("resourceslices", "ResourceSlice", "resource.k8s.io", "v1", False),
        ResourceInfo(
            "statefulsets", "StatefulSet", "apps", "v1", True, ("sts",), ("status", "scale")
        ),
        # Stored and served, no controller: what doctor reads of a cluster's add-ons (device
        # plugins; DRA drivers' ResourceSlices are above); tests write them as add-ons would.
        ResourceInfo("daemonsets", "DaemonSet", "apps", "v1", True, ("ds",), ("status",)),
        # Stored and served, not enforced: --network-policy's (no CNI here to apply it).
        ResourceInfo(
            "networkpolicies", "NetworkPolicy", "networking.k8s.io", "v1", True, ("netpol",)
        ),
        ResourceInfo("roles", "Role", "rbac.authorization.k8s.io", "v1", True),
        ResourceInfo("rolebindings", "RoleBinding", "rbac.authorization.k8s.io", "v1", True),
        ResourceInfo("clusterroles", "ClusterRole", "rbac.authorization.k8s.io", "v1", False),
        ResourceInfo(
            "clusterrolebindings", "ClusterRoleBinding", "rbac.authorization.k8s.io", "v1", False
        ),
        # Stored and served, not enforced: `nccl-k8s rbac --label-nodes` prints one of each
        # (tests/test_rbac.py checks its CEL apart from a cluster).
        ResourceInfo(
            "validatingadmissionpolicies",
            "ValidatingAdmissionPolicy",
            "admissionregistration.k8s.io",
            "v1",
            False,
            (),
            ("status",),
        ),
        ResourceInfo(
            "validatingadmissionpolicybindings",
            "ValidatingAdmissionPolicyBinding",
            "admissionregistration.k8s.io",
            "v1",
            False,
        ),
        # Not stored: the API server answers a create with the review (tests/cluster/rbac.py).
        ResourceInfo(
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            "authorization.k8s.io",
            "v1",
            False,
            verbs=("create",),
        ),
        ResourceInfo(
            "customresourcedefinitions",
            "CustomResourceDefinition",
            "apiextensions.k8s.io",
            "v1",
            False,
            ("crd", "crds"),
            ("status",),
        ),
    )
}

#: Admission: called for every create, after defaults and name generation, inside the store's
#: lock; raising ApiError refuses the object (tests/cluster/admission.py: Pod Security).
Admission = Callable[["Store", str, Obj], None]


def info(resource: str, table: Mapping[str, ResourceInfo] = RESOURCES) -> ResourceInfo:
    try:
        return table[resource]
    except KeyError:
        raise errors.ApiError(
            404, "NotFound", f'the server could not find the requested resource "{resource}"'
        ) from None


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def clone(value: _T) -> _T:
    """Deep copy of JSON-shaped data, several times faster than copy.deepcopy (which dominated
    the store's profile at 1,000 pods); anything not dict/list/scalar falls back to deepcopy."""
    t = type(value)
    if t is dict:
        return {k: clone(v) for k, v in value.items()}  # type: ignore[attr-defined,return-value]
    if t is list:
        return [clone(v) for v in value]  # type: ignore[attr-defined,return-value]
    if t in (str, int, float, bool) or value is None:
        return value
    return copy.deepcopy(value)


# --------------------------------------------------------------------------------------------
# Selectors


@dataclass(frozen=True)
class _Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "=":
            return present and value == self.values[0]
        if self.op == "!=":
            return not present or value != self.values[0]
        if self.op == "in":
            return present and value in self.values
        if self.op == "notin":
            return not present or value not in self.values
        if self.op == "exists":
            return present
        return not present  # "!"


_SET_RE = re.compile(r"^\s*([^\s!=()]+)\s+(in|notin)\s*\(([^)]*)\)\s*$")


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses (`a in (x,y),b=c` is two requirements)."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def parse_label_selector(selector: Selector) -> list[_Requirement]:
    """Parse a selector string, a label map, or a LabelSelector object (matchLabels/Expressions).

    Raises ApiError(400) on syntax kube-apiserver would reject, so a typo in a test is loud.
    """
    if not selector:
        return []
    if isinstance(selector, Mapping):
        if "matchLabels" in selector or "matchExpressions" in selector:
            reqs = [
                _Requirement(str(k), "=", (str(v),))
                for k, v in (selector.get("matchLabels") or {}).items()
            ]
            for expr in selector.get("matchExpressions") or []:
                op = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}.get(
                    expr.get("operator", "")
                )
                if op is None:
                    raise errors.bad_request(f"invalid label selector operator {expr!r}")
                reqs.append(_Requirement(expr["key"], op, tuple(expr.get("values") or ())))
            return reqs
        return [_Requirement(str(k), "=", (str(v),)) for k, v in selector.items()]
    reqs = []
    for part in _split_top(selector):
        m = _SET_RE.match(part)
        if m:
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            reqs.append(_Requirement(m.group(1), m.group(2), values))
        elif "!=" in part:
            k, v = part.split("!=", 1)
            reqs.append(_Requirement(k.strip(), "!=", (v.strip(),)))
        elif "==" in part:
            k, v = part.split("==", 1)
            reqs.append(_Requirement(k.strip(), "=", (v.strip(),)))
        elif "=" in part:
            k, v = part.split("=", 1)
            reqs.append(_Requirement(k.strip(), "=", (v.strip(),)))
        elif part.startswith("!"):
            reqs.append(_Requirement(part[1:].strip(), "!"))
        elif re.fullmatch(r"[A-Za-z0-9_./-]+", part):
            reqs.append(_Requirement(part, "exists"))
        else:
            raise errors.bad_request(f"unable to parse requirement: {part!r}")
    return reqs


def labels_match(labels: Mapping[str, str] | None, selector: Selector) -> bool:
    """True when `labels` satisfy `selector` (any form parse_label_selector accepts)."""
    reqs = parse_label_selector(selector)
    return all(r.matches(labels or {}) for r in reqs)


def _field_value(obj: Obj, path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


_FIELD_OK = re.compile(
    r"^(metadata\.name|metadata\.namespace|spec\.nodeName|status\.phase|spec\.schedulerName"
    r"|spec\.unschedulable|status\.podIP|involvedObject\.[A-Za-z]+|reason|type|source"
    r"|reportingComponent)$"
)


def parse_field_selector(selector: Selector) -> list[tuple[str, str, str]]:
    """(path, op, value) triples; op is "=" or "!=". Unknown fields are a 400 as in Kubernetes."""
    if not selector:
        return []
    if isinstance(selector, Mapping):
        return [(str(k), "=", str(v)) for k, v in selector.items()]
    out = []
    for part in _split_top(selector):
        if "!=" in part:
            k, v = part.split("!=", 1)
            op = "!="
        elif "==" in part:
            k, v = part.split("==", 1)
            op = "="
        elif "=" in part:
            k, v = part.split("=", 1)
            op = "="
        else:
            raise errors.bad_request(f"invalid field selector: {part!r}")
        k = k.strip()
        if not _FIELD_OK.match(k):
            raise errors.bad_request(f'field label not supported: "{k}"')
        out.append((k, op, v.strip()))
    return out


def fields_match(obj: Obj, selector: Selector) -> bool:
    for path, op, value in parse_field_selector(selector):
        actual = _field_value(obj, path)
        if (actual == value) != (op == "="):
            return False
    return True


# --------------------------------------------------------------------------------------------
# Watch


class Watch:
    """A stream of (type, obj) for one resource, in resourceVersion order, until close().

    Objects that move into or out of the selector arrive as ADDED / DELETED, as kube-apiserver
    does, so a watcher's view equals a fresh list filtered the same way.
    """

    def __init__(
        self,
        store: Store,
        resource: str,
        namespace: str | None,
        label_selector: Selector,
        field_selector: Selector,
    ) -> None:
        self._store = store
        self.resource = resource
        self.namespace = namespace
        self._labels = parse_label_selector(label_selector)
        self._fields = parse_field_selector(field_selector)
        self._queue: deque[tuple[str, Obj]] = deque()
        self._cond = threading.Condition()
        self._closed = False

    def _selected(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata", {})
        if self.namespace and meta.get("namespace") != self.namespace:
            return False
        labels = meta.get("labels") or {}
        if not all(r.matches(labels) for r in self._labels):
            return False
        return all((_field_value(obj, p) == v) == (op == "=") for p, op, v in self._fields)

    def _offer(self, etype: str, old: Obj | None, new: Obj) -> None:
        """Called by the store under its lock; decides what this watcher sees of one change."""
        was, now = self._selected(old), self._selected(new)
        if etype == "DELETED":
            out = "DELETED" if (now or was) else None
        elif was and now:
            out = "MODIFIED"
        elif now:
            out = "ADDED"
        elif was:
            out = "DELETED"
        else:
            out = None
        if out is None:
            return
        with self._cond:
            if not self._closed:
                self._queue.append((out, new))
                self._cond.notify_all()

    def next(self, timeout: float | None = None) -> tuple[str, Obj] | None:
        """The next event (a deep copy), or None on timeout or once closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._queue and not self._closed:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining)
            if not self._queue:
                return None
            etype, obj = self._queue.popleft()
        return etype, clone(obj)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()
        self._store._unwatch(self)

    def __iter__(self) -> Iterator[tuple[str, Obj]]:
        while True:
            item = self.next()
            if item is None:
                return
            yield item

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------------------------
# Store


@dataclass
class _Change:
    rv: int
    etype: str
    resource: str
    old: Obj | None
    new: Obj


Callback = Callable[[str, str, Obj], None]


@dataclass
class Store:
    """Thread-safe in-memory API objects. See tests/cluster/INTERFACE.md for the contract.

    `history` is how many past changes a watch can resume from; older resourceVersions get 410.
    """

    history: int = 20000
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _objects: dict[str, dict[tuple[str, str], Obj]] = field(default_factory=dict, repr=False)
    _rv: int = 0
    _log: deque[_Change] = field(default_factory=deque, repr=False)
    _compacted_rv: int = 0  # every change with rv <= this is gone from _log
    _watches: dict[str, set[Watch]] = field(default_factory=dict, repr=False)
    _subscribers: list[Callback] = field(default_factory=list, repr=False)
    _pending: deque[_Change] = field(default_factory=deque, repr=False)
    _draining: bool = False
    _drain_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # Indexes kept by _record, so GC and event de-duplication stay cheap at 1,000+ pods.
    _owned: dict[str, set[tuple[str, tuple[str, str]]]] = field(default_factory=dict, repr=False)
    _event_keys: dict[tuple[str, ...], str] = field(default_factory=dict, repr=False)
    _by_uid: dict[str, tuple[str, tuple[str, str]]] = field(default_factory=dict, repr=False)
    _ns_count: dict[str, int] = field(default_factory=dict, repr=False)
    resources: dict[str, ResourceInfo] = field(default_factory=lambda: dict(RESOURCES))
    """What this store serves, by ResourceInfo.key: the built-in kinds, then every CRD's."""
    admission: list[Admission] = field(default_factory=list)
    """Admission plugins run on every create (the API's and the controllers' alike)."""

    def __post_init__(self) -> None:
        for r in self.resources:
            self._objects[r] = {}
            self._watches[r] = set()
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.create("namespaces", {"metadata": {"name": ns}})

    # ---- reading ---------------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        with self._lock:
            return str(self._rv)

    def get(self, resource: str, namespace: str | None, name: str) -> Obj:
        ri = info(resource, self.resources)
        with self._lock:
            obj = self._objects[resource].get(self._key(ri, namespace, name))
            if obj is None:
                raise errors.not_found(resource, name, ri.group)
            return clone(obj)

    def list(
        self,
        resource: str,
        namespace: str | None = None,
        label_selector: Selector = None,
        field_selector: Selector = None,
        *,
        after: tuple[str, str] | None = None,
        limit: int | None = None,
        project: Callable[[Obj], Any] | None = None,
    ) -> tuple[list[Obj], str]:
        """Matching objects sorted by namespace/name, and the resourceVersion to watch from.

        A page, as kube-apiserver serves one from its cache: only objects whose (namespace,
        name) sorts after `after`, at most `limit` of them (a page costs its own size, not the
        whole list's). `project` makes what is returned from each object under the lock in
        place of a full copy (a Table row, the metadata alone); it must not keep references
        into the object it is given."""
        ri = info(resource, self.resources)
        labels = parse_label_selector(label_selector)
        fields = parse_field_selector(field_selector)
        take = project or clone
        with self._lock:
            out: list[Any] = []
            for key, obj in sorted(self._objects[resource].items()):
                ns = key[0]
                if ri.namespaced and namespace and ns != namespace:
                    continue
                if after is not None and key <= after:
                    continue
                obj_labels = obj["metadata"].get("labels") or {}
                if not all(r.matches(obj_labels) for r in labels):
                    continue
                if not all((_field_value(obj, p) == v) == (op == "=") for p, op, v in fields):
                    continue
                if limit is not None and len(out) >= limit:
                    break
                out.append(take(obj))
            return out, str(self._rv)

    # ---- writing ---------------------------------------------------------------------------

    def create(self, resource: str, obj: Obj) -> Obj:
        ri = info(resource, self.resources)
        obj = clone(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
        name = meta.get("name") or ""
        if ri.namespaced:
            meta["namespace"] = meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        obj["apiVersion"] = obj.get("apiVersion") or ri.api_version
        obj["kind"] = obj.get("kind") or ri.kind
        _validate(ri, obj)
        crd = crds.resource_info(obj) if resource == "customresourcedefinitions" else None
        with self._lock:
            ns = meta.get("namespace", "")
            if ri.namespaced:
                ns_obj = self._objects["namespaces"].get(("", ns))
                if ns_obj is None:
                    raise errors.not_found("namespaces", ns)
                if ns_obj["metadata"].get("deletionTimestamp"):
                    raise ApiError(
                        403,
                        "Forbidden",
                        f'{resource} "{name}" is forbidden: unable to create new content in '
                        f"namespace {ns} because it is being terminated",
                    )
            for admit in self.admission:
                admit(self, resource, obj)
            key = self._key(ri, ns, name)
            if key in self._objects[resource]:
                raise errors.already_exists(resource, name, ri.group)
            for k in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
                meta.pop(k, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta["generation"] = 1
            _default(ri, obj)
            if crd is not None:
                crds.established(obj)
            self._rv += 1
            meta["resourceVersion"] = str(self._rv)
            self._objects[resource][key] = obj
            self._record("ADDED", resource, None, obj)
            if crd is not None:
                # Served from now on: routes, discovery and watches of the new resource.
                self.resources[crd.key] = crd
                self._objects.setdefault(crd.key, {})
                self._watches.setdefault(crd.key, set())
            out = clone(obj)
        self._drain()
        return out

    def update(self, resource: str, obj: Obj, *, subresource: str | None = None) -> Obj:
        """Replace an object. A non-empty metadata.resourceVersion must be the current one (409).

        With subresource="status" only .status changes; without it everything the caller sends
        is taken (the API server keeps .status itself for PUTs on the main resource).
        """
        ri = info(resource, self.resources)
        meta = obj.get("metadata") or {}
        name = meta.get("name") or ""
        ns = meta.get("namespace") or ("default" if ri.namespaced else "")
        with self._lock:
            current = self._objects[resource].get(self._key(ri, ns, name))
            if current is None:
                raise errors.not_found(resource, name, ri.group)
            rv = meta.get("resourceVersion")
            if rv and str(rv) != current["metadata"]["resourceVersion"]:
                raise errors.conflict(
                    resource,
                    name,
                    "the object has been modified; please apply your changes to the latest "
                    "version and try again",
                    ri.group,
                )
            out = self._replace(ri, current, clone(obj), subresource)
        self._drain()
        return out

    def mutate(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        fn: Callable[[Obj], Any],
        *,
        subresource: str | None = None,
    ) -> Obj:
        """Apply fn to a copy of the current object and commit it, all under the lock."""
        ri = info(resource, self.resources)
        with self._lock:
            current = self._objects[resource].get(self._key(ri, namespace, name))
            if current is None:
                raise errors.not_found(resource, name, ri.group)
            new = clone(current)
            fn(new)
            out = self._replace(ri, current, new, subresource)
        self._drain()
        return out

    def delete(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        *,
        propagation: str = "Background",
        grace_period_s: int | None = None,
        preconditions: dict[str, str] | None = None,
    ) -> Obj:
        """Delete, gracefully for bound pods (the kubelet finalizes), cascading to dependents.

        `preconditions` ({"uid": ..., "resourceVersion": ...}, DeleteOptions' field) must match
        the object or nothing is deleted: 409 Conflict "Precondition failed", as kube-apiserver.
        Returns the object as it is now: with deletionTimestamp if it lingers, else as it was.
        """
        ri = info(resource, self.resources)
        if propagation not in ("Background", "Foreground", "Orphan"):
            raise errors.bad_request(f"unsupported propagationPolicy {propagation!r}")
        with self._lock:
            key = self._key(ri, namespace, name)
            current = self._objects[resource].get(key)
            if current is None:
                raise errors.not_found(resource, name, ri.group)
            for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
                want = (preconditions or {}).get(field)
                have = current["metadata"].get(field)
                if want is not None and want != have:
                    raise errors.conflict(
                        resource,
                        name,
                        f"Precondition failed: {label} in precondition: {want}, {label} in "
                        f"object meta: {have}",
                        ri.group,
                    )
            if resource == "pods" and self._graceful(current, grace_period_s):
                grace = self._grace(current, grace_period_s)
                meta = current["metadata"]
                previous = meta.get("deletionGracePeriodSeconds")
                if previous is not None and previous <= grace:
                    return clone(current)
                new = clone(current)
                new["metadata"]["deletionTimestamp"] = rfc3339(time.time() + grace)
                new["metadata"]["deletionGracePeriodSeconds"] = grace
                out = self._replace(ri, current, new, None, force=True)
            elif current["metadata"].get("deletionTimestamp") and resource != "pods":
                return clone(current)  # already going; a second delete changes nothing
            elif resource == "pods" and not current["metadata"].get("finalizers"):
                out = self._remove(ri, key, propagation)  # unbound, finished or forced
            else:
                out = self._delete_now_or_mark(ri, key, propagation)
        self._drain()
        return out

    def finalize_delete(self, resource: str, namespace: str | None, name: str) -> None:
        """Remove a terminating object for good (the kubelet calls it once processes are gone)."""
        ri = info(resource, self.resources)
        with self._lock:
            key = self._key(ri, namespace, name)
            if key not in self._objects[resource]:
                return
            self._remove(ri, key, "Background")
        self._drain()

    def record_event(
        self,
        involved: Obj,
        reason: str,
        message: str,
        *,
        type: str = "Normal",
        component: str = "default-scheduler",
    ) -> Obj | None:
        """Create an Event about `involved`, or bump count/lastTimestamp of the same one.

        Returns None when the namespace is gone (events about deleted things are dropped).
        """
        meta = involved.get("metadata", {})
        ns = meta.get("namespace") or "default"
        ref = {
            "kind": involved.get("kind", ""),
            "apiVersion": involved.get("apiVersion", ""),
            "namespace": meta.get("namespace", ""),
            "name": meta.get("name", ""),
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        }
        stamp = now_rfc3339()
        with self._lock:
            if ("", ns) not in self._objects["namespaces"]:
                return None
            same = self._event_keys.get((ns, ref["uid"], ref["name"], reason, message, component))
        # Written outside the lock so subscribers run unlocked, as for every other write.
        if same is not None:

            def bump(e: Obj) -> None:
                e["count"] = int(e.get("count", 1)) + 1
                e["lastTimestamp"] = stamp

            try:
                return self.mutate("events", ns, same, bump)
            except ApiError:
                pass  # deleted meanwhile: record a fresh one
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{ref['name']}.{secrets.token_hex(8)}", "namespace": ns},
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "type": type,
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": component,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "eventTime": None,
            "action": reason,
        }
        try:
            return self.create("events", event)
        except ApiError:
            return None  # namespace deleted meanwhile

    # ---- watching --------------------------------------------------------------------------

    def watch(
        self,
        resource: str,
        namespace: str | None = None,
        since_rv: str | int | None = None,
        label_selector: Selector = None,
        field_selector: Selector = None,
    ) -> Watch:
        """Changes after `since_rv` (None or 0: from now on). ApiError(410) if that is compacted."""
        info(resource, self.resources)
        w = Watch(self, resource, namespace, label_selector, field_selector)
        try:
            since = int(since_rv) if since_rv not in (None, "") else 0
        except (TypeError, ValueError):
            raise errors.bad_request(f"invalid resourceVersion {since_rv!r}") from None
        with self._lock:
            if since > 0:
                if since < self._compacted_rv:
                    raise errors.expired(
                        f"too old resource version: {since} ({self._compacted_rv + 1})"
                    )
                for ch in self._log:
                    if ch.rv > since and ch.resource == resource:
                        w._offer(ch.etype, ch.old, ch.new)
            self._watches[resource].add(w)
        return w

    def subscribe(self, callback: Callback) -> None:
        """callback(event_type, resource, obj) after each commit, in order, outside the lock."""
        with self._lock:
            self._subscribers.append(callback)

    def unsubscribe(self, callback: Callback) -> None:
        with self._lock:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

    def compact(self) -> None:
        """Forget all history, so any resourceVersion before now gets 410 (tests use this)."""
        with self._lock:
            self._log.clear()
            self._compacted_rv = self._rv

    def close(self) -> None:
        """End every open watch (the API server's streams then finish)."""
        with self._lock:
            watches = [w for ws in self._watches.values() for w in ws]
            self._subscribers.clear()
        for w in watches:
            w.close()

    # ---- internals -------------------------------------------------------------------------

    @staticmethod
    def _key(ri: ResourceInfo, namespace: str | None, name: str) -> tuple[str, str]:
        return ((namespace or "default") if ri.namespaced else "", name)

    def _unwatch(self, w: Watch) -> None:
        with self._lock:
            self._watches[w.resource].discard(w)

    @staticmethod
    def _grace(pod: Obj, requested: int | None) -> int:
        if requested is not None:
            return max(0, int(requested))
        tgps = pod.get("spec", {}).get("terminationGracePeriodSeconds")
        return 30 if tgps is None else int(tgps)

    def _graceful(self, pod: Obj, requested: int | None) -> bool:
        # As kube-apiserver: unbound or finished pods, and grace 0 (force), go at once.
        if not pod.get("spec", {}).get("nodeName"):
            return False
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return False
        return self._grace(pod, requested) > 0

    def _replace(
        self,
        ri: ResourceInfo,
        current: Obj,
        new: Obj,
        subresource: str | None,
        *,
        force: bool = False,
    ) -> Obj:
        """Commit `new` over `current` (lock held). Identity fields always stay the server's."""
        if subresource == "status":
            merged = clone(current)
            merged["status"] = new.get("status", {})
            new = merged
        elif subresource not in (None, ""):
            raise errors.bad_request(f"unsupported subresource {subresource!r}")
        old_meta = current["metadata"]
        meta = new.setdefault("metadata", {})
        for k in ("uid", "creationTimestamp", "name", "namespace"):
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        if not force:
            for k in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                if k in old_meta:
                    meta[k] = old_meta[k]
                else:
                    meta.pop(k, None)
        new["apiVersion"] = current.get("apiVersion", ri.api_version)
        new["kind"] = current.get("kind", ri.kind)
        if subresource is None and not force:
            _validate(ri, new)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        meta["generation"] = old_meta.get("generation", 1)
        if _spec_of(new) != _spec_of(current):
            meta["generation"] = int(meta["generation"]) + 1
        if new == current:
            return clone(current)  # a no-op write is no event, so controllers settle
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        key = self._key(ri, meta.get("namespace"), meta["name"])
        self._objects[ri.key][key] = new
        self._record("MODIFIED", ri.key, current, new)
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and ri.plural not in ("pods", "namespaces")
        ):
            return self._remove(ri, key, "Background")
        return clone(new)

    def _remove(self, ri: ResourceInfo, key: tuple[str, str], propagation: str) -> Obj:
        """Delete one object now and handle its dependents (lock held)."""
        obj = self._objects[ri.key].pop(key)
        self._rv += 1
        gone = clone(obj)
        gone["metadata"]["resourceVersion"] = str(self._rv)
        self._record("DELETED", ri.key, obj, gone)
        uid = obj["metadata"]["uid"]
        if ri.plural == "customresourcedefinitions":
            # Its objects go with it, then the resource is no longer served.
            served = crds.resource_info(obj).key
            for k in list(self._objects.get(served, {})):
                self._remove(self.resources[served], k, "Background")
            self.resources.pop(served, None)
        if ri.plural == "namespaces":
            # Deleting a namespace deletes everything in it, as the namespace controller does.
            ns = obj["metadata"]["name"]
            for plural, rinfo in list(self.resources.items()):
                if not rinfo.namespaced:
                    continue
                for k in [k for k in self._objects[plural] if k[0] == ns]:
                    if k in self._objects[plural]:
                        self._remove(rinfo, k, "Background")
            return gone
        self._collect(uid, propagation)
        for ref in obj["metadata"].get("ownerReferences") or []:
            self._finish_foreground(ref.get("uid", ""))
        if ri.namespaced:
            self._finish_namespace(obj["metadata"].get("namespace", ""))
        return gone

    def _collect(self, uid: str, propagation: str) -> None:
        """The garbage collector's work for a deleted (or foreground-deleting) owner (lock held)."""
        for plural, k in sorted(self._owned.get(uid, ())):
            rinfo = self.resources[plural]
            dep = self._objects[plural].get(k)
            if dep is not None:
                refs = dep["metadata"].get("ownerReferences") or []
                if propagation == "Orphan":
                    new = clone(dep)
                    new["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                    if not new["metadata"]["ownerReferences"]:
                        del new["metadata"]["ownerReferences"]
                    self._replace(rinfo, dep, new, None)
                    continue
                if len([r for r in refs if r.get("uid") != uid]) > 0:
                    # Another owner still holds it: only drop our reference, as the GC does.
                    new = clone(dep)
                    new["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                    self._replace(rinfo, dep, new, None)
                    continue
                if not dep["metadata"].get("deletionTimestamp"):
                    self._delete_now_or_mark(rinfo, k, propagation)

    def _delete_now_or_mark(self, ri: ResourceInfo, key: tuple[str, str], propagation: str) -> Obj:
        """Delete one object as kube-apiserver would (lock held): a bound pod only gets a
        deletionTimestamp (the kubelet finalizes it); with Foreground an owner with dependents
        stays, marked with the foregroundDeletion finalizer, until they are gone."""
        current = self._objects[ri.key][key]
        meta = current["metadata"]
        if ri.plural == "namespaces":
            return self._terminate_namespace(key)
        if ri.plural == "pods" and self._graceful(current, None):
            grace = self._grace(current, None)
            new = clone(current)
            new["metadata"]["deletionTimestamp"] = rfc3339(time.time() + grace)
            new["metadata"]["deletionGracePeriodSeconds"] = grace
            return self._replace(ri, current, new, None, force=True)
        if meta.get("finalizers") and not (
            propagation == "Foreground" and self._owned.get(meta["uid"])
        ):
            new = clone(current)
            new["metadata"]["deletionTimestamp"] = now_rfc3339()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            return self._replace(ri, current, new, None, force=True)
        if propagation == "Foreground" and self._owned.get(meta["uid"]):
            new = clone(current)
            new["metadata"]["deletionTimestamp"] = now_rfc3339()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            new["metadata"]["finalizers"] = [*(meta.get("finalizers") or []), "foregroundDeletion"]
            out = self._replace(ri, current, new, None, force=True)
            self._collect(meta["uid"], "Foreground")
            self._finish_foreground(meta["uid"])
            return out
        return self._remove(ri, key, propagation)

    def _terminate_namespace(self, key: tuple[str, str]) -> Obj:
        """As the namespace controller: mark it Terminating, delete what it holds (bound pods
        gracefully), and remove it once empty (lock held)."""
        ns_ri = self.resources["namespaces"]
        current = self._objects["namespaces"][key]
        name = current["metadata"]["name"]
        new = clone(current)
        new["metadata"]["deletionTimestamp"] = now_rfc3339()
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        new.setdefault("spec", {})["finalizers"] = ["kubernetes"]
        new["status"] = {"phase": "Terminating"}
        out = self._replace(ns_ri, current, new, None, force=True)
        for plural, rinfo in list(self.resources.items()):
            if not rinfo.namespaced:
                continue
            for k in [k for k in self._objects[plural] if k[0] == name]:
                obj = self._objects[plural].get(k)
                if obj is not None and not obj["metadata"].get("deletionTimestamp"):
                    self._delete_now_or_mark(rinfo, k, "Background")
        self._finish_namespace(name)
        return self._objects["namespaces"].get(key) or out

    def _finish_namespace(self, name: str) -> None:
        ns = self._objects["namespaces"].get(("", name))
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return
        if self._ns_count.get(name, 0) == 0:
            self._remove(self.resources["namespaces"], ("", name), "Background")

    def _finish_foreground(self, uid: str) -> None:
        """Remove a foreground-deleting owner once its last dependent is gone (lock held)."""
        loc = self._by_uid.get(uid)
        if loc is None:
            return
        plural, key = loc
        owner = self._objects[plural].get(key)
        if owner is None or "foregroundDeletion" not in (owner["metadata"].get("finalizers") or []):
            return
        if any(self._objects[p].get(k) is not None for p, k in self._owned.get(uid, ())):
            return
        self._remove(self.resources[plural], key, "Background")

    def _record(self, etype: str, resource: str, old: Obj | None, new: Obj) -> None:
        """Append a change to history and hand it to watchers and subscribers (lock held)."""
        # Committed objects are never edited in place (writes build a new dict), so history and
        # watchers can share them; copies are made on delivery.
        change = _Change(self._rv, etype, resource, old, new)
        self._reindex(resource, old, None if etype == "DELETED" else new)
        self._log.append(change)
        while len(self._log) > self.history:
            self._compacted_rv = self._log.popleft().rv
        for w in list(self._watches[resource]):
            w._offer(etype, change.old, change.new)
        if self._subscribers:
            self._pending.append(change)

    def _reindex(self, resource: str, old: Obj | None, new: Obj | None) -> None:
        ri = self.resources[resource]
        for obj, add in ((old, False), (new, True)):
            if obj is None:
                continue
            meta = obj["metadata"]
            key = self._key(ri, meta.get("namespace"), meta["name"])
            if add:
                self._by_uid[meta["uid"]] = (resource, key)
            else:
                self._by_uid.pop(meta["uid"], None)
            if ri.namespaced:
                ns = meta.get("namespace", "")
                self._ns_count[ns] = self._ns_count.get(ns, 0) + (1 if add else -1)
            for ref in meta.get("ownerReferences") or []:
                uid = ref.get("uid", "")
                if add:
                    self._owned.setdefault(uid, set()).add((resource, key))
                elif uid in self._owned:
                    self._owned[uid].discard((resource, key))
                    if not self._owned[uid]:
                        del self._owned[uid]
            if resource == "events":
                io = obj.get("involvedObject") or {}
                ev_key = (
                    meta.get("namespace", ""),
                    io.get("uid", ""),
                    io.get("name", ""),
                    obj.get("reason", ""),
                    obj.get("message", ""),
                    (obj.get("source") or {}).get("component", ""),
                )
                if add:
                    self._event_keys[ev_key] = meta["name"]
                elif self._event_keys.get(ev_key) == meta["name"]:
                    del self._event_keys[ev_key]

    def _drain(self) -> None:
        """Deliver queued changes to subscribers, in order, from one thread at a time.

        A thread that finds another one draining returns at once: that thread delivers its
        change too. So callbacks that write to the store neither recurse nor reorder.
        """
        with self._drain_lock:
            if self._draining:
                return
            self._draining = True
        try:
            while True:
                with self._lock, self._drain_lock:
                    if not self._pending:
                        self._draining = False
                        return
                    change = self._pending.popleft()
                    subscribers = list(self._subscribers)
                for cb in subscribers:
                    try:
                        cb(change.etype, change.resource, clone(change.new))
                    except Exception:
                        log.exception("store subscriber %r failed on %s", cb, change.etype)
        except BaseException:
            with self._drain_lock:
                self._draining = False
            raise


def _spec_of(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


# --------------------------------------------------------------------------------------------
# Validation and defaults: the few rules tests (and kubectl users) trip over.


def _validate(ri: ResourceInfo, obj: Obj) -> None:
    """Refuse (422) what kube-apiserver refuses; a custom object is first pruned of undeclared
    fields and defaulted by its CRD's structural schema, as upstream stores it."""
    name = obj["metadata"].get("name") or ""
    causes: list[tuple[str, str]] = []
    if ri.schema is not None:
        crds.prune_and_default(obj, ri.schema)
        causes += crds.schema_causes(obj, ri.schema)
    if not name:
        causes.append(("metadata.name", "Required value: name or generateName is required"))
    elif ri.plural in ("pods", "services", "jobs", "statefulsets", "namespaces") and not re.match(
        r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", name
    ):
        causes.append(
            (
                "metadata.name",
                f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower '
                "case alphanumeric characters, '-' or '.'",
            )
        )
    spec = obj.get("spec") or {}
    if ri.plural in ("configmaps", "secrets"):
        # etcd's object limit, as kube-apiserver enforces it: a zipapp shipped in a ConfigMap
        # must fit, and a test should see the same 422 a real cluster gives.
        size = sum(len(k) + len(str(v)) for k, v in (obj.get("data") or {}).items())
        for k, v in (obj.get("binaryData") or {}).items():
            size += len(k) + len(str(v)) * 3 // 4
        if size > 1024 * 1024:
            causes.append(("[]", "Too long: must have at most 1048576 bytes"))
    if ri.plural == "pods":
        causes += _pod_spec_causes(spec, "spec")
    elif ri.plural in ("jobs", "statefulsets"):
        template = spec.get("template")
        if not isinstance(template, Mapping):
            causes.append(("spec.template", "Required value"))
        else:
            causes += _pod_spec_causes(template.get("spec") or {}, "spec.template.spec")
        if ri.plural == "statefulsets" and not spec.get("selector"):
            causes.append(("spec.selector", "Required value"))
    if causes:
        kind = f"{ri.kind}.{ri.group}" if ri.schema is not None else ri.kind
        raise errors.invalid(kind, name, causes, ri.group)


def _pod_spec_causes(spec: Obj, path: str) -> list[tuple[str, str]]:
    containers = spec.get("containers")
    if not containers:
        return [(f"{path}.containers", "Required value")]
    causes = []
    for i, c in enumerate(containers):
        if not c.get("name"):
            causes.append((f"{path}.containers[{i}].name", "Required value"))
        if not c.get("image"):
            causes.append((f"{path}.containers[{i}].image", "Required value"))
    return causes


_WITH_SPEC = frozenset(
    ("pods", "nodes", "namespaces", "services", "persistentvolumeclaims", "jobs", "statefulsets")
)
_service_ip = iter(range(1, 1 << 16))


def _default(ri: ResourceInfo, obj: Obj) -> None:
    """Server-side defaults kube-apiserver applies that controllers and kubectl rely on."""
    has_spec = ri.plural in _WITH_SPEC
    spec = obj.setdefault("spec", {}) if has_spec else {}
    meta = obj["metadata"]
    if ri.plural == "pods":
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            c.setdefault("imagePullPolicy", "IfNotPresent")
            c.setdefault("terminationMessagePolicy", "File")
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
    elif ri.plural == "namespaces":
        obj["status"] = {"phase": "Active"}
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
    elif ri.plural == "services":
        if spec.get("clusterIP") != "None":
            n = next(_service_ip)
            spec["clusterIP"] = f"10.96.{n // 250}.{n % 250 + 1}"
        spec.setdefault("clusterIPs", [spec["clusterIP"]] if spec.get("clusterIP") else [])
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        obj.setdefault("status", {"loadBalancer": {}})
    elif ri.plural == "jobs":
        uid = meta["uid"]
        if spec.get("completions") is None and spec.get("parallelism") is None:
            spec["completions"] = 1
            spec["parallelism"] = 1
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        if not spec.get("manualSelector"):
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
            labels = spec["template"].setdefault("metadata", {}).setdefault("labels", {})
            labels.update(
                {
                    "batch.kubernetes.io/controller-uid": uid,
                    "batch.kubernetes.io/job-name": meta["name"],
                    "controller-uid": uid,
                    "job-name": meta["name"],
                }
            )
        obj.setdefault("status", {})
    elif ri.plural == "statefulsets":
        spec.setdefault("replicas", 1)
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
        spec.setdefault("revisionHistoryLimit", 10)
        obj.setdefault("status", {"replicas": 0, "availableReplicas": 0})
    elif ri.plural == "secrets":
        obj["type"] = obj.get("type") or "Opaque"
    elif ri.plural == "persistentvolumeclaims":
        obj.setdefault("status", {"phase": "Bound"})
