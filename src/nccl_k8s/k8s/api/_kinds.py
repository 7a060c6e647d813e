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

from nccl_k8s.errors import ClusterError

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
}
#: Custom resources we render or read, by apiVersion (two groups both call theirs PodGroup).
#: Made once with lightkube's public generic-resource API. Kueue's LocalQueue is only read
#: (doctor checks that --queue names one).
CUSTOM: dict[tuple[str, str], Any] = {
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): create_namespaced_resource(
        "scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups"
    ),
    ("scheduling.x-k8s.io/v1alpha1", "PodGroup"): create_namespaced_resource(
        "scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups"
    ),
    # --pod-monitor: the Prometheus Operator's.
    ("monitoring.coreos.com/v1", "PodMonitor"): create_namespaced_resource(
        "monitoring.coreos.com", "v1", "PodMonitor", "podmonitors"
    ),
    ("kueue.x-k8s.io/v1beta1", "LocalQueue"): create_namespaced_resource(
        "kueue.x-k8s.io", "v1beta1", "LocalQueue", "localqueues"
    ),
}
#: The apiVersion a custom kind is read with when the caller names none.
DEFAULT_VERSION = {"LocalQueue": "kueue.x-k8s.io/v1beta1"}


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
    if kind in ("PodGroup", "PodMonitor", "LocalQueue"):
        return f"{kind.lower()}s"
    res = RESOURCES.get(kind)
    return str(lk_resource.api_info(res).plural) if res is not None else kind.lower()


__all__ = ["CUSTOM", "DEFAULT_VERSION", "RESOURCES", "plural", "resource"]
