"""doctor's checks, pure: a RunSpec and what the API would show (namespaces, nodes, quotas,
limit ranges, Leases, queues) in, pass/warn/fail with the message and hint a user reads out.
Each case is a cluster that would refuse or strand the run, and one that would not."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from nccl_k8s.k8s.preflight._nodechecks import check_nodes
from nccl_k8s.k8s.preflight._nodefit import place
from nccl_k8s.k8s.preflight._preflight import (
    Read,
    check_gang,
    check_limit_ranges,
    check_pod_security,
    check_queue,
    check_quotas,
    check_scheduler,
)
from nccl_k8s.spec import build_run_spec

Obj = dict[str, Any]
NOW = datetime.datetime(2026, 12, 3, 12, 0, tzinfo=datetime.timezone.utc)


def spec(**kw: Any):
    kw.setdefault("world_size", "16")
    kw.setdefault("gpus_per_node", "8")
    kw.setdefault("namespace", "bench")
    return build_run_spec(**kw)


def node(name: str, gpus: int = 8, *, taints: list[Obj] | None = None, **extra: Any) -> Obj:
    alloc = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus), **extra.pop("alloc", {})}
    capacity = {**alloc, **extra.pop("capacity", {})}
    return {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **extra.pop("labels", {})},
        },
        "spec": {"taints": taints or [], **extra.pop("spec", {})},
        "status": {
            "allocatable": alloc,
            "capacity": capacity,
            "conditions": [{"type": "Ready", "status": extra.pop("ready", "True")}],
        },
    }


def by_name(checks) -> dict[str, Any]:
    return {c.name: c for c in checks}


def namespace(labels: dict[str, str] | None = None) -> Read:
    return Read(items=[{"metadata": {"name": "bench", "labels": labels or {}}}])


# ---- Pod Security ------------------------------------------------------------------------------


def test_baseline_namespace_refuses_the_rdma_profile_certainly_with_the_fix() -> None:
    s = spec(network="ib", rdma_resource=["rdma/ib=1"])
    c = check_pod_security(
        s, "bench", namespace({"pod-security.kubernetes.io/enforce": "baseline"})
    )
    assert c.status == "fail" and c.certain
    assert c.message == (
        "namespace bench enforces Pod Security level 'baseline' (pod-security.kubernetes.io/enforce) "
        "and the pods of --security rdma need 'privileged' (the IPC_LOCK capability): "
        "PodSecurity admission refuses them"
    )
    assert "only 'privileged' admits" in c.hint
    assert "pod-security.kubernetes.io/enforce=privileged" in c.hint


@pytest.mark.parametrize(
    ("enforce", "kw", "status"),
    [
        ("restricted", {}, "pass"),  # socket passes restricted
        ("baseline", {"security": "privileged"}, "fail"),
        ("privileged", {"network": "ib", "rdma_resource": ["rdma/ib=1"]}, "pass"),
        ("restricted", {"host_network": True}, "fail"),
        ("strictest", {}, "warn"),
        (None, {"security": "privileged"}, "pass"),
    ],
)
def test_pod_security_levels(enforce: str | None, kw: dict[str, Any], status: str) -> None:
    labels = {"pod-security.kubernetes.io/enforce": enforce} if enforce else {}
    assert check_pod_security(spec(**kw), "bench", namespace(labels)).status == status


def test_an_unconfined_apparmor_annotation_is_why_the_pods_need_privileged() -> None:
    s = spec(pod_annotation=["container.apparmor.security.beta.kubernetes.io/bench=unconfined"])
    c = check_pod_security(
        s, "bench", namespace({"pod-security.kubernetes.io/enforce": "restricted"})
    )
    assert c.status == "fail"
    assert (
        "need 'privileged' (the annotation container.apparmor.security.beta.kubernetes.io/bench=unconfined)"
        in c.message
    )


def test_a_restricted_namespace_suggests_the_profile_it_admits() -> None:
    c = check_pod_security(
        spec(security="privileged"),
        "bench",
        namespace({"pod-security.kubernetes.io/enforce": "restricted"}),
    )
    assert c.hint.startswith("deploy with --security socket")


# ---- quotas and limit ranges -----------------------------------------------------------------


def quota(hard: dict[str, str], used: dict[str, str] | None = None, **spec_: Any) -> Obj:
    return {
        "metadata": {"name": "team"},
        "spec": {"hard": hard, **spec_},
        "status": {"hard": hard, "used": used or {}},
    }


def test_a_gpu_quota_too_small_for_the_run_fails_naming_need_and_room() -> None:
    c = check_quotas(
        spec(),
        Read(items=[quota({"requests.nvidia.com/gpu": "24"}, {"requests.nvidia.com/gpu": "16"})]),
    )
    assert c.status == "fail" and c.certain
    assert c.message == (
        "ResourceQuota team: the run needs requests.nvidia.com/gpu 16, 8 of 24 is left (16 used): "
        "the pods would be refused"
    )


def test_quota_room_scopes_and_cpu_limits() -> None:
    fits = quota({"requests.nvidia.com/gpu": "32", "pods": "10", "requests.memory": "1Ti"})
    assert check_quotas(spec(), Read(items=[fits])).status == "pass"
    # Only BestEffort pods count against this one: ours request CPU and memory.
    scoped = quota({"pods": "0"}, scopes=["BestEffort"])
    assert (
        check_quotas(spec(), Read(items=[scoped])).message == "no ResourceQuota applies to the pods"
    )
    # A quota for another priority class does not apply; one for ours does.
    sel = {
        "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]
    }
    assert (
        check_quotas(spec(), Read(items=[quota({"pods": "0"}, scopeSelector=sel)])).status == "pass"
    )
    assert (
        check_quotas(
            spec(priority_class="high"), Read(items=[quota({"pods": "0"}, scopeSelector=sel)])
        ).status
        == "fail"
    )
    cpu = check_quotas(spec(), Read(items=[quota({"limits.cpu": "1000"})]))
    assert cpu.status == "fail" and cpu.hint == "deploy with --qos guaranteed (CPU limit = request)"
    assert (
        check_quotas(spec(qos="guaranteed"), Read(items=[quota({"limits.cpu": "1000"})])).status
        == "pass"
    )
    assert check_quotas(spec(), Read(forbidden=True)).status == "warn"


def limit_range(**item: Any) -> Obj:
    return {"metadata": {"name": "defaults"}, "spec": {"limits": [{"type": "Container", **item}]}}


def test_limit_ranges_that_refuse_the_pods() -> None:
    # A CPU maximum needs a CPU limit, which --qos burstable pods do not set.
    c = check_limit_ranges(spec(), Read(items=[limit_range(max={"cpu": "64"})]))
    assert c.status == "fail" and c.certain
    assert c.message == (
        "LimitRange defaults: maximum cpu usage per Container is 64, no limit is specified: "
        "admission refuses the pods"
    )
    assert c.hint == "deploy with --qos guaranteed (a CPU limit = request)"
    assert (
        check_limit_ranges(
            spec(qos="guaranteed"), Read(items=[limit_range(max={"cpu": "64"})])
        ).status
        == "pass"
    )
    # A default CPU limit below the pods' request makes request > limit.
    low = check_limit_ranges(spec(), Read(items=[limit_range(default={"cpu": "2"})]))
    assert low.status == "fail" and "cpu request 16 is above the cpu limit 2" in low.message
    big = check_limit_ranges(spec(), Read(items=[limit_range(max={"memory": "16Gi"})]))
    assert (
        big.status == "fail"
        and "maximum memory usage per Container is 16Gi, the pods ask for 40Gi" in big.message
    )
    ok = check_limit_ranges(
        spec(), Read(items=[limit_range(min={"memory": "1Gi"}, max={"nvidia.com/gpu": "8"})])
    )
    assert ok.status == "pass" and ok.message == "the pods pass LimitRange defaults"


# ---- nodes ---------------------------------------------------------------------------------------


def test_too_few_gpus_for_the_world_names_what_fits() -> None:
    checks = by_name(
        check_nodes(spec(world_size="64"), Read(items=[node(f"n{i}") for i in range(4)]))
    )
    world = checks["world"]
    assert world.status == "fail"
    assert world.message.startswith(
        "world size 64 needs 8 pod(s) of 8 nvidia.com/gpu (one per node; cpu 16, memory 40Gi each); "
        "4 can be placed"
    )
    assert world.hint.startswith("--world-size 32 fits these nodes")
    assert (
        checks["gpu-nodes"].message
        == "4 of 4 nodes have nvidia.com/gpu allocatable (nodes x GPUs: 4 x 8)"
    )


def test_no_gpu_resource_points_at_the_resource_the_nodes_have() -> None:
    nodes = [node("n0", 0, alloc={"amd.com/gpu": "8"}), node("n1", 0)]
    [only] = check_nodes(spec(), Read(items=nodes))
    assert only.name == "gpu-nodes" and only.status == "fail"
    assert only.message == "no node of 2 has nvidia.com/gpu allocatable"
    assert only.hint == "the nodes advertise amd.com/gpu: --gpu-resource amd.com/gpu"


def test_untolerated_taints_are_named_with_the_toleration_that_frees_them() -> None:
    taint = [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]
    nodes = [node("n0", taints=taint), node("n1", taints=taint), node("n2")]
    checks = by_name(check_nodes(spec(), Read(items=nodes)))
    assert checks["taints"].status == "fail"
    assert checks["taints"].message == (
        "2 GPU node(s) are left out (taint gpu=true:NoSchedule on 2), and without them the run "
        "does not fit"
    )
    assert checks["taints"].hint == "tolerate it: --toleration gpu=true:NoSchedule"
    tolerated = by_name(check_nodes(spec(toleration=["gpu=true:NoSchedule"]), Read(items=nodes)))
    assert tolerated["taints"].status == "pass" and tolerated["world"].status == "pass"


def test_rdma_resource_on_no_node_and_a_device_plugin_gone_from_one() -> None:
    nodes = [node("n0", alloc={"rdma/hca_shared_devices_a": "1"}), node("n1")]
    s = spec(network="ib", rdma_resource=["rdma/ib=1"])
    checks = by_name(check_nodes(s, Read(items=nodes)))
    assert checks["rdma"].status == "fail"
    assert checks["rdma"].message == (
        "no GPU node has rdma/ib=1 allocatable; the run needs 2 for --network ib (the GPU nodes "
        "advertise rdma/hca_shared_devices_a)"
    )
    gone = node("n2", 0, capacity={"nvidia.com/gpu": "8"})
    dp = by_name(check_nodes(spec(), Read(items=[node("n0"), node("n1"), gone])))["device-plugin"]
    assert (
        dp.status == "warn" and "n2 have nvidia.com/gpu capacity but none allocatable" in dp.message
    )


def test_node_names_and_selector_leave_too_few() -> None:
    nodes = [
        node("n0", labels={"pool": "a"}),
        node("n1", labels={"pool": "b"}),
        node("n2", labels={"pool": "b"}),
    ]
    checks = by_name(check_nodes(spec(node_selector=["pool=a"]), Read(items=nodes)))
    assert checks["node-selection"].status == "fail"
    assert "no label pool=a on 2" in checks["node-selection"].message
    p = place(spec(world_size="8", node=["n1"]), nodes)
    assert [v.name for v in p.eligible] == ["n1"] and p.dropped["n0"] == ("node", "not a --node")


# ---- add-ons ---------------------------------------------------------------------------------------


def lease(name: str, renewed: datetime.datetime) -> Obj:
    stamp = renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"holderIdentity": f"{name}-x", "renewTime": stamp},
    }


def test_a_named_scheduler_needs_a_fresh_lease_or_pods_it_placed() -> None:
    s = spec(scheduler="hami-scheduler")
    fresh = Read(items=[lease("hami-scheduler", NOW - datetime.timedelta(seconds=5))])
    assert check_scheduler(s, fresh, Read(items=[]), NOW).message == (
        "hami-scheduler runs: its Lease kube-system/hami-scheduler was renewed 5s ago"
    )
    stale = Read(items=[lease("hami-scheduler", NOW - datetime.timedelta(minutes=10))])
    pending = Read(items=[{"metadata": {"name": "p"}, "spec": {}}])
    c = check_scheduler(s, stale, pending, NOW)
    assert c.status == "fail"
    assert c.message == (
        "no sign of scheduler hami-scheduler: no leader-election Lease of it renewed in the last "
        "60s and no running pod placed by it; 1 pod(s) asking for it wait unbound"
    )
    assert c.hint.startswith(
        "install hami-scheduler (its Helm chart) or deploy without --scheduler hami-scheduler"
    )
    placed = Read(items=[{"metadata": {"name": "p"}, "spec": {"nodeName": "n0"}}])
    assert check_scheduler(s, stale, placed, NOW).status == "pass"
    assert check_scheduler(spec(), Read(), Read(), NOW).status == "pass"


def test_gang_crd_and_kueue_queue() -> None:
    gang = check_gang(spec(gang="volcano"), Read(absent=True))
    assert gang is not None and gang.status == "fail" and "Volcano is not installed" in gang.message
    assert check_gang(spec(), Read(absent=True)) is None
    koord = check_gang(spec(gang="koordinator"), Read(absent=True))
    assert (
        koord is not None
        and koord.certain
        and koord.message
        == (
            "the cluster does not serve podgroups.scheduling.sigs.k8s.io/v1alpha1: Koordinator is "
            "not installed (no PodGroup CRD)"
        )
    )
    assert koord.hint == "install Koordinator, or deploy without --gang"
    q = spec(queue="gpu")

    def queue(read: Read) -> Any:
        c = check_queue(q, "bench", read)
        assert c is not None
        return c

    assert queue(Read(absent=True)).status == "warn"
    missing = queue(Read(items=[{"metadata": {"name": "cpu"}}]))
    assert missing.status == "fail" and missing.certain
    assert missing.message.startswith("no LocalQueue gpu in namespace bench (there: cpu)")
    assert queue(Read(items=[{"metadata": {"name": "gpu"}}])).status == "pass"
    assert check_queue(spec(), "bench", Read(absent=True)) is None
