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
import secrets
from collections.abc import Sequence
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
    choice,
    dns_label,
    dns_subdomain,
    env_pairs,
    is_qualified_name,
    label_pairs,
    parse_duration,
    parse_toleration,
    quantity,
    quote,
    rdma_resources,
    whole,
)

Network = Literal["auto", "ib", "roce", "socket"]
Security = Literal["socket", "rdma", "host", "privileged"]
Workload = Literal["job", "statefulset"]
EngineMode = Literal["zipapp", "image"]
Spread = Literal["required", "preferred", "none"]

#: A stock PyTorch image, pinned to a tag so that the same command measures the same NCCL next
#: month: a floating tag (`latest`) would silently change torch and NCCL versions between runs that
#: are meant to be compared. The engine travels in a ConfigMap, so any image with torch works.
DEFAULT_IMAGE = "pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime"

#: Labels every object carries; status, logs, results and cleanup select by them.
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
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
    cpu: str | None
    """CPU request per pod as a Kubernetes quantity; None requests nothing (no limit is set:
    CPU limits throttle NCCL's proxy threads)."""
    memory: str | None
    """Memory request = limit per pod as a Kubernetes quantity; None sets neither."""
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
    backoff_limit: int
    """Job only: pod failures retried before the Job fails. 0: a benchmark whose rank died has no
    meaningful result, and a retry would hide a flaky node."""
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
_JOB_ONLY = ("active_deadline", "ttl", "backoff_limit")


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


def _image(v: _Given) -> tuple[EngineMode, str]:
    engine_mode = cast(EngineMode, choice("--engine", v.need("engine"), get_args(EngineMode)))
    image = v.text("image")
    if image is None:
        if engine_mode == "image":
            raise UsageError(
                "--engine image: expected --image naming an image with nccl-k8s installed "
                f"(the default {DEFAULT_IMAGE} has only torch)",
                key="--image",
            )
        image = DEFAULT_IMAGE
    if not image or any(c.isspace() for c in image):
        raise UsageError(
            f"--image {quote(image)}: expected an image reference such as {DEFAULT_IMAGE}",
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
            "backoff_limit": 0,
        }
    if "interval" in v:
        raise UsageError("--interval: applies to --workload statefulset, not job", key="--interval")
    return {
        "interval_s": None,
        "active_deadline_s": parse_duration("--active-deadline", v.need("active_deadline")) or None,
        "ttl_s": parse_duration("--ttl", v.need("ttl")),
        "backoff_limit": whole("--backoff-limit", v.need("backoff_limit"), minimum=0),
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


def _pod(v: _Given) -> dict[str, Any]:
    """What every pod carries: placement, resources, environment."""
    cpu, memory = v.text("cpu"), v.text("memory")
    return {
        "node_selector": label_pairs("--node-selector", v.items("node_selector"), what="label"),
        "tolerations": tuple(parse_toleration(t) for t in v.items("toleration")),
        "spread": cast(Spread, choice("--spread", v.need("spread"), get_args(Spread))),
        "cpu": quantity("--cpu", cpu) if cpu is not None else None,
        "memory": quantity("--memory", memory) if memory is not None else None,
        "shm_size": quantity("--shm-size", v.need("shm_size")),
        "env": env_pairs(v.items("env")),
    }


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
    engine_mode, image = _image(v)
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
        **_network(v),
        **_names(v),
        **_pod(v),
        **_metadata(v),
        master_port=master_port_for(run_id),
        rendezvous_timeout_s=rdzv_s,
        engine_args=_engine_args(engine_args, world_size=world),
    )


__all__ = [
    "DEFAULT_IMAGE",
    "LIFETIME",
    "METADATA",
    "NETWORK",
    "OPTIONS",
    "OPTION_BY_NAME",
    "PODS",
    "RESERVED_ENV",
    "SHAPE",
    "EngineMode",
    "Network",
    "Option",
    "OptionKind",
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
]
