"""The platform table: every fabric platform `--platform NAME` can target, one entry each.

An entry (`Platform`, spec.platforms._model) holds what a pod needs on that platform for NCCL to
use its fabric, as the vendor's reference manifests state it, and how its nodes are recognised.
The renderer, `--platform auto` (`detect`), doctor's prerequisite checks and diagnose's fabric
gate all read it. It lives in spec, below every layer that reads it, because the option's choices
come from it. A new platform is one entry in its vendor's module plus its tests.
"""

from __future__ import annotations

from nccl_k8s.spec.platforms import _aws, _gke, _ib
from nccl_k8s.spec.platforms._detect import Choice, NodeFacts, detect, node_evidence
from nccl_k8s.spec.platforms._generic import GENERIC
from nccl_k8s.spec.platforms._model import (
    TOPOGRAPH_LABELS,
    ZONE_LABEL,
    Detect,
    Instance,
    NetworkPreset,
    Platform,
    Prerequisite,
    PrerequisiteKind,
)

#: Every platform by its --platform name, `generic` first; detection tries them in this order.
PLATFORMS: dict[str, Platform] = {
    p.name: p for p in (GENERIC, *_aws.PLATFORMS, *_gke.PLATFORMS, *_ib.PLATFORMS)
}

#: What --platform accepts: `auto` (read the nodes) or a name of the table.
AUTO = "auto"


def platform_choices() -> tuple[str, ...]:
    return (AUTO, *PLATFORMS)


__all__ = [
    "AUTO",
    "GENERIC",
    "PLATFORMS",
    "TOPOGRAPH_LABELS",
    "ZONE_LABEL",
    "Choice",
    "Detect",
    "Instance",
    "NetworkPreset",
    "NodeFacts",
    "Platform",
    "Prerequisite",
    "PrerequisiteKind",
    "detect",
    "node_evidence",
    "platform_choices",
]
