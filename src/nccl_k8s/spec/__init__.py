"""RunSpec: the one validated description of a run on Kubernetes.

`build_run_spec` is the edge: it takes what the user typed (strings, lists of `K=V`, flags) and
either returns a RunSpec whose every field is already checked and converted, or raises
`UsageError` with one line naming the value and the form that was expected. Nothing below this
module (manifests, presets, the deployer) parses a user string again, so a bad value can never
reach the API server half-way through a deploy.

Pure: no I/O, no API calls. The only impure inputs are the clock and the random source used for a
generated run id, both overridable for tests.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import re
import secrets
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Literal, cast, get_args

from nccl_k8s.errors import UsageError
from nccl_k8s.spec._options import (
    LIFETIME,
    METADATA,
    NETWORK,
    OPTION_BY_NAME,
    OPTIONS,
    PODS,
    SHAPE,
    Option,
    OptionKind,
)
from nccl_k8s.spec._values import (
    LABEL_VALUE,
    RESERVED_ENV,
    TaintEffect,
    Toleration,
    bytes_quantity,
    choice,
    cpu_quantity,
    dns_label,
    dns_subdomain,
    env_pairs,
    is_qualified_name,
    label_pairs,
    parse_duration,
    parse_toleration,
    quantity,
    quantity_value,
    quote,
    rdma_resources,
    whole,
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


def _world(world_text: object, gpus_text: object, nodes_text: object) -> tuple[int, int, int]:
    """Resolve world size, GPUs per node and nodes from the two or three the user gave."""
    gpus_per_node = whole("--gpus-per-node", gpus_text) if gpus_text is not None else None
    world_size = whole("--world-size", world_text) if world_text is not None else None
    nodes = whole("--nodes", nodes_text) if nodes_text is not None else None
    g = (
        gpus_per_node
        if gpus_per_node is not None
        else int(OPTION_BY_NAME["gpus_per_node"].default or 0)
    )
    g_text = (
        f" --gpus-per-node {g}"
        if gpus_per_node is not None
        else f" (--gpus-per-node {g}, the default)"
    )
    if world_size is None and nodes is None:
        raise UsageError(
            "no run size: expected --world-size N (a multiple of --gpus-per-node) or --nodes M",
            key="--world-size",
        )
    if world_size is not None:
        if world_size % g:
            raise UsageError(
                f"--world-size {world_size}{g_text}: world size must be a multiple of GPUs per node",
                key="--world-size",
            )
        if nodes is not None and nodes * g != world_size:
            raise UsageError(
                f"--world-size {world_size} --nodes {nodes}{g_text}: world size must equal nodes "
                "x GPUs per node; give one of --world-size or --nodes",
                key="--nodes",
            )
        return _fits(world_size, g, world_size // g, f"--world-size {world_size}{g_text}")
    m = nodes or 0  # not None: both-None was refused above
    return _fits(m * g, g, m, f"--nodes {m}{g_text}")


#: Kubernetes refuses an Indexed Job with more completions (and parallelism) than this.
MAX_PODS = 100_000
#: Ranks are 32-bit signed integers in NCCL and torch.distributed.
MAX_WORLD_SIZE = 2**31 - 1


def _fits(world: int, g: int, nodes: int, given: str) -> tuple[int, int, int]:
    """The size, when Kubernetes and NCCL can hold it (checked here, not by the API server)."""
    if nodes > MAX_PODS:
        raise UsageError(
            f"{given}: {nodes} pods, but an Indexed Job runs at most {MAX_PODS:,} "
            "(completions); expected a smaller run",
            key="--world-size",
        )
    if world > MAX_WORLD_SIZE:
        raise UsageError(
            f"{given}: world size {world} exceeds the {MAX_WORLD_SIZE:,} ranks NCCL can "
            "number; expected a smaller --gpus-per-node",
            key="--gpus-per-node",
        )
    return world, g, nodes


def _engine_args(args: Sequence[str], *, world_size: int) -> tuple[str, ...]:
    """Validate engine flags with the engine's own parser, so a bad -b fails here, not in a pod."""
    from nccl_k8s.bench.config import ConfigError, check_backend, parse_args

    argv = [str(a) for a in args]
    if any(a in ("-h", "--help") for a in argv):
        raise UsageError(
            "engine arguments: -h/--help is not a benchmark flag; see `python -m nccl_k8s.bench --help`",
            key="engine_args",
        )
    try:
        config = parse_args(argv)
        # On GPU pods `auto` resolves to NCCL; an explicit backend is checked as given.
        backend = config.backend if config.backend != "auto" else "nccl"
        check_backend(config, backend, world_size=world_size)
    except ConfigError as exc:
        raise UsageError(f"engine arguments: {exc}", key="engine_args") from exc
    except SystemExit as exc:  # argparse exits on its own for a few actions
        raise UsageError(
            f"engine arguments {quote(' '.join(argv))}: not accepted", key="engine_args"
        ) from exc
    return tuple(argv)


#: Options that apply to one workload only.
_JOB_ONLY = ("active_deadline", "ttl")


class _Given:
    """The user's values by option name, with the table's defaults behind them."""

    def __init__(self, values: dict[str, object]) -> None:
        unknown = sorted(set(values) - set(OPTION_BY_NAME))
        if unknown:
            raise TypeError(f"build_run_spec: unknown option(s) {', '.join(unknown)}")
        self.given = {k: v for k, v in values.items() if v is not None}

    def __contains__(self, name: str) -> bool:
        return name in self.given

    def text(self, name: str) -> str | None:
        """The value as typed, else the table's default, else None."""
        value = self.given.get(name, OPTION_BY_NAME[name].default)
        return None if value is None else str(value)

    def need(self, name: str) -> str:
        """text() of an option that has a default."""
        return self.text(name) or ""

    def items(self, name: str) -> list[str]:
        value = self.given.get(name) or ()
        return [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]

    def switch(self, name: str) -> bool:
        return bool(self.given.get(name, False))


def _image(v: _Given, network: Network) -> tuple[EngineMode, str]:
    """The engine mode and the image: given, else one that can use the fabric."""
    engine_mode = cast(EngineMode, choice("--engine", v.need("engine"), get_args(EngineMode)))
    rdma = network in ("ib", "roce")
    image = v.text("image")
    if image is None:
        if engine_mode == "image":
            raise UsageError(
                "--engine image: expected --image naming an image with nccl-k8s installed "
                f"(the default {DEFAULT_IMAGE} has only torch)",
                key="--image",
            )
        image = RDMA_IMAGE if rdma else DEFAULT_IMAGE
    if not image or any(c.isspace() for c in image):
        raise UsageError(
            f"--image {quote(image)}: expected an image reference such as {DEFAULT_IMAGE}",
            key="--image",
        )
    repository = image.split("@")[0].rsplit(":", 1)[0] if "/" in image else image
    if rdma and repository in NO_IBVERBS_REPOSITORIES:
        raise UsageError(
            f"--image {quote(image)} --network {network}: the pytorch/pytorch images carry no "
            f"libibverbs (rdma-core), so NCCL cannot open an HCA; expected an image with "
            f"rdma-core, e.g. {RDMA_IMAGE} (the default for --network {network})",
            key="--image",
        )
    return engine_mode, image


def _lifetime(v: _Given, kind: Workload) -> dict[str, Any]:
    """The workload-specific fields: the sweep interval, or the Job's deadline, TTL, retries."""
    if kind == "statefulset":
        for name in _JOB_ONLY:
            if name in v:
                flag = OPTION_BY_NAME[name].flag
                raise UsageError(f"{flag}: applies to --workload job, not statefulset", key=flag)
        return {
            "interval_s": parse_duration("--interval", v.text("interval") or "5m"),
            "active_deadline_s": None,
            "ttl_s": None,
        }
    if "interval" in v:
        raise UsageError("--interval: applies to --workload statefulset, not job", key="--interval")
    return {
        "interval_s": None,
        "active_deadline_s": parse_duration("--active-deadline", v.need("active_deadline")) or None,
        "ttl_s": parse_duration("--ttl", v.need("ttl")),
    }


def _network(v: _Given) -> dict[str, Any]:
    """Fabric preset, RDMA resources and the privilege profile they imply."""
    net = cast(Network, choice("--network", v.need("network"), get_args(Network)))
    rdma = rdma_resources(v.items("rdma_resource"))
    security = v.text("security")
    if security is None:
        sec = "rdma" if net in ("ib", "roce") else "socket"
    else:
        sec = choice("--security", security, get_args(Security))
    if sec == "rdma" and not rdma:
        why = f"--network {net} uses --security rdma" if security is None else "--security rdma"
        raise UsageError(
            f"{why}: expected --rdma-resource NAME=COUNT (e.g. rdma/ib=1) for the RDMA devices, "
            "or --security host|privileged where devices are reached otherwise",
            key="--rdma-resource",
        )
    return {
        "network": net,
        "rdma_resources": rdma,
        "host_network": v.switch("host_network"),
        "security": cast(Security, sec),
    }


def _names(v: _Given) -> dict[str, Any]:
    """Scheduler, priority class, claim and queue: names the API server would check later."""
    scheduler, priority_class, pvc, queue = (
        v.text(n) for n in ("scheduler", "priority_class", "pvc", "queue")
    )
    if scheduler is not None:
        dns_subdomain("--scheduler", scheduler)
    if priority_class is not None:
        dns_subdomain("--priority-class", priority_class)
    if pvc is not None:
        dns_subdomain("--pvc", pvc)
    if queue is not None and (len(queue) > 63 or not LABEL_VALUE.match(queue) or not queue):
        raise UsageError(
            f"--queue {quote(queue)}: expected a Kueue LocalQueue name (a label value)",
            key="--queue",
        )
    gpu_resource = v.need("gpu_resource")
    if not is_qualified_name(gpu_resource) or "/" not in gpu_resource:
        raise UsageError(
            f"--gpu-resource {quote(gpu_resource)}: expected an extended resource name such as "
            "nvidia.com/gpu",
            key="--gpu-resource",
        )
    return {
        "scheduler_name": scheduler,
        "priority_class": priority_class,
        "pvc": pvc,
        "queue": queue,
        "gpu_resource": gpu_resource,
    }


def _resources(v: _Given, gpus: int) -> dict[str, Any]:
    """CPU and memory per pod: given, else sized per GPU; memory always above /dev/shm, which
    the kernel charges to the pod's memory cgroup (a tmpfs page is the pod's memory)."""
    shm = quantity("--shm-size", v.need("shm_size"))
    cpu_text, memory_text = v.text("cpu"), v.text("memory")
    cpu = quantity("--cpu", cpu_text) if cpu_text is not None else cpu_quantity(CPU_PER_GPU * gpus)
    if memory_text is None:
        memory = bytes_quantity(quantity_value(MEMORY_PER_GPU) * gpus + quantity_value(shm))
    else:
        memory = quantity("--memory", memory_text)
        if quantity_value(memory) <= quantity_value(shm):
            at_least = bytes_quantity(quantity_value(shm) + Fraction(2**30))
            raise UsageError(
                f"--memory {memory}: not more than --shm-size {shm}, and /dev/shm counts against "
                f"the pod's memory limit; expected more (at least {at_least}), or a smaller "
                "--shm-size",
                key="--memory",
            )
    qos = cast(Qos, choice("--qos", v.need("qos"), get_args(Qos)))
    return {"cpu": cpu, "memory": memory, "shm_size": shm, "qos": qos}


def _pod(v: _Given) -> dict[str, Any]:
    """What every pod carries: placement, environment, network attachments."""
    attachments: list[str] = []
    for item in v.items("network_attachment"):
        for name in item.split(","):
            attachments.append(_network_attachment(name.strip(), item))
    return {
        "node_selector": label_pairs("--node-selector", v.items("node_selector"), what="label"),
        "tolerations": tuple(parse_toleration(t) for t in v.items("toleration")),
        "spread": cast(Spread, choice("--spread", v.need("spread"), get_args(Spread))),
        "env": env_pairs(v.items("env")),
        "network_attachments": tuple(dict.fromkeys(attachments)),
    }


def _network_attachment(name: str, item: str) -> str:
    """Multus' short form: [namespace/]name[@interface], each part a DNS-1123 label."""
    ns_name, _, interface = name.partition("@")
    namespace, slash, attachment = ns_name.rpartition("/")
    parts = [attachment] + ([namespace] if slash else []) + ([interface] if "@" in name else [])
    if not all(len(p) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", p) for p in parts):
        raise UsageError(
            f"--network-attachment {quote(item)}: expected NetworkAttachmentDefinition names "
            "[namespace/]name[@interface], comma-separated (DNS-1123 labels)",
            key="--network-attachment",
        )
    return name


def _metadata(v: _Given) -> dict[str, Any]:
    labels = label_pairs("--label", v.items("label"), what="label")
    for key, _ in labels:
        if key in RESERVED_LABELS or key == LABEL_KUEUE_QUEUE:
            raise UsageError(
                f"--label {quote(key)}: set by nccl-k8s (use --run-id or --queue); expected "
                "another key",
                key="--label",
            )
    annotations = label_pairs(
        "--annotation", v.items("annotation"), what="annotation", check_value=False
    )
    pod_annotations = label_pairs(
        "--pod-annotation", v.items("pod_annotation"), what="annotation", check_value=False
    )
    return {"labels": labels, "annotations": annotations, "pod_annotations": pod_annotations}


def _gang(v: _Given) -> Gang | None:
    text = v.text("gang")
    return None if text is None else cast(Gang, choice("--gang", text, get_args(Gang)))


def build_run_spec(
    *,
    engine_args: Sequence[str] = (),
    now: datetime.datetime | None = None,
    **values: object,
) -> RunSpec:
    """Validate the options' values (keyed by `Option.name`, as typed: strings, lists of
    strings, bools) into a RunSpec, or raise UsageError naming the value and the expected form.
    Absent options (or None) take their table default (OPTIONS)."""
    v = _Given(values)
    world, g, n = _world(
        v.given.get("world_size"), v.given.get("gpus_per_node"), v.given.get("nodes")
    )
    run_id = v.text("run_id") or generate_run_id(now)
    dns_label("--run-id", run_id, max_len=RUN_ID_MAX_LEN)
    namespace = v.text("namespace")
    if namespace is not None:
        dns_label("--namespace", namespace)
    network = _network(v)
    engine_mode, image = _image(v, network["network"])
    pod, metadata = _pod(v), _metadata(v)
    if pod["network_attachments"] and any(
        k == NETWORKS_ANNOTATION for k, _ in metadata["annotations"] + metadata["pod_annotations"]
    ):
        raise UsageError(
            f"--network-attachment and an annotation {NETWORKS_ANNOTATION}: both set the pods' "
            "Multus networks; expected one of them",
            key="--network-attachment",
        )
    kind = cast(Workload, choice("--workload", v.need("workload"), get_args(Workload)))
    rdzv_text = v.need("rendezvous_timeout")
    rdzv_s = parse_duration("--rendezvous-timeout", rdzv_text)
    if rdzv_s < 1:
        raise UsageError(
            f"--rendezvous-timeout {quote(rdzv_text)}: expected at least 1s",
            key="--rendezvous-timeout",
        )
    return RunSpec(
        run_id=run_id,
        namespace=namespace,
        world_size=world,
        gpus_per_node=g,
        nodes=n,
        image=image,
        engine=engine_mode,
        workload=kind,
        **_lifetime(v, kind),
        **network,
        **_names(v),
        **pod,
        **_resources(v, g),
        **metadata,
        gang=_gang(v),
        master_port=master_port_for(run_id),
        rendezvous_timeout_s=rdzv_s,
        engine_args=_engine_args(engine_args, world_size=world),
    )


__all__ = [
    "CPU_PER_GPU",
    "DEFAULT_IMAGE",
    "LIFETIME",
    "MEMORY_PER_GPU",
    "METADATA",
    "NETWORK",
    "OPTIONS",
    "OPTION_BY_NAME",
    "PODS",
    "RDMA_IMAGE",
    "RESERVED_ENV",
    "SHAPE",
    "EngineMode",
    "Gang",
    "Network",
    "Option",
    "OptionKind",
    "Qos",
    "RunSpec",
    "Security",
    "Spread",
    "TaintEffect",
    "Toleration",
    "Workload",
    "build_run_spec",
    "generate_run_id",
    "master_port_for",
    "parse_duration",
    "parse_toleration",
    "quantity_value",
]
