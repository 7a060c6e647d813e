"""eks-efa: what AWS's reference manifest for NCCL on EKS puts into a worker pod, item by item, and
how EKS nodes with EFA are recognised.

The expected values are read from the sources the entry cites (docs/platforms.md, "eks-efa"):
aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/kubernetes/nccl-tests.yaml
(the Worker's resources, the mpirun -x environment), its gpu-cluster-healthcheck
instance-profiles.conf (EFA devices per machine type), the EKS user guide's EFA page and the EFA
device plugin's Helm chart (the resource, the DaemonSet), and AWS's PyTorch DLC docs (the image).
"""

from __future__ import annotations

import kubernetes_validate
import pytest

from nccl_k8s.k8s import render
from nccl_k8s.spec import build_run_spec, with_platform
from nccl_k8s.spec.platforms import PLATFORMS, NodeFacts, detect

EFA = "vpc.amazonaws.com/efa"
TYPE = "node.kubernetes.io/instance-type"


def _pod(**options: object) -> tuple[dict, dict]:  # type: ignore[type-arg]
    spec = build_run_spec(world_size=16, run_id="efa", platform="eks-efa", **options)  # type: ignore[arg-type]
    objs = render(spec)
    job = objs[-1]
    pod = job["spec"]["template"]["spec"]
    return job, pod


def _env(container: dict) -> dict[str, str]:  # type: ignore[type-arg]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


@pytest.mark.parametrize(
    ("instance", "devices"),
    [
        ("p4d.24xlarge", 4),
        ("p4de.24xlarge", 4),
        ("p5.48xlarge", 32),
        ("p5e.48xlarge", 32),
        ("p5en.48xlarge", 16),
        ("p6-b200.48xlarge", 8),
    ],
)
def test_a_whole_node_pod_requests_every_efa_device_of_its_machine(
    instance: str, devices: int
) -> None:
    _, pod = _pod(instance_type=instance)
    resources = pod["containers"][0]["resources"]
    assert resources["limits"][EFA] == resources["requests"][EFA] == str(devices)
    assert resources["limits"]["nvidia.com/gpu"] == "8"


def test_a_half_node_pod_requests_half_the_devices() -> None:
    _, pod = _pod(instance_type="p5.48xlarge", gpus_per_node=4)
    assert pod["containers"][0]["resources"]["limits"][EFA] == "16"


def test_the_pod_carries_what_the_reference_worker_carries() -> None:
    job, pod = _pod(instance_type="p5.48xlarge")
    bench = pod["containers"][0]
    # Resources: the Worker's limits and requests (nccl-tests.yaml).
    for side in ("limits", "requests"):
        assert bench["resources"][side]["hugepages-2Mi"] == "5120Mi"
        assert bench["resources"][side][EFA] == "32"
    # Environment: what the launcher exports to the ranks with mpirun -x.
    env = _env(bench)
    assert env["FI_PROVIDER"] == "efa"
    assert env["FI_EFA_FORK_SAFE"] == "1"
    assert env["NCCL_BUFFSIZE"] == "8388608"
    assert env["NCCL_P2P_NET_CHUNKSIZE"] == "524288"
    assert env["NCCL_DEBUG"] == "INFO"
    # Not forced to the IB transport: NCCL loads the image's aws-ofi-nccl itself.
    assert "NCCL_NET" not in env and "NCCL_IB_HCA" not in env
    # The image: AWS's public PyTorch DLC for EC2/EKS, which has aws-ofi-nccl, pinned.
    assert bench["image"] == "public.ecr.aws/deep-learning-containers/pytorch:2.13.0-cu133-amzn2023"
    # Root (as the reference's container) with IPC_LOCK to pin memory for the EFA devices.
    assert bench["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert "runAsNonRoot" not in pod.get("securityContext", {})
    # No host network, no privileged container: the device plugin hands the devices over.
    assert not pod.get("hostNetwork") and not bench["securityContext"].get("privileged")
    for version in ("1.29", "1.33", "1.37"):
        for obj in render(with_platform(build_run_spec(world_size=16, run_id="efa"), "eks-efa",
                                        devices=32)):  # fmt: skip
            kubernetes_validate.validate(obj, version, strict=True)
    assert job["kind"] == "Job"


def test_user_options_win_over_the_platform() -> None:
    _, pod = _pod(
        instance_type="p5.48xlarge",
        image="me/torch-efa:1",
        env=["FI_PROVIDER=efa;ofi_rxd", "NCCL_BUFFSIZE=4194304"],
        rdma_resource=[f"{EFA}=8"],
    )
    bench = pod["containers"][0]
    env = _env(bench)
    assert bench["image"] == "me/torch-efa:1"
    assert env["FI_PROVIDER"] == "efa;ofi_rxd" and env["NCCL_BUFFSIZE"] == "4194304"
    assert bench["resources"]["limits"][EFA] == "8"


def _node(name: str, gpus: int = 8, **facts: object) -> NodeFacts:
    allocatable = {"nvidia.com/gpu": str(gpus), **facts.pop("allocatable", {})}  # type: ignore[dict-item]
    return NodeFacts(name=name, allocatable=allocatable, **facts)  # type: ignore[arg-type]


def test_detected_from_efa_devices_and_the_machine_type() -> None:
    p5 = [
        _node(f"ip-10-1-2-{i}", labels={TYPE: "p5.48xlarge"}, allocatable={EFA: "32"})
        for i in (3, 4)
    ]
    choice = detect(p5, PLATFORMS)
    assert choice.platform == "eks-efa"
    assert choice.reason.startswith(
        "eks-efa: node ip-10-1-2-3 has vpc.amazonaws.com/efa: 32, is labelled "
        "node.kubernetes.io/instance-type=p5.48xlarge"
    )
    assert (choice.devices, choice.instance_type) == (32, "p5.48xlarge")
    # A p5 node group without the EFA device plugin is still EKS with EFA (doctor says what
    # is missing): its machine type names it, and the table knows its devices.
    bare = detect([_node("ip-10-1-2-5", labels={TYPE: "p5en.48xlarge"})], PLATFORMS)
    assert (bare.platform, bare.devices, bare.instance_type) == ("eks-efa", None, "p5en.48xlarge")
    # A machine type with EFA the table does not list (g6e), through its allocatable devices.
    g6e = detect([_node("g", labels={TYPE: "g6e.48xlarge"}, allocatable={EFA: "4"})], PLATFORMS)
    assert (g6e.platform, g6e.devices, g6e.instance_type) == ("eks-efa", 4, None)
    # An EKS GPU node without EFA is not the platform.
    plain = detect([_node("ip-10-9-9-9", labels={TYPE: "g5.xlarge"}, gpus=1)], PLATFORMS)
    assert plain.platform == "generic"
