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

Rank order (`plan_order`, `with_rank_plan`): NCCL's ring is the rank order, so where the deployer
can read the nodes (deploy, not render) it sorts the nodes the run may use by their label values
at these levels, coarse to fine, and puts that order into the pods' environment (RANK_PLAN_ENV);
the pods' launcher (launch._pod) then numbers the pods by the place of the node each landed on,
so that consecutive ranks share the finest domain whatever node each pod was given. torchrun
hosts its store on node rank 0 at the master address, so a planned torchrun Job starts it behind
the placement step (launch._place, hosted by the pod of index 0 on `placement_port`), which
hands each pod its node rank and the address of the pod of node rank 0. Under Kueue TAS the
completion index is already the order in which Kueue assigns domains, and that order is kept.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence

from nccl_k8s.bench.config import POD_IP_ENV, RANK_PLAN_ENV
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.rendering._computedomain import CLIQUE_LABEL
from nccl_k8s.k8s.rendering._launcher import (
    JOB_INDEX_REF,
    launcher_args,
    placement_port,
    pod_ip_env,
)
from nccl_k8s.k8s.rendering._names import CONTAINER_NAME
from nccl_k8s.k8s.rendering._platform import platform_of
from nccl_k8s.k8s.rendering._presets import uses_host_network
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


def rank_order_levels(spec: RunSpec) -> tuple[tuple[str, ...], str]:
    """The levels the ranks would be ordered by (none for one pod or `--topology none`), and
    why the completion index stays the order instead (empty when the deployer plans it)."""
    levels = tuple(dict.fromkeys((*fabric_levels(spec), *topology_levels(spec))))
    if spec.nodes < 2 or spec.topology == "none":
        return (), ""
    if spec.workload != "job":
        return levels, "rank order: pod ordinal (a StatefulSet's ranks keep their ordinals)"
    if kueue_annotation(spec) is not None:
        return levels, "rank order: completion index, the order in which Kueue assigns domains"
    return levels, ""


def plan_order(nodes: Iterable[Obj], levels: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    """The nodes in topology order, each with its label values at `levels` (coarse to fine;
    "" where it has none): grouped by those values, coarse to fine, so that consecutive nodes
    share the finest domain; a node lacking a label after those that carry it; then by name."""
    out = []
    for node in nodes:
        labels = node.get("metadata", {}).get("labels") or {}
        out.append((node["metadata"]["name"], tuple(str(labels.get(k, "")) for k in levels)))
    return sorted(out, key=lambda n: (*((v == "", v) for v in n[1]), n[0]))


def with_rank_plan(
    spec: RunSpec,
    objs: list[Obj],
    levels: Sequence[str],
    planned: Sequence[tuple[str, tuple[str, ...]]],
) -> list[Obj]:
    """Copies of `objs` whose Job's container carries the plan (RANK_PLAN_ENV) for the pods'
    launcher, torchrun behind the placement step (`_with_placement`); the objects unchanged
    without a plan."""
    if not planned:
        return objs
    value = json.dumps(
        {"levels": list(levels), "nodes": [[n, list(v)] for n, v in planned]},
        separators=(",", ":"),
    )
    out = []
    for obj in objs:
        if obj["kind"] == "Job":
            obj = copy.deepcopy(obj)
            for container in obj["spec"]["template"]["spec"]["containers"]:
                if container["name"] == CONTAINER_NAME:
                    _with_placement(spec, container)
                container.setdefault("env", []).append({"name": RANK_PLAN_ENV, "value": value})
        out.append(obj)
    return out


def _with_placement(spec: RunSpec, container: Obj) -> None:
    """The benchmark container of a planned Job (in place): torchrun's words replaced by the
    placement step's and torchrun's without a node rank and master (the step adds them), the
    pod's address in its env (the step hands it on), and under host networking the step's port
    declared as a hostPort, as the rendezvous port is. The direct launcher needs none of it."""
    plain, args = launcher_args(spec, JOB_INDEX_REF), container.get("args", [])
    # The words start the args, or follow a platform's sourcing shell (rendering._platform).
    at = next((i for i in range(len(args)) if args[i : i + len(plain)] == plain), None)
    if spec.launcher != "torchrun" or at is None:
        return
    placed = launcher_args(spec, JOB_INDEX_REF, planned=True)
    container["args"] = [*args[:at], *placed, *args[at + len(plain) :]]
    env = container.setdefault("env", [])
    if not any(e["name"] == POD_IP_ENV for e in env):
        env.append(pod_ip_env())
    if uses_host_network(spec):
        port = placement_port(spec)
        container.setdefault("ports", []).append(
            {"name": "placement", "containerPort": port, "hostPort": port, "protocol": "TCP"}
        )


def rank_plan_of(workload: Obj | None) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """(levels, node -> label values) of the plan a run's workload carries; empty without."""
    containers = (workload or {}).get("spec", {}).get("template", {}).get("spec", {})
    for container in containers.get("containers") or []:
        for env in container.get("env") or []:
            if env.get("name") == RANK_PLAN_ENV and env.get("value"):
                plan = json.loads(env["value"])
                nodes = {str(n): tuple(str(x) for x in v) for n, v in plan["nodes"]}
                return tuple(plan["levels"]), nodes
    return (), {}


__all__ = [
    "KUEUE_PREFERRED_TOPOLOGY",
    "KUEUE_REQUIRED_TOPOLOGY",
    "apply_topology",
    "fabric_levels",
    "kueue_annotation",
    "plan_order",
    "rank_order_levels",
    "rank_plan_of",
    "topology_levels",
    "with_rank_plan",
]
