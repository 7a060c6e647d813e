"""Amazon Web Services: EKS with EFA.

Each entry follows the vendor's reference manifests; the version followed is cited on the entry
(`sources`) and in docs/platforms.md.

eks-efa follows AWS's NCCL tests manifest for EKS (the Worker of
micro-benchmarks/nccl-tests/kubernetes/nccl-tests.yaml in aws-samples/awsome-distributed-training):
the EFA devices as the `vpc.amazonaws.com/efa` extended resource of the EFA device plugin,
requested = limited with `hugepages-2Mi: 5120Mi`, and the libfabric/NCCL environment its mpirun
exports. What the reference does through mpirun or its own image, and this entry does otherwise:

- The image: the reference builds its own (nccl-tests, no PyTorch), which our engine cannot run
  (the pods start torchrun). The default is AWS's public PyTorch Deep Learning Container for
  EC2/EKS, which carries EFA, libfabric and aws-ofi-nccl (the stock pytorch/pytorch image has no
  aws-ofi-nccl, so NCCL there can only use sockets). `--image` still wins.
- NCCL_TUNER_PLUGIN: the reference names the tuner's path inside its image; the path differs
  per image (the DLC installs the plugin under /opt/amazon/ofi-nccl/lib64), so it is left out.
- FI_EFA_USE_DEVICE_RDMA: not set. aws-ofi-nccl's EFA cheatsheet (doc/efa-env-var.md) says not
  to set it for libfabric >= 1.18 and aws-ofi-nccl >= 1.7, which pick GPUDirect RDMA themselves
  where the instance has it; the DLC's are newer.
- The pod runs as root with IPC_LOCK (--security rdma): the reference's container runs as root,
  and libfabric registers (pins) memory for the EFA devices.
"""

from __future__ import annotations

from nccl_k8s.fabrics import Fabric
from nccl_k8s.spec.platforms._model import Detect, Instance, Platform, Prerequisite

#: The resource the EFA device plugin advertises (and the DRA driver does not: it publishes
#: ResourceSlices of `dra.net`, which pods reach through a ResourceClaim instead).
EFA_RESOURCE = "vpc.amazonaws.com/efa"

_DEVICE_PLUGIN_HINT = (
    "install the EFA device plugin: helm repo add eks https://aws.github.io/eks-charts && "
    "helm install efa eks/aws-efa-k8s-device-plugin -n kube-system "
    "(https://docs.aws.amazon.com/eks/latest/userguide/device-management-efa.html)"
)

_PROFILES = (
    "aws-samples/awsome-distributed-training@8d6ab8ee041c8c4713d57b8de8d43eb6e21e3622 "
    "4.validation_and_observability/2.gpu-cluster-healthcheck/instance-profiles.conf"
)

EKS_EFA = Platform(
    name="eks-efa",
    title="Amazon EKS with EFA",
    fabric=Fabric.EFA,
    # NCCL loads aws-ofi-nccl (the image's net plugin) by itself; the ib/roce presets would
    # force NCCL_NET=IB, which is not EFA.
    network="auto",
    security="rdma",
    resource=EFA_RESOURCE,
    per_gpu_devices=True,
    instances=tuple(
        Instance(name=name, gpus=8, devices=devices, note=_PROFILES)
        for name, devices in (
            ("p4d.24xlarge", 4),
            ("p4de.24xlarge", 4),
            ("p5.48xlarge", 32),
            ("p5e.48xlarge", 32),
            ("p5en.48xlarge", 16),
            ("p6-b200.48xlarge", 8),
        )
    ),
    detect=Detect(
        # A node with EFA devices allocatable, or of a GPU machine type with EFA (so that a p5
        # node group without the device plugin is still recognised, and doctor says what is
        # missing).
        resources=(EFA_RESOURCE,),
        labels={
            "node.kubernetes.io/instance-type": (
                "p4d.24xlarge",
                "p4de.24xlarge",
                "p5.48xlarge",
                "p5e.48xlarge",
                "p5en.48xlarge",
                "p6-b200.48xlarge",
            )
        },
    ),
    extra_resources={"hugepages-2Mi": "5120Mi"},
    env={
        "FI_PROVIDER": "efa",
        "FI_EFA_FORK_SAFE": "1",
        "NCCL_BUFFSIZE": "8388608",
        "NCCL_P2P_NET_CHUNKSIZE": "524288",
    },
    image="public.ecr.aws/deep-learning-containers/pytorch:2.13.0-cu133-amzn2023",
    image_note=(
        "AWS's PyTorch Deep Learning Container for EC2/EKS (PyTorch 2.13.0, CUDA 13.3, NCCL "
        "2.30.7, EFA 1.49.0 with the AWS NCCL OFI plugin); the stock pytorch/pytorch image has "
        "no aws-ofi-nccl, so NCCL there falls back to sockets. Its CUDA 13 runtime needs an "
        "R580 or newer driver on the nodes (the pods' command replaces the image's entrypoint, "
        "which would otherwise add the CUDA forward-compatibility libraries)."
    ),
    fallback="the image has no aws-ofi-nccl, or the pods got no EFA devices (check --image "
    "and the vpc.amazonaws.com/efa the pods request)",
    prerequisites=(
        Prerequisite(
            kind="resource",
            name=EFA_RESOURCE,
            what="EFA devices allocatable on the nodes",
            hint=_DEVICE_PLUGIN_HINT,
        ),
        Prerequisite(
            kind="daemonset",
            name="aws-efa-k8s-device-plugin",
            what="the EFA device plugin",
            hint=_DEVICE_PLUGIN_HINT + "; EKS Auto Mode runs its own and needs none",
            severity="warn",
        ),
        Prerequisite(
            kind="resource",
            name="hugepages-2Mi",
            what="2 MiB huge pages allocatable on the nodes (the pods request 5120Mi)",
            hint="use the EKS-optimized accelerated AMIs, or preallocate 2 MiB huge pages on "
            "the GPU nodes (vm.nr_hugepages); --env FI_EFA_USE_HUGE_PAGE=0 turns libfabric's "
            "use of them off",
        ),
    ),
    # EKS's network topology labels, coarse to fine; layer 4 is "present only on instance types
    # whose topology has four layers" (docs.aws.amazon.com/eks/latest/userguide/
    # ml-workload-topology.html, read 2026-09).
    topology=tuple(f"topology.k8s.aws/network-node-layer-{n}" for n in (1, 2, 3, 4)),
    # "An AWS EFA placement group is single-AZ": SkyPilot renders a required same-zone pod
    # affinity for multi-node EFA jobs (skypilot-org/skypilot#10054, merged 2026-07).
    one_zone=True,
    sources=(
        "aws-samples/awsome-distributed-training@a7b62b9ffb04cd3c80216e53d4ca913c024e5ab1 "
        "micro-benchmarks/nccl-tests/kubernetes/nccl-tests.yaml",
        _PROFILES,
        "awsdocs/amazon-eks-user-guide@43d79bdbc30853697a1fa55dee3cf32b97b36d19 "
        "latest/ug/ml/device-management-efa.adoc",
        "aws/eks-charts@bfe91c4b9257c80f754ad4b3d6a9a3c239b2b8ec "
        "stable/aws-efa-k8s-device-plugin (chart v0.5.30)",
        "aws/deep-learning-containers@f1e622e430623f0afc8b51958c0483f78cbc31b2 "
        "docs/pytorch/index.md, docs/src/data/pytorch/2.13-cuda-ec2.yml",
        "aws/aws-ofi-nccl@518f4c6aba76d5ae5712ac9cb2f8779e05cc8915 doc/efa-env-var.md",
    ),
)

PLATFORMS: tuple[Platform, ...] = (EKS_EFA,)

__all__ = ["EFA_RESOURCE", "EKS_EFA", "PLATFORMS"]
