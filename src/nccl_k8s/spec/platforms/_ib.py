"""InfiniBand and RoCE clouds: CoreWeave, Nebius, Together, AKS (InfiniBand) and OKE (RoCE).

Each entry follows the vendor's reference manifests; the version followed is cited on the entry
(`sources`) and in docs/platforms.md.
"""

from __future__ import annotations

from nccl_k8s.spec.platforms._model import Platform

PLATFORMS: tuple[Platform, ...] = ()

__all__ = ["PLATFORMS"]
