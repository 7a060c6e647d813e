"""The kinds the client handles: kind (and apiVersion, for custom resources) -> lightkube's
resource class, which gives the URL of each request."""

from __future__ import annotations

from typing import Any

from lightkube.core import resource as lk_resource
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import DaemonSet, StatefulSet
from lightkube.resources.batch_v1 import Job
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
from lightkube.resources.rbac_authorization_v1 import Role, RoleBinding
from lightkube.resources.resource_v1 import ResourceSlice

from nccl_k8s.errors import ClusterError
from nccl_k8s.spec import GANGS

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
    # Read by --platform auto and doctor's platform prerequisites (ResourceSlices: the DRA
    # drivers' devices per node, also doctor --compute-domain's).
    "DaemonSet": DaemonSet,
    "CustomResourceDefinition": CustomResourceDefinition,
    "ResourceSlice": ResourceSlice,
    # A rendered run's adoption objects (rendering._adopt), which cleanup deletes.
    "ServiceAccount": ServiceAccount,
    "Role": Role,
    "RoleBinding": RoleBinding,
}
#: Kinds without a namespace (the client sends no namespace for them).
CLUSTER_SCOPED = frozenset({"Namespace", "Node", "CustomResourceDefinition", "ResourceSlice"})
#: Custom resources we render or read, by apiVersion (several groups call theirs PodGroup).
#: Made once with lightkube's public generic-resource API: the PodGroup of every scheduler of the
#: gang table, the Prometheus Operator's PodMonitor (--pod-monitor), Kueue's LocalQueue, which
#: is only read (doctor checks that --queue names one), and NVIDIA's ComputeDomain
#: (--compute-domain).
CUSTOM: dict[tuple[str, str], Any] = {
    **{
        (g.api_version, g.kind): create_namespaced_resource(g.group, g.version, g.kind, g.plural)
        for g in GANGS.values()
    },
    ("monitoring.coreos.com/v1", "PodMonitor"): create_namespaced_resource(
        "monitoring.coreos.com", "v1", "PodMonitor", "podmonitors"
    ),
    ("kueue.x-k8s.io/v1beta1", "LocalQueue"): create_namespaced_resource(
        "kueue.x-k8s.io", "v1beta1", "LocalQueue", "localqueues"
    ),
    # --compute-domain: NVIDIA's DRA driver's ComputeDomain (its CRD, v1beta1).
    ("resource.nvidia.com/v1beta1", "ComputeDomain"): create_namespaced_resource(
        "resource.nvidia.com", "v1beta1", "ComputeDomain", "computedomains"
    ),
}
#: The apiVersion a custom kind is read with when the caller names none.
DEFAULT_VERSION = {
    "LocalQueue": "kueue.x-k8s.io/v1beta1",
    "ComputeDomain": "resource.nvidia.com/v1beta1",
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


def plural(kind: str) -> str:
    res = RESOURCES.get(kind) or next((r for (_, k), r in CUSTOM.items() if k == kind), None)
    return str(lk_resource.api_info(res).plural) if res is not None else kind.lower()


__all__ = [
    "CLUSTER_SCOPED",
    "CUSTOM",
    "DEFAULT_VERSION",
    "GLOBAL",
    "RESOURCES",
    "cluster_object",
    "plural",
    "resource",
]
