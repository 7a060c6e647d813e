"""doctor's node checks: the GPU resource and its device plugin, RDMA resources, taints, node
selection and whether enough nodes remain for the world asked. Pure: the cluster's Node
objects (k8s.preflight._nodefit places the run on them) and the RunSpec in, Checks out.

None of these is `certain`: a cluster autoscaler may add the nodes a run lacks, and deploy
waits --schedule-timeout for it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.preflight._nodefit import GPU_NODE_LABELS, Placement, gpu_shapes, node_view, place
from nccl_k8s.k8s.preflight._preflight import Check, Read
from nccl_k8s.spec import RunSpec

_AUTOSCALER = "a cluster autoscaler may add nodes (deploy waits --schedule-timeout for them)"


def _names(names: Sequence[str], most: int = 4) -> str:
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def check_nodes(spec: RunSpec, nodes: Read) -> list[Check]:
    """Every node check, from one list of the cluster's nodes."""
    if nodes.forbidden or nodes.items is None:
        return [
            Check(
                "nodes",
                "warn",
                "may not list nodes (RBAC): GPU, RDMA, taint and placement checks skipped",
                "ask for get/list on nodes, or run doctor as a user who has it",
            )
        ]
    items = nodes.items
    placement = place(spec, items)
    first = _gpu_nodes(spec, items, placement)
    if first.status == "fail":
        return [first]
    checks = [first, _device_plugin(spec, items)]
    rdma = _rdma(spec, placement)
    if rdma is not None:
        checks.append(rdma)
    checks.append(_filtered(spec, items, placement, ("taints",), "taints"))
    if spec.node_selector or spec.node_names:
        checks.append(_filtered(spec, items, placement, ("node", "selector"), "node-selection"))
    checks.append(_world(spec, placement))
    return checks


def _gpu_nodes(spec: RunSpec, items: list[Obj], placement: Placement) -> Check:
    res = spec.gpu_resource
    if placement.gpu_nodes:
        return Check(
            "gpu-nodes",
            "pass",
            f"{len(placement.gpu_nodes)} of {len(items)} nodes have {res} allocatable "
            f"(nodes x GPUs: {gpu_shapes(placement.gpu_nodes, res)})",
        )
    views = [node_view(n) for n in items]
    other = sorted({r for v in views for r in v.allocatable if "gpu" in r and v.has(r) > 0})
    labelled = [v.name for v in views if any(k in v.labels for k in GPU_NODE_LABELS)]
    if other:
        hint = f"the nodes advertise {', '.join(other)}: --gpu-resource {other[0]}"
    elif labelled:
        hint = (
            f"{_names(labelled)} are labelled as GPU nodes but advertise no {res}: is the NVIDIA "
            "device plugin (or GPU operator) running there?"
        )
    else:
        hint = f"install the NVIDIA device plugin or GPU operator on the GPU nodes; {_AUTOSCALER}"
    return Check("gpu-nodes", "fail", f"no node of {len(items)} has {res} allocatable", hint)


def _device_plugin(spec: RunSpec, items: list[Obj]) -> Check:
    """A GPU resource is allocatable only while a device plugin serves it on that node: the
    kubelet zeroes it when the plugin goes away (the capacity stays)."""
    res = spec.gpu_resource
    views = [node_view(n) for n in items]
    gone = [v.name for v in views if v.capacity.get(res, 0) > 0 and v.has(res) == 0]
    bare = [
        v.name
        for v in views
        if v.capacity.get(res, 0) == 0 and any(k in v.labels for k in GPU_NODE_LABELS)
    ]
    serving = sum(1 for v in views if v.has(res) > 0)
    if gone or bare:
        parts = []
        if gone:
            parts.append(f"{_names(gone)} have {res} capacity but none allocatable")
        if bare:
            parts.append(f"{_names(bare)} are labelled as GPU nodes but advertise no {res}")
        return Check(
            "device-plugin",
            "warn",
            f"the device plugin serves {res} on {serving} node(s), not on all: " + "; ".join(parts),
            "look at the device plugin's pods on those nodes (kubectl get pods -A -o wide "
            "| grep device-plugin)",
        )
    return Check("device-plugin", "pass", f"a device plugin serves {res} on {serving} node(s)")


def _rdma(spec: RunSpec, placement: Placement) -> Check | None:
    if spec.network not in ("ib", "roce") and not spec.rdma_resources:
        return None
    if not spec.rdma_resources:
        return Check(
            "rdma",
            "pass",
            f"no RDMA resource asked: --security {spec.security} reaches the HCAs without one",
        )
    for name, count in spec.rdma_resources:
        having = [v.name for v in placement.gpu_nodes if v.has(name) >= count]
        if len(having) >= spec.nodes:
            continue
        seen = sorted(
            {
                r
                for v in placement.gpu_nodes
                for r in v.allocatable
                if ("rdma" in r or "hca" in r or "sriov" in r) and v.has(r) > 0
            }
        )
        there = f" (the GPU nodes advertise {', '.join(seen)})" if seen else ""
        how = "no GPU node has" if not having else f"only {len(having)} GPU node(s) have"
        return Check(
            "rdma",
            "fail",
            f"{how} {name}={count} allocatable; the run needs {spec.nodes} for "
            f"--network {spec.network}{there}",
            "install the device plugin that advertises the HCAs (the RDMA shared device plugin, "
            "or SR-IOV's) or name the resource the nodes have (--rdma-resource NAME=COUNT)",
        )
    asked = ", ".join(f"{n}={c}" for n, c in spec.rdma_resources)
    return Check("rdma", "pass", f"{asked} is allocatable on enough GPU nodes")


def _filtered(
    spec: RunSpec, items: list[Obj], placement: Placement, stages: tuple[str, ...], name: str
) -> Check:
    """Taints (or node selection): how many GPU nodes they keep the pods off, and whether
    that is what makes the run not fit."""
    why = Counter[str]()
    for stage in stages:
        why.update(placement.by_stage(stage))
    what = "an untolerated taint" if name == "taints" else "--node/--node-selector"
    if not why:
        return Check(name, "pass", f"no GPU node is kept out by {what}")
    parts = ", ".join(f"{reason} on {n}" for reason, n in why.most_common())
    count = sum(why.values())
    if placement.fits:
        return Check(name, "pass", f"{count} GPU node(s) are left out ({parts}); enough remain")
    freed = place(spec, items, skip=stages)
    if not freed.fits:
        return Check(name, "warn", f"{count} GPU node(s) are left out ({parts})")
    top = why.most_common(1)[0][0]
    if name == "taints":
        taint = top.removeprefix("taint ")
        hint = f"tolerate it: --toleration {taint}"
    else:
        hint = "widen --node/--node-selector to more GPU nodes"
    return Check(
        name,
        "fail",
        f"{count} GPU node(s) are left out ({parts}), and without them the run does not fit",
        hint,
    )


#: What to do when no node can take a pod, by the filter that left most GPU nodes out.
_NO_SLOT_HINTS = {
    "ready": "the GPU nodes are not Ready or are cordoned (kubectl describe node)",
    "gpus": "no node has {g} {res} allocatable: fewer --gpus-per-node",
    "rdma": "the rdma check says what the nodes lack",
    "node": "name nodes that have the GPUs with --node",
    "selector": "widen --node-selector",
    "health": "check the nodes (nccl-k8s nodes check --label) or widen --healthy-within",
    "taints": "tolerate the GPU nodes' taint (--toleration)",
    "fit": "ask for less --cpu/--memory per pod",
}


def _world(spec: RunSpec, placement: Placement) -> Check:
    res, g = spec.gpu_resource, spec.gpus_per_node
    per = "one per node" if spec.spread == "required" else f"--spread {spec.spread}"
    shape = f"{spec.nodes} pod(s) of {g} {res} ({per}; cpu {spec.cpu}, memory {spec.memory} each)"
    if placement.fits:
        return Check(
            "world",
            "pass",
            f"{len(placement.eligible)} of {len(placement.gpu_nodes)} GPU nodes can take a pod of "
            f"the {spec.world_size} ranks: {shape}",
        )
    why = Counter(w for _, w in placement.dropped.values())
    parts = "; ".join(f"{n} {reason}" for reason, n in why.most_common())
    of = f" (of {len(placement.gpu_nodes)} GPU nodes: {parts})" if parts else ""
    fits_now = placement.slots * g
    stages = Counter(stage for stage, _ in placement.dropped.values())
    top = stages.most_common(1)[0][0] if stages else "none"
    hint = (
        f"--world-size {fits_now} fits these nodes"
        if fits_now
        else _NO_SLOT_HINTS.get(top, "see the checks above").format(g=g, res=res)
    )
    return Check(
        "world",
        "fail",
        f"world size {spec.world_size} needs {shape}; {placement.slots} can be placed{of}",
        f"{hint}; {_AUTOSCALER}",
    )


__all__ = ["check_nodes"]
