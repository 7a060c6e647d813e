"""Which nodes could take one of a run's pods, and why the others cannot. Pure: Node objects
and a RunSpec in, a verdict per node out, the way the scheduler's filters would decide it
(NodeUnschedulable, NodeResourcesFit on the GPU and RDMA resources, --node, NodeAffinity on
--node-selector and on --healthy-only's check labels, TaintToleration, NodeResourcesFit on cpu
and memory), checked in that order so each node is dropped for its first reason.

What it cannot see: GPUs already in use by other pods (counted from the nodes' allocatable, not
from every pod in the cluster, which would be one list of every pod), and a cluster autoscaler
that adds nodes on demand. Doctor says so where it matters; `doctor` and `nodes check` both
place with it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction

from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.rendering._health import health
from nccl_k8s.k8s.rendering._resources import pod_resources
from nccl_k8s.spec import RunSpec, Toleration, quantity_value

#: Labels that say a node has NVIDIA GPUs whether or not a device plugin advertises them
#: (GPU feature discovery, node feature discovery's PCI vendor 10de, the clouds' accelerator
#: labels).
GPU_NODE_LABELS = (
    "nvidia.com/gpu.present",
    "nvidia.com/gpu.count",
    "feature.node.kubernetes.io/pci-10de.present",
    "cloud.google.com/gke-accelerator",
    "k8s.amazonaws.com/accelerator",
)

#: The filters in the scheduler's order; a node is dropped for the first that rejects it.
STAGES = ("ready", "gpus", "rdma", "node", "selector", "health", "taints", "fit")


def _q(value: object) -> Fraction:
    try:
        return quantity_value(str(value))
    except ValueError:
        return Fraction(0)


@dataclasses.dataclass(frozen=True)
class NodeView:
    name: str
    ready: bool
    unschedulable: bool
    labels: Mapping[str, str]
    taints: Sequence[Obj]
    allocatable: Mapping[str, Fraction]
    capacity: Mapping[str, Fraction]

    def has(self, resource: str) -> Fraction:
        return self.allocatable.get(resource, Fraction(0))


def node_view(node: Obj) -> NodeView:
    status = node.get("status") or {}
    ready = True
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    spec = node.get("spec") or {}
    return NodeView(
        name=str(node["metadata"]["name"]),
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
        labels=dict(node["metadata"].get("labels") or {}),
        taints=list(spec.get("taints") or []),
        allocatable={k: _q(v) for k, v in (status.get("allocatable") or {}).items()},
        capacity={k: _q(v) for k, v in (status.get("capacity") or {}).items()},
    )


def taint_text(taint: Obj) -> str:
    """kubectl's form: key=value:Effect (key:Effect without a value)."""
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + str(value) if value else ''}:{taint.get('effect')}"


def tolerated(taint: Obj, tolerations: Iterable[Toleration]) -> bool:
    for tol in tolerations:
        if tol.effect is not None and tol.effect != taint.get("effect"):
            continue
        if tol.operator == "Exists" and tol.key in ("", taint.get("key")):
            return True
        if tol.key == taint.get("key") and (tol.value or "") == (taint.get("value") or ""):
            return True
    return False


def untolerated(node: NodeView, tolerations: Iterable[Toleration]) -> list[Obj]:
    """The node's taints that keep the pods off (NoSchedule, NoExecute) and are not tolerated."""
    tols = list(tolerations)
    return [
        t
        for t in node.taints
        if t.get("effect") in ("NoSchedule", "NoExecute") and not tolerated(t, tols)
    ]


def pod_requests(spec: RunSpec) -> dict[str, Fraction]:
    """What one pod of the run asks of a node: the requests the renderer writes into it."""
    return pod_resources(spec).amounts()[0]


@dataclasses.dataclass(frozen=True)
class Placement:
    """The nodes that could take a pod of the run, and why each other GPU node cannot."""

    gpu_nodes: list[NodeView]
    """Nodes with the GPU resource allocatable (> 0)."""
    eligible: list[NodeView]
    dropped: dict[str, tuple[str, str]]
    """node -> (stage, why), for every GPU node not eligible."""
    slots: int
    """How many of the run's pods the eligible nodes hold: one per node with --spread
    required, else as many as their GPUs allow."""
    needed: int

    @property
    def fits(self) -> bool:
        return self.slots >= self.needed

    def by_stage(self, stage: str) -> Counter[str]:
        """why -> how many nodes were dropped at this stage for it."""
        return Counter(why for s, why in self.dropped.values() if s == stage)


def _drop(node: NodeView, spec: RunSpec, skip: frozenset[str]) -> tuple[str, str] | None:
    """The first filter that rejects the node: (stage, why), or None."""
    need = pod_requests(spec)
    checks: list[tuple[str, str | None]] = [
        ("ready", "not Ready" if not node.ready else "cordoned" if node.unschedulable else None),
        (
            "gpus",
            f"fewer than {spec.gpus_per_node} {spec.gpu_resource}"
            if node.has(spec.gpu_resource) < spec.gpus_per_node
            else None,
        ),
        (
            "rdma",
            next(
                (f"no {n}={c}" for n, c in spec.rdma_resources if node.has(n) < c),
                None,
            ),
        ),
        ("node", "not a --node" if spec.node_names and node.name not in spec.node_names else None),
        (
            "selector",
            next(
                (f"no label {k}={v}" for k, v in spec.node_selector if node.labels.get(k) != v),
                None,
            ),
        ),
        ("health", _unhealthy(node, spec)),
        (
            "taints",
            next((f"taint {taint_text(t)}" for t in untolerated(node, spec.tolerations)), None),
        ),
        (
            "fit",
            next(
                (
                    f"less than {spec.cpu if r == 'cpu' else spec.memory} {r} allocatable"
                    for r in ("cpu", "memory")
                    if r in node.allocatable and node.has(r) < need[r]
                ),
                None,
            ),
        ),
    ]
    for stage, why in checks:
        if why is not None and stage not in skip:
            return stage, why
    return None


def _unhealthy(node: NodeView, spec: RunSpec) -> str | None:
    """--healthy-only: why the node's check labels keep the pods off (as the affinity does)."""
    if spec.healthy_since is None:
        return None
    h = health({"metadata": {"name": node.name, "labels": dict(node.labels)}}, spec.healthy_since)
    return None if h.ok else f"not checked good within --healthy-within ({h.verdict or 'never'})"


def place(spec: RunSpec, nodes: Iterable[Obj], *, skip: Iterable[str] = ()) -> Placement:
    """Where the run's pods could go; `skip` leaves filters out (to say what one would free)."""
    skipping = frozenset(skip)
    views = [node_view(n) for n in nodes]
    gpu_nodes = [v for v in views if v.has(spec.gpu_resource) > 0]
    eligible: list[NodeView] = []
    dropped: dict[str, tuple[str, str]] = {}
    for v in gpu_nodes:
        why = _drop(v, spec, skipping)
        if why is None:
            eligible.append(v)
        else:
            dropped[v.name] = why
    if spec.spread == "required":
        slots = len(eligible)
    else:
        slots = sum(int(v.has(spec.gpu_resource) // spec.gpus_per_node) for v in eligible)
    return Placement(gpu_nodes, eligible, dropped, slots, spec.nodes)


def gpu_shapes(nodes: Iterable[NodeView], resource: str) -> str:
    """`4 x 8, 2 x 4`: how many nodes have how many of the resource, most GPUs first."""
    counts = Counter(int(v.has(resource)) for v in nodes)
    return ", ".join(f"{n} x {g}" for g, n in sorted(counts.items(), reverse=True))


__all__ = [
    "GPU_NODE_LABELS",
    "STAGES",
    "NodeView",
    "Placement",
    "gpu_shapes",
    "node_view",
    "place",
    "pod_requests",
    "taint_text",
    "tolerated",
    "untolerated",
]
