"""Placement by the network's topology: the pods of a run close together on the fabric.

NCCL builds its inter-node rings and trees in rank order and detects no network topology of its
own, so a run whose pods are spread over the data centre is measured at its longest path. Each
platform names its topology labels, coarse to fine (spec.platforms, the entry's `topology`;
docs/topology.md cites each); `--topology` picks them (auto: the platform's) and `--placement`
how hard to ask:

- with `--queue` (Kueue) and levels named by `--topology`, Kueue's Topology Aware Scheduling annotations on the pod template
  (kubernetes-sigs/kueue v0.19.2, apis/kueue/v1beta2/topology_types.go, "set at the PodTemplate
  level"): required, `kueue.x-k8s.io/podset-required-topology` at the coarsest level ("requires
  scheduling all pods on nodes within the same topology domain"); preferred,
  `kueue.x-k8s.io/podset-preferred-topology` at the finest ("the levels are evaluated one-by-one
  going up from the level indicated"). Kueue then assigns the domains itself, and the run's pods
  get no topology affinity (Kueue's node selectors already place them);
- without Kueue, pod affinity of the run's pods to each other: required, one term on the coarsest
  level; preferred, one weighted term per level, the finer the heavier.

A fabric rule holds whatever the options say, as a required pod affinity term: eks-efa keeps
every pod in one availability zone (the platform's `one_zone`: EFA does not cross zones), and
--compute-domain keeps them in one NVLink clique (rendering._computedomain's label). A run of one
pod gets no topology placement (there is no second pod to be close to).
"""

from __future__ import annotations

from collections.abc import Mapping

from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.rendering._computedomain import CLIQUE_LABEL
from nccl_k8s.k8s.rendering._platform import platform_of
from nccl_k8s.spec import RunSpec
from nccl_k8s.spec.platforms import ZONE_LABEL

#: Kueue's TAS annotations (kubernetes-sigs/kueue v0.19.2, 8eab68778fc1b52affe165fdf5af29d1e9b4f3cb,
#: apis/kueue/v1beta2/topology_types.go: PodSetRequiredTopologyAnnotation,
#: PodSetPreferredTopologyAnnotation); the value is a node label, a level of the Topology.
KUEUE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"


def topology_levels(spec: RunSpec) -> tuple[str, ...]:
    """The node labels the pods are placed by, coarse to fine: --topology's, or (auto) the
    platform's; none for `none`."""
    if spec.topology == "none":
        return ()
    if spec.topology == "auto":
        return platform_of(spec).topology
    return tuple(spec.topology.split(","))


def fabric_levels(spec: RunSpec) -> tuple[str, ...]:
    """The levels every pod must share whatever --topology says: the platform's zone, the
    NVLink clique of --compute-domain."""
    rules = ((ZONE_LABEL, platform_of(spec).one_zone), (CLIQUE_LABEL, spec.compute_domain))
    return tuple(key for key, needed in rules if needed)


def kueue_annotation(spec: RunSpec) -> tuple[str, str] | None:
    """(annotation, level) a queued run's pod template carries, or None. Only for levels the
    user named: a level must be one of the Kueue Topology's (the admin's choice, which render
    cannot read; doctor --queue lists them), and Kueue cannot place a pod set by a level its
    Topology lacks; `auto` under Kueue places by pod affinity, as without it."""
    levels = topology_levels(spec)
    if spec.queue is None or spec.topology in ("auto", "none") or spec.nodes < 2:
        return None
    if spec.placement == "required":
        return KUEUE_REQUIRED_TOPOLOGY, levels[0]
    return KUEUE_PREFERRED_TOPOLOGY, levels[-1]


def _weights(n: int) -> list[int]:
    """1..100, coarse to fine: the finer level the heavier (a shared rack beats a shared zone)."""
    return [round(100 * (i + 1) / n) for i in range(n)]


def apply_topology(spec: RunSpec, template: Obj, selector: Mapping[str, str]) -> None:
    """Put the run's topology placement into the pod template (in place); the pods of the run
    are those `selector` matches."""

    def term(key: str) -> Obj:
        return {"labelSelector": {"matchLabels": dict(selector)}, "topologyKey": key}

    required = list(fabric_levels(spec))
    preferred: tuple[str, ...] = ()
    levels = topology_levels(spec) if spec.nodes > 1 else ()
    queued = kueue_annotation(spec)
    if queued is not None:
        annotations = template["metadata"].setdefault("annotations", {})
        annotations.setdefault(*queued)  # a --pod-annotation of the same key wins
    elif levels and spec.placement == "required":
        required.append(levels[0])
    else:
        preferred = levels
    if not required and not preferred:
        return
    affinity = template["spec"].setdefault("affinity", {}).setdefault("podAffinity", {})
    if required:
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = [
            term(k) for k in dict.fromkeys(required)
        ]
    if preferred:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": w, "podAffinityTerm": term(k)}
            for k, w in zip(preferred, _weights(len(preferred)), strict=True)
        ]


__all__ = [
    "KUEUE_PREFERRED_TOPOLOGY",
    "KUEUE_REQUIRED_TOPOLOGY",
    "apply_topology",
    "fabric_levels",
    "kueue_annotation",
    "topology_levels",
]
