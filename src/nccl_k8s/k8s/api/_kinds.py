"""The kinds the client handles: kind (and apiVersion, for custom resources) -> lightkube's
resource class, which gives the URL of each request."""

from __future__ import annotations

from typing import Any

from lightkube.core import resource as lk_resource
from lightkube.core.resource_registry import resource_registry
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.admissionregistration_v1 import (
    ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
)
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import DaemonSet, StatefulSet
from lightkube.resources.batch_v1 import CronJob, Job
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import (
    ConfigMap,
    Event,
    LimitRange,
    Namespace,
    Node,
    Pod,
    ResourceQuota,
    Service,
    ServiceAccount,
)
from lightkube.resources.rbac_authorization_v1 import (
    ClusterRole,
    ClusterRoleBinding,
    Role,
    RoleBinding,
)

from nccl_k8s.errors import ClusterError
from nccl_k8s.spec import CUSTOM_KINDS, CustomKind

RESOURCES: dict[str, Any] = {
    "ConfigMap": ConfigMap,
    "Service": Service,
    "Pod": Pod,
    "Namespace": Namespace,
    "Node": Node,
    "Event": Event,
    "Job": Job,
    "StatefulSet": StatefulSet,
    "ResourceQuota": ResourceQuota,
    "LimitRange": LimitRange,
    "Lease": Lease,
    # Read by doctor's platform prerequisites.
    "DaemonSet": DaemonSet,
    "CustomResourceDefinition": CustomResourceDefinition,
    # A rendered run's adoption objects (rendering._adopt), which cleanup deletes.
    "ServiceAccount": ServiceAccount,
    "Role": Role,
    "RoleBinding": RoleBinding,
    # What `nodes schedule` prints beyond those, which `cleanup --schedule` deletes
    # (k8s.nodes._unschedule).
    "CronJob": CronJob,
    "ClusterRole": ClusterRole,
    "ClusterRoleBinding": ClusterRoleBinding,
    "ValidatingAdmissionPolicy": ValidatingAdmissionPolicy,
    "ValidatingAdmissionPolicyBinding": ValidatingAdmissionPolicyBinding,
}


def _custom(k: CustomKind) -> Any:
    """The resource class of an optional kind, from lightkube's public API: its own model for
    a built-in API group (resource.k8s.io), else a generic resource of the entry's facts."""
    if k.crd is None:
        return resource_registry.load(k.api_version, k.kind)
    make = create_global_resource if k.scope == "Cluster" else create_namespaced_resource
    return make(k.group, k.version, k.kind, k.plural)


#: The optional kinds (spec.CUSTOM_KINDS: the gangs' PodGroups, PodMonitor, ComputeDomain,
#: LocalQueue, ResourceSlice ...), by apiVersion (several groups call theirs PodGroup): one
#: resource class per entry.
CUSTOM: dict[tuple[str, str], Any] = {(k.api_version, k.kind): _custom(k) for k in CUSTOM_KINDS}
#: Kinds without a namespace (the client sends no namespace for them).
CLUSTER_SCOPED = frozenset(
    {"Namespace", "Node", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    | {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    | {k.kind for k in CUSTOM_KINDS if k.scope == "Cluster"}
)
#: The apiVersion a custom kind is read with when the caller names none: the table's, where it
#: has one entry of that kind.
DEFAULT_VERSION = {
    k.kind: k.api_version
    for k in CUSTOM_KINDS
    if sum(1 for o in CUSTOM_KINDS if o.kind == k.kind) == 1
}


def resource(kind: str, api_version: str | None = None) -> Any:
    """The lightkube class of a kind; custom kinds need their apiVersion to tell groups apart."""
    if kind in RESOURCES:
        return RESOURCES[kind]
    try:
        return CUSTOM[(api_version or DEFAULT_VERSION.get(kind, ""), kind)]
    except KeyError:
        known = ", ".join(sorted(f"{k} {v}" for v, k in CUSTOM))
        raise ClusterError(
            f"cannot handle a {kind} {api_version}: expected one of {known}"
        ) from None


def cluster_object(api: str) -> tuple[str, str]:
    """(kind, apiVersion) to read cluster-scoped objects of `api` (`group/version/plural`, as a
    platform prerequisite names them) with; the resource class is made once, on first use."""
    group, version, plural_ = api.split("/")
    kind = f"Object:{plural_}.{group}"
    api_version = f"{group}/{version}"
    if (api_version, kind) not in CUSTOM:
        CUSTOM[(api_version, kind)] = create_global_resource(group, version, kind, plural_)
        GLOBAL.add(kind)
    return kind, api_version


#: Custom kinds made by `cluster_object` (cluster-scoped).
GLOBAL: set[str] = set()


#: The namespace argument that lists a namespaced kind across every namespace.
ALL_NS = "*"


def path(res: Any, *, namespace: str | None = None, name: str | None = None) -> str:
    """The URL path of a resource class (`api/v1/namespaces/ns/pods/p/log`, `apis/group/version/
    plural`), from lightkube's public API info: a namespaced kind in `namespace` (ALL_NS or
    None: of every namespace), a named object, a subresource's action."""
    info = lk_resource.api_info(res)
    base = info.parent or info.resource
    parts = ["api", base.version] if not base.group else ["apis", base.group, base.version]
    namespaced = issubclass(
        res, (lk_resource.NamespacedResource, lk_resource.NamespacedSubResource)
    )
    if namespaced and namespace is not None and namespace != ALL_NS:
        parts += ["namespaces", namespace]
    parts.append(info.plural)
    if name is not None:
        parts.append(name)
    if info.action:
        parts.append(info.action)
    return "/".join(parts)


def plural(kind: str) -> str:
    res = RESOURCES.get(kind) or next((r for (_, k), r in CUSTOM.items() if k == kind), None)
    return str(lk_resource.api_info(res).plural) if res is not None else kind.lower()


__all__ = [
    "ALL_NS",
    "CLUSTER_SCOPED",
    "CUSTOM",
    "DEFAULT_VERSION",
    "GLOBAL",
    "RESOURCES",
    "cluster_object",
    "path",
    "plural",
    "resource",
]
