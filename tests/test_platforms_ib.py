"""Issue 20, the InfiniBand and RoCE clouds (spec/platforms/_ib.py): each platform's rendered pod
carries, item by item, what its vendor's reference manifest requires (docs/platforms.md cites
each); nodes labelled and provisioned as the vendor does are detected as its platform; the
objects pass the upstream schemas; and `diagnose --expect-fabric` holds a platform's fabric
against public logs of that fabric and of others (acceptance 5, first half, for ib and roce)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.errors import UsageError
from nccl_k8s.k8s import render
from nccl_k8s.results import diagnose_files
from nccl_k8s.spec import RDMA_IMAGE, build_run_spec, with_platform
from nccl_k8s.spec.platforms import PLATFORMS, NodeFacts, detect

Obj = dict[str, Any]
TYPE = "node.kubernetes.io/instance-type"


def _job(platform: str, **options: object) -> Obj:
    devices = options.pop("devices", None)
    instance_type = options.pop("instance_type", None)
    spec = build_run_spec(world_size=16, run_id="r", **options)  # type: ignore[arg-type]
    spec = with_platform(spec, platform, devices=devices, instance_type=instance_type)  # type: ignore[arg-type]
    return render(spec)[-1]


def _pod(job: Obj) -> tuple[Obj, Obj]:
    """The pod spec and its benchmark container."""
    pod = job["spec"]["template"]["spec"]
    return pod, pod["containers"][0]


def _env(container: Obj) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def _limits(container: Obj) -> dict[str, str]:
    res = container["resources"]
    assert res["requests"].get("rdma/ib") == res["limits"].get("rdma/ib")
    return dict(res["limits"])


def _gpu_node(name: str, labels: dict[str, str], **allocatable: str) -> NodeFacts:
    return NodeFacts(name=name, labels=labels, allocatable={"nvidia.com/gpu": "8", **allocatable})


# --- CoreWeave ---------------------------------------------------------------------------------


def test_coreweave_pod_requests_rdma_ib_1_and_sets_the_vendor_nccl_env() -> None:
    # rdma/ib "is used as a boolean": 1 whatever the node's allocatable says.
    pod, bench = _pod(_job("coreweave", devices=1000))
    assert _limits(bench)["rdma/ib"] == "1"
    env = _env(bench)
    assert env["NCCL_IB_HCA"] == "ibp"  # CoreWeave's HCAs are ibp0..ibp7, not mlx5_*
    assert env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert env["NCCL_NET_PLUGIN"] == "none"
    assert env["NCCL_NET"] == "IB" and env["NCCL_DEBUG"] == "INFO"
    assert bench["image"] == RDMA_IMAGE  # rdma-core/libibverbs
    assert bench["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert "privileged" not in bench["securityContext"] and "hostNetwork" not in pod
    # No machine type is needed to render it; the user's --env still wins.
    _, mine = _pod(_job("coreweave", env=["NCCL_IB_HCA=ibp0"]))
    assert _limits(mine)["rdma/ib"] == "1" and _env(mine)["NCCL_IB_HCA"] == "ibp0"


def test_coreweave_nodes_are_detected_by_their_fabric_labels() -> None:
    ib = {"ib.coreweave.cloud/fabric": "fabric-a", TYPE: "gd-8xh100ib-i128"}
    backend = {"backend.coreweave.cloud/flavor": "infiniband", TYPE: "gd-8xh100ib-i128"}
    choice = detect([_gpu_node("g137a1", ib), _gpu_node("g137a2", backend)], PLATFORMS)
    assert choice.platform == "coreweave"
    assert choice.reason.startswith(
        "coreweave: node g137a1 is labelled ib.coreweave.cloud/fabric=fabric-a"
    )
    roce = {"backend.coreweave.cloud/flavor": "roce"}  # a RoCE fabric is not this entry's
    assert detect([_gpu_node("gb300-1", roce)], PLATFORMS).platform == "generic"


# --- Nebius ------------------------------------------------------------------------------------


def test_nebius_pod_is_privileged_with_the_vendor_nccl_env() -> None:
    job = _job("nebius")
    pod, bench = _pod(job)
    assert bench["securityContext"] == {"privileged": True}
    assert not any(k.startswith("rdma/") for k in _limits(bench))  # no RDMA device plugin
    env = _env(bench)
    assert (env["NCCL_SOCKET_IFNAME"], env["NCCL_IB_HCA"], env["NCCL_NET"]) == (
        "eth0",
        "mlx5",
        "IB",
    )
    assert "hostNetwork" not in pod and bench["image"] == RDMA_IMAGE
    assert job["metadata"]["annotations"]["nccl-k8s/pod-security"] == "privileged"


def test_nebius_nodes_are_detected_by_their_gpu_cluster_label() -> None:
    labels = {"topology.nebius.com/gpu-cluster-id": "computegpucluster-e00abc"}
    choice = detect([_gpu_node("n1", labels), _gpu_node("n2", labels)], PLATFORMS)
    assert choice.platform == "nebius"
    assert (
        "is labelled topology.nebius.com/gpu-cluster-id=computegpucluster-e00abc" in choice.reason
    )


# --- Together AI -------------------------------------------------------------------------------


def test_together_renders_without_flags_as_skypilot_sets_its_pods() -> None:
    """SkyPilot's `network_tier: best` on Together (skypilot-org/skypilot#8581): IPC_LOCK,
    NCCL_IB_HCA=mlx5, and nvidia.com/rdma_ib, one per GPU of the pod."""
    _, bench = _pod(_job("together"))
    res = bench["resources"]
    assert res["limits"]["nvidia.com/rdma_ib"] == res["requests"]["nvidia.com/rdma_ib"] == "8"
    assert bench["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert _env(bench)["NCCL_IB_HCA"] == "mlx5" and _env(bench)["NCCL_NET"] == "IB"
    _, half = _pod(_job("together", gpus_per_node=4))
    assert half["resources"]["limits"]["nvidia.com/rdma_ib"] == "4"
    _, mine = _pod(_job("together", rdma_resource=["nvidia.com/rdma_ib=2"]))
    assert mine["resources"]["limits"]["nvidia.com/rdma_ib"] == "2"  # told otherwise


def test_together_nodes_are_detected_by_their_worker_role_label() -> None:
    nodes = [_gpu_node(f"t{i}", {"node-role.together.ai/worker": "true"}) for i in range(2)]
    assert detect(nodes, PLATFORMS).platform == "together"
    assert detect([_gpu_node("plain", {})], PLATFORMS).platform == "generic"


def test_render_cli_together_needs_no_extra_flag() -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["render", "--world-size", "16", "--platform", "together"])
    assert out.exit_code == 0, out.output
    assert "nvidia.com/rdma_ib: '8'" in out.output or 'nvidia.com/rdma_ib: "8"' in out.output


# --- Azure AKS ---------------------------------------------------------------------------------


def test_aks_pod_requests_one_rdma_ib_per_gpu_with_ipc_lock() -> None:
    _, bench = _pod(_job("aks-ib", instance_type="Standard_ND96isr_H100_v5"))
    assert _limits(bench)["rdma/ib"] == "8"  # SR-IOV device plugin: one per NIC, 8 NICs
    assert "IPC_LOCK" in bench["securityContext"]["capabilities"]["add"]
    env = _env(bench)
    assert env["NCCL_IB_DISABLE"] == "0"
    assert env["NCCL_NET_GDR_LEVEL"] == "SYS"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    _, half = _pod(_job("aks-ib", instance_type="Standard_ND96asr_v4", gpus_per_node=4))
    assert _limits(half)["rdma/ib"] == "4"  # the vendor's test: rdma/ib = GPUs of the pod
    with pytest.raises(UsageError, match=r"Standard_ND96isr_H100_v5.*--rdma-resource rdma/ib"):
        _job("aks-ib")  # how many NICs depends on the VM size


def test_aks_nodes_are_detected_by_their_nd_vm_size() -> None:
    h100 = {TYPE: "Standard_ND96isr_H100_v5"}
    nodes = [_gpu_node(f"aks-ibnodepool-{i}", h100, **{"rdma/ib": "8"}) for i in range(2)]
    choice = detect(nodes, PLATFORMS)
    assert (choice.platform, choice.devices, choice.instance_type) == (
        "aks-ib",
        8,
        "Standard_ND96isr_H100_v5",
    )
    _, bench = _pod(_job("aks-ib", devices=choice.devices, instance_type=choice.instance_type))
    assert _limits(bench)["rdma/ib"] == "8"
    other = _gpu_node("nc", {TYPE: "Standard_NC24ads_A100_v4"})
    assert detect([*nodes, other], PLATFORMS).platform == "generic"


# --- Oracle OKE --------------------------------------------------------------------------------


def test_oke_pod_uses_the_host_rdma_interfaces_and_the_shape_nccl_env() -> None:
    job = _job("oke-roce", instance_type="BM.GPU.H100.8")
    pod, bench = _pod(job)
    assert (pod["hostNetwork"], pod["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    assert {"name": "devinf", "hostPath": {"path": "/dev/infiniband"}} in pod["volumes"]
    assert {"name": "devinf", "mountPath": "/dev/infiniband"} in bench["volumeMounts"]
    assert bench["securityContext"] == {"privileged": True}
    env = _env(bench)
    assert env["NCCL_IB_HCA"] == (
        "=mlx5_0,mlx5_1,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7,mlx5_8,"
        "mlx5_9,mlx5_10,mlx5_12,mlx5_13,mlx5_14,mlx5_15,mlx5_16,mlx5_17"
    )  # the 16 RDMA ports, exactly (`=`), not the front-end NIC
    assert {k: env[k] for k in ("NCCL_IB_GID_INDEX", "NCCL_IB_TC", "NCCL_IB_SL")} == {
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_IB_TC": "41",
        "NCCL_IB_SL": "0",
    }
    assert (env["NCCL_IB_TIMEOUT"], env["NCCL_IB_SPLIT_DATA_ON_QPS"]) == ("22", "0")
    assert (env["NCCL_SOCKET_IFNAME"], env["NCCL_CUMEM_ENABLE"]) == ("eth0", "0")
    assert env["NCCL_IGNORE_CPU_AFFINITY"] == "1" and env["NCCL_NET"] == "IB"
    assert job["metadata"]["annotations"]["nccl-k8s/pod-security"] == "privileged"


def test_oke_nccl_env_follows_the_shape() -> None:
    _, h200 = _pod(_job("oke-roce", instance_type="BM.GPU.H200.8"))
    assert _env(h200)["NCCL_IB_HCA"] == "=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11"
    _, a100 = _pod(_job("oke-roce", instance_type="BM.GPU4.8"))
    env = _env(a100)
    assert env["NCCL_IB_QPS_PER_CONNECTION"] == "4" and "NCCL_CUMEM_ENABLE" not in env
    assert env["NCCL_IB_HCA"].startswith("=mlx5_0,mlx5_2,mlx5_6,")
    with pytest.raises(
        UsageError,
        match=r'^--instance-type "BM.GPU.GB200.4" --platform oke-roce: not a machine type '
        r"oke-roce knows \(known: BM.GPU4.8, .*\); expected one of them$",
    ):
        _job("oke-roce", instance_type="BM.GPU.GB200.4")  # not guessed: its env is another
    _, unknown = _pod(_job("oke-roce"))  # no shape: every ConnectX port, and the common env
    assert _env(unknown)["NCCL_IB_HCA"] == "mlx5"
    assert _env(unknown)["NCCL_IB_GID_INDEX"] == "3"


def test_oke_nodes_are_detected_by_their_bare_metal_gpu_shape() -> None:
    nodes = [_gpu_node(f"10.0.{i}.2", {TYPE: "BM.GPU.H200.8"}) for i in range(3)]
    choice = detect(nodes, PLATFORMS)
    assert (choice.platform, choice.instance_type) == ("oke-roce", "BM.GPU.H200.8")
    assert choice.reason.startswith(
        "oke-roce: node 10.0.0.2 is labelled node.kubernetes.io/instance-type=BM.GPU.H200.8"
    )
    assert choice.reason.endswith("(and 2 more node(s) alike)")
    spec = with_platform(build_run_spec(world_size=16, run_id="r"), choice.platform,
                         instance_type=choice.instance_type)  # fmt: skip
    assert _env(_pod(render(spec)[-1])[1])["NCCL_IB_HCA"].startswith("=mlx5_0,mlx5_3,")
    gb200 = [_gpu_node("gb", {TYPE: "BM.GPU.GB200.4"})]  # not in the table: not guessed
    assert detect(gb200, PLATFORMS).platform == "generic"


# --- all five ----------------------------------------------------------------------------------

CASES: dict[str, dict[str, object]] = {
    "coreweave": {},
    "nebius": {},
    "together": {"rdma_resource": ["rdma/ib=1"]},
    "aks-ib": {"instance_type": "Standard_ND96isr_H100_v5"},
    "oke-roce": {"instance_type": "BM.GPU.B200.8"},
}


@pytest.mark.parametrize("version", ["1.29", "1.33", "1.37"])
@pytest.mark.parametrize("platform", sorted(CASES))
def test_every_object_passes_the_strict_upstream_schema(platform: str, version: str) -> None:
    options = dict(CASES[platform])
    instance_type = options.pop("instance_type", None)
    spec = build_run_spec(world_size=16, run_id=f"s-{platform}", **options)  # type: ignore[arg-type]
    spec = with_platform(spec, platform, instance_type=instance_type)  # type: ignore[arg-type]
    for obj in render(spec):
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(
                f"{platform}: {obj['kind']} invalid for Kubernetes {version}: {exc.message}"
            )


def test_nodes_of_two_of_these_clouds_give_generic_naming_both() -> None:
    cw = _gpu_node("cw-1", {"ib.coreweave.cloud/fabric": "f"}, **{"rdma/ib": "1"})
    aks = _gpu_node("aks-1", {TYPE: "Standard_ND96isr_H100_v5"}, **{"rdma/ib": "8"})
    choice = detect([cw, aks], PLATFORMS)
    assert choice.platform == "generic"
    assert "cw-1 look like coreweave" in choice.reason and "aks-1 look like aks-ib" in choice.reason


def test_render_cli_takes_the_platform_and_the_shape() -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["render", "--world-size", "16", "--run-id", "r",
                             "--platform", "oke-roce", "--instance-type", "BM.GPU.H200.8"])  # fmt: skip
    assert ok.exit_code == 0, ok.stderr
    assert "hostNetwork: true" in ok.stdout and "=mlx5_0,mlx5_3,mlx5_4" in ok.stdout
    bad = runner.invoke(app, ["render", "--world-size", "16", "--platform", "aks-ib",
                              "--instance-type", "Standard_ND40rs_v2"])  # fmt: skip
    assert bad.exit_code == 2 and bad.stdout == ""
    assert bad.stderr.startswith(
        'error: --instance-type "Standard_ND40rs_v2" --platform aks-ib: not a machine type aks-ib '
        "knows (known: Standard_ND96asr_v4, Standard_ND96isr_H100_v5, Standard_ND96isr_H200_v5)"
    )


# --- diagnose --expect-fabric: each platform's fabric against public logs ---------------------

LOGS = Path(__file__).parent / "data" / "nccl-logs"
#: Public logs by the fabric their lines show (read from the files; see nccl-logs/README.md).
IB_LOGS = (
    "aks-rdma-infiniband-30_mpijob_ib_gdrdma_connections.log",  # via NET/IB/<n>/GDRDMA, 2 pods
    "aks-rdma-infiniband-30_mpijob_ib_init.log",  # mlx5_*:1/IB, Using network IB
    "ib_gdr_a100.log",
    "ibext_v8_a100x8_4nodes_gdr.log",  # HPC-X's IBext_v8 plugin on InfiniBand
)
ROCE_LOGS = ("nccl-tests-185_roce_h100x2.log",)  # mlx5_10:1/RoCE under Using network IB
OTHER_LOGS = (
    "../nccl-tests/public/aws-eks-efa_t4x2_mpijob_launcher.log",  # EFA
    "socket_fallback_h100.log",  # TCP sockets
    "polaris-cxi_aws-ofi-nccl_16ranks_4nodes_working.log",  # HPE Slingshot
)


@pytest.mark.parametrize("platform", sorted(CASES))
def test_a_platform_fabric_passes_on_its_logs_and_fails_on_the_others(platform: str) -> None:
    fabric = str(PLATFORMS[platform].fabric)
    own, sibling = (IB_LOGS, ROCE_LOGS) if fabric == "ib" else (ROCE_LOGS, IB_LOGS)
    runner = CliRunner()
    for name in own:
        res = runner.invoke(app, ["diagnose", str(LOGS / name), "--expect-fabric", fabric])
        assert res.exit_code == 0, (name, res.stderr)
        assert f"info expect-{fabric}: inter-node traffic uses {fabric}, as expected" in res.stderr
    for name in sibling:  # NCCL's IB transport carries both, but the gate asked for one of them
        d = diagnose_files([LOGS / name], expect_fabric=fabric)
        assert d.failed
        assert [f.severity for f in d.findings if f.code == f"expect-{fabric}"] == ["error"]
    for name in OTHER_LOGS:
        res = runner.invoke(app, ["diagnose", str(LOGS / name), "--expect-fabric", fabric])
        assert res.exit_code == 1, name
        assert res.stderr.startswith("error "), (name, res.stderr)


def test_the_aks_log_shows_both_pods_on_infiniband_with_gpudirect() -> None:
    d = diagnose_files([LOGS / "aks-rdma-infiniband-30_mpijob_ib_gdrdma_connections.log"])
    assert {r.host for r in d.ranks} == {"nccl-tests-worker-0", "nccl-tests-worker-1"}
    assert (d.nodes, d.inter_node, d.gdr) == (2, "ib", True)


def test_doctor_auto_names_together_on_nodes_with_its_labels() -> None:
    """What doctor/deploy --platform auto print (k8s.preflight._platforms.resolve, pure)."""
    from nccl_k8s.k8s.preflight._platforms import resolve

    def node(name: str) -> Obj:
        return {
            "metadata": {"name": name, "labels": {"node-role.together.ai/worker": "true"}},
            "spec": {},
            "status": {
                "allocatable": {"nvidia.com/gpu": "8", "nvidia.com/rdma_ib": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }

    spec = build_run_spec(world_size=16, run_id="r")
    resolved = resolve(spec, [node("t0"), node("t1")], [])
    assert resolved.spec.platform == "together"
    assert resolved.note.startswith("platform together")
    bench = render(resolved.spec)[-1]["spec"]["template"]["spec"]["containers"][0]
    assert bench["resources"]["limits"]["nvidia.com/rdma_ib"] == "8"
