"""doctor's domain fit (issue 37): can one domain of the run's required (or preferred) topology
level hold the whole run, counting the GPUs the live pods already hold? Pure: Node and Pod
objects in, the check a user reads out."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nccl_k8s.errors import Forbidden
from nccl_k8s.k8s.api._access import ACCESS, DOMAIN_FIT, nodes_check_access
from nccl_k8s.k8s.preflight._access import _uses
from nccl_k8s.k8s.preflight._domainfit import (
    LIVE_PODS,
    check_domain_fit,
    domain_fit,
    fit_levels,
    gpus_in_use,
    pod_gpus,
)
from nccl_k8s.k8s.preflight._preflight import Read
from nccl_k8s.spec import build_run_spec

Obj = dict[str, Any]
BLOCK = "cloud.google.com/gce-topology-block"
ZONE = "topology.kubernetes.io/zone"


def spec(**kw: Any):
    kw.setdefault("world_size", "8")
    kw.setdefault("gpus_per_node", "4")
    kw.setdefault("namespace", "bench")
    return build_run_spec(**kw)


def node(name: str, gpus: int = 4, labels: dict[str, str] | None = None) -> Obj:
    alloc = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {},
        "status": {
            "allocatable": alloc,
            "capacity": alloc,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(node_name: str, gpus: int, *, phase: str = "Running", init: int = 0) -> Obj:
    def c(n: int) -> Obj:
        return {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(n)}}}

    return {
        "metadata": {"name": f"p-{node_name}", "namespace": "other"},
        "spec": {
            "nodeName": node_name,
            "containers": [c(gpus)],
            "initContainers": [c(init)] if init else [],
        },
        "status": {"phase": phase},
    }


#: Two blocks of two 4-GPU nodes; another team's pod holds one node of each.
NODES = [
    node("a1", 4, {BLOCK: "block-a"}),
    node("a2", 4, {BLOCK: "block-a"}),
    node("b1", 4, {BLOCK: "block-b"}),
    node("b2", 4, {BLOCK: "block-b"}),
]
BUSY = Read(items=[pod("a2", 4), pod("b2", 4)])
REQUIRED = {"topology": BLOCK, "placement": "required"}


def test_required_placement_that_no_domain_holds_fails_naming_each_domains_free_gpus() -> None:
    check = check_domain_fit(spec(**REQUIRED), NODES, BUSY)
    assert check is not None and check.status == "fail"
    assert check.message == (
        f"8 ranks need one {BLOCK} domain (--placement required), but no domain has 8 free "
        "nvidia.com/gpu (2 pods of 4): block-a 4, block-b 4"
    )
    assert check.hint == (
        "--world-size 4 fits block-a; free GPUs in one domain; --placement preferred lets the "
        "pods spread"
    )
    assert not check.certain  # pods end, autoscalers add nodes


def test_preferred_placement_is_a_warning_that_the_run_will_spread() -> None:
    check = check_domain_fit(spec(topology=BLOCK), NODES, BUSY)
    assert check is not None and check.status == "warn"
    assert "(--placement preferred), but no domain has 8 free" in check.message
    assert "the pods will spread over domains" in check.hint


def test_a_domain_with_room_passes_and_is_named() -> None:
    check = check_domain_fit(spec(**REQUIRED), NODES, Read(items=[pod("b2", 4)]))
    assert check is not None and check.status == "pass"
    assert check.message == (
        f"1 of 2 {BLOCK} domains can hold all 2 pods (--placement required); the roomiest, "
        "block-a, has 8 free nvidia.com/gpu"
    )


def test_free_gpus_enough_in_sum_but_not_per_pod_is_no_room() -> None:
    # block-a has 4 free GPUs on each of two 8-GPU nodes: 8 free, but no room for a pod of 8.
    nodes = [node("a1", 8, {BLOCK: "block-a"}), node("a2", 8, {BLOCK: "block-a"})]
    busy = Read(items=[pod("a1", 4), pod("a2", 4)])
    check = check_domain_fit(spec(world_size="16", gpus_per_node="8", **REQUIRED), nodes, busy)
    assert check is not None and check.status == "fail"
    assert "no domain has 16 free nvidia.com/gpu (2 pods of 8): block-a 8" in check.message


def test_the_fabric_rule_requires_one_zone_whatever_placement_says() -> None:
    nodes = [node("a1", 4, {ZONE: "us-east-1a"}), node("b1", 4, {ZONE: "us-east-1b"})]
    s = spec(platform="eks-efa")
    assert s.placement == "preferred"
    check = check_domain_fit(s, nodes, Read(items=[]))
    assert check is not None and check.status == "fail"
    assert f"need one {ZONE} domain (eks-efa: one zone)" in check.message
    assert "us-east-1a 4, us-east-1b 4" in check.message
    assert "--placement preferred" not in check.hint  # it would not help


def test_a_required_level_no_node_carries_keeps_the_pods_pending() -> None:
    check = check_domain_fit(spec(**REQUIRED), [node("n1"), node("n2")], None)
    assert check is not None and check.status == "fail"
    assert check.message == (
        f"the run's pods must share one {BLOCK} domain (--placement required), but none of the "
        f"2 nodes that could take a pod carries {BLOCK}: they stay Pending"
    )
    # Preferred: nothing to say (the pods go anywhere).
    assert check_domain_fit(spec(topology=BLOCK), [node("n1"), node("n2")], None) is None


def test_unreadable_pods_count_allocatable_and_say_so() -> None:
    check = check_domain_fit(spec(**REQUIRED), NODES, Read(forbidden=True))
    assert check is not None and check.status == "pass"
    assert check.message.endswith("(GPUs in use not counted: may not list pods)")


def test_no_check_for_one_pod_or_no_level() -> None:
    assert fit_levels(spec(world_size="4", **REQUIRED)) is None
    assert fit_levels(spec(topology="none")) is None
    assert check_domain_fit(spec(topology="none"), NODES, BUSY) is None


def test_pod_gpus_counts_as_the_scheduler_does() -> None:
    two = pod("a1", 2, init=3)
    two["spec"]["containers"].append(two["spec"]["containers"][0])
    assert pod_gpus(two, "nvidia.com/gpu") == 4  # 2 + 2 containers beat the init's 3
    assert pod_gpus(pod("a1", 1, init=3), "nvidia.com/gpu") == 3
    ended = [pod("a1", 4, phase="Succeeded"), pod("a2", 2), pod("a2", 1)]
    assert gpus_in_use(ended, "nvidia.com/gpu") == {"a2": 3}


class _Client:
    """What domain_fit asks of the API: one list of the live pods, all namespaces."""

    def __init__(self, pods: list[Obj] | None) -> None:
        self.pods = pods
        self.asked: list[tuple[str, dict[str, Any]]] = []

    async def list(self, kind: str, **kw: Any) -> tuple[list[Obj], str]:
        self.asked.append((kind, kw))
        if self.pods is None:
            raise Forbidden("pods is forbidden")
        return self.pods, "1"


def test_doctor_lists_the_live_pods_once_and_only_when_a_node_carries_the_level() -> None:
    kc = _Client(BUSY.items)
    checks = asyncio.run(domain_fit(kc, spec(**REQUIRED), Read(items=NODES)))  # type: ignore[arg-type]
    assert [c.status for c in checks] == ["fail"]
    assert kc.asked == [("Pod", {"all_namespaces": True, "field_selector": LIVE_PODS})]
    bare = _Client([])
    asyncio.run(domain_fit(bare, spec(topology=BLOCK), Read(items=[node("n1"), node("n2")])))  # type: ignore[arg-type]
    assert bare.asked == []
    denied = asyncio.run(domain_fit(_Client(None), spec(**REQUIRED), Read(items=NODES)))  # type: ignore[arg-type]
    assert "may not list pods" in denied[0].message
    assert asyncio.run(domain_fit(kc, spec(**REQUIRED), Read(forbidden=True))) == []  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "reviewed"),
    [(REQUIRED, True), ({"topology": "none"}, False), ({"world_size": "4"}, False)],
)
def test_doctor_reviews_the_pods_list_only_for_a_run_with_a_level(
    kw: dict[str, str], reviewed: bool
) -> None:
    entry = next(a for a in ACCESS if a.optional == DOMAIN_FIT)
    assert (entry.group, entry.resource, entry.verbs, entry.scope) == (
        "",
        "pods",
        ("list",),
        "cluster",
    )
    assert _uses(entry, spec(**kw), False) is reviewed
    # doctor's read, never a scheduled nodes check's grant
    assert entry not in nodes_check_access(label=True, idle_only=True)
