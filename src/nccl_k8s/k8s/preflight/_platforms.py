"""`--platform` against a cluster: which platform the nodes a run may use belong to, and how many
fabric devices a pod of it requests there.

deploy, doctor and `nodes check` resolve a spec here before they render or place it: with
`--platform auto` the nodes the run may use (Ready, the run's --node, --node-selector and
tolerations, as node fit filters them) and the DRA ResourceSlices published for them become
`NodeFacts`, `spec.platforms.detect` chooses, and `spec.with_platform` derives the platform's
defaults again; a named platform whose device count neither --instance-type nor --rdma-resource
gave takes it from those nodes' allocatable. The one line saying what was chosen and why is
what deploy prints. render stays pure (auto is generic there).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Sequence

from nccl_k8s.errors import Forbidden, NotFound
from nccl_k8s.k8s.api._client import KubeClient
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.preflight._nodefit import node_view, untolerated
from nccl_k8s.k8s.rendering._health import health
from nccl_k8s.spec import RunSpec, missing_devices, with_platform
from nccl_k8s.spec.platforms import (
    AUTO,
    GENERIC,
    PLATFORMS,
    Choice,
    NodeFacts,
    Platform,
    detect,
)


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A spec whose platform is known, and what was read to know it."""

    spec: RunSpec
    note: str
    """One line: `platform eks-efa: node ip-10-1-2-3 has vpc.amazonaws.com/efa: 32, instance
    type p5.48xlarge`, or why generic; empty when nothing had to be resolved."""
    choice: Choice | None = None


class NodeList:
    """The cluster's nodes as one command reads them, listed once however many of its steps
    ask (deploy: `--platform auto`, the rank plan, `--healthy-only`): at thousands of nodes a
    list is megabytes, and `nodes check` deploys a run per pair test. A run pinned to its nodes
    (--node) lists those alone, by name: every reader keeps only them anyway (`may_use`, node
    fit). `read` raises Forbidden, each time, where RBAC refuses the list: it is asked once."""

    def __init__(self, kc: KubeClient, spec: RunSpec) -> None:
        self._kc = kc
        self._names = spec.node_names
        self._listed: asyncio.Future[list[Obj]] | None = None

    async def read(self) -> list[Obj]:
        if self._listed is None:
            self._listed = asyncio.ensure_future(self._list())
        return await self._listed

    async def _list(self) -> list[Obj]:
        if not self._names:
            return (await self._kc.list("Node"))[0]
        got = await asyncio.gather(
            *(self._kc.list("Node", field_selector=f"metadata.name={n}") for n in self._names)
        )
        return [node for items, _ in got for node in items]


def may_use(spec: RunSpec, nodes: Iterable[Obj]) -> list[Obj]:
    """The nodes the run's pods may land on whatever the platform: Ready and schedulable, a
    --node where given, every --node-selector label, checked good within the window with
    --healthy-only, every NoSchedule/NoExecute taint tolerated (node fit's filters that do not
    depend on resources)."""
    out = []
    for node in nodes:
        v = node_view(node)
        if not v.ready or v.unschedulable:
            continue
        if spec.node_names and v.name not in spec.node_names:
            continue
        if any(v.labels.get(k) != val for k, val in spec.node_selector):
            continue
        if spec.healthy_since is not None and not health(node, spec.healthy_since).ok:
            continue
        if untolerated(v, spec.tolerations):
            continue
        out.append(node)
    return out


def node_facts(nodes: Iterable[Obj], slices: Iterable[Obj]) -> list[NodeFacts]:
    """What detection reads of each node: labels, allocatable, and the DRA drivers whose
    ResourceSlices (resource.k8s.io/v1: spec.driver, spec.nodeName) name it."""
    drivers: dict[str, set[str]] = {}
    for s in slices:
        spec = s.get("spec") or {}
        node, driver = spec.get("nodeName"), spec.get("driver")
        if node and driver:
            drivers.setdefault(str(node), set()).add(str(driver))
    out = []
    for n in nodes:
        meta, status = n.get("metadata") or {}, n.get("status") or {}
        name = str(meta.get("name"))
        out.append(
            NodeFacts(
                name=name,
                labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
                allocatable={str(k): str(v) for k, v in (status.get("allocatable") or {}).items()},
                drivers=frozenset(drivers.get(name, ())),
            )
        )
    return out


async def read_slices(kc: KubeClient) -> list[Obj]:
    """Every ResourceSlice; none where the cluster serves no resource.k8s.io/v1 or RBAC
    forbids the read (detection then goes by labels and allocatable alone)."""
    try:
        return (await kc.list("ResourceSlice"))[0]
    except (NotFound, Forbidden):
        return []


def per_pod(platform: Platform, spec: RunSpec, facts: Sequence[NodeFacts], count: int) -> int:
    """A pod's share of a node's `count` devices: all of them, or (a platform whose devices
    follow the GPUs) in proportion to the GPUs it takes of the node's."""
    if not platform.per_gpu_devices:
        return count
    gpus = [
        f.count(spec.gpu_resource)
        for f in facts
        if platform.resource and f.count(platform.resource)
    ]
    node_gpus = min(gpus, default=0)
    if node_gpus <= spec.gpus_per_node:
        return count
    return max(1, count * spec.gpus_per_node // node_gpus)


def resolve(spec: RunSpec, nodes: Sequence[Obj], slices: Sequence[Obj]) -> Resolved:
    """The spec for the platform of `nodes` (auto), or with a named platform's device count
    from them; the spec itself when nothing is to be resolved. Pure."""
    named = PLATFORMS.get(spec.platform)
    if spec.platform != AUTO and (named is None or missing_devices(spec) is None):
        return Resolved(spec, "")
    facts = node_facts(may_use(spec, nodes), slices)
    if named is not None:  # a named platform: its devices from the nodes
        assert named.resource is not None  # missing_devices said a count is missing
        counts = [f.count(named.resource) for f in facts if f.count(spec.gpu_resource) > 0]
        have = [c for c in counts if c > 0]
        if not have:
            return Resolved(spec, f"platform {named.name}: no node the run may use has "
                            f"{named.resource} allocatable")  # fmt: skip
        devices = per_pod(named, spec, facts, min(have))
        note = (
            f"platform {named.name}: {devices} {named.resource} per pod, from the nodes' "
            f"allocatable ({min(have)} per node)"
        )
        return Resolved(with_platform(spec, named.name, devices=devices), note)
    choice = detect(facts, PLATFORMS, gpu_resource=spec.gpu_resource)
    platform = PLATFORMS[choice.platform]
    if platform.escalation:  # never more privilege than asked for, whatever the nodes say
        note = (
            f"platform generic: the nodes look like {choice.reason}, but {platform.name}'s pods "
            f"need {platform.escalation} ({platform.privilege_reason}), which --platform auto "
            f"never chooses on its own: pass --platform {platform.name} to use it"
        )
        return Resolved(with_platform(spec, GENERIC.name), note)
    share = None if choice.devices is None else per_pod(platform, spec, facts, choice.devices)
    resolved = with_platform(
        spec, choice.platform, devices=share, instance_type=choice.instance_type
    )
    return Resolved(resolved, f"platform {choice.reason}", choice)


async def resolve_async(
    kc: KubeClient,
    spec: RunSpec,
    nodes: Sequence[Obj] | None = None,
    *,
    reader: NodeList | None = None,
) -> Resolved:
    """`resolve` over what the cluster shows: the nodes given, else read here (by `reader`,
    which the command's other steps then share)."""
    if spec.platform != AUTO and missing_devices(spec) is None:
        return Resolved(spec, "")
    if nodes is None:
        reader = reader or NodeList(kc, spec)
        try:
            listed, slices = await asyncio.gather(reader.read(), read_slices(kc))
        except Forbidden:
            name = "generic" if spec.platform == AUTO else spec.platform
            note = (
                f"platform {name}: may not list nodes (RBAC), so --platform {spec.platform} "
                "cannot read them; name the platform (and --instance-type) to choose it"
            )
            spec = with_platform(spec, name) if spec.platform == AUTO else spec
            return Resolved(spec, note)
        return resolve(spec, listed, slices)
    return resolve(spec, nodes, await read_slices(kc))


__all__ = [
    "NodeList",
    "Resolved",
    "may_use",
    "node_facts",
    "per_pod",
    "read_slices",
    "resolve",
    "resolve_async",
]
