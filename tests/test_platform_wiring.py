"""The pure parts of --platform against a cluster: which nodes count (k8s.preflight._platforms),
doctor's prerequisite verdicts (_prereqs), and the fabric gate (run._fabric) on public logs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nccl_k8s.fabrics import Fabric
from nccl_k8s.k8s.preflight import _prereqs
from nccl_k8s.k8s.preflight._platforms import resolve
from nccl_k8s.k8s.preflight._preflight import Read
from nccl_k8s.k8s.run._fabric import judge
from nccl_k8s.results.platform_gate import rank_ranges
from nccl_k8s.spec import build_run_spec
from nccl_k8s.spec.platforms import PLATFORMS, Detect, Platform, Prerequisite

LOGS = Path(__file__).parent / "data" / "nccl-logs"


def node(
    name: str,
    labels: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
    *,
    taints: list[Any] | None = None,
) -> dict[str, Any]:
    alloc = {"nvidia.com/gpu": "8", **(extra or {})}
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or []},
        "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]},
    }


P5 = {"node.kubernetes.io/instance-type": "p5.48xlarge"}
EFA = {"vpc.amazonaws.com/efa": "32"}


def test_only_the_nodes_the_run_may_use_are_read() -> None:
    nodes = [
        node("gpu-plain"),
        node("p5-a", P5, EFA),
        node("p5-tainted", P5, EFA, taints=[{"key": "x", "value": "y", "effect": "NoSchedule"}]),
    ]
    mixed = resolve(build_run_spec(world_size=16, run_id="r"), nodes, [])
    assert mixed.spec.platform == "generic" and "gpu-plain" in mixed.note
    picked = resolve(build_run_spec(world_size=16, run_id="r", node_selector=[
        "node.kubernetes.io/instance-type=p5.48xlarge"]), nodes, [])  # fmt: skip
    assert picked.spec.platform == "eks-efa"
    assert picked.note.startswith("platform eks-efa: node p5-a has vpc.amazonaws.com/efa: 32")
    assert "p5-tainted" not in picked.note  # its taint is not tolerated
    assert ("vpc.amazonaws.com/efa", 32) in picked.spec.rdma_resources
    # A named platform without a count takes the nodes' (4 of 8 GPUs: half of them).
    named = resolve(build_run_spec(world_size=16, gpus_per_node=4, run_id="r",
                                   platform="eks-efa"), nodes[1:2], [])  # fmt: skip
    assert ("vpc.amazonaws.com/efa", 16) in named.spec.rdma_resources
    assert "16 vpc.amazonaws.com/efa per pod" in named.note
    # Nothing to resolve: the spec as it was, no note.
    given = build_run_spec(world_size=16, run_id="r", platform="eks-efa",
                           instance_type="p5.48xlarge")  # fmt: skip
    assert resolve(given, nodes, []).note == ""


def test_dra_drivers_come_from_resource_slices(monkeypatch: Any) -> None:
    fake = Platform(name="fake-dra", title="fake", fabric=Fabric.IB,
                    detect=Detect(drivers=("gpu.example.com",)))  # fmt: skip
    monkeypatch.setitem(PLATFORMS, fake.name, fake)
    slices = [{"spec": {"driver": "gpu.example.com", "nodeName": "n1"}}]
    got = resolve(build_run_spec(world_size=16, run_id="r"), [node("n1"), node("n2")], slices)
    assert got.spec.platform == "generic" and "n1 look like fake-dra" in got.note
    both = [{"spec": {"driver": "gpu.example.com", "nodeName": n}} for n in ("n1", "n2")]
    got = resolve(build_run_spec(world_size=16, run_id="r"), [node("n1"), node("n2")], both)
    assert got.note.startswith(
        "platform fake-dra: node n1 publishes ResourceSlices of gpu.example.com"
    )


def test_each_prerequisite_kind_passes_or_fails_with_its_hint() -> None:
    reqs = (
        Prerequisite(kind="crd", name="computedomains.resource.nvidia.com", what="the CRD", hint="h1"),
        Prerequisite(kind="driver", name="dra.example.com", what="the driver", hint="h2"),
        Prerequisite(kind="object", name="vpc1", api="networking.gke.io/v1/networks",
                     what="the network", hint="h3", severity="warn"),
        Prerequisite(kind="daemonset", name="plugin", namespace="kube-system", what="the plugin",
                     hint="h4"),
    )  # fmt: skip
    p = Platform(name="x", title="x", fabric=Fabric.IB, prerequisites=reqs)
    spec = build_run_spec(world_size=16, run_id="r")
    empty = [Read(items=[]), Read(items=[]), Read(items=[]), Read(items=[])]
    checks = _prereqs.check(p, spec, empty, Read(items=[]))
    assert [(c.status, c.hint) for c in checks] == [
        ("fail", "h1"), ("fail", "h2"), ("warn", "h3"), ("fail", "h4")]  # fmt: skip
    present = [
        Read(items=[{"metadata": {"name": "computedomains.resource.nvidia.com"}}]),
        Read(items=[{"spec": {"driver": "dra.example.com", "nodeName": "n1"}}]),
        Read(items=[{"metadata": {"name": "vpc1"}}]),
        Read(items=[{"metadata": {"name": "rel-plugin", "namespace": "kube-system"},
                     "status": {"numberReady": 0}}]),
    ]  # fmt: skip
    checks = _prereqs.check(p, spec, present, Read(items=[]))
    assert [c.status for c in checks] == ["pass", "pass", "pass", "fail"]
    assert "has no ready pod" in checks[3].message
    forbidden = _prereqs.check(p, spec, [Read(forbidden=True)] * 4, Read(items=[]))
    assert {c.status for c in forbidden} == {"warn"}


def test_the_fabric_gate_on_public_logs() -> None:
    efa = PLATFORMS["eks-efa"]
    ok = judge(efa, [(LOGS / "aws-ofi-nccl-24_horovod_efa_ring_ompi.log").read_text()])
    assert ok.ok and ok.used == "efa"
    sockets = judge(efa, [(LOGS / "nccl-447_gcp_slurm_socket_2nodes_nccl278.log").read_text()])
    assert not sockets.ok and sockets.used == "socket"
    assert sockets.message().startswith("rendered for eks-efa, but ranks ")
    assert "used NET/Socket: the image has no aws-ofi-nccl" in sockets.message()
    assert rank_ranges([3, 0, 1, 2, 8, 10, 11]) == "0-3, 8, 10-11"
