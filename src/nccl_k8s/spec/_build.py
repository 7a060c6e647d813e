"""build_run_spec: what the user typed -> a validated RunSpec, or one line saying what was expected."""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, cast, get_args

from nccl_k8s.errors import UsageError
from nccl_k8s.spec._model import (
    CPU_PER_GPU,
    DEFAULT_IMAGE,
    LABEL_KUEUE_QUEUE,
    MEMORY_PER_GPU,
    NETWORKS_ANNOTATION,
    NO_IBVERBS_REPOSITORIES,
    RDMA_IMAGE,
    RESERVED_LABELS,
    RUN_ID_MAX_LEN,
    EngineMode,
    Gang,
    Network,
    Qos,
    RunSpec,
    Security,
    Spread,
    Workload,
    generate_run_id,
    master_port_for,
)
from nccl_k8s.spec._options import (
    OPTION_BY_NAME,
)
from nccl_k8s.spec._values import (
    LABEL_VALUE,
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
        "node_names": tuple(dict.fromkeys(dns_subdomain("--node", n) for n in v.items("node"))),
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


#: Engine flags the deployer sets itself: the metrics port follows --metrics-port (the pods'
#: port and annotations must name the one the engine serves), the sweeps follow --workload.
_DEPLOY_SETS = {
    "--metrics-port": "the deploy option --metrics-port (the pods' containerPort and "
    "annotations follow it)",
}
_STATEFULSET_SETS = ("--sweeps", "--sweep-interval")


def _monitoring(v: _Given, kind: Workload, engine_args: Sequence[str]) -> dict[str, Any]:
    """--metrics-port and --pod-monitor, and the engine flags they and the workload own."""
    text = v.need("metrics_port")
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise UsageError(
            f"--metrics-port {quote(text)}: expected a TCP port, 1 to 65535, or 0 for none",
            key="--metrics-port",
        )
    pod_monitor = v.switch("pod_monitor")
    if pod_monitor and not port:
        raise UsageError(
            "--pod-monitor with --metrics-port 0: the PodMonitor scrapes the metrics port; "
            "expected a port",
            key="--pod-monitor",
        )
    for arg in engine_args:
        flag = str(arg).split("=", 1)[0]
        if flag in _DEPLOY_SETS:
            raise UsageError(
                f"engine arguments: {flag} is set by {_DEPLOY_SETS[flag]}", key="engine_args"
            )
        if flag in _STATEFULSET_SETS and kind == "statefulset":
            raise UsageError(
                f"engine arguments: {flag} is set by --workload statefulset (sweeps until "
                "stopped) and --interval (the pause between them)",
                key="engine_args",
            )
    from nccl_k8s.bench.config import parse_args

    if kind == "job" and parse_args([str(a) for a in engine_args]).sweeps == 0:
        raise UsageError(
            "engine arguments: --sweeps 0 sweeps until stopped, which a Job never is (its "
            "--active-deadline fails it): expected --workload statefulset for continuous sweeps",
            key="engine_args",
        )
    return {"metrics_port": port, "pod_monitor": pod_monitor}


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
    names = pod["node_names"]
    if names and pod["spread"] == "required" and len(names) < n:
        raise UsageError(
            f"--node {' --node '.join(names)}: {len(names)} node(s) for {n} pods, one per node "
            "(--spread required); expected at least as many --node as pods, or --spread none",
            key="--node",
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
        **_monitoring(v, kind, engine_args),
    )
