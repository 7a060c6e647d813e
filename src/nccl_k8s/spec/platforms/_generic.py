"""The platform of a cluster nccl-k8s knows nothing special about: the pods carry only what the
deploy options say (--network, --rdma-resource, --network-attachment ...)."""

from __future__ import annotations

from nccl_k8s.spec.platforms._model import Platform

GENERIC = Platform(
    name="generic",
    title="a cluster without a known fabric platform",
    fabric=None,
)

__all__ = ["GENERIC"]
