"""Google Cloud: GKE with GPUDirect-TCPX (A3 High), GPUDirect-TCPXO (A3 Mega) and GPUDirect RDMA
with Google's gIB NCCL plugin (A3 Ultra, A4, A4X).

Each entry follows Google's reference manifests in GoogleCloudPlatform/container-engine-
accelerators at commit 992db81257553607f1477945f1b3219632991829 (2026-06-11): the NCCL test pods
(`gpudirect-tcpx/nccl-test-latest.yaml`, `gpudirect-tcpxo/nccl-test-latest.yaml`,
`gpudirect-rdma/nccl-test.yaml`, `nccl-test-a4.yaml`, `nccl-test-imex-a4x.yaml`), the NCCL
configuration they run with (`gpudirect-tcpx/nccl-config.yaml`, `gpudirect-tcpxo/README.md`) and
`gpudirect-tcpxo/best-practice.md`; and the GKE documentation cited per entry. docs/platforms.md
lists every item with its source.

What the three share: the NCCL network plugin is not in the image but on the node, installed by
Google's installer DaemonSet under /home/kubernetes/bin and mounted into the pod (so the stock
image serves, `image` stays None); the GPU NICs reach the pod through GKE multi-networking (the
pod names a GKE `Network` per NIC in `networking.gke.io/interfaces`), not through an extended
resource. TCPX and TCPXO also need a receive-path daemon (RxDM) beside the benchmark, in the same
network namespace: it is a native sidecar (an init container with restartPolicy Always, GKE 1.29+),
as best-practice.md ("Automatic Sidecar Termination") recommends, so the Job's pod completes when
the benchmark ends and the benchmark starts after the daemon.

Host paths are mounted read-only wherever Google's manifests allow it (issue 36: a run could
otherwise plant code in the driver, plugin or gIB directories that later GPU pods on the node
load): the installers' library directories and the gIB directory are only read by the pods, and
gpudirect-tcpx/nccl-test.yaml (same commit) mounts the library directory `readOnly: true`. Kept
writable, as the vendor needs: the TCPXO aperture devices (the installer makes their PCI resource
files `a+rw` for the plugin to map) and the RxDM daemons' `/sys` and `/proc/sys` (no Google
manifest mounts them read-only; the benchmark container never gets them). The TCPX daemon's
socket directory is the pod's own emptyDir at /run/tcpx, as gpudirect-tcpx/nccl-test.yaml has it,
named to the plugin by NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX (GoogleCloudPlatform/cluster-toolkit
@1047080375afbb44da4b596be314634e7486af4a, examples/machine-learning/a3-highgpu-8g: README.md and
nemo-framework/Dockerfile), not the host's /run/tcpx as the benchmark's /tmp. docs/security.md
says the same per platform.
"""

from __future__ import annotations

import json
from typing import Literal

from nccl_k8s.fabrics import Fabric
from nccl_k8s.spec.platforms._model import (
    Detect,
    Instance,
    Obj,
    Platform,
    Prerequisite,
)

#: GKE's physical topology labels, coarse to fine: "the organization-specific ID of the reserved
#: block", "of the sub-block", "the ID of the host on which the VM is located" (Google Cloud,
#: "Schedule GKE workloads with Topology Aware Scheduling", docs.cloud.google.com/ai-hypercomputer/
#: docs/workloads/schedule-gke-workloads-tas, read 2026-09; the levels of its Kueue Topology).
GKE_TOPOLOGY = (
    "cloud.google.com/gce-topology-block",
    "cloud.google.com/gce-topology-subblock",
    "cloud.google.com/gce-topology-host",
)

#: GoogleCloudPlatform/container-engine-accelerators, the version every entry follows.
_CEA = "GoogleCloudPlatform/container-engine-accelerators@992db81257553607f1477945f1b3219632991829"
#: GoogleCloudPlatform/cluster-toolkit, for the TCPX socket directory's setting.
_CLUSTER_TOOLKIT = "GoogleCloudPlatform/cluster-toolkit@1047080375afbb44da4b596be314634e7486af4a"
_RAW = "https://raw.githubusercontent.com/GoogleCloudPlatform/container-engine-accelerators/master"
_MULTINET_DOC = (
    "https://cloud.google.com/kubernetes-engine/docs/how-to/gpu-bandwidth-gpudirect-tcpx"
)

_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
_ACCELERATOR = "cloud.google.com/gke-accelerator"
_DEFAULT_INTERFACE = "networking.gke.io/default-interface"
_INTERFACES = "networking.gke.io/interfaces"

#: Where the installers put NCCL and its plugin on the node, and where the pods mount them.
_HOST_LIB64 = "/home/kubernetes/bin/nvidia/lib64"
_LIB64 = "/usr/local/nvidia/lib64"


def _interfaces(first: int, networks: list[str]) -> str:
    """The `networking.gke.io/interfaces` value: eth0 on the default network, then one
    interface per GPU NIC from eth<first>, in the manifests' layout."""
    pairs = [("eth0", "default")] + [(f"eth{first + i}", n) for i, n in enumerate(networks)]
    rows = [json.dumps({"interfaceName": i, "network": n}, separators=(",", ":")) for i, n in pairs]
    return "[\n  " + ",\n  ".join(rows) + "\n]\n"


def _devices(*paths: str) -> str:
    """A `devices.gke.io/container.<name>` value: the device files the NRI device injector
    gives that container (the RxDM daemon reaches the GPUs without requesting them)."""
    return "".join(f"- path: {p}\n" for p in paths)


_GPU_DEVICES = (*(f"/dev/nvidia{i}" for i in range(8)), "/dev/nvidiactl", "/dev/nvidia-uvm")


def _host(name: str, path: str) -> Obj:
    return {"name": name, "hostPath": {"path": path}}


def _ro(name: str, path: str) -> Obj:
    """A read-only mount: the pod reads what the node's installer put there, never writes it."""
    return {"name": name, "mountPath": path, "readOnly": True}


def _network(
    name: str, *, severity: Literal["fail", "warn"] = "fail", note: str = ""
) -> Prerequisite:
    return Prerequisite(
        kind="object",
        api="networking.gke.io/v1/networks",
        name=name,
        what=f"the GKE Network {name!r} (with its GKENetworkParamSet){note}",
        hint=f"create the GPU NIC networks and their Network/GKENetworkParamSet objects as "
        f"{_MULTINET_DOC} (or the RDMA guide) shows; the pods name {name!r} in "
        f"{_INTERFACES} (override with --pod-annotation if yours are named otherwise)",
        severity=severity,
    )


_MULTI_NETWORK = Prerequisite(
    kind="crd",
    name="networks.networking.gke.io",
    what="GKE multi-networking (the Network CRD)",
    hint="create the cluster with --enable-multi-networking and --enable-dataplane-v2 "
    f"({_MULTINET_DOC})",
)

_NRI_INJECTOR = Prerequisite(
    kind="daemonset",
    name="device-injector",
    namespace="kube-system",
    what="the NRI device injector (gives the RxDM sidecar the GPU device files)",
    hint=f"kubectl apply -f {_RAW}/nri_device_injector/nri-device-injector.yaml",
)


# --- gke-tcpx: A3 High (a3-highgpu-8g), 4 GPU NICs, GPUDirect-TCPX ---------------------------

_TCPX_NIC_NETWORKS = [f"vpc{i}" for i in range(1, 5)]

#: The RxDM daemon of gpudirect-tcpx/nccl-test-latest.yaml (container `tcpx-daemon`), as a
#: native sidecar. Its Unix sockets (/run/tcpx, the pod's `tcpx-socket` emptyDir, as in
#: gpudirect-tcpx/nccl-test.yaml) are where the plugin in the benchmark container finds it:
#: the same volume at the same path, named by NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX.
_TCPX_SOCKETS = "/run/tcpx"
_TCPX_DAEMON: Obj = {
    "name": "tcpx-daemon",
    "image": "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/tcpgpudmarxd-dev:v2.0.12",
    "imagePullPolicy": "Always",
    "restartPolicy": "Always",
    "command": [
        "/tcpgpudmarxd/build/app/tcpgpudmarxd",
        "--gpu_nic_preset",
        "a3vm",
        "--gpu_shmem_type",
        "fd",
        "--uds_path",
        _TCPX_SOCKETS,
        "--setup_param",
        '\\"--verbose 128 2 0 \\"',
    ],
    "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}},
    "volumeMounts": [
        _ro("libraries", _LIB64),
        {"name": "tcpx-socket", "mountPath": _TCPX_SOCKETS},
        {"name": "sys", "mountPath": "/hostsysfs"},
        {"name": "proc-sys", "mountPath": "/hostprocsysfs"},
    ],
    "env": [{"name": "LD_LIBRARY_PATH", "value": _LIB64}],
}

#: The NCCL settings Google runs its TCPX test with (gpudirect-tcpx/nccl-config.yaml, run-nccl.sh,
#: 2026-06-02: "for nccl-net 3.1.11+"); the plugin README calls them required, not tuning.
_TCPX_ENV = {
    "LD_LIBRARY_PATH": _LIB64,
    "NCCL_SOCKET_IFNAME": "eth0",
    "NCCL_ALGO": "Ring,Tree",
    "NCCL_PROTO": "Simple",
    "NCCL_CROSS_NIC": "0",
    "NCCL_NET_GDR_LEVEL": "PIX",
    "NCCL_P2P_PXN_LEVEL": "0",
    "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": "eth1,eth2,eth3,eth4",
    "NCCL_GPUDIRECTTCPX_CTRL_DEV": "eth0",
    "NCCL_DYNAMIC_CHUNK_SIZE": "524288",
    "NCCL_P2P_NET_CHUNKSIZE": "524288",
    "NCCL_P2P_PCI_CHUNKSIZE": "524288",
    "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
    "NCCL_BUFFSIZE": "4194304",
    "NCCL_NSOCKS_PERTHREAD": "4",
    "NCCL_SOCKET_NTHREADS": "1",
    "NCCL_GPUDIRECTTCPX_TX_BINDINGS": "eth1:8-21,112-125;eth2:8-21,112-125;"
    "eth3:60-73,164-177;eth4:60-73,164-177",
    "NCCL_GPUDIRECTTCPX_RX_BINDINGS": "eth1:22-35,126-139;eth2:22-35,126-139;"
    "eth3:74-87,178-191;eth4:74-87,178-191",
    "NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS": "500000",
    # where the daemon's sockets are (the plugin's default is /tmp): cluster-toolkit's A3 High
    # README.md and nemo-framework/Dockerfile (see the module docstring)
    "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX": _TCPX_SOCKETS,
}

GKE_TCPX = Platform(
    name="gke-tcpx",
    title="GKE A3 High with GPUDirect-TCPX",
    fabric=Fabric.TCPX,
    security="rdma",  # root (the RxDM sidecar too) and IPC_LOCK, as the manifest's test container
    instances=(
        Instance(
            name="a3-highgpu-8g",
            gpus=8,
            devices=4,
            note="8 H100, 4 GPU NICs (eth1-eth4): gpudirect-tcpx/nccl-test-latest.yaml",
        ),
    ),
    detect=Detect(labels={_INSTANCE_TYPE: ("a3-highgpu-8g",)}),
    annotations={
        _DEFAULT_INTERFACE: "eth0",
        _INTERFACES: _interfaces(1, _TCPX_NIC_NETWORKS),
        "devices.gke.io/container.tcpx-daemon": _devices(*_GPU_DEVICES),
    },
    env=_TCPX_ENV,
    volumes=(
        _host("libraries", _HOST_LIB64),
        {"name": "tcpx-socket", "emptyDir": {}},
        _host("sys", "/sys"),
        _host("proc-sys", "/proc/sys"),
    ),
    mounts=(
        {"name": "tcpx-socket", "mountPath": _TCPX_SOCKETS},
        _ro("libraries", _LIB64),
    ),
    init_containers=(_TCPX_DAEMON,),
    capabilities=("IPC_LOCK",),
    image_note="the stock image serves: NCCL's GPUDirectTCPX plugin comes from the node "
    f"(nccl-tcpx-installer copies it to {_HOST_LIB64}, mounted at {_LIB64} and put on "
    "LD_LIBRARY_PATH); the image's NCCL must be one that plugin supports",
    prerequisites=(
        _MULTI_NETWORK,
        *(_network(n) for n in _TCPX_NIC_NETWORKS),
        Prerequisite(
            kind="daemonset",
            name="nccl-tcpx-installer",
            namespace="kube-system",
            what="Google's NCCL GPUDirectTCPX plugin installer",
            hint=f"kubectl apply -f {_RAW}/gpudirect-tcpx/nccl-tcpx-installer.yaml",
        ),
        _NRI_INJECTOR,
    ),
    topology=GKE_TOPOLOGY,
    sources=(
        f"{_CEA} gpudirect-tcpx/nccl-test-latest.yaml (annotations, tcpx-daemon, volumes, mounts)",
        f"{_CEA} gpudirect-tcpx/nccl-test.yaml (read-only libraries, the socket emptyDir)",
        f"{_CLUSTER_TOOLKIT} examples/machine-learning/a3-highgpu-8g README.md, "
        "nemo-framework/Dockerfile (NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX)",
        f"{_CEA} gpudirect-tcpx/nccl-config.yaml (NCCL environment)",
        f"{_CEA} gpudirect-tcpxo/best-practice.md (native sidecar)",
        f"{_CEA} gpudirect-tcpx/nccl-tcpx-installer.yaml, nri_device_injector/nri-device-injector.yaml",
    ),
)


# --- gke-tcpxo: A3 Mega (a3-megagpu-8g), 8 GPU NICs, GPUDirect-TCPXO (FasTrak) ---------------

_TCPXO_NIC_NETWORKS = [f"vpc{i}" for i in range(1, 9)]

#: The RxDM daemon of gpudirect-tcpxo/nccl-test-latest.yaml (`tcpxo-daemon`, the Jan 9, 2026
#: release of README.md), as the native sidecar of best-practice.md, with its startup probe: the
#: daemon writes HEALTH_CHECK_LOG_FILE once initialised, and a native sidecar's startup probe
#: holds the benchmark back until then (and fails the pod on a bad node).
_TCPXO_DAEMON: Obj = {
    "name": "tcpxo-daemon",
    "image": "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.21",
    "imagePullPolicy": "Always",
    "restartPolicy": "Always",
    "command": ["/bin/sh", "-c"],
    "args": [
        "set -ex\nchmod 755 /fts/entrypoint_rxdm_container.sh\n"
        "/fts/entrypoint_rxdm_container.sh --num_hops=2\n"
    ],
    "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_BIND_SERVICE"]}},
    "volumeMounts": [
        _ro("nvidia", _LIB64),
        {"name": "sys", "mountPath": "/hostsysfs"},
        {"name": "proc-sys", "mountPath": "/hostprocsysfs"},
    ],
    "env": [
        {"name": "LD_LIBRARY_PATH", "value": _LIB64},
        {"name": "HEALTH_CHECK_LOG_FILE", "value": "/run/health-check"},
    ],
    "startupProbe": {
        "initialDelaySeconds": 1,
        "periodSeconds": 5,
        "timeoutSeconds": 1,
        "successThreshold": 1,
        "failureThreshold": 6,
        "exec": {"command": ["cat", "/run/health-check"]},
    },
}

GKE_TCPXO = Platform(
    name="gke-tcpxo",
    title="GKE A3 Mega with GPUDirect-TCPXO",
    fabric=Fabric.TCPXO,
    security="rdma",  # root, which the RxDM sidecar needs for its capabilities
    instances=(
        Instance(
            name="a3-megagpu-8g",
            gpus=8,
            devices=8,
            note="8 H100 Mega, 8 GPU NICs (eth1-eth8): gpudirect-tcpxo/nccl-test-latest.yaml",
        ),
    ),
    detect=Detect(
        labels={
            _INSTANCE_TYPE: ("a3-megagpu-8g",),
            _ACCELERATOR: ("nvidia-h100-mega-80gb",),  # nccl-tcpxo-installer.yaml's affinity
        }
    ),
    annotations={
        "devices.gke.io/container.tcpxo-daemon": _devices(
            *_GPU_DEVICES, "/dev/dmabuf_import_helper"
        ),
        _DEFAULT_INTERFACE: "eth0",
        _INTERFACES: _interfaces(1, _TCPXO_NIC_NETWORKS),
    },
    env={
        "LD_LIBRARY_PATH": _LIB64,
        "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY": "/dev/aperture_devices",
        "NCCL_LIB_DIR": _LIB64,
    },
    # README.md "NCCL configs": NCCL_LIB_DIR set, and the profile sourced at start: it exports
    # the FasTrak settings of the installed plugin's release (NCCL_FASTRAK_IFNAME ...).
    source=f"{_LIB64}/nccl-env-profile.sh",
    volumes=(
        _host("nvidia", _HOST_LIB64),
        _host("sys", "/sys"),
        _host("proc-sys", "/proc/sys"),
        _host("aperture-devices", "/dev/aperture_devices"),
    ),
    mounts=(
        _ro("nvidia", _LIB64),
        # writable: the plugin maps the devices' PCI resource files, which the installer
        # makes a+rw (gpudirect-tcpxo/nccl-tcpxo-installer.yaml)
        {"name": "aperture-devices", "mountPath": "/dev/aperture_devices"},
    ),
    init_containers=(_TCPXO_DAEMON,),
    image_note="the stock image serves: NCCL's FasTrak plugin and the NCCL core Google "
    f"qualifies with it come from the node (nccl-tcpxo-installer copies them to {_HOST_LIB64}, "
    f"mounted at {_LIB64} and put on LD_LIBRARY_PATH)",
    prerequisites=(
        _MULTI_NETWORK,
        *(_network(n) for n in _TCPXO_NIC_NETWORKS),
        Prerequisite(
            kind="daemonset",
            name="nccl-tcpxo-installer",
            namespace="kube-system",
            what="Google's NCCL FasTrak (TCPXO) plugin installer",
            hint=f"kubectl apply -f {_RAW}/gpudirect-tcpxo/nccl-tcpxo-installer.yaml",
        ),
        _NRI_INJECTOR,
    ),
    topology=GKE_TOPOLOGY,
    sources=(
        f"{_CEA} gpudirect-tcpxo/nccl-test-latest.yaml (annotations, tcpxo-daemon, volumes, env)",
        f"{_CEA} gpudirect-tcpxo/README.md (Jan 9, 2026 release; NCCL_LIB_DIR, "
        "nccl-env-profile.sh)",
        f"{_CEA} gpudirect-tcpxo/best-practice.md (native sidecar, startup probe)",
        f"{_CEA} gpudirect-tcpxo/nccl-tcpxo-installer.yaml, "
        "nri_device_injector/nri-device-injector.yaml",
    ),
)


# --- gke-rdma: A3 Ultra, A4 (8 RDMA NICs), A4X (4), GPUDirect RDMA with gIB -------------------

_RDMA8 = _interfaces(2, [f"rdma-{i}" for i in range(8)])
_RDMA4 = _interfaces(2, [f"rdma-{i}" for i in range(4)])
_A4X_DOC = (
    "https://docs.cloud.google.com/ai-hypercomputer/docs/create/gke-ai-hypercompute-custom-a4x"
)


def _a4x(name: str) -> Instance:
    return Instance(
        name=name,
        gpus=4,
        devices=4,
        annotations={_INTERFACES: _RDMA4},
        node_selector={"kubernetes.io/arch": "arm64"},
        note="4 GB200, 4 CX-7 RDMA NICs (eth2-eth5), Arm: gpudirect-rdma/nccl-test-imex-a4x.yaml "
        f"and {_A4X_DOC} (last updated 2026-04-06)",
    )


GKE_RDMA = Platform(
    name="gke-rdma",
    title="GKE A3 Ultra, A4 or A4X with GPUDirect RDMA (gIB)",
    fabric=Fabric.GIB,
    security="rdma",  # root and IPC_LOCK, which RDMA needs to register memory
    instances=(
        Instance(
            name="a3-ultragpu-8g",
            gpus=8,
            devices=8,
            annotations={_INTERFACES: _RDMA8},
            note="8 H200, 8 CX-7 RDMA NICs (eth2-eth9): gpudirect-rdma/nccl-test.yaml",
        ),
        Instance(
            name="a4-highgpu-8g",
            gpus=8,
            devices=8,
            annotations={_INTERFACES: _RDMA8},
            note="8 B200, 8 CX-7 RDMA NICs (eth2-eth9): gpudirect-rdma/nccl-test-a4.yaml",
        ),
        _a4x("a4x-highgpu-4g"),
        _a4x("a4x-highgpu-4g-nolssd"),
    ),
    detect=Detect(
        labels={
            _INSTANCE_TYPE: (
                "a3-ultragpu-8g",
                "a4-highgpu-8g",
                "a4x-highgpu-4g",
                "a4x-highgpu-4g-nolssd",
            ),
            # the accelerators nccl-rdma-installer.yaml and its -a4x variant install on
            _ACCELERATOR: ("nvidia-h200-141gb", "nvidia-b200", "nvidia-gb200"),
        }
    ),
    annotations={_DEFAULT_INTERFACE: "eth0"},
    env={"LD_LIBRARY_PATH": _LIB64},
    # Google's gIB environment for the machine (NCCL_NET=gIB and its tuning), kept current by
    # the installer; the GKE guides say to source it in the workload container.
    source="/usr/local/gib/scripts/set_nccl_env.sh",
    volumes=(
        _host("library-dir-host", "/home/kubernetes/bin/nvidia"),
        _host("gib", "/home/kubernetes/bin/gib"),
    ),
    mounts=(
        _ro("library-dir-host", "/usr/local/nvidia"),
        _ro("gib", "/usr/local/gib"),
    ),
    image_note="the stock image serves on A3 Ultra and A4: the gIB plugin comes from the node "
    "(nccl-rdma-installer copies it to /home/kubernetes/bin/gib and "
    f"{_HOST_LIB64}, mounted and put on LD_LIBRARY_PATH); A4X nodes are Arm: give an arm64 "
    "image with --image",
    prerequisites=(
        _MULTI_NETWORK,
        *(_network(f"rdma-{i}") for i in range(4)),
        *(
            _network(f"rdma-{i}", severity="warn", note=" (A3 Ultra and A4 only: 8 RDMA NICs)")
            for i in range(4, 8)
        ),
        Prerequisite(
            kind="daemonset",
            name="nccl-rdma-installer",
            namespace="kube-system",
            what="Google's gIB NCCL plugin installer",
            hint=f"kubectl apply -f {_RAW}/gpudirect-rdma/nccl-rdma-installer.yaml "
            "(nccl-rdma-installer-a4x.yaml on A4X)",
        ),
    ),
    topology=GKE_TOPOLOGY,
    sources=(
        f"{_CEA} gpudirect-rdma/nccl-test.yaml, nccl-test-a4.yaml (annotations, volumes, mounts, "
        "env, set_nccl_env.sh)",
        f"{_CEA} gpudirect-rdma/nccl-test-imex-a4x.yaml (A4X: 4 NICs, arm64)",
        f"{_CEA} gpudirect-rdma/nccl-rdma-installer.yaml, nccl-rdma-installer-a4x.yaml",
        f"{_A4X_DOC} (last updated 2026-04-06)",
    ),
)

PLATFORMS: tuple[Platform, ...] = (GKE_TCPX, GKE_TCPXO, GKE_RDMA)

__all__ = ["GKE_RDMA", "GKE_TCPX", "GKE_TCPXO", "PLATFORMS"]
