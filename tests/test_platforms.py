"""The platform table's machinery: detection from node facts, the defaults a platform sets, and
where its pieces land in the pod. Each real platform's entry has its own tests (what its vendor's
reference manifest requires, item by item); these use one made-up entry to prove the placement."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from nccl_k8s.errors import UsageError
from nccl_k8s.fabrics import Fabric
from nccl_k8s.k8s import render
from nccl_k8s.spec import build_run_spec, with_platform
from nccl_k8s.spec.platforms import PLATFORMS, Detect, Instance, NodeFacts, Platform, detect

FAKE = Platform(
    name="fake-rdma",
    title="a made-up RDMA cloud",
    fabric=Fabric.IB,
    network="ib",
    resource="example.com/hca",
    instances=(Instance(name="big.8gpu", gpus=8, devices=4),),
    detect=Detect(labels={"example.com/fabric": ("ib",)}, resources=("example.com/hca",)),
    extra_resources={"hugepages-2Mi": "1Gi"},
    annotations={"example.com/nics": "eth1,eth2"},
    env={"NCCL_IB_EXAMPLE": "1"},
    source="/opt/vendor/nccl-env.sh",
    volumes=({"name": "plugin", "hostPath": {"path": "/opt/vendor/lib"}},),
    mounts=({"name": "plugin", "mountPath": "/usr/local/vendor", "readOnly": True},),
    sidecars=({"name": "helper", "image": "example.com/helper:1"},),
    capabilities=("IPC_LOCK", "SYS_RESOURCE"),
    image="example.com/nccl:1",
)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Platform:
    monkeypatch.setitem(PLATFORMS, FAKE.name, FAKE)
    return FAKE


def _node(name: str, gpus: int = 8, **facts: object) -> NodeFacts:
    allocatable = {"nvidia.com/gpu": str(gpus), **facts.pop("allocatable", {})}  # type: ignore[dict-item]
    return NodeFacts(name=name, allocatable=allocatable, **facts)  # type: ignore[arg-type]


def test_detect_names_the_platform_and_its_evidence(fake: Platform) -> None:
    nodes = [
        _node("n1", allocatable={"example.com/hca": "4"}, labels={"node.kubernetes.io/instance-type": "big.8gpu"}),
        _node("n2", allocatable={"example.com/hca": "2"}, labels={"node.kubernetes.io/instance-type": "big.8gpu"}),
        _node("cpu-0", gpus=0),
    ]  # fmt: skip
    choice = detect(nodes, PLATFORMS)
    assert choice.platform == "fake-rdma"
    assert choice.reason.startswith("fake-rdma: node n1 has example.com/hca: 4")
    assert "instance type big.8gpu" in choice.reason and "1 more node" in choice.reason
    assert (choice.devices, choice.instance_type) == (2, "big.8gpu")  # the fewest any node has


def test_detect_gives_generic_with_its_reason(fake: Platform) -> None:
    cpu = detect([_node("cpu-0", gpus=0)], PLATFORMS)
    assert cpu.platform == "generic" and "nvidia.com/gpu allocatable" in cpu.reason
    plain = detect([_node("g1"), _node("g2")], PLATFORMS)
    assert plain.platform == "generic" and "g1, g2" in plain.reason
    mixed = detect([_node("g1"), _node("ib1", labels={"example.com/fabric": "ib"})], PLATFORMS)
    assert mixed.platform == "generic"
    assert "ib1 look like fake-rdma" in mixed.reason and "g1 like no known platform" in mixed.reason
    wrong_value = detect([_node("g1", labels={"example.com/fabric": "tcp"})], PLATFORMS)
    assert wrong_value.platform == "generic"


def test_a_platform_sets_only_the_defaults_the_user_left(fake: Platform) -> None:
    auto = build_run_spec(world_size=16)
    spec = with_platform(auto, "fake-rdma", devices=4)
    assert (spec.network, spec.security, spec.image) == ("ib", "rdma", "example.com/nccl:1")
    assert spec.rdma_resources == (("example.com/hca", 4),)
    mine = build_run_spec(world_size=16, network="socket", image="me/img:2")
    spec = with_platform(mine, "fake-rdma", instance_type="big.8gpu")
    assert (spec.network, spec.image) == ("socket", "me/img:2")
    assert spec.rdma_resources == (("example.com/hca", 4),)  # from the machine type's table
    given = build_run_spec(world_size=16, rdma_resource=["example.com/hca=1"])
    assert with_platform(given, "fake-rdma", devices=4).rdma_resources == (("example.com/hca", 1),)


def test_render_refuses_an_unknown_device_count_and_places_every_piece(fake: Platform) -> None:
    unknown = with_platform(build_run_spec(world_size=16, run_id="r"), "fake-rdma")
    with pytest.raises(
        UsageError,
        match=r"--instance-type TYPE \(big.8gpu\) or --rdma-resource example.com/hca=COUNT",
    ):
        render(unknown)
    spec = with_platform(build_run_spec(world_size=16, run_id="r"), "fake-rdma", devices=4)
    job = render(spec)[-1]
    template = job["spec"]["template"]
    pod, bench = template["spec"], template["spec"]["containers"][0]
    assert template["metadata"]["annotations"]["example.com/nics"] == "eth1,eth2"
    assert bench["resources"]["limits"]["example.com/hca"] == "4"
    assert bench["resources"]["limits"]["hugepages-2Mi"] == "1Gi"
    assert bench["resources"]["requests"]["hugepages-2Mi"] == "1Gi"
    assert {"name": "NCCL_IB_EXAMPLE", "value": "1"} in bench["env"]
    assert (
        bench["command"][:2] == ["/bin/sh", "-c"]
        and ". /opt/vendor/nccl-env.sh" in bench["command"][2]
    )
    assert bench["args"][1:3] == ["python3", "-c"] and "torchrun" in bench["args"]
    assert {"name": "plugin", "mountPath": "/usr/local/vendor", "readOnly": True} in bench[
        "volumeMounts"
    ]
    assert {"name": "plugin", "hostPath": {"path": "/opt/vendor/lib"}} in pod["volumes"]
    assert [c["name"] for c in pod["containers"]][1:] == ["helper"]
    assert set(bench["securityContext"]["capabilities"]["add"]) == {"IPC_LOCK", "SYS_RESOURCE"}
    assert job["metadata"]["annotations"]["nccl-k8s/pod-security"] == "privileged"


def test_auto_renders_as_generic() -> None:
    spec = build_run_spec(world_size=16, run_id="r")
    generic = with_platform(spec, "generic")
    assert render(spec) == render(generic)


MULTI_NIC = Platform(
    name="fake-nics",
    title="a made-up cloud whose pods name one network interface per GPU NIC",
    fabric=Fabric.ROCE,
    instances=(
        Instance(
            name="four.nic",
            gpus=4,
            devices=4,
            annotations={"example.com/nics": "4"},
            node_selector={"kubernetes.io/arch": "arm64"},
        ),
        Instance(name="eight.nic", gpus=8, devices=8, annotations={"example.com/nics": "8"}),
    ),
    annotations={"example.com/nics": "none", "example.com/default": "eth0"},
    security="rdma",  # root: its devices come with its networks, not with a resource
)


def test_annotations_that_depend_on_the_machine_need_its_type(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Model extension (issue 20, GKE): an annotation per machine type, e.g. GKE's
    networking.gke.io/interfaces listing 4 or 8 GPU NICs."""
    monkeypatch.setitem(PLATFORMS, MULTI_NIC.name, MULTI_NIC)
    spec = build_run_spec(world_size=16, run_id="r")
    with pytest.raises(UsageError, match=r"expected --instance-type TYPE \(four.nic, eight.nic\)"):
        render(with_platform(spec, "fake-nics"))
    with pytest.raises(UsageError, match=r"not a machine type fake-nics knows \(known: four"):
        with_platform(spec, "fake-nics", instance_type="huge.nic")
    job = render(with_platform(spec, "fake-nics", instance_type="eight.nic"))[-1]
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert annotations["example.com/nics"] == "8"  # the machine's replaces the platform's
    assert annotations["example.com/default"] == "eth0"
    mine = build_run_spec(world_size=16, run_id="r", pod_annotation=["example.com/nics=mine"])
    job = render(with_platform(mine, "fake-nics", instance_type="four.nic"))[-1]
    assert job["spec"]["template"]["metadata"]["annotations"]["example.com/nics"] == "mine"


def test_placement_per_machine_and_rdma_without_a_resource(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine's node selector joins the platform's (GKE A4X selects arm64 nodes); a platform
    whose devices come with its networks runs the rdma profile without --rdma-resource."""
    monkeypatch.setitem(PLATFORMS, MULTI_NIC.name, MULTI_NIC)
    spec = build_run_spec(world_size=8, gpus_per_node=4, run_id="r")
    four = with_platform(spec, "fake-nics", instance_type="four.nic")
    assert (four.security, four.rdma_resources) == ("rdma", ())
    pod = render(four)[-1]["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["kubernetes.io/arch"] == "arm64"
    assert pod["containers"][0]["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    eight = render(with_platform(spec, "fake-nics", instance_type="eight.nic"))[-1]
    assert "kubernetes.io/arch" not in eight["spec"]["template"]["spec"].get("nodeSelector", {})


def test_a_sourced_script_cannot_change_the_runs_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The vendor script runs in the container's shell, then the run's settings are exported
    again: NCCL_DEBUG=INFO (the fabric proof) and the user's --env win over what it exports
    (GKE's TCPXO profile sets NCCL_DEBUG=WARN); the platform's own variables it may refine."""
    script = tmp_path / "vendor-env.sh"
    script.write_text("export NCCL_DEBUG=WARN NCCL_IB_EXAMPLE=9 NCCL_VENDOR=1 NCCL_MINE=vendor\n")
    monkeypatch.setitem(PLATFORMS, FAKE.name, dataclasses.replace(FAKE, source=str(script)))
    spec = build_run_spec(world_size=16, run_id="r", env=["NCCL_MINE=user value"])
    bench = render(with_platform(spec, "fake-rdma", devices=4))[-1]["spec"]["template"]["spec"][
        "containers"
    ][0]
    env = {e["name"]: e["value"] for e in bench["env"] if "value" in e}
    shell = [*bench["command"][:3], "nccl-k8s", "env"]  # the command, running `env` instead
    out = subprocess.run(shell, env=env, capture_output=True, text=True, check=True).stdout
    seen = dict(line.split("=", 1) for line in out.splitlines() if line.startswith("NCCL_"))
    assert seen["NCCL_DEBUG"] == "INFO" and seen["NCCL_MINE"] == "user value"
    assert seen["NCCL_IB_EXAMPLE"] == "9" and seen["NCCL_VENDOR"] == "1"
