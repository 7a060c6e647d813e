"""`--platform auto`: which platform the nodes a run may use belong to, and the evidence.

Pure: the k8s layer reads the nodes (labels, allocatable) and the DRA ResourceSlices and hands
them over as `NodeFacts`; this module decides. A node belongs to the first platform of the table
whose `Detect` it matches; the run's platform is the one every GPU node belongs to. Nodes that
differ, or that match none, give `generic` with a one-line reason, never a guess.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from nccl_k8s.spec.platforms._model import Platform

#: The node label every cloud's nodes carry with their machine type.
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


@dataclasses.dataclass(frozen=True, kw_only=True)
class NodeFacts:
    """What the API shows of one node, as detection needs it."""

    name: str
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    allocatable: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Resource name -> quantity, as the node's status.allocatable spells it."""
    drivers: frozenset[str] = frozenset()
    """DRA drivers with a ResourceSlice on this node."""

    @property
    def instance_type(self) -> str | None:
        return self.labels.get(INSTANCE_TYPE_LABEL)

    def count(self, resource: str) -> int:
        """The node's allocatable count of an extended resource (0 when absent or not whole)."""
        value = self.allocatable.get(resource, "0")
        return int(value) if value.isdigit() else 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Choice:
    """The platform `auto` chose, and why."""

    platform: str
    reason: str
    """One line: the evidence ("eks-efa: node ip-10-1-2-3 has vpc.amazonaws.com/efa: 32,
    instance type p5.48xlarge"), or why generic."""
    devices: int | None = None
    """The fewest fabric devices (the platform's `resource`) a chosen node has allocatable."""
    instance_type: str | None = None
    """The chosen nodes' machine type, when they all share one the platform's table knows."""


def node_evidence(platform: Platform, node: NodeFacts) -> str | None:
    """Why `node` is the platform's ("has vpc.amazonaws.com/efa: 32"), or None."""
    found: list[str] = []
    for resource in platform.detect.resources:
        if node.count(resource) > 0:
            found.append(f"has {resource}: {node.allocatable[resource]}")
    for key, values in platform.detect.labels.items():
        value = node.labels.get(key)
        if value is not None and (not values or value in values):
            found.append(f"is labelled {key}={value}")
    for driver in platform.detect.drivers:
        if driver in node.drivers:
            found.append(f"publishes ResourceSlices of {driver}")
    return ", ".join(found) or None


def _gpu_nodes(nodes: Iterable[NodeFacts], gpu_resource: str) -> list[NodeFacts]:
    return [n for n in nodes if n.count(gpu_resource) > 0]


def _belongs(node: NodeFacts, platforms: Sequence[Platform]) -> tuple[Platform, str] | None:
    for platform in platforms:
        evidence = node_evidence(platform, node)
        if evidence is not None:
            return platform, evidence
    return None


def _names(nodes: Sequence[NodeFacts], limit: int = 3) -> str:
    shown = ", ".join(n.name for n in nodes[:limit])
    return shown + (f" and {len(nodes) - limit} more" if len(nodes) > limit else "")


def detect(
    nodes: Sequence[NodeFacts],
    platforms: Mapping[str, Platform],
    *,
    gpu_resource: str = "nvidia.com/gpu",
    generic: str = "generic",
) -> Choice:
    """The platform of the GPU nodes among `nodes` (those the run may use), or generic with
    the reason: no GPU node, nodes that match no platform, or nodes of different platforms."""
    gpu = _gpu_nodes(nodes, gpu_resource)
    if not gpu:
        why = f"none of the {len(nodes)} node(s)" if nodes else "no node"
        return Choice(platform=generic, reason=f"{generic}: {why} has {gpu_resource} allocatable")
    known = [p for p in platforms.values() if p.name != generic]
    by_platform: dict[str, list[tuple[NodeFacts, str]]] = {}
    unknown: list[NodeFacts] = []
    for node in gpu:
        found = _belongs(node, known)
        if found is None:
            unknown.append(node)
        else:
            by_platform.setdefault(found[0].name, []).append((node, found[1]))
    if not by_platform:
        return Choice(
            platform=generic,
            reason=f"{generic}: no GPU node ({_names(gpu)}) carries the labels, resources or "
            "DRA drivers of a known platform",
        )
    if unknown or len(by_platform) > 1:
        parts = [f"{_names([n for n, _ in v])} look like {k}" for k, v in by_platform.items()]
        if unknown:
            parts.append(f"{_names(unknown)} like no known platform")
        return Choice(
            platform=generic,
            reason=f"{generic}: the GPU nodes differ ({'; '.join(parts)}); pick nodes of one "
            "platform (--node-selector) or name it with --platform",
        )
    ((name, members),) = by_platform.items()
    platform = platforms[name]
    node, evidence = members[0]
    types = {n.instance_type for n, _ in members}
    instance_type = next(iter(types)) if len(types) == 1 else None
    devices = None
    if platform.resource is not None:
        counts = [n.count(platform.resource) for n, _ in members]
        devices = min(counts) if all(counts) else None
    reason = f"{name}: node {node.name} {evidence}"
    if instance_type and f"{INSTANCE_TYPE_LABEL}={instance_type}" not in reason:
        reason += f", instance type {instance_type}"
    if len(members) > 1:
        reason += f" (and {len(members) - 1} more node(s) alike)"
    known_type = instance_type if instance_type and platform.instance(instance_type) else None
    return Choice(platform=name, reason=reason, devices=devices, instance_type=known_type)


__all__ = ["INSTANCE_TYPE_LABEL", "Choice", "NodeFacts", "detect", "node_evidence"]
