"""InfiniBand and RoCE clouds: CoreWeave, Nebius, Together, AKS (InfiniBand) and OKE (RoCE).

Each entry follows the vendor's reference manifests; the version followed is cited on the entry
(`sources`) and in docs/platforms.md. What a vendor's reference sets only for its own launcher
(Open MPI's UCX_* and HCOLL_*, `NCCL_DEBUG=WARN`) is left out: the pods here run torchrun, and
NCCL_DEBUG=INFO is what proves the fabric afterwards.
"""

from __future__ import annotations

from nccl_k8s.fabrics import Fabric
from nccl_k8s.spec.platforms._detect import INSTANCE_TYPE_LABEL
from nccl_k8s.spec.platforms._model import (
    TOPOGRAPH_LABELS,
    ZONE_LABEL,
    Detect,
    Instance,
    Platform,
    Prerequisite,
)

#: The NVIDIA Network Operator's cluster-wide policy kind; its CRD is there once the operator
#: is installed (mellanox.com_nicclusterpolicies.yaml in the operator's Helm chart).
NIC_CLUSTER_POLICY_CRD = "nicclusterpolicies.mellanox.com"

# --- CoreWeave ---------------------------------------------------------------------------------

_CW_DOCS = "https://docs.coreweave.com/products/networking/hpc-interconnect"

COREWEAVE = Platform(
    name="coreweave",
    title="CoreWeave CKS with InfiniBand",
    fabric=Fabric.IB,
    network="ib",
    # "Set spec.containers.resources.requests.rdma/ib to 1. This value does not indicate the
    # number of InfiniBand devices requested, it's used as a boolean" (use-gpudirect-rdma);
    # every worker of coreweave/nccl-tests requests and limits rdma/ib: 1.
    resource="rdma/ib",
    devices_per_pod=1,
    # CKS labels the nodes of its backend fabrics (infiniband-roce-labels): the InfiniBand
    # schema, and the fabric-agnostic one whose flavor tells InfiniBand from RoCE.
    detect=Detect(
        labels={
            "ib.coreweave.cloud/fabric": (),
            "backend.coreweave.cloud/flavor": ("infiniband",),
        }
    ),
    # The HCAs are named ibp* (NCCL_IB_HCA is a prefix list) and eth0 carries bootstrap;
    # NCCL_NET_PLUGIN=none keeps an image's SHARP/IBext plugin out, as every non-SHARP
    # manifest of coreweave/nccl-tests does.
    env={"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "ibp", "NCCL_NET_PLUGIN": "none"},
    topology=(ZONE_LABEL, *TOPOGRAPH_LABELS),
    prerequisites=(
        Prerequisite(
            kind="resource",
            name="rdma/ib",
            what="InfiniBand nodes (rdma/ib allocatable)",
            hint="CKS installs the InfiniBand drivers and device plugin itself: use a Node "
            f"Pool of an instance type with InfiniBand ({_CW_DOCS}/use-gpudirect-rdma)",
        ),
    ),
    sources=(
        "coreweave/nccl-tests@cb86553328f8c9ed6f9d682971f5f9b17a926ab4 "
        "mpi-operator/nccl-test-distributed-h100-64-mpijob.yaml (and the a100, b200, b300 "
        "and gb200 MPIJobs: rdma/ib: 1, NCCL_SOCKET_IFNAME=eth0, NCCL_IB_HCA=ibp, "
        "NCCL_NET_PLUGIN=none)",
        f"{_CW_DOCS}/use-gpudirect-rdma (read 2026-12-04)",
        f"{_CW_DOCS}/infiniband-roce-labels (read 2026-12-04)",
    ),
)

# --- Nebius ------------------------------------------------------------------------------------

NEBIUS = Platform(
    name="nebius",
    title="Nebius Managed Kubernetes with InfiniBand",
    fabric=Fabric.IB,
    network="ib",
    # Nebius's Network Operator application deploys the driver only (no RDMA device plugin):
    # its NCCL test reaches /dev/infiniband as a privileged container. Privileged also holds
    # CAP_IPC_LOCK, which lifts the locked-memory limit its `ulimit -l` init container sets
    # in that container's own process only (a limit does not outlive the process).
    security="privileged",
    privileged=True,
    privilege_reason="Nebius's Network Operator installs no RDMA device plugin: its NCCL test "
    "reaches /dev/infiniband as a privileged container, which also holds CAP_IPC_LOCK",
    # "Nodes with the same value have high-speed network connectivity between each other"
    # (topology-aware-scheduling): only nodes in a GPU cluster carry it.
    detect=Detect(labels={"topology.nebius.com/gpu-cluster-id": ()}),
    env={"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5"},
    # The GPU cluster (its InfiniBand fabric), then Topograph's fabric tiers (its nebius
    # provider publishes them; docs/reference/node-labels.md).
    topology=("topology.nebius.com/gpu-cluster-id", *TOPOGRAPH_LABELS[:3]),
    prerequisites=(
        Prerequisite(
            kind="crd",
            name=NIC_CLUSTER_POLICY_CRD,
            what="the NVIDIA Network Operator (InfiniBand drivers)",
            hint="install the nvidia-network-operator application from Nebius's marketplace "
            "(not needed on node groups with driverful images, nebius.com/driverful=true)",
            severity="warn",
        ),
    ),
    sources=(
        "nebius/nebius-solution-library@b2a14f037112b218bc7b80482e371ad3295ce8b3 "
        "modules/nccl-test/files/helm/nccl-test/templates/nccl-test-h100.yaml (privileged, "
        "NCCL_SOCKET_IFNAME=eth0, NCCL_IB_HCA=mlx5)",
        "nebius/nebius-k8s-applications@33d14191284544d986a60e2ff56f0de690d597d6 "
        "nvidia-network-operator/chart/values.yaml (NicClusterPolicy with ofedDriver only)",
        "https://docs.nebius.com/kubernetes/gpu/topology-aware-scheduling (read 2026-12-04)",
    ),
)

# --- Together AI -------------------------------------------------------------------------------

# Together's GPU clusters are Kubernetes with "high-speed InfiniBand for multi-node
# communication" (docs.together.ai); its own docs state no pod configuration. SkyPilot, which
# Together's docs name for its clusters, enables their InfiniBand with `network_tier: best`
# (skypilot-org/skypilot#8581, merged 2026-01-14: "Support InfiniBand for Together AI"): the
# pods get IPC_LOCK (`requires_ipc_lock_capability`) and NCCL_IB_HCA=mlx5
# (sky/provision/kubernetes/utils.py, KubernetesHighPerformanceNetworkType.TOGETHER), and the
# NVIDIA Network Operator's `nvidia.com/rdma_ib`, one per GPU the pod takes (issue 37's reading of
# SkyPilot's documented pod settings). Nodes carry `node-role.together.ai/worker`, by which
# NVIDIA's aicr tells Together nodes (platform detection: "Node topology labels (e.g.
# node-role.together.ai/) - explicit, provider-managed signal") and Together's own NCCL test
# scripts select their workers.
TOGETHER = Platform(
    name="together",
    title="Together AI GPU clusters with InfiniBand",
    fabric=Fabric.IB,
    network="ib",
    resource="nvidia.com/rdma_ib",
    devices_per_gpu=1,
    detect=Detect(labels={"node-role.together.ai/worker": ()}),
    env={"NCCL_IB_HCA": "mlx5"},
    # Nothing documented of its own: the zone and Topograph's labels, as generic.
    topology=(ZONE_LABEL, *TOPOGRAPH_LABELS),
    sources=(
        "https://docs.together.ai/docs/gpu-clusters-concepts (read 2026-12-04): nodes "
        "connected by InfiniBand",
        "https://docs.together.ai/docs/skypilot-on-gpu-clusters (read 2026-09)",
        "skypilot-org/skypilot#8581 (merged 2026-01-14) examples/together_infiniband/README.md "
        "(network_tier: best) and sky/provision/kubernetes/utils.py "
        "(KubernetesHighPerformanceNetworkType.TOGETHER: NCCL_IB_HCA=mlx5, IPC_LOCK)",
        "NVIDIA/aicr pkg/recipe (service detection by node-role.together.ai/ labels)",
    ),
)

# --- Azure AKS ---------------------------------------------------------------------------------

_AKS = "Azure/aks-rdma-infiniband@700dabb4fe0451d482ae09a373617ed68658b021"
_ND_TYPES = ("Standard_ND96asr_v4", "Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5")

AKS_IB = Platform(
    name="aks-ib",
    title="Azure AKS with InfiniBand (NVIDIA Network Operator, SR-IOV device plugin)",
    fabric=Fabric.IB,
    network="ib",
    # "Maximum Performance: Use the SR-IOV Device Plugin with one pod per node claiming all
    # InfiniBand NICs (rdma/ib: <NIC count>)"; its test requests rdma/ib = GPUs per node.
    resource="rdma/ib",
    per_gpu_devices=True,
    instances=(
        Instance(
            name="Standard_ND96asr_v4",
            gpus=8,
            devices=8,
            note="ND A100 v4: one 200 Gb/s HDR InfiniBand connection per GPU (Microsoft Learn)",
        ),
        Instance(
            name="Standard_ND96isr_H100_v5",
            gpus=8,
            devices=8,
            note="ND H100 v5: one 400 Gb/s NDR InfiniBand connection per GPU (Microsoft Learn)",
        ),
        Instance(
            name="Standard_ND96isr_H200_v5",
            gpus=8,
            devices=8,
            note="ND H200 v5: 8 GPUs (Azure's VM size list); the vendor's test requests "
            "rdma/ib equal to the node's GPUs",
        ),
    ),
    detect=Detect(labels={INSTANCE_TYPE_LABEL: _ND_TYPES}),
    # "A pod without this will have a low locked memory value (ulimit -l 64)".
    capabilities=("IPC_LOCK",),
    # The test chart's ncclEnvVars (NCCL_IB_DISABLE=0 "Force NCCL to use Infiniband",
    # NCCL_NET_GDR_LEVEL=SYS) and its MPIJob's CUDA_DEVICE_ORDER=PCI_BUS_ID.
    env={"NCCL_IB_DISABLE": "0", "NCCL_NET_GDR_LEVEL": "SYS", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
    # Azure's NCCL chart pins its workers to one InfiniBand switching domain with pod affinity
    # on `ib/torset` (set by its torset labeler; "If torset labels are not present on nodes,
    # using them in required will prevent pods from scheduling").
    topology=(ZONE_LABEL, "ib/torset"),
    prerequisites=(
        Prerequisite(
            kind="crd",
            name=NIC_CLUSTER_POLICY_CRD,
            what="the NVIDIA Network Operator",
            hint="helm install network-operator nvidia/network-operator with the values of "
            "Azure/aks-rdma-infiniband configs/values/network-operator/values.yaml",
        ),
        Prerequisite(
            kind="resource",
            name="rdma/ib",
            what="the SR-IOV device plugin's InfiniBand NICs (rdma/ib allocatable)",
            hint="kubectl apply -k https://github.com/Azure/aks-rdma-infiniband/configs/"
            "nicclusterpolicy/sriov-device-plugin",
        ),
    ),
    sources=(
        f"{_AKS} website/docs/configurations/01-network-operator.md (SR-IOV device plugin: "
        "rdma/ib per NIC, IPC_LOCK)",
        f"{_AKS} configs/nicclusterpolicy/sriov-device-plugin/sriov.yaml (resourcePrefix "
        "rdma, resourceName ib)",
        "Azure/ai-infrastructure-on-azure@6582df926eb4b900f8b1a0679cd4c6c15840fe58 "
        "infrastructure_validations/aks/NCCL/README.md (affinity on ib/torset)",
        f"{_AKS} tests/scenarios/test.sh, tests/scenarios/k8s/values.yaml, "
        "tests/scenarios/k8s/templates/mpi-job.yaml",
        "https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/"
        "ndh100v5-series and nda100-v4-series (read 2026-12-04)",
    ),
)

# --- Oracle OKE --------------------------------------------------------------------------------

_OCI = "oracle-quickstart/oci-hpc-oke@61d210acc37f1990f27012aa4f108c5db4e52ab2"
#: What the NCCL test of every BM.GPU shape sets (docs/recommended-nccl-rccl-parameters-by-shape).
_OKE_ENV = {
    "NCCL_IB_SPLIT_DATA_ON_QPS": "0",
    "NCCL_IB_GID_INDEX": "3",
    "NCCL_IB_TC": "41",
    "NCCL_IB_SL": "0",
    "NCCL_IB_TIMEOUT": "22",
}
#: Ampere shapes add four QPs per connection; Hopper and Blackwell shapes pin bootstrap to eth0.
_OKE_AMPERE = {"NCCL_IB_QPS_PER_CONNECTION": "4"}
_OKE_HOPPER = {
    "NCCL_CUMEM_ENABLE": "0",
    "NCCL_SOCKET_IFNAME": "eth0",
    "NCCL_IGNORE_CPU_AFFINITY": "1",
}
_A100_HCA = (
    "=mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7,mlx5_8,"
    "mlx5_14,mlx5_15,mlx5_16,mlx5_17,mlx5_9,mlx5_10,mlx5_11,mlx5_12"
)
_H200_HCA = "=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11"


def _shape(name: str, ports: int, hca: str, extra: dict[str, str]) -> Instance:
    return Instance(
        name=name,
        gpus=8,
        devices=ports,
        note=f"{ports} RDMA ports ({'dual' if ports == 16 else 'single'}-port shape, "
        "docs/using-rdma-network-interfaces-in-manifests.md)",
        env={"NCCL_IB_HCA": hca, **extra},
    )


OKE_ROCE = Platform(
    name="oke-roce",
    title="Oracle OKE with RDMA over RoCE (cluster networks)",
    fabric=Fabric.ROCE,
    network="roce",
    # "To use the host's RDMA interfaces in your pods": hostNetwork with
    # ClusterFirstWithHostNet, /dev/infiniband from the host, a privileged container (which
    # holds the IPC_LOCK the manifests also add).
    security="privileged",
    privileged=True,
    host_network=True,
    privilege_reason="Oracle's RDMA manifests reach the host's RDMA interfaces with hostNetwork, "
    "/dev/infiniband from the host and a privileged container",
    volumes=({"name": "devinf", "hostPath": {"path": "/dev/infiniband"}},),
    mounts=({"name": "devinf", "mountPath": "/dev/infiniband"},),
    instances=(
        _shape(
            "BM.GPU4.8",
            16,
            "=mlx5_0,mlx5_2,mlx5_6,mlx5_8,mlx5_10,mlx5_12,mlx5_14,mlx5_16,"
            "mlx5_1,mlx5_3,mlx5_7,mlx5_9,mlx5_11,mlx5_13,mlx5_15,mlx5_17",
            _OKE_AMPERE,
        ),
        _shape("BM.GPU.A100-v2.8", 16, _A100_HCA, _OKE_AMPERE),
        _shape("BM.GPU.B4.8", 16, _A100_HCA, _OKE_AMPERE),
        _shape(
            "BM.GPU.H100.8",
            16,
            "=mlx5_0,mlx5_1,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7,mlx5_8,"
            "mlx5_9,mlx5_10,mlx5_12,mlx5_13,mlx5_14,mlx5_15,mlx5_16,mlx5_17",
            _OKE_HOPPER,
        ),
        _shape("BM.GPU.H200.8", 8, _H200_HCA, _OKE_HOPPER),
        _shape("BM.GPU.B200.8", 8, _H200_HCA, _OKE_HOPPER),
        _shape(
            "BM.GPU.B300.8",
            16,
            "=mlx5_0,mlx5_1,mlx5_7,mlx5_8,mlx5_9,mlx5_10,mlx5_11,mlx5_12,"
            "mlx5_13,mlx5_14,mlx5_16,mlx5_17,mlx5_18,mlx5_19,mlx5_20,mlx5_21",
            _OKE_HOPPER,
        ),
    ),
    detect=Detect(
        labels={
            INSTANCE_TYPE_LABEL: (
                "BM.GPU4.8",
                "BM.GPU.A100-v2.8",
                "BM.GPU.B4.8",
                "BM.GPU.H100.8",
                "BM.GPU.H200.8",
                "BM.GPU.B200.8",
                "BM.GPU.B300.8",
            )
        }
    ),
    env=_OKE_ENV,
    # OCI's network block and rack of the host (NVIDIA/topograph@e2b625071e327ee5c3bb119d8a31289a
    # 818c30fc docs/reference/node-labels.md, "Without Topograph").
    topology=(
        ZONE_LABEL,
        "oci.oraclecloud.com/host.network_block_id",
        "oci.oraclecloud.com/host.rack_id",
    ),
    sources=(
        f"{_OCI} docs/using-rdma-network-interfaces-in-manifests.md (Using hostNetwork)",
        f"{_OCI} manifests/nccl-tests/kueue/BM.GPU.H100.8.yaml (and the BM.GPU4.8, "
        "A100-v2.8, B4.8, H200.8, B200.8, B300.8 manifests)",
        f"{_OCI} docs/recommended-nccl-rccl-parameters-by-shape.md",
    ),
)

PLATFORMS: tuple[Platform, ...] = (COREWEAVE, NEBIUS, TOGETHER, AKS_IB, OKE_ROCE)

__all__ = [
    "AKS_IB",
    "COREWEAVE",
    "NEBIUS",
    "NIC_CLUSTER_POLICY_CRD",
    "OKE_ROCE",
    "PLATFORMS",
    "TOGETHER",
]
