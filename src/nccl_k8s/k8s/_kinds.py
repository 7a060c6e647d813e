"""The kinds the client handles: kind (and apiVersion, for custom resources) -> lightkube's
resource class, which gives the URL of each request."""

from __future__ import annotations

from typing import Any

from lightkube.core import resource as lk_resource
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apps_v1 import StatefulSet
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import ConfigMap, Event, Namespace, Node, Pod, Service

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
}
#: Custom resources we render, by apiVersion (two groups both call theirs PodGroup). Made once
#: with lightkube's public generic-resource API.
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
}


def resource(kind: str, api_version: str | None = None) -> Any:
    """The lightkube class of a kind; custom kinds need their apiVersion to tell groups apart."""
    if kind in RESOURCES:
        return RESOURCES[kind]
    try:
        return CUSTOM[(api_version or "", kind)]
    except KeyError:
        known = ", ".join(sorted(f"{k} {v}" for v, k in CUSTOM))
        raise ClusterError(
            f"cannot handle a {kind} {api_version}: expected one of {known}"
        ) from None


def plural(kind: str) -> str:
    if kind == "PodGroup":
        return "podgroups"
    if kind == "PodMonitor":
        return "podmonitors"
    res = RESOURCES.get(kind)
    return str(lk_resource.api_info(res).plural) if res is not None else kind.lower()


__all__ = ["CUSTOM", "RESOURCES", "plural", "resource"]
