"""The kinds the client handles: kind (and apiVersion, for custom resources) -> lightkube's
resource class, which gives the URL of each request."""

from __future__ import annotations

from typing import Any

from lightkube.core import resource as lk_resource
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apps_v1 import StatefulSet
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
)
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
    # DRA drivers' devices per node (doctor --compute-domain: NVIDIA's compute-domain driver).
    "ResourceSlice": ResourceSlice,
}
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


def plural(kind: str) -> str:
    res = RESOURCES.get(kind) or next((r for (_, k), r in CUSTOM.items() if k == kind), None)
    return str(lk_resource.api_info(res).plural) if res is not None else kind.lower()


__all__ = ["CUSTOM", "DEFAULT_VERSION", "RESOURCES", "plural", "resource"]
