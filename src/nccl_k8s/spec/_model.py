"""RunSpec, the deploy option registry declared on its fields, and the constants a run is made
of (labels, ports, images, run ids)."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import re
import secrets
from typing import Literal, get_args

from nccl_k8s.errors import UsageError
from nccl_k8s.spec._gangs import GANGS, Gang, gang_help
from nccl_k8s.spec._options import (
    LIFETIME,
    METADATA,
    MONITORING,
    NETWORK,
    PODS,
    SHAPE,
    option,
    options_of,
    repeated,
    switch,
)
from nccl_k8s.spec._values import (
    Toleration,
    attachment_names,
    dns_label,
    dns_subdomain,
    duration_or_none,
    env_pairs,
    extended_resource,
    instance_type,
    label_pairs,
    metrics_peers,
    node_name_list,
    one_of,
    parse_duration,
    pod_port,
    quantity,
    queue_name,
    quote,
    rdma_counts,
    timeout,
    toleration_list,
    topology_keys,
    whole,
)
from nccl_k8s.spec.platforms import NetworkPreset, platform_choices

#: The --network presets (the platform table names one per platform: the same type).
Network = NetworkPreset
Security = Literal["socket", "rdma", "host", "privileged"]
Workload = Literal["job", "statefulset"]
EngineMode = Literal["zipapp", "image"]
Launcher = Literal["torchrun", "direct"]
Spread = Literal["required", "preferred", "none"]
Qos = Literal["burstable", "guaranteed"]
PolicyMode = Literal["auto", "on", "off"]
Placement = Literal["required", "preferred"]

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


#: Per-run master ports are drawn from [MIN, MIN + SPAN), as is the placement step's port (half
#: the span away: k8s.rendering's placement_port): unprivileged, below Linux's default ephemeral
#: range (32768-60999: no outgoing connection on a host-network node already holds the port,
#: whose bind would fail with "Address already in use") and below the NodePort range
#: (30000-32767) for the same reason.
MASTER_PORT_MIN = 20000
MASTER_PORT_SPAN = 10000

#: A run id names the Service, the workload and (with a suffix) the ConfigMap; pods are named
#: `<run-id>-<index>` and StatefulSet revisions `<run-id>-<10-char hash>`, all of which must stay
#: DNS labels (63 characters), so run ids are kept well below that.
RUN_ID_MAX_LEN = 40

#: Run ids that would name (and so make `kubectl apply` rewrite, and cleanup delete) an object
#: the namespace or the cluster already owns: the run's ServiceAccount, Role, RoleBinding, Service
#: and workload are named after the run. Each entry: the name (a trailing `*`: a prefix) and why.
RESERVED_RUN_IDS: tuple[tuple[str, str], ...] = (
    ("default", "every namespace's own ServiceAccount"),
    ("kubernetes", "the API server's Service in the default namespace"),
    ("kube-*", "Kubernetes' own names (kube-root-ca.crt, kube-system's objects)"),
    ("openshift-*", "OpenShift's own names in every project"),
    ("builder", "OpenShift's ServiceAccount in every project"),
    ("deployer", "OpenShift's ServiceAccount in every project"),
    ("nccl-k8s", "the Role that `nccl-k8s rbac` grants its users"),
)


def reserved_because(run_id: str) -> str | None:
    """Why `run_id` may not name a run (RESERVED_RUN_IDS), or None."""
    for name, why in RESERVED_RUN_IDS:
        if run_id == name or (name.endswith("*") and run_id.startswith(name[:-1])):
            return why
    return None


def run_id_arg(flag: str, value: str) -> str:
    """A run id the user names to read or remove a run (`--run ID`): checked for the form every
    run id has (a DNS label of at most RUN_ID_MAX_LEN characters) before any request is sent, so a
    typo is one line, exit 2, not a label selector the API server refuses."""
    return dns_label(flag, value, max_len=RUN_ID_MAX_LEN)


def _run_id(flag: str, value: str) -> str:
    run_id = dns_label(flag, value, max_len=RUN_ID_MAX_LEN)
    why = reserved_because(run_id)
    if why is not None:
        raise UsageError(
            f"{flag} {quote(value)}: reserved ({why}); expected another run id",
            key=flag,
        )
    return run_id


def _labels(flag: str, items: list[str]) -> tuple[tuple[str, str], ...]:
    """User labels: any but the ones nccl-k8s sets itself (selection by them must stay exact)."""
    labels = label_pairs(flag, items, what="label")
    for key, _ in labels:
        if key in RESERVED_LABELS or key == LABEL_KUEUE_QUEUE:
            raise UsageError(
                f"{flag} {quote(key)}: set by nccl-k8s (use --run-id or --queue); expected "
                "another key",
                key=flag,
            )
    return labels


#: An image's digest (`NAME[:TAG]@ALGORITHM:HEX`), as the distribution reference grammar
#: spells it (github.com/distribution/reference, reference.go: `digest-algorithm` components
#: joined by `+ . - _`, at least 32 hex digits), with the lengths of the algorithms that
#: go-digest registers (sha256, sha384, sha512; lowercase hex, as digest.Validate requires).
_DIGEST = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[+._-][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}")
_DIGEST_HEX_LEN = {"sha256": 64, "sha384": 96, "sha512": 128}


def _image(flag: str, value: str) -> str:
    """An image reference; a digest (`@sha256:...`, the one way to pin what runs) is checked for
    its form, since a malformed one only fails at the kubelet's pull (InvalidImageName)."""
    if not value or any(c.isspace() for c in value):
        raise UsageError(
            f"{flag} {quote(value)}: expected an image reference such as {DEFAULT_IMAGE}", key=flag
        )
    name, at, digest = value.partition("@")
    if at:
        algorithm, _, hexa = digest.partition(":")
        want = _DIGEST_HEX_LEN.get(algorithm)
        if (
            not name
            or not _DIGEST.fullmatch(digest)
            or (want is not None and not re.fullmatch(f"[0-9a-f]{{{want}}}", hexa))
        ):
            raise UsageError(
                f"{flag} {quote(value)}: expected a digest such as NAME@sha256:<64 lowercase hex "
                "digits> (docs/security.md, Images)",
                key=flag,
            )
    return value


_annotations = functools.partial(label_pairs, what="annotation", check_value=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSpec:
    """Everything a deploy creates, validated. Build it with `build_run_spec`, which fills every
    field. The fields are the deploy option registry: a field set by an option declares it
    (flag, parser, help, default; spec/_options.py), in --help order per panel; the docstrings
    say what each field means and why its default is what it is."""

    # fmt: off
    world_size: int = option(
        "--world-size", parse=whole, metavar="N", panel=SHAPE,
        help="Total ranks (GPUs); a multiple of --gpus-per-node.",
    )
    """Total ranks (GPUs) across all pods: nodes x gpus_per_node."""
    gpus_per_node: int = option(
        "--gpus-per-node", parse=whole, metavar="N", panel=SHAPE, default="8",
        help="GPUs (ranks) per pod, one pod per node.",
    )
    """Ranks per pod, one per GPU; torchrun's --nproc-per-node."""
    nodes: int = option(
        "--nodes", parse=whole, metavar="N", panel=SHAPE,
        help="Pods (nodes), instead of --world-size.",
    )
    """Pods, one per node: world_size / gpus_per_node."""
    workload: Workload = option(
        "--workload", parse=one_of(get_args(Workload)), metavar="job|statefulset", panel=SHAPE,
        default="job", help="job: one sweep; statefulset: continuous sweeps.",
    )
    """job: one sweep, an Indexed Job that ends; statefulset: continuous runs (the seed's layout)."""
    interval_s: int | None = option(
        "--interval", parse=parse_duration, metavar="DURATION", panel=SHAPE, default="5m",
        default_note="5m with statefulset", only_with=("workload", "statefulset"),
        help="statefulset: pause between sweeps, e.g. 300, 5m. Frequent enough to catch a "
        "degrading link within minutes, sparse enough to leave the fabric to real work.",
    )
    """StatefulSet only: seconds to pause between sweeps (the default is frequent enough to catch
    a degrading link within minutes, sparse enough to leave the fabric mostly to real work)."""
    run_id: str = option(
        "--run-id", parse=_run_id, metavar="ID",
        panel=METADATA, default_note="nccl-<time>-<hex>", help="Run name (a DNS-1123 label).",
    )
    """DNS-1123 label naming the run; every object carries it as app.kubernetes.io/instance.
    Generated as `nccl-<yyyymmdd-hhmmss>-<4 hex>` so ids sort by time and two runs started in the
    same second still differ."""
    namespace: str | None = option(
        "--namespace", "-n", parse=dns_label, metavar="NAME", panel=METADATA,
        default_note="the kubeconfig context's", help="Target namespace.",
    )
    """Target namespace; None means the kubeconfig context's namespace, which only the deployer
    can resolve (render then omits metadata.namespace, as `kubectl apply -n` expects)."""
    labels: tuple[tuple[str, str], ...] = repeated(
        "--label", parse=_labels, metavar="KEY=VALUE", panel=METADATA,
        help="Label on every object (repeatable).",
    )
    """Extra labels on every object (the app.kubernetes.io/* ones are reserved)."""
    annotations: tuple[tuple[str, str], ...] = repeated(
        "--annotation", parse=_annotations, metavar="KEY=VALUE", panel=METADATA,
        help="Annotation on every object (repeatable).",
    )
    """Extra annotations on every object."""
    pod_annotations: tuple[tuple[str, str], ...] = repeated(
        "--pod-annotation", parse=_annotations, metavar="KEY=VALUE", panel=METADATA,
        help="Annotation on the pods only, e.g. a Multus network or a mesh opt-out (repeatable).",
    )
    """Extra annotations on the pods only (after `annotations`, which they override): what pod
    admission webhooks read (Multus networks, sidecar injection) belongs on pods, not on the
    ConfigMap or Service."""
    image: str = option(
        "--image", parse=_image, metavar="IMAGE", panel=PODS,
        default_note="a pinned pytorch/pytorch image; for ib/roce a pinned NGC PyTorch image "
        "(it has libibverbs)", help="Container image; NAME@sha256:DIGEST pins its content.",
    )
    """Container image; the default, DEFAULT_IMAGE, is pinned (see there for why)."""
    runtime_class: str | None = option(
        "--runtime-class", parse=dns_subdomain, metavar="NAME", panel=PODS,
        help="Pod runtimeClassName, e.g. nvidia where the GPU Operator's runtime is not the "
        "node's default.",
    )
    """Pod runtimeClassName: on clusters where containerd's default runtime is not NVIDIA's
    (the GPU Operator installs a RuntimeClass `nvidia` for them), GPUs reach a pod only
    through it. None renders nothing: the node's default runtime."""
    engine: EngineMode = option(
        "--engine", parse=one_of(get_args(EngineMode)), metavar="zipapp|image", panel=PODS,
        default="zipapp",
        help="zipapp: ship the engine in a ConfigMap; image: the image has nccl-k8s installed.",
    )
    """zipapp: the engine travels in a ConfigMap onto a stock PyTorch image (no custom image
    needed); image: the image already has nccl-k8s installed."""
    launcher: Launcher = option(
        "--launcher", parse=one_of(get_args(Launcher)), metavar="torchrun|direct", panel=PODS,
        default="torchrun",
        help="What starts each pod's ranks: torchrun (needs torch: the stock PyTorch images) or "
        "direct, the engine's own launcher (no torch; the slim image needs it).",
    )
    """torchrun: each pod runs torchrun, which imports torch (seconds per pod) and is in every
    PyTorch image; direct: the engine's own launcher (nccl_k8s.launch._pod), same rendezvous,
    environment and failure semantics without torch, so the slim image (images/slim) can run
    the NCCL path. torchrun stays the default: it is what a stock image is known to carry."""
    scheduler_name: str | None = option(
        "--scheduler", parse=dns_subdomain, metavar="NAME", panel=PODS,
        default_note="the cluster's default scheduler",
        help="Pod schedulerName, e.g. hami-scheduler.",
    )
    """Pod schedulerName (e.g. hami-scheduler); None keeps the cluster's default scheduler."""
    node_selector: tuple[tuple[str, str], ...] = repeated(
        "--node-selector", parse=functools.partial(label_pairs, what="label"),
        metavar="KEY=VALUE", panel=PODS, help="Node label the pods require (repeatable).",
    )
    """Node labels the pods require, in the order given."""
    node_names: tuple[str, ...] = repeated(
        "--node", parse=node_name_list, metavar="NAME", panel=PODS,
        help="Run only on these nodes, by node name (repeatable; node affinity on "
        "metadata.name).",
    )
    """--node: the only nodes the pods may run on, by node name (required node affinity on the
    field metadata.name, which unlike the hostname label every node has and no one relabels);
    empty: any node. The bad-node finder pins each 2-node test to its pair with it."""
    tolerations: tuple[Toleration, ...] = repeated(
        "--toleration", parse=toleration_list, metavar="KEY[=VALUE][:EFFECT]", panel=PODS,
        help="Taint the pods tolerate (repeatable).",
    )
    """Taints the pods tolerate (GPU nodes are often tainted)."""
    spread: Spread = option(
        "--spread", parse=one_of(get_args(Spread)), metavar="required|preferred|none",
        panel=PODS, default="required", help="One pod per node: required, preferred or none.",
    )
    """Pod anti-affinity on hostname. required (default): one pod per node or the pod stays
    Pending, so `nodes` means nodes and an inter-node benchmark cannot silently run intra-node;
    preferred: spread when possible; none: let the scheduler pack pods."""
    topology: str = option(
        "--topology", parse=topology_keys, metavar="auto|none|LABEL[,LABEL]", panel=PODS,
        default="auto",
        help="Node labels of the network topology, coarse to fine, that place the pods "
        "(auto: the platform's, docs/topology.md; none: no topology placement).",
    )
    """The topology levels the pods are placed by: `auto` the platform's labels (spec.platforms,
    each entry's `topology`), `none` none, else the given label keys, coarse to fine. A fabric
    rule is kept whatever it says (eks-efa's one zone, --compute-domain's one NVLink clique)."""
    placement: Placement = option(
        "--placement", parse=one_of(get_args(Placement)), metavar="required|preferred",
        panel=PODS, default="preferred",
        help="required: every pod in one domain of the coarsest --topology level (or Pending); "
        "preferred: as close as the nodes allow. With --queue, Kueue's TAS annotations.",
    )
    """preferred (default): render reads no nodes, and a required term on a label the nodes
    lack keeps every pod Pending, so the default asks the scheduler (or Kueue) for closeness at
    every level without refusing anything; required: all pods in one domain of the coarsest
    level (Kueue: `podset-required-topology`), the run waits until one fits."""
    healthy_only: bool = switch(
        "--healthy-only", panel=PODS,
        help="Only on nodes whose last `nodes check` said good within --healthy-within "
        "(required node affinity on its labels; render fixes the window's start when it "
        "renders). docs/fleet.md.",
    )
    """Required node affinity, in every node selector term: the nccl-k8s/node-check label In
    [good] and nccl-k8s/checked-at Gt `healthy_since` (k8s.rendering._health); deploy first
    counts the nodes that qualify, where it may list nodes."""
    healthy_within_s: int = option(
        "--healthy-within", parse=timeout, metavar="DURATION", panel=PODS, default="24h",
        help="How old a node's last check may be for --healthy-only (and before doctor "
        "calls it stale), e.g. 24h, 30h.",
    )
    """Seconds a good verdict stays valid. A day, as GKE's health scanner keeps an NCCL
    verdict and OKE's checks skip nodes tested within 24 h; a schedule must retest within
    it (docs/fleet.md: its --skip-checked-within plus its period)."""
    gpu_resource: str = option(
        "--gpu-resource", parse=extended_resource, metavar="NAME", panel=PODS,
        default="nvidia.com/gpu", help="Extended resource name of a GPU.",
    )
    """Extended resource name of a GPU (the NVIDIA device plugin's name by default)."""
    cpu: str = option(
        "--cpu", parse=quantity, metavar="QUANTITY", panel=PODS, default_note="2 per GPU",
        help="CPU request per pod, e.g. 16, 500m (no limit unless --qos guaranteed: limits "
        "throttle NCCL's proxy threads).",
    )
    """CPU request per pod as a Kubernetes quantity (default CPU_PER_GPU per GPU). No limit with
    qos burstable: CPU limits throttle NCCL's proxy threads and skew small-message latency."""
    memory: str = option(
        "--memory", parse=quantity, metavar="QUANTITY", panel=PODS,
        default_note="4Gi per GPU + --shm-size",
        help="Memory request = limit per pod, e.g. 64Gi; /dev/shm counts against it, so it "
        "must exceed --shm-size.",
    )
    """Memory request = limit per pod as a Kubernetes quantity (default MEMORY_PER_GPU per GPU
    plus shm_size). Always more than shm_size: /dev/shm is charged to the pod's memory."""
    qos: Qos = option(
        "--qos", parse=one_of(get_args(Qos)), metavar="burstable|guaranteed", panel=PODS,
        default="burstable",
        help="guaranteed: CPU limit = request too (exclusive cores under the static CPU "
        "manager; the recommendation on dedicated GPU nodes).",
    )
    """burstable: CPU requested only; guaranteed: CPU limit = request as well, so the pod is in
    the Guaranteed QoS class (exclusive cores under the kubelet's static CPU manager policy)."""
    shm_size: str = option(
        "--shm-size", parse=quantity, metavar="QUANTITY", panel=PODS, default="8Gi",
        help="Size of /dev/shm (NCCL's shared-memory transport; the runtime's 64Mi is too "
        "small for 8 GPUs).",
    )
    """Size of /dev/shm (a memory emptyDir). NCCL's shared-memory transport and torch's
    inter-process queues live there; the container runtime's 64Mi default makes NCCL fail with
    8 GPUs per node. Counts against the memory limit when one is set."""
    env: tuple[tuple[str, str], ...] = repeated(
        "--env", parse=env_pairs, metavar="KEY=VALUE", panel=PODS,
        help="Environment variable in every pod; beats the presets (repeatable).",
    )
    """User environment, in the order given; these values beat every preset."""
    pvc: str | None = option(
        "--pvc", parse=dns_subdomain, metavar="CLAIM", panel=PODS,
        help="PersistentVolumeClaim mounted at /workspace/results.",
    )
    """PersistentVolumeClaim mounted at /workspace/results; rank 0 also writes results there.
    Multi-node runs need a ReadWriteMany claim, since every pod mounts it."""
    network: Network = option(
        "--network", parse=one_of(get_args(Network)), metavar="auto|ib|roce|socket",
        panel=NETWORK, default="auto", help="The NCCL fabric preset (auto lets NCCL choose).",
    )
    """Fabric preset: auto sets nothing and lets NCCL choose; ib/roce/socket set only the NCCL
    variables that select that fabric."""
    platform: str = option(
        "--platform", parse=one_of(platform_choices()), metavar="|".join(platform_choices()),
        panel=NETWORK, default="auto",
        help="The fabric platform whose pieces the pods carry (docs/platforms.md); auto reads "
        "the nodes (render, which reads none, takes auto as generic).",
    )
    """A key of spec.platforms.PLATFORMS, or auto: deploy, doctor and nodes check read the nodes
    the run may use and choose (spec.platforms.detect), render takes generic. The platform's
    entry adds its resources, annotations, sidecars, volumes, environment and image."""
    instance_type: str | None = option(
        "--instance-type", parse=instance_type, metavar="TYPE", panel=NETWORK,
        help="The nodes' machine type (e.g. p5.48xlarge, a4-highgpu-8g), for how many fabric "
        "devices or GPU NIC interfaces a pod gets where render cannot read the nodes.",
    )
    """The machine type of the run's nodes, one the platform's table knows; it gives the count
    of the platform's fabric devices a pod requests, and the annotations and placement that
    depend on the machine (GKE's GPU NIC interfaces)."""
    rdma_resources: tuple[tuple[str, int], ...] = repeated(
        "--rdma-resource", parse=rdma_counts, metavar="NAME=COUNT", panel=NETWORK,
        help="RDMA device resource per pod, e.g. rdma/ib=1 (repeatable).",
    )
    """Extended resources for RDMA devices (e.g. rdma/ib=1), requested = limited per pod."""
    network_attachments: tuple[str, ...] = repeated(
        "--network-attachment", parse=attachment_names, metavar="NAME[,NAME]", panel=NETWORK,
        help="Multus network attachment(s) of the pods ([namespace/]name[@interface]), e.g. "
        "an SR-IOV network (repeatable).",
    )
    """Multus network attachments ([namespace/]name[@interface]) set as the pods'
    k8s.v1.cni.cncf.io/networks annotation, in the order given."""
    host_network: bool = switch(
        "--host-network", panel=NETWORK,
        help="Run pods in the node's network namespace (the rendezvous port becomes a "
        "hostPort).",
    )
    """Run pods in the node's network namespace (needed by some RoCE setups)."""
    compute_domain: bool = switch(
        "--compute-domain", panel=NETWORK,
        help="GB200/GB300 NVL72 (NVIDIA DRA driver): create the run's own ComputeDomain; the "
        "pods claim its IMEX channel, share one NVLink clique and run NCCL with MNNVL.",
    )
    """Multi-node NVLink through NVIDIA's DRA driver (k8s-dra-driver-gpu): render a ComputeDomain
    owned by the run (one per run, as the driver's docs advise, deleted with it), the pods' claim
    of its channel ResourceClaimTemplate, required pod affinity on the nvidia.com/gpu.clique node
    label and NCCL's MNNVL settings (k8s.rendering._computedomain). A switch, not a name: a
    ComputeDomain is the workload's, formed around its pods and torn down after them."""
    security: Security = option(
        "--security", parse=one_of(get_args(Security)), metavar="socket|rdma|host|privileged",
        panel=NETWORK, default_note="rdma for ib/roce, else socket",
        help="Privilege profile (docs/deploy.md lists what each needs).",
    )
    """Privilege profile, least privilege each (the renderer's security presets). Default: rdma when the
    network is ib or roce (RDMA needs IPC_LOCK to pin memory), else socket (no privileges)."""
    queue: str | None = option(
        "--queue", parse=queue_name, metavar="NAME", panel=LIFETIME,
        help="Kueue LocalQueue name.",
    )
    """Kueue LocalQueue name, set as the kueue.x-k8s.io/queue-name label on the workload."""
    gang: Gang | None = option(
        "--gang", parse=one_of(tuple(GANGS)), metavar="|".join(GANGS), panel=LIFETIME,
        help=gang_help(),
    )
    """Gang scheduling: a PodGroup of one of the schedulers of GANGS with minMember = pods,
    the pods bound to it, so a run is placed whole or not at all; None: the scheduler places pods
    one by one (Kueue's --queue admits the Job as a whole)."""
    priority_class: str | None = option(
        "--priority-class", parse=dns_subdomain, metavar="NAME", panel=LIFETIME,
        help="Pod priorityClassName.",
    )
    """Pod priorityClassName."""
    active_deadline_s: int | None = option(
        "--active-deadline", parse=duration_or_none, metavar="DURATION", panel=LIFETIME,
        default="1h", only_with=("workload", "job"),
        help="job: fail after this long however far it got (0 = never); bounds how long a "
        "hung run holds GPUs.",
    )
    """Job only: seconds before the Job is failed however far it got. The default (an hour)
    bounds how long a hung run holds GPUs, while a full default sweep takes minutes; None means
    no deadline."""
    ttl_s: int | None = option(
        "--ttl", parse=parse_duration, metavar="DURATION", panel=LIFETIME, default="1d",
        only_with=("workload", "job"),
        help="job: delete it this long after it finished (time for results, logs, status).",
    )
    """Job only: seconds a finished Job (and its pods' logs) stays before garbage collection; a
    day leaves time to run `results`, `logs` and `status` on it."""
    rendezvous_timeout_s: int = option(
        "--rendezvous-timeout", parse=timeout, metavar="DURATION", panel=LIFETIME,
        default="15m",
        help="How long pods wait for each other (cold nodes pull a multi-GB image first).",
    )
    """Seconds torchrun (or, with --launcher direct, pod 0's launcher) waits for every pod to join. Pods start apart by image pulls of a
    multi-GB PyTorch image on cold nodes, which take minutes."""
    metrics_port: int = option(
        "--metrics-port", parse=pod_port, metavar="PORT", panel=MONITORING, default="8080",
        help="Port each pod serves Prometheus metrics on (a named containerPort `metrics` "
        "and the prometheus.io/* annotations; 1024-65535, 0: none). docs/metrics.md lists the metrics.",
    )
    """TCP port each pod's engine serves Prometheus metrics on (local rank 0 of the pod), a
    named containerPort `metrics` and the pods' prometheus.io/* annotations; 0: no metrics.
    8080 is what the prometheus.io annotation convention and the seed used."""
    pod_monitor: bool = switch(
        "--pod-monitor", panel=MONITORING,
        help="Also create a Prometheus Operator PodMonitor (monitoring.coreos.com/v1) that "
        "scrapes the run's pods.",
    )
    """Also render a Prometheus Operator PodMonitor selecting the run's pods (port `metrics`)."""
    network_policy: PolicyMode = option(
        "--network-policy", parse=one_of(get_args(PolicyMode)), metavar="auto|on|off",
        panel=NETWORK, default="auto",
        help="The run's NetworkPolicy (networking.k8s.io/v1): into its pods only the run's own "
        "pods (every port: NCCL uses ephemeral ones) and, on the metrics port, --metrics-from "
        "(every namespace when not given). auto: rendered unless the pods are on the node's "
        "network, where policies do not apply; on: refused there; off: none. docs/security.md.",
    )
    """The run's NetworkPolicy: ingress to its pods from the run's own pods on every port (the
    rendezvous store and NCCL's ephemeral ports) and the metrics port from --metrics-from
    (every namespace's pods when not given: who scrapes is the cluster's choice, as without a
    policy); nothing else, so no other pod reaches the rendezvous store or NCCL's listeners.
    By default (auto) on every pod-network run: a policy is ignored by a network plugin that
    does not enforce policies, and selects no pod on the node's network (so it is not rendered
    there, and `on` refuses that). `off` for a plugin or mesh that needs more (issue 36)."""
    metrics_from: tuple[tuple[str, str], ...] = repeated(
        "--metrics-from", parse=metrics_peers, metavar="namespace=NAME|KEY=VALUE", panel=MONITORING,
        help="Who the NetworkPolicy lets reach the metrics port, repeatable: namespace=NAME "
        "(its pods) or KEY=VALUE (pods of the run's namespace with that label). Not given: "
        "every namespace's pods.",
    )
    """The peers the NetworkPolicy lets reach the metrics port (each `namespace=NAME`: every pod
    of that namespace; or a pod label of the run's namespace). Empty: every namespace's pods."""
    # fmt: on

    # ---- derived: set by build_run_spec, not by an option of their own ----
    master_port: int
    """torchrun's rendezvous port, derived from the run id (see master_port_for) so that two
    host-network runs on the same nodes do not collide, and the same run renders the same port."""
    healthy_since: int | None = None
    """--healthy-only: the unix second after which a node's good verdict counts (build time
    minus healthy_within_s; None without it), so that rendering stays a function of the spec."""
    given: frozenset[str] = frozenset()
    """The options the user gave (Option.name): the defaults derived from others (network,
    security, image, fabric devices) are derived again when --platform auto is resolved
    (spec.with_platform), and only those."""
    engine_args: tuple[str, ...]
    """Engine flags, passed verbatim to `python -m nccl_k8s.bench` (already validated by the
    engine's own parser)."""

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


#: Every deploy option (`render` and `deploy` take them all), in --help order per panel.
OPTIONS = options_of(RunSpec)
OPTION_BY_NAME = {o.name: o for o in OPTIONS}
