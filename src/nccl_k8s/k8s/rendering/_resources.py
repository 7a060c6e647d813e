"""What one pod of a run requests and is limited to: the one statement of the rule (its QoS).

The renderer writes it into the container, the PodGroup sums it over the pods, doctor checks it
against quotas and limit ranges, and node fit against each node's allocatable: all of them call
`pod_resources`, so what doctor and `nodes check` judge is what the pods will ask for.
"""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

from nccl_k8s.k8s.rendering._platform import platform_of
from nccl_k8s.spec import RunSpec, quantity_value


class PodResources(NamedTuple):
    """One pod's `resources`: resource name -> quantity, as the container carries them."""

    requests: dict[str, str]
    limits: dict[str, str]

    def amounts(self) -> tuple[dict[str, Fraction], dict[str, Fraction]]:
        """(requests, limits) as numbers: cores for cpu, bytes for memory, counts otherwise."""
        return (
            {k: quantity_value(v) for k, v in self.requests.items()},
            {k: quantity_value(v) for k, v in self.limits.items()},
        )


def pod_resources(spec: RunSpec) -> PodResources:
    """Devices are requested = limited (extended resources must be); memory too, so the pod is
    not OOM-killed for using what it was granted (/dev/shm included: the spec makes memory
    exceed it); CPU only requested unless --qos guaranteed (limits throttle NCCL's proxy
    threads and skew small-message latency, unless the static CPU manager gives whole cores).
    The platform's fabric devices come in as --rdma-resource entries (spec.with_platform)."""
    limits: dict[str, str] = {spec.gpu_resource: str(spec.gpus_per_node)}
    limits.update({name: str(count) for name, count in spec.rdma_resources})
    # The platform's other resources (hugepages ...), requested = limited like devices.
    limits.update(platform_of(spec).extra_resources)
    requests = {**limits, "cpu": spec.cpu, "memory": spec.memory}
    limits["memory"] = spec.memory
    if spec.qos == "guaranteed":
        limits["cpu"] = spec.cpu
    return PodResources(requests, limits)


__all__ = ["PodResources", "pod_resources"]
