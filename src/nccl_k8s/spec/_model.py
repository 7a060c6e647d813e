"""RunSpec and the constants a run is made of (labels, ports, images, run ids)."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import secrets
from typing import Literal

from nccl_k8s.spec._values import (
    Toleration,
)

Network = Literal["auto", "ib", "roce", "socket"]
Security = Literal["socket", "rdma", "host", "privileged"]
Workload = Literal["job", "statefulset"]
EngineMode = Literal["zipapp", "image"]
Spread = Literal["required", "preferred", "none"]
Gang = Literal["volcano", "coscheduling"]
Qos = Literal["burstable", "guaranteed"]

#: A stock PyTorch image, pinned to a tag so that the same command measures the same NCCL next
#: month: a floating tag (`latest`) would silently change torch and NCCL versions between runs that
#: are meant to be compared. The engine travels in a ConfigMap, so any image with torch works.
DEFAULT_IMAGE = "pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime"

#: The default for --network ib|roce: NCCL reaches the HCAs through libibverbs (rdma-core), which
#: the pytorch/pytorch images do not carry (their Dockerfile's final stage installs only
#: ca-certificates, libjpeg-dev and libpng-dev on Ubuntu), while NVIDIA's NGC framework images
#: list rdma-core, HPC-X and UCX among their contents. 25.01: torch 2.6, Python 3.12, Ubuntu 24.04.
RDMA_IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"

#: Image repositories known to lack libibverbs: refused with --network ib|roce, where NCCL could
#: not open a single HCA ("Failed to open libibverbs.so") and NCCL_NET=IB makes that fatal.
NO_IBVERBS_REPOSITORIES = ("pytorch/pytorch", "docker.io/pytorch/pytorch")

#: Requested per GPU when --cpu/--memory are not given: small enough for any GPU node (the
#: smallest cloud GPU nodes have 4 vCPUs and 16 GiB per GPU), enough for torchrun, one rank per
#: GPU and NCCL's proxy threads. /dev/shm comes on top of the memory (it counts against the limit).
CPU_PER_GPU = 2
MEMORY_PER_GPU = "4Gi"

#: Labels every object carries; status, logs, results and cleanup select by them.
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
#: Multus' pod annotation naming the NetworkAttachmentDefinitions a pod joins.
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
RESERVED_LABELS = frozenset({LABEL_NAME, LABEL_INSTANCE, LABEL_MANAGED_BY, LABEL_COMPONENT})


#: Per-run master ports are drawn from this range: unprivileged, below Linux's default ephemeral
#: range (32768-60999) so no outgoing connection on a host-network node already holds the port,
#: and below the NodePort range (30000-32767) for the same reason.
MASTER_PORT_MIN = 20000
MASTER_PORT_SPAN = 10000

#: A run id names the Service, the workload and (with a suffix) the ConfigMap; pods are named
#: `<run-id>-<index>` and StatefulSet revisions `<run-id>-<10-char hash>`, all of which must stay
#: DNS labels (63 characters), so run ids are kept well below that.
RUN_ID_MAX_LEN = 40


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSpec:
    """Everything a deploy creates, validated. Build it with `build_run_spec`, which fills every
    field: the defaults live in OPTIONS (one place for the CLI and the validation); the fields
    say what they mean and why their defaults are what they are."""

    run_id: str
    """DNS-1123 label naming the run; every object carries it as app.kubernetes.io/instance.
    Generated as `nccl-<yyyymmdd-hhmmss>-<4 hex>` so ids sort by time and two runs started in the
    same second still differ."""
    namespace: str | None
    """Target namespace; None means the kubeconfig context's namespace, which only the deployer
    can resolve (render then omits metadata.namespace, as `kubectl apply -n` expects)."""
    world_size: int
    """Total ranks (GPUs) across all pods: nodes x gpus_per_node."""
    gpus_per_node: int
    """Ranks per pod, one per GPU; torchrun's --nproc-per-node."""
    nodes: int
    """Pods, one per node: world_size / gpus_per_node."""
    image: str
    """Container image; the default, DEFAULT_IMAGE, is pinned (see there for why)."""
    engine: EngineMode
    """zipapp: the engine travels in a ConfigMap onto a stock PyTorch image (no custom image
    needed); image: the image already has nccl-k8s installed."""
    workload: Workload
    """job: one sweep, an Indexed Job that ends; statefulset: continuous runs (the seed's layout)."""
    interval_s: int | None
    """StatefulSet only: seconds to pause between sweeps (the default is frequent enough to catch
    a degrading link within minutes, sparse enough to leave the fabric mostly to real work)."""
    scheduler_name: str | None
    """Pod schedulerName (e.g. hami-scheduler); None keeps the cluster's default scheduler."""
    node_selector: tuple[tuple[str, str], ...]
    """Node labels the pods require, in the order given."""
    tolerations: tuple[Toleration, ...]
    """Taints the pods tolerate (GPU nodes are often tainted)."""
    node_names: tuple[str, ...] = ()
    """--node: the only nodes the pods may run on, by node name (required node affinity on the
    field metadata.name, which unlike the hostname label every node has and no one relabels);
    empty: any node. The bad-node finder pins each 2-node test to its pair with it."""
    spread: Spread
    """Pod anti-affinity on hostname. required (default): one pod per node or the pod stays
    Pending, so `nodes` means nodes and an inter-node benchmark cannot silently run intra-node;
    preferred: spread when possible; none: let the scheduler pack pods."""
    gpu_resource: str
    """Extended resource name of a GPU (the NVIDIA device plugin's name by default)."""
    rdma_resources: tuple[tuple[str, int], ...]
    """Extended resources for RDMA devices (e.g. rdma/ib=1), requested = limited per pod."""
    network: Network
    """Fabric preset: auto sets nothing and lets NCCL choose; ib/roce/socket set only the NCCL
    variables that select that fabric."""
    host_network: bool
    """Run pods in the node's network namespace (needed by some RoCE setups)."""
    security: Security
    """Privilege profile, least privilege each (see k8s/presets.py). Default: rdma when the
    network is ib or roce (RDMA needs IPC_LOCK to pin memory), else socket (no privileges)."""
    cpu: str
    """CPU request per pod as a Kubernetes quantity (default CPU_PER_GPU per GPU). No limit with
    qos burstable: CPU limits throttle NCCL's proxy threads and skew small-message latency."""
    memory: str
    """Memory request = limit per pod as a Kubernetes quantity (default MEMORY_PER_GPU per GPU
    plus shm_size). Always more than shm_size: /dev/shm is charged to the pod's memory."""
    qos: Qos
    """burstable: CPU requested only; guaranteed: CPU limit = request as well, so the pod is in
    the Guaranteed QoS class (exclusive cores under the kubelet's static CPU manager policy)."""
    shm_size: str
    """Size of /dev/shm (a memory emptyDir). NCCL's shared-memory transport and torch's
    inter-process queues live there; the container runtime's 64Mi default makes NCCL fail with
    8 GPUs per node. Counts against the memory limit when one is set."""
    env: tuple[tuple[str, str], ...]
    """User environment, in the order given; these values beat every preset."""
    pvc: str | None
    """PersistentVolumeClaim mounted at /workspace/results; rank 0 also writes results there.
    Multi-node runs need a ReadWriteMany claim, since every pod mounts it."""
    queue: str | None
    """Kueue LocalQueue name, set as the kueue.x-k8s.io/queue-name label on the workload."""
    priority_class: str | None
    """Pod priorityClassName."""
    active_deadline_s: int | None
    """Job only: seconds before the Job is failed however far it got. The default (an hour)
    bounds how long a hung run holds GPUs, while a full default sweep takes minutes; None means
    no deadline."""
    ttl_s: int | None
    """Job only: seconds a finished Job (and its pods' logs) stays before garbage collection; a
    day leaves time to run `results`, `logs` and `status` on it."""
    gang: Gang | None
    """Gang scheduling: a PodGroup (Volcano's or the coscheduling plugin's) with minMember = pods,
    the pods bound to it, so a run is placed whole or not at all; None: the scheduler places pods
    one by one (Kueue's --queue admits the Job as a whole)."""
    network_attachments: tuple[str, ...]
    """Multus network attachments ([namespace/]name[@interface]) set as the pods'
    k8s.v1.cni.cncf.io/networks annotation, in the order given."""
    labels: tuple[tuple[str, str], ...]
    """Extra labels on every object (the app.kubernetes.io/* ones are reserved)."""
    annotations: tuple[tuple[str, str], ...]
    """Extra annotations on every object."""
    pod_annotations: tuple[tuple[str, str], ...]
    """Extra annotations on the pods only (after `annotations`, which they override): what pod
    admission webhooks read (Multus networks, sidecar injection) belongs on pods, not on the
    ConfigMap or Service."""
    master_port: int
    """torchrun's rendezvous port, derived from the run id (see master_port_for) so that two
    host-network runs on the same nodes do not collide, and the same run renders the same port."""
    rendezvous_timeout_s: int
    """Seconds torchrun waits for every pod to join. Pods start apart by image pulls of a
    multi-GB PyTorch image on cold nodes, which take minutes."""
    engine_args: tuple[str, ...]
    """Engine flags, passed verbatim to `python -m nccl_k8s.bench` (already validated by the
    engine's own parser)."""
    metrics_port: int = 8080
    """TCP port each pod's engine serves Prometheus metrics on (local rank 0 of the pod), a
    named containerPort `metrics` and the pods' prometheus.io/* annotations; 0: no metrics.
    8080 is what the prometheus.io annotation convention and the seed used."""
    pod_monitor: bool = False
    """Also render a Prometheus Operator PodMonitor selecting the run's pods (port `metrics`)."""

    @property
    def workload_name(self) -> str:
        """The Job or StatefulSet name; pods are `<workload_name>-<rank>`."""
        return self.run_id

    @property
    def service_name(self) -> str:
        """The headless Service that gives pods their DNS names."""
        return self.run_id

    @property
    def configmap_name(self) -> str:
        """The ConfigMap carrying the engine zipapp."""
        return f"{self.run_id}-engine"

    @property
    def master_addr(self) -> str:
        """Rank 0's DNS name, resolvable from every pod of the run in its namespace."""
        return f"{self.workload_name}-0.{self.service_name}"


def master_port_for(run_id: str) -> int:
    """The run's rendezvous port: a stable hash of the run id into the unprivileged range."""
    digest = hashlib.sha256(run_id.encode()).digest()
    return MASTER_PORT_MIN + int.from_bytes(digest[:4], "big") % MASTER_PORT_SPAN


def generate_run_id(now: datetime.datetime | None = None, *, token: str | None = None) -> str:
    """`nccl-<yyyymmdd-hhmmss>-<4 hex>` in UTC: sortable by time, unique within a second."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    token = token if token is not None else secrets.token_hex(2)
    return f"nccl-{now:%Y%m%d-%H%M%S}-{token}"
