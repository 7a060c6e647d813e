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
import json
import re
import secrets
from collections.abc import Sequence
from typing import Literal, cast, get_args

from nccl_k8s.errors import UsageError

Network = Literal["auto", "ib", "roce", "socket"]
Security = Literal["socket", "rdma", "host", "privileged"]
Workload = Literal["job", "statefulset"]
EngineMode = Literal["zipapp", "image"]
Spread = Literal["required", "preferred", "none"]
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

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

#: Environment variables the manifests set themselves; a user value would break the pod's wiring.
RESERVED_ENV = frozenset({"NCCL_K8S_RUN_ID", "JOB_COMPLETION_INDEX", "POD_NAME", "PYTHONPATH"})

#: Per-run master ports are drawn from this range: unprivileged, below Linux's default ephemeral
#: range (32768-60999) so no outgoing connection on a host-network node already holds the port,
#: and below the NodePort range (30000-32767) for the same reason.
MASTER_PORT_MIN = 20000
MASTER_PORT_SPAN = 10000

#: A run id names the Service, the workload and (with a suffix) the ConfigMap; pods are named
#: `<run-id>-<index>` and StatefulSet revisions `<run-id>-<10-char hash>`, all of which must stay
#: DNS labels (63 characters), so run ids are kept well below that.
RUN_ID_MAX_LEN = 40

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
# Kubernetes resource.Quantity, positive only: a decimal number with a binary (Ki..Ei) or
# decimal (m, k, M..E) suffix, or an exponent.
_QUANTITY = re.compile(r"^(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[mkMGTPE]|[eE]\d+)?$")
_DURATION = re.compile(r"^(\d+)([smhd]?)$")
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Toleration:
    """One pod toleration, parsed from kubectl's taint syntax."""

    key: str
    """Taint key; the toleration matches taints with this key."""
    operator: Literal["Equal", "Exists"]
    """Equal when a value was given (`key=value`), Exists otherwise (`key`, `key:Effect`)."""
    value: str | None = None
    """Taint value for Equal; None for Exists."""
    effect: TaintEffect | None = None
    """Only taints with this effect; None tolerates every effect of the key."""

    def to_dict(self) -> dict[str, str]:
        out: dict[str, str] = {"key": self.key, "operator": self.operator}
        if self.value is not None:
            out["value"] = self.value
        if self.effect is not None:
            out["effect"] = self.effect
        return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSpec:
    """Everything a deploy creates, validated. Build it with `build_run_spec`."""

    run_id: str
    """DNS-1123 label naming the run; every object carries it as app.kubernetes.io/instance.
    Generated as `nccl-<yyyymmdd-hhmmss>-<4 hex>` so ids sort by time and two runs started in the
    same second still differ."""
    namespace: str | None = None
    """Target namespace; None means the kubeconfig context's namespace, which only the deployer
    can resolve (render then omits metadata.namespace, as `kubectl apply -n` expects)."""
    world_size: int
    """Total ranks (GPUs) across all pods: nodes x gpus_per_node."""
    gpus_per_node: int
    """Ranks per pod, one per GPU; torchrun's --nproc-per-node."""
    nodes: int
    """Pods, one per node: world_size / gpus_per_node."""
    image: str = DEFAULT_IMAGE
    """Container image; the default is pinned (see DEFAULT_IMAGE for why)."""
    engine: EngineMode = "zipapp"
    """zipapp: the engine travels in a ConfigMap onto a stock PyTorch image (no custom image
    needed); image: the image already has nccl-k8s installed."""
    workload: Workload = "job"
    """job: one sweep, an Indexed Job that ends; statefulset: continuous runs (the seed's layout)."""
    interval_s: int | None = None
    """StatefulSet only: seconds to pause between sweeps (default 300: frequent enough to catch a
    degrading link within minutes, sparse enough to leave the fabric mostly to real work)."""
    scheduler_name: str | None = None
    """Pod schedulerName (e.g. hami-scheduler); None keeps the cluster's default scheduler."""
    node_selector: tuple[tuple[str, str], ...] = ()
    """Node labels the pods require, in the order given."""
    tolerations: tuple[Toleration, ...] = ()
    """Taints the pods tolerate (GPU nodes are often tainted)."""
    spread: Spread = "required"
    """Pod anti-affinity on hostname. required (default): one pod per node or the pod stays
    Pending, so `nodes` means nodes and an inter-node benchmark cannot silently run intra-node;
    preferred: spread when possible; none: let the scheduler pack pods."""
    gpu_resource: str = "nvidia.com/gpu"
    """Extended resource name of a GPU (the NVIDIA device plugin's name by default)."""
    rdma_resources: tuple[tuple[str, int], ...] = ()
    """Extended resources for RDMA devices (e.g. rdma/ib=1), requested = limited per pod."""
    network: Network = "auto"
    """Fabric preset: auto sets nothing and lets NCCL choose; ib/roce/socket set only the NCCL
    variables that select that fabric."""
    host_network: bool = False
    """Run pods in the node's network namespace (needed by some RoCE setups)."""
    security: Security = "socket"
    """Privilege profile, least privilege each (see k8s/presets.py). Default: rdma when the
    network is ib or roce (RDMA needs IPC_LOCK to pin memory), else socket (no privileges)."""
    cpu: str | None = None
    """CPU request per pod as a Kubernetes quantity; None requests nothing (no limit is set:
    CPU limits throttle NCCL's proxy threads)."""
    memory: str | None = None
    """Memory request = limit per pod as a Kubernetes quantity; None sets neither."""
    shm_size: str = "8Gi"
    """Size of /dev/shm (a memory emptyDir). NCCL's shared-memory transport and torch's
    inter-process queues live there; the container runtime's 64Mi default makes NCCL fail with
    8 GPUs per node. Counts against the memory limit when one is set."""
    env: tuple[tuple[str, str], ...] = ()
    """User environment, in the order given; these values beat every preset."""
    pvc: str | None = None
    """PersistentVolumeClaim mounted at /workspace/results; rank 0 also writes results there.
    Multi-node runs need a ReadWriteMany claim, since every pod mounts it."""
    queue: str | None = None
    """Kueue LocalQueue name, set as the kueue.x-k8s.io/queue-name label on the workload."""
    priority_class: str | None = None
    """Pod priorityClassName."""
    active_deadline_s: int | None = 3600
    """Job only: seconds before the Job is failed however far it got. An hour bounds how long a
    hung run holds GPUs, while a full default sweep takes minutes; None means no deadline."""
    ttl_s: int | None = 86400
    """Job only: seconds a finished Job (and its pods' logs) stays before garbage collection; a
    day leaves time to run `results`, `logs` and `status` on it."""
    backoff_limit: int = 0
    """Job only: pod failures retried before the Job fails. 0: a benchmark whose rank died has no
    meaningful result, and a retry would hide a flaky node."""
    labels: tuple[tuple[str, str], ...] = ()
    """Extra labels on every object (the app.kubernetes.io/* ones are reserved)."""
    annotations: tuple[tuple[str, str], ...] = ()
    """Extra annotations on every object."""
    master_port: int
    """torchrun's rendezvous port, derived from the run id (see master_port_for) so that two
    host-network runs on the same nodes do not collide, and the same run renders the same port."""
    rendezvous_timeout_s: int = 900
    """Seconds torchrun waits for every pod to join. Pods start apart by image pulls of a
    multi-GB PyTorch image on cold nodes, which take minutes."""
    engine_args: tuple[str, ...] = ()
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


def _q(value: object) -> str:
    """Quote a user value for a one-line message (escapes newlines and quotes)."""
    return json.dumps(str(value))


_LABEL_FORM = (
    "a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter "
    "or digit, at most {n} characters)"
)


def _dns_label(flag: str, value: str, *, max_len: int = 63) -> str:
    if len(value) > max_len or not _DNS1123_LABEL.match(value):
        raise UsageError(f"{flag} {_q(value)}: expected {_LABEL_FORM.format(n=max_len)}", key=flag)
    return value


def _dns_subdomain(flag: str, value: str) -> str:
    if len(value) > 253 or not _DNS1123_SUBDOMAIN.match(value):
        raise UsageError(
            f"{flag} {_q(value)}: expected a DNS-1123 name (lowercase letters, digits, '-' and '.', "
            "at most 253 characters)",
            key=flag,
        )
    return value


def _is_qualified_name(key: str) -> bool:
    """Kubernetes' qualified name: an optional DNS subdomain prefix and '/', then a name."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.match(name))


def _label_pairs(
    flag: str, items: Sequence[str], *, what: str, check_value: bool = True
) -> tuple[tuple[str, str], ...]:
    """Parse `key=value` labels, node-selector terms or (check_value=False) annotations."""
    pairs: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq:
            raise UsageError(f"{flag} {_q(item)}: expected KEY=VALUE", key=flag)
        if not _is_qualified_name(key):
            raise UsageError(
                f"{flag} {_q(item)}: {_q(key)} is not a valid {what} key (expected [prefix/]name, "
                "name of letters, digits, '-', '_', '.', at most 63 characters)",
                key=flag,
            )
        if check_value and (len(value) > 63 or not _LABEL_VALUE.match(value)):
            raise UsageError(
                f"{flag} {_q(item)}: {_q(value)} is not a valid {what} value (expected at most 63 "
                "letters, digits, '-', '_', '.', starting and ending with a letter or digit)",
                key=flag,
            )
        pairs[key] = value
    return tuple(pairs.items())


def _env_pairs(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    pairs: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UsageError(f"--env {_q(item)}: expected KEY=VALUE", key="--env")
        if not _ENV_NAME.match(key):
            raise UsageError(
                f"--env {_q(item)}: {_q(key)} is not a valid variable name (expected letters, "
                "digits, '_', '-', '.', not starting with a digit)",
                key="--env",
            )
        if key in RESERVED_ENV:
            raise UsageError(
                f"--env {_q(item)}: {key} is set by nccl-k8s to wire the pods together; "
                f"expected another name (reserved: {', '.join(sorted(RESERVED_ENV))})",
                key="--env",
            )
        pairs[key] = value
    return tuple(pairs.items())


def parse_toleration(text: str) -> Toleration:
    """kubectl taint syntax: `key=value:Effect`, `key:Effect`, `key=value`, `key`."""
    form = "expected key=value:Effect, key:Effect, key=value or key (Effect: NoSchedule, PreferNoSchedule, NoExecute)"
    body, colon, effect_text = text.rpartition(":") if ":" in text else (text, "", "")
    effect: TaintEffect | None = None
    if colon:
        if effect_text not in get_args(TaintEffect):
            raise UsageError(f"--toleration {_q(text)}: {form}", key="--toleration")
        effect = cast(TaintEffect, effect_text)
    key, eq, value = body.partition("=")
    if not _is_qualified_name(key):
        raise UsageError(f"--toleration {_q(text)}: {form}", key="--toleration")
    if eq:
        if len(value) > 63 or not _LABEL_VALUE.match(value):
            raise UsageError(f"--toleration {_q(text)}: {form}", key="--toleration")
        return Toleration(key=key, operator="Equal", value=value, effect=effect)
    return Toleration(key=key, operator="Exists", effect=effect)


def _quantity(flag: str, value: str) -> str:
    match = _QUANTITY.match(value)
    if not match or float(match.group(1)) <= 0:
        raise UsageError(
            f"{flag} {_q(value)}: expected a positive Kubernetes quantity such as 500m, 4, 64Gi, 1G",
            key=flag,
        )
    return value


def parse_duration(flag: str, value: str) -> int:
    """Whole seconds from `90`, `90s`, `15m`, `2h`, `1d`."""
    match = _DURATION.match(value.strip())
    if not match:
        raise UsageError(
            f"{flag} {_q(value)}: expected a duration such as 90, 90s, 15m, 2h, 1d", key=flag
        )
    return int(match.group(1)) * _DURATION_UNITS[match.group(2)]


def _choice(flag: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise UsageError(f"{flag} {_q(value)}: expected one of {', '.join(choices)}", key=flag)
    return value


def _rdma_resources(items: Sequence[str]) -> tuple[tuple[str, int], ...]:
    out: dict[str, int] = {}
    for item in items:
        name, eq, count_text = item.partition("=")
        if not eq or "/" not in name or not _is_qualified_name(name):
            raise UsageError(
                f"--rdma-resource {_q(item)}: expected NAME=COUNT with an extended resource name "
                "such as rdma/ib=1",
                key="--rdma-resource",
            )
        if not count_text.isdigit() or int(count_text) < 1:
            raise UsageError(
                f"--rdma-resource {_q(item)}: expected a whole count >= 1 after '='",
                key="--rdma-resource",
            )
        out[name] = int(count_text)
    return tuple(out.items())


def _whole(flag: str, value: int | str, *, minimum: int = 1) -> int:
    """A whole number from the CLI (a string there, so a typo gets our one-line message)."""
    text = str(value).strip()
    try:
        number = int(text)
    except ValueError:
        raise UsageError(
            f"{flag} {_q(text)}: expected a whole number >= {minimum}", key=flag
        ) from None
    if number < minimum:
        raise UsageError(f"{flag} {number}: expected a whole number >= {minimum}", key=flag)
    return number


def _world(
    world_text: int | str | None, gpus_text: int | str | None, nodes_text: int | str | None
) -> tuple[int, int, int]:
    """Resolve world size, GPUs per node and nodes from the two or three the user gave."""
    gpus_per_node = _whole("--gpus-per-node", gpus_text) if gpus_text is not None else None
    world_size = _whole("--world-size", world_text) if world_text is not None else None
    nodes = _whole("--nodes", nodes_text) if nodes_text is not None else None
    g = gpus_per_node if gpus_per_node is not None else 8
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
        return world_size, g, world_size // g
    m = nodes or 0  # not None: both-None was refused above
    return m * g, g, m


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
            f"engine arguments {_q(' '.join(argv))}: not accepted", key="engine_args"
        ) from exc
    return tuple(argv)


def build_run_spec(
    *,
    world_size: int | str | None = None,
    gpus_per_node: int | str | None = None,
    nodes: int | str | None = None,
    run_id: str | None = None,
    namespace: str | None = None,
    image: str | None = None,
    engine: str = "zipapp",
    workload: str = "job",
    interval: str | None = None,
    scheduler: str | None = None,
    node_selector: Sequence[str] = (),
    toleration: Sequence[str] = (),
    spread: str = "required",
    gpu_resource: str = "nvidia.com/gpu",
    rdma_resource: Sequence[str] = (),
    network: str = "auto",
    host_network: bool = False,
    security: str | None = None,
    cpu: str | None = None,
    memory: str | None = None,
    shm_size: str | None = None,
    env: Sequence[str] = (),
    pvc: str | None = None,
    queue: str | None = None,
    priority_class: str | None = None,
    active_deadline: str | None = None,
    ttl: str | None = None,
    backoff_limit: int | str | None = None,
    label: Sequence[str] = (),
    annotation: Sequence[str] = (),
    rendezvous_timeout: str | None = None,
    engine_args: Sequence[str] = (),
    now: datetime.datetime | None = None,
) -> RunSpec:
    """Validate the CLI's values (named after its flags) into a RunSpec, or raise UsageError."""
    world, g, n = _world(world_size, gpus_per_node, nodes)

    if run_id is None:
        run_id = generate_run_id(now)
    _dns_label("--run-id", run_id, max_len=RUN_ID_MAX_LEN)
    if namespace is not None:
        _dns_label("--namespace", namespace)

    engine_mode = _choice("--engine", engine, get_args(EngineMode))
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
            f"--image {_q(image)}: expected an image reference such as {DEFAULT_IMAGE}",
            key="--image",
        )

    kind = _choice("--workload", workload, get_args(Workload))
    interval_s: int | None = None
    if kind == "statefulset":
        interval_s = parse_duration("--interval", interval) if interval is not None else 300
        for flag, given in (
            ("--active-deadline", active_deadline),
            ("--ttl", ttl),
            ("--backoff-limit", backoff_limit),
        ):
            if given is not None:
                raise UsageError(f"{flag}: applies to --workload job, not statefulset", key=flag)
        active_deadline_s: int | None = None
        ttl_s: int | None = None
        backoff = 0
    else:
        if interval is not None:
            raise UsageError(
                "--interval: applies to --workload statefulset, not job", key="--interval"
            )
        active_deadline_s = 3600
        if active_deadline is not None:
            active_deadline_s = parse_duration("--active-deadline", active_deadline) or None
        ttl_s = parse_duration("--ttl", ttl) if ttl is not None else 86400
        backoff = 0
        if backoff_limit is not None:
            backoff = _whole("--backoff-limit", backoff_limit, minimum=0)

    net = _choice("--network", network, get_args(Network))
    rdma = _rdma_resources(rdma_resource)
    if security is None:
        sec = "rdma" if net in ("ib", "roce") else "socket"
    else:
        sec = _choice("--security", security, get_args(Security))
    if sec == "rdma" and not rdma:
        why = f"--network {net} uses --security rdma" if security is None else "--security rdma"
        raise UsageError(
            f"{why}: expected --rdma-resource NAME=COUNT (e.g. rdma/ib=1) for the RDMA devices, "
            "or --security host|privileged where devices are reached otherwise",
            key="--rdma-resource",
        )

    if scheduler is not None:
        _dns_subdomain("--scheduler", scheduler)
    if priority_class is not None:
        _dns_subdomain("--priority-class", priority_class)
    if pvc is not None:
        _dns_subdomain("--pvc", pvc)
    if queue is not None and (len(queue) > 63 or not _LABEL_VALUE.match(queue) or not queue):
        raise UsageError(
            f"--queue {_q(queue)}: expected a Kueue LocalQueue name (a label value)", key="--queue"
        )
    if not _is_qualified_name(gpu_resource) or "/" not in gpu_resource:
        raise UsageError(
            f"--gpu-resource {_q(gpu_resource)}: expected an extended resource name such as nvidia.com/gpu",
            key="--gpu-resource",
        )

    labels = _label_pairs("--label", label, what="label")
    for key, _ in labels:
        if key in RESERVED_LABELS or key == LABEL_KUEUE_QUEUE:
            raise UsageError(
                f"--label {_q(key)}: set by nccl-k8s (use --run-id or --queue); expected another key",
                key="--label",
            )

    rdzv_s = 900
    if rendezvous_timeout is not None:
        rdzv_s = parse_duration("--rendezvous-timeout", rendezvous_timeout)
        if rdzv_s < 1:
            raise UsageError(
                f"--rendezvous-timeout {_q(rendezvous_timeout)}: expected at least 1s",
                key="--rendezvous-timeout",
            )

    return RunSpec(
        run_id=run_id,
        namespace=namespace,
        world_size=world,
        gpus_per_node=g,
        nodes=n,
        image=image,
        engine=cast(EngineMode, engine_mode),
        workload=cast(Workload, kind),
        interval_s=interval_s,
        scheduler_name=scheduler,
        node_selector=_label_pairs("--node-selector", node_selector, what="label"),
        tolerations=tuple(parse_toleration(t) for t in toleration),
        spread=cast(Spread, _choice("--spread", spread, get_args(Spread))),
        gpu_resource=gpu_resource,
        rdma_resources=rdma,
        network=cast(Network, net),
        host_network=host_network,
        security=cast(Security, sec),
        cpu=_quantity("--cpu", cpu) if cpu is not None else None,
        memory=_quantity("--memory", memory) if memory is not None else None,
        shm_size=_quantity("--shm-size", shm_size) if shm_size is not None else "8Gi",
        env=_env_pairs(env),
        pvc=pvc,
        queue=queue,
        priority_class=priority_class,
        active_deadline_s=active_deadline_s,
        ttl_s=ttl_s,
        backoff_limit=backoff,
        labels=labels,
        annotations=_label_pairs("--annotation", annotation, what="annotation", check_value=False),
        master_port=master_port_for(run_id),
        rendezvous_timeout_s=rdzv_s,
        engine_args=_engine_args(engine_args, world_size=world),
    )


__all__ = [
    "DEFAULT_IMAGE",
    "EngineMode",
    "Network",
    "RunSpec",
    "Security",
    "Spread",
    "Toleration",
    "Workload",
    "build_run_spec",
    "generate_run_id",
    "master_port_for",
    "parse_duration",
    "parse_toleration",
]
