"""GKE platforms (issue 20): what Google's reference manifests require, item by item, in the pods
`render --platform gke-tcpx|gke-tcpxo|gke-rdma` prints, and their detection from GKE's node labels.

Every expected value below is read from GoogleCloudPlatform/container-engine-accelerators at
commit 992db81257553607f1477945f1b3219632991829 (the file named on each test) or the GKE
documentation cited in docs/platforms.md, not from our code.
"""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.errors import UsageError
from nccl_k8s.k8s import render
from nccl_k8s.spec import build_run_spec, with_platform
from nccl_k8s.spec.platforms import PLATFORMS, NodeFacts, detect

Obj = dict[str, Any]

GPUS = [f"/dev/nvidia{i}" for i in range(8)] + ["/dev/nvidiactl", "/dev/nvidia-uvm"]


def _job(platform: str, **options: Any) -> Obj:
    instance_type = options.pop("instance_type", None)
    spec = build_run_spec(run_id="g", **{"world_size": 16, **options})
    return render(with_platform(spec, platform, instance_type=instance_type))[-1]


def _pod(job: Obj) -> tuple[Obj, Obj, Obj]:
    """The pod template's metadata, spec and benchmark container."""
    template = job["spec"]["template"]
    return template["metadata"], template["spec"], template["spec"]["containers"][0]


def _interfaces(metadata: Obj) -> list[tuple[str, str]]:
    parsed = json.loads(metadata["annotations"]["networking.gke.io/interfaces"])
    return [(i["interfaceName"], i["network"]) for i in parsed]


def _devices(metadata: Obj, container: str) -> list[str]:
    listed = yaml.safe_load(metadata["annotations"][f"devices.gke.io/container.{container}"])
    return [d["path"] for d in listed]


def _env(container: Obj) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def _mounts(container: Obj) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}


def _host_paths(pod: Obj) -> dict[str, str]:
    return {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}


def _valid(job: Obj) -> None:
    for version in ("1.33", "1.35"):
        kubernetes_validate.validate(job, version, strict=True)


def test_gke_tcpx_pod_carries_what_the_a3_high_manifest_requires() -> None:
    """gpudirect-tcpx/nccl-test-latest.yaml, nccl-config.yaml; best-practice.md (native
    sidecar)."""
    job = _job("gke-tcpx")
    metadata, pod, bench = _pod(job)
    assert metadata["annotations"]["networking.gke.io/default-interface"] == "eth0"
    assert _interfaces(metadata) == [
        ("eth0", "default"), ("eth1", "vpc1"), ("eth2", "vpc2"), ("eth3", "vpc3"), ("eth4", "vpc4"),
    ]  # fmt: skip
    assert _devices(metadata, "tcpx-daemon") == GPUS
    # The RxDM daemon: a native sidecar (init container, restartPolicy Always).
    assert [c["name"] for c in pod["containers"]] == ["bench"]
    (daemon,) = [c for c in pod["initContainers"] if c["name"] == "tcpx-daemon"]
    assert daemon["restartPolicy"] == "Always"
    assert (
        daemon["image"] == "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/tcpgpudmarxd-dev:v2.0.12"
    )
    assert daemon["command"] == [
        "/tcpgpudmarxd/build/app/tcpgpudmarxd", "--gpu_nic_preset", "a3vm", "--gpu_shmem_type",
        "fd", "--uds_path", "/run/tcpx", "--setup_param", '\\"--verbose 128 2 0 \\"',
    ]  # fmt: skip
    assert daemon["securityContext"] == {"capabilities": {"add": ["NET_ADMIN"]}}
    assert _mounts(daemon) == {
        "/usr/local/nvidia/lib64": "libraries", "/run/tcpx": "tcpx-socket",
        "/hostsysfs": "sys", "/hostprocsysfs": "proc-sys",
    }  # fmt: skip
    assert _env(daemon) == {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64"}
    assert _host_paths(pod) == {
        "libraries": "/home/kubernetes/bin/nvidia/lib64", "sys": "/sys", "proc-sys": "/proc/sys",
    }  # fmt: skip
    # The benchmark: the daemon's sockets (the pod's own, see the socket test below), the
    # host's NCCL plugin on LD_LIBRARY_PATH, IPC_LOCK, and the NCCL settings of nccl-config.yaml.
    mounts = _mounts(bench)
    assert (mounts["/run/tcpx"], mounts["/usr/local/nvidia/lib64"]) == ("tcpx-socket", "libraries")
    assert "IPC_LOCK" in bench["securityContext"]["capabilities"]["add"]
    env = _env(bench)
    assert env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert {k: env[k] for k in (
        "NCCL_SOCKET_IFNAME", "NCCL_ALGO", "NCCL_PROTO", "NCCL_CROSS_NIC", "NCCL_NET_GDR_LEVEL",
        "NCCL_P2P_PXN_LEVEL", "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME", "NCCL_GPUDIRECTTCPX_CTRL_DEV",
        "NCCL_DYNAMIC_CHUNK_SIZE", "NCCL_P2P_NET_CHUNKSIZE", "NCCL_P2P_PCI_CHUNKSIZE",
        "NCCL_P2P_NVL_CHUNKSIZE", "NCCL_BUFFSIZE", "NCCL_NSOCKS_PERTHREAD", "NCCL_SOCKET_NTHREADS",
        "NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS",
    )} == {
        "NCCL_SOCKET_IFNAME": "eth0", "NCCL_ALGO": "Ring,Tree", "NCCL_PROTO": "Simple",
        "NCCL_CROSS_NIC": "0", "NCCL_NET_GDR_LEVEL": "PIX", "NCCL_P2P_PXN_LEVEL": "0",
        "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": "eth1,eth2,eth3,eth4",
        "NCCL_GPUDIRECTTCPX_CTRL_DEV": "eth0", "NCCL_DYNAMIC_CHUNK_SIZE": "524288",
        "NCCL_P2P_NET_CHUNKSIZE": "524288", "NCCL_P2P_PCI_CHUNKSIZE": "524288",
        "NCCL_P2P_NVL_CHUNKSIZE": "1048576", "NCCL_BUFFSIZE": "4194304",
        "NCCL_NSOCKS_PERTHREAD": "4", "NCCL_SOCKET_NTHREADS": "1",
        "NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS": "500000",
    }  # fmt: skip
    assert env["NCCL_GPUDIRECTTCPX_TX_BINDINGS"] == (
        "eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177"
    )
    assert env["NCCL_GPUDIRECTTCPX_RX_BINDINGS"] == (
        "eth1:22-35,126-139;eth2:22-35,126-139;eth3:74-87,178-191;eth4:74-87,178-191"
    )
    assert env["NCCL_DEBUG"] == "INFO"  # what proves the fabric afterwards
    # Placement and privilege: GPUs of the whole node, the pod's own network namespace.
    assert bench["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert "hostNetwork" not in pod
    assert bench["image"].startswith("pytorch/pytorch:")  # the plugin comes from the node
    assert job["metadata"]["annotations"]["nccl-k8s/pod-security"] == "privileged"
    _valid(job)


def test_gke_tcpxo_pod_carries_what_the_a3_mega_manifest_requires() -> None:
    """gpudirect-tcpxo/nccl-test-latest.yaml, README.md (Jan 9, 2026), best-practice.md."""
    job = _job("gke-tcpxo")
    metadata, pod, bench = _pod(job)
    assert metadata["annotations"]["networking.gke.io/default-interface"] == "eth0"
    assert _interfaces(metadata) == [("eth0", "default")] + [
        (f"eth{i}", f"vpc{i}") for i in range(1, 9)
    ]
    assert _devices(metadata, "tcpxo-daemon") == [*GPUS, "/dev/dmabuf_import_helper"]
    assert [c["name"] for c in pod["containers"]] == ["bench"]
    (daemon,) = [c for c in pod["initContainers"] if c["name"] == "tcpxo-daemon"]
    assert daemon["restartPolicy"] == "Always"
    assert daemon["image"] == (
        "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.21"
    )
    assert daemon["command"] == ["/bin/sh", "-c"]
    assert daemon["args"] == [
        "set -ex\nchmod 755 /fts/entrypoint_rxdm_container.sh\n"
        "/fts/entrypoint_rxdm_container.sh --num_hops=2\n"
    ]
    assert daemon["securityContext"]["capabilities"]["add"] == ["NET_ADMIN", "NET_BIND_SERVICE"]
    assert _mounts(daemon) == {
        "/usr/local/nvidia/lib64": "nvidia", "/hostsysfs": "sys", "/hostprocsysfs": "proc-sys",
    }  # fmt: skip
    assert _env(daemon) == {
        "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
        "HEALTH_CHECK_LOG_FILE": "/run/health-check",
    }
    probe = daemon["startupProbe"]
    assert probe["exec"]["command"] == ["cat", "/run/health-check"]
    assert (probe["periodSeconds"], probe["failureThreshold"]) == (5, 6)
    assert _host_paths(pod) == {
        "nvidia": "/home/kubernetes/bin/nvidia/lib64", "sys": "/sys", "proc-sys": "/proc/sys",
        "aperture-devices": "/dev/aperture_devices",
    }  # fmt: skip
    mounts = _mounts(bench)
    assert mounts["/usr/local/nvidia/lib64"] == "nvidia"
    assert mounts["/dev/aperture_devices"] == "aperture-devices"
    env = _env(bench)
    assert env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert env["NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY"] == "/dev/aperture_devices"
    assert env["NCCL_LIB_DIR"] == "/usr/local/nvidia/lib64"
    # The vendor's NCCL profile is sourced before the engine, then NCCL_DEBUG=INFO again.
    line = bench["command"][2]
    assert line.startswith(". /usr/local/nvidia/lib64/nccl-env-profile.sh && export ")
    assert "NCCL_DEBUG=INFO" in line and bench["args"][1] == "python3"
    assert "hostNetwork" not in pod
    _valid(job)


RDMA8 = [("eth0", "default")] + [(f"eth{i + 2}", f"rdma-{i}") for i in range(8)]
RDMA4 = [("eth0", "default")] + [(f"eth{i + 2}", f"rdma-{i}") for i in range(4)]


@pytest.mark.parametrize(
    ("instance_type", "gpus", "interfaces", "arch"),
    [
        ("a3-ultragpu-8g", 8, RDMA8, None),  # gpudirect-rdma/nccl-test.yaml
        ("a4-highgpu-8g", 8, RDMA8, None),  # gpudirect-rdma/nccl-test-a4.yaml
        ("a4x-highgpu-4g", 4, RDMA4, "arm64"),  # nccl-test-imex-a4x.yaml, the A4X GKE guide
    ],
)
def test_gke_rdma_pod_carries_what_the_gib_manifests_require(
    instance_type: str, gpus: int, interfaces: list[tuple[str, str]], arch: str | None
) -> None:
    job = _job("gke-rdma", gpus_per_node=gpus, instance_type=instance_type)
    metadata, pod, bench = _pod(job)
    assert metadata["annotations"]["networking.gke.io/default-interface"] == "eth0"
    assert _interfaces(metadata) == interfaces
    assert _host_paths(pod) == {
        "library-dir-host": "/home/kubernetes/bin/nvidia", "gib": "/home/kubernetes/bin/gib",
    }  # fmt: skip
    mounts = _mounts(bench)
    assert (mounts["/usr/local/nvidia"], mounts["/usr/local/gib"]) == ("library-dir-host", "gib")
    assert _env(bench)["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert bench["command"][2].startswith(". /usr/local/gib/scripts/set_nccl_env.sh && export ")
    assert "IPC_LOCK" in bench["securityContext"]["capabilities"]["add"]
    assert bench["resources"]["limits"]["nvidia.com/gpu"] == str(gpus)
    assert not pod.get("initContainers") and [c["name"] for c in pod["containers"]] == ["bench"]
    assert pod.get("nodeSelector", {}).get("kubernetes.io/arch") == arch
    assert "hostNetwork" not in pod
    _valid(job)


def test_gke_rdma_needs_the_machine_type() -> None:
    """How many RDMA NICs the pod names depends on the machine: render says so and stops."""
    with pytest.raises(UsageError, match=r"expected --instance-type TYPE \(a3-ultragpu-8g, a4"):
        _job("gke-rdma")
    res = CliRunner().invoke(app, ["render", "--world-size", "16", "--platform", "gke-rdma"])
    assert res.exit_code == 2 and "--instance-type" in res.output
    res = CliRunner().invoke(
        app,
        ["render", "--world-size", "16", "--platform", "gke-rdma", "--instance-type", "a3-megagpu-8g"],
    )  # fmt: skip
    assert res.exit_code == 2 and "not a machine type gke-rdma knows" in res.output
    res = CliRunner().invoke(
        app,
        ["render", "--world-size", "16", "--platform", "gke-rdma", "--instance-type", "a4-highgpu-8g"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert '"network":"rdma-7"' in res.output


def test_the_users_options_win_over_gke_defaults() -> None:
    job = _job(
        "gke-tcpxo",
        env=["NCCL_DEBUG=WARN", "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY=/mine"],
        pod_annotation=['networking.gke.io/interfaces=[{"interfaceName":"eth0","network":"x"}]'],
        image="me/nccl:1",
    )
    metadata, _, bench = _pod(job)
    assert _interfaces(metadata) == [("eth0", "x")]
    assert _env(bench)["NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY"] == "/mine"
    assert "NCCL_DEBUG=WARN" in bench["command"][2]  # exported again after the profile
    assert bench["image"] == "me/nccl:1"


# --- detection from the labels GKE puts on its nodes ---------------------------------------------


def _gke_node(name: str, machine: str, accelerator: str, gpus: int = 8) -> NodeFacts:
    return NodeFacts(
        name=name,
        labels={
            "node.kubernetes.io/instance-type": machine,
            "cloud.google.com/gke-accelerator": accelerator,
        },
        allocatable={"nvidia.com/gpu": str(gpus)},
    )


@pytest.mark.parametrize(
    ("machine", "accelerator", "gpus", "platform"),
    [
        ("a3-highgpu-8g", "nvidia-h100-80gb", 8, "gke-tcpx"),
        ("a3-megagpu-8g", "nvidia-h100-mega-80gb", 8, "gke-tcpxo"),
        ("a3-ultragpu-8g", "nvidia-h200-141gb", 8, "gke-rdma"),
        ("a4-highgpu-8g", "nvidia-b200", 8, "gke-rdma"),
        ("a4x-highgpu-4g", "nvidia-gb200", 4, "gke-rdma"),
    ],
)
def test_each_gke_platform_is_detected_from_its_nodes(
    machine: str, accelerator: str, gpus: int, platform: str
) -> None:
    nodes = [_gke_node(f"gke-{i}", machine, accelerator, gpus) for i in range(2)]
    choice = detect(nodes, PLATFORMS)
    assert choice.platform == platform
    assert choice.reason.startswith(
        f"{platform}: node gke-0 is labelled node.kubernetes.io/instance-type={machine}"
    )
    assert choice.instance_type == machine
    spec = build_run_spec(world_size=2 * gpus, gpus_per_node=gpus, run_id="g")
    resolved = with_platform(spec, choice.platform, instance_type=choice.instance_type)
    _valid(render(resolved)[-1])  # what auto chose renders without --instance-type


def test_gke_nodes_without_a_fabric_platform_or_of_two_are_generic() -> None:
    small = [_gke_node("a3-4g", "a3-highgpu-4g", "nvidia-h100-80gb", 4)]
    assert detect(small, PLATFORMS).platform == "generic"  # no GPU NICs beyond the 8-GPU shape
    mixed = [
        _gke_node("mega", "a3-megagpu-8g", "nvidia-h100-mega-80gb"),
        _gke_node("ultra", "a3-ultragpu-8g", "nvidia-h200-141gb"),
    ]
    choice = detect(mixed, PLATFORMS)
    assert choice.platform == "generic"
    assert (
        "mega look like gke-tcpxo" in choice.reason and "ultra look like gke-rdma" in choice.reason
    )
    # A3 Ultra and A4 nodes are both gke-rdma, but of two machine types: render needs one.
    both = [
        _gke_node("ultra", "a3-ultragpu-8g", "nvidia-h200-141gb"),
        _gke_node("a4", "a4-highgpu-8g", "nvidia-b200"),
    ]
    choice = detect(both, PLATFORMS)
    assert (choice.platform, choice.instance_type) == ("gke-rdma", None)
    with pytest.raises(UsageError, match="--instance-type"):
        render(with_platform(build_run_spec(world_size=16, run_id="g"), choice.platform))


#: The host paths a GKE pod must mount writable, and why (docs/security.md, "Per platform"):
#: the FasTrak plugin maps the aperture devices' PCI resource files read-write (the installer,
#: gpudirect-tcpxo/nccl-tcpxo-installer.yaml, makes them `a+rw` for that); the RxDM daemons get
#: the node's /sys and /proc/sys as Google's manifests mount them, beside NET_ADMIN, and no
#: Google manifest mounts those read-only.
WRITABLE = {
    ("gke-tcpxo", "bench", "aperture-devices"),
    ("gke-tcpx", "tcpx-daemon", "sys"),
    ("gke-tcpx", "tcpx-daemon", "proc-sys"),
    ("gke-tcpxo", "tcpxo-daemon", "sys"),
    ("gke-tcpxo", "tcpxo-daemon", "proc-sys"),
}
GKE = {"gke-tcpx": {}, "gke-tcpxo": {}, "gke-rdma": {"instance_type": "a3-ultragpu-8g"}}


@pytest.mark.parametrize("platform", sorted(GKE))
def test_gke_host_paths_are_read_only_unless_the_vendor_needs_them_written(platform: str) -> None:
    """Issue 36: the NVIDIA driver and NCCL plugin directories and the gIB directory (whose
    set_nccl_env.sh every run sources) were mounted read-write into a root container, so a run
    could plant code that later GPU pods on the node load. Google mounts the installers' library
    directory read-only (gpudirect-tcpx/nccl-test.yaml at 992db81); the pods only read them."""
    job = _job(platform, **GKE[platform])
    _, pod, _ = _pod(job)
    host = _host_paths(pod)
    assert host, platform
    seen = set()
    for c in pod.get("initContainers", []) + pod["containers"]:
        for m in c.get("volumeMounts", []):
            if m["name"] not in host:
                continue
            key = (platform, c["name"], m["name"])
            seen.add(key)
            assert m.get("readOnly", False) is (key not in WRITABLE), (key, host[m["name"]])
    assert {k for k in WRITABLE if k[0] == platform} <= seen  # the exceptions are still mounted
    _valid(job)


def test_gke_tcpx_socket_directory_is_the_pods_own_at_its_own_path() -> None:
    """Issue 36: the host's /run/tcpx was the benchmark's whole /tmp. Google's
    gpudirect-tcpx/nccl-test.yaml (992db81) shares the daemon's socket directory as an emptyDir
    of the pod; the plugin is told where it is with NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX
    (GoogleCloudPlatform/cluster-toolkit@1047080 examples/machine-learning/a3-highgpu-8g:
    README.md "must be configured to be aware of this path", nemo-framework/Dockerfile
    `NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX=/run/tcpx`)."""
    _, pod, bench = _pod(_job("gke-tcpx"))
    (socket,) = [v for v in pod["volumes"] if v["name"] == "tcpx-socket"]
    assert socket == {"name": "tcpx-socket", "emptyDir": {}}
    (daemon,) = [c for c in pod["initContainers"] if c["name"] == "tcpx-daemon"]
    assert _mounts(daemon)["/run/tcpx"] == "tcpx-socket"
    assert _mounts(bench)["/run/tcpx"] == "tcpx-socket"
    assert "/tmp" not in _mounts(bench)
    assert _env(bench)["NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX"] == "/run/tcpx"
