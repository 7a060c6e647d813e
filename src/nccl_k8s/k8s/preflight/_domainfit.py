"""doctor's topology check: can one domain of the level the run must (or would like to) share
hold the whole run, counting the GPUs free there now (docs/topology.md)?

The level: the fabric's rules (eks-efa's one zone, --compute-domain's one clique) and, with
`--placement required`, the coarsest of the run's topology levels (a required pod affinity
term, or Kueue's required-topology annotation with --queue): every pod in one domain, or the
pods stay Pending, so a miss is a fail. With `--placement preferred` the coarsest level is only
asked for: a miss is a warning (the pods spread, and the run measures the links between the
domains).

A domain's free GPUs: per node the run may use (preflight._nodefit's filters), its allocatable
GPUs less what the live pods bound to it request (one LIST of the pods of every namespace, read
only when some node carries the level's labels). A node lacking a label of the level is in no
domain: the scheduler's InterPodAffinity filter wants every topology key of a required term on
the node. Not `certain`: pods end and autoscalers add nodes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from fractions import Fraction

from nccl_k8s.errors import Forbidden
from nccl_k8s.k8s.api._client import KubeClient
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.preflight._nodefit import NodeView, place
from nccl_k8s.k8s.preflight._preflight import Check, Read, Status
from nccl_k8s.k8s.rendering._topology import fabric_levels, topology_levels
from nccl_k8s.spec import RunSpec, quantity_value
from nccl_k8s.spec.platforms import ZONE_LABEL

#: A pod that has ended holds no GPU; the one list of pods asks the server for the others.
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"

#: Domains named in a message at most (the roomiest first).
_SHOWN = 8


def pod_gpus(pod: Obj, resource: str) -> float:
    """How many of `resource` the pod holds, as the scheduler counts it: its containers' sum
    or its largest init container, whichever is more (a request, or the limit an extended
    resource's request defaults to)."""
    spec = pod.get("spec") or {}

    def asked(c: Obj) -> float:
        res = c.get("resources") or {}
        got = (res.get("requests") or {}).get(resource) or (res.get("limits") or {}).get(resource)
        return 0.0 if got is None else float(quantity_value(str(got)))

    run = sum(asked(c) for c in spec.get("containers") or [])
    return max([run, *(asked(c) for c in spec.get("initContainers") or [])])


def gpus_in_use(pods: Iterable[Obj], resource: str) -> dict[str, float]:
    """Node -> the `resource` the live pods bound to it request."""
    used: dict[str, float] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        used[node] = used.get(node, 0.0) + pod_gpus(pod, resource)
    return used


@dataclasses.dataclass(frozen=True)
class FitLevels:
    """The labels every pod of the run must share (or is asked to), and on whose account."""

    levels: tuple[str, ...]
    why: str
    status: Status
    """What a miss is: fail (required), warn (preferred)."""
    by_placement: bool = False
    """--placement required asks it (not only a fabric rule): preferred would let them spread."""


def fit_levels(spec: RunSpec) -> FitLevels | None:
    """The level doctor checks for this run; None for one pod or no level."""
    if spec.nodes < 2:
        return None
    levels = topology_levels(spec)
    required: dict[str, str] = {}
    for key in fabric_levels(spec):
        required[key] = f"{spec.platform}: one zone" if key == ZONE_LABEL else "--compute-domain"
    if levels and spec.placement == "required":
        required.setdefault(levels[0], "--placement required")
    if required:
        why = ", ".join(dict.fromkeys(required.values()))
        asked = bool(levels) and required.get(levels[0]) == "--placement required"
        return FitLevels(tuple(required), why, "fail", by_placement=asked)
    if levels:
        return FitLevels((levels[0],), "--placement preferred", "warn")
    return None


def _domains(views: Iterable[NodeView], levels: tuple[str, ...]) -> dict[str, list[NodeView]]:
    out: dict[str, list[NodeView]] = {}
    for v in views:
        values = [v.labels.get(k, "") for k in levels]
        if all(values):
            out.setdefault("/".join(values), []).append(v)
    return out


def check_domain_fit(spec: RunSpec, nodes: list[Obj], pods: Read | None) -> Check | None:
    """Does one domain of the run's level have room for every pod of the run? `pods`: the
    live pods (None: not read, as no node carries the level)."""
    fit = fit_levels(spec)
    if fit is None:
        return None
    eligible = place(spec, nodes).eligible
    domains = _domains(eligible, fit.levels)
    label = " + ".join(fit.levels)
    if not domains:
        if fit.status == "warn":
            return None
        return Check(
            "domain-fit",
            "fail",
            f"the run's pods must share one {label} domain ({fit.why}), but none of the "
            f"{len(eligible)} nodes that could take a pod carries {label}: they stay Pending",
            "label the nodes, name the labels they carry (--topology), or --placement preferred",
        )
    res, g = spec.gpu_resource, spec.gpus_per_node
    used = gpus_in_use(pods.items or [], res) if pods is not None and pods.ok else {}

    def free(v: NodeView) -> int:
        return max(0, int(v.has(res) - Fraction(used.get(v.name, 0.0))))

    def room(v: NodeView) -> int:
        pods_there = free(v) // g
        return min(1, pods_there) if spec.spread == "required" else pods_there

    rows = sorted(
        (
            (sum(room(v) for v in vs), sum(free(v) for v in vs), name)
            for name, vs in domains.items()
        ),
        key=lambda r: (-r[0], -r[1], r[2]),
    )
    unseen = "" if pods is not None and pods.ok else " (GPUs in use not counted: may not list pods)"
    best_room, _, best = rows[0]
    if best_room >= spec.nodes:
        holding = sum(1 for r in rows if r[0] >= spec.nodes)
        return Check(
            "domain-fit",
            "pass",
            f"{holding} of {len(rows)} {label} domains can hold all {spec.nodes} pods "
            f"({fit.why}); the roomiest, {best}, has {rows[0][1]} free {res}{unseen}",
        )
    need = spec.nodes * g
    listed = ", ".join(
        f"{name} {n_free}" + (f" (room for {r} pod(s))" if n_free >= need else "")
        for r, n_free, name in rows[:_SHOWN]
    )
    more = f" and {len(rows) - _SHOWN} more" if len(rows) > _SHOWN else ""
    message = (
        f"{spec.world_size} ranks need one {label} domain ({fit.why}), but no domain has "
        f"{need} free {res} ({spec.nodes} pods of {g}): {listed}{more}{unseen}"
    )
    if fit.status == "warn":
        return Check(
            "domain-fit",
            "warn",
            message,
            "the pods will spread over domains and the run measures the links between them; "
            "--placement required waits for one domain instead",
        )
    fits = f"--world-size {best_room * g} fits {best}; " if best_room else ""
    spread = "; --placement preferred lets the pods spread" if fit.by_placement else ""
    return Check("domain-fit", "fail", message, f"{fits}free GPUs in one domain{spread}")


async def domain_fit(kc: KubeClient, spec: RunSpec, nodes: Read) -> list[Check]:
    """doctor's domain-fit check, with the live pods listed (all namespaces, once) when some
    node carries the level's labels; nothing where the nodes could not be read."""
    fit = fit_levels(spec)
    if fit is None or not nodes.ok or nodes.items is None:
        return []
    pods: Read | None = None
    if _domains(place(spec, nodes.items).eligible, fit.levels):
        try:
            got, _ = await kc.list("Pod", all_namespaces=True, field_selector=LIVE_PODS)
            pods = Read(items=got)
        except Forbidden:
            pods = Read(forbidden=True)
    check = check_domain_fit(spec, nodes.items, pods)
    return [check] if check is not None else []


__all__ = [
    "LIVE_PODS",
    "FitLevels",
    "check_domain_fit",
    "domain_fit",
    "fit_levels",
    "gpus_in_use",
    "pod_gpus",
]
