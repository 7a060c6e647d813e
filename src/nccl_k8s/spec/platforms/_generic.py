"""The platform of a cluster nccl-k8s knows nothing special about: the pods carry only what the
deploy options say (--network, --rdma-resource, --network-attachment ...)."""

from __future__ import annotations

from nccl_k8s.spec.platforms._model import TOPOGRAPH_LABELS, ZONE_LABEL, Platform

GENERIC = Platform(
    name="generic",
    title="a cluster without a known fabric platform",
    fabric=None,
    # Nothing is known of the cluster: the zone every cloud labels, then NVIDIA Topograph's
    # labels where it runs.
    topology=(ZONE_LABEL, *TOPOGRAPH_LABELS),
)

__all__ = ["GENERIC"]
