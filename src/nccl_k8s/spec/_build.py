"""build_run_spec: what the user typed -> a validated RunSpec, or one line saying what was expected.

Each option's value is parsed by its own entry (the RunSpec field that declares it: flag,
parser, default; spec/_model.py), in table order. What is left here are the facts between
options: the run size from two of three numbers, defaults that depend on other options (run id,
security, image, CPU and memory), options that apply to one workload only (the entries'
`only_with`), and the checks that read several options at once.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from nccl_k8s.errors import UsageError
from nccl_k8s.spec._model import (
    CPU_PER_GPU,
    DEFAULT_IMAGE,
    MEMORY_PER_GPU,
    NETWORKS_ANNOTATION,
    NO_IBVERBS_REPOSITORIES,
    OPTION_BY_NAME,
    OPTIONS,
    RDMA_IMAGE,
    RunSpec,
    generate_run_id,
    master_port_for,
)
from nccl_k8s.spec._options import Option
from nccl_k8s.spec._values import (
    bytes_quantity,
    cpu_quantity,
    quantity_value,
    quote,
)
from nccl_k8s.spec.platforms import PLATFORMS, Instance, Platform

#: What build_run_spec works on: RunSpec field -> value so far.
Fields = dict[str, Any]


def _parse(values: dict[str, object]) -> tuple[Fields, set[str]]:
    """Every option parsed by its entry: the value given, else the entry's default, else None
    (an empty tuple for a list, False for a switch); and the names of the options given."""
    unknown = sorted(set(values) - set(OPTION_BY_NAME))
    if unknown:
        raise TypeError(f"build_run_spec: unknown option(s) {', '.join(unknown)}")
    given = {k: v for k, v in values.items() if v is not None and v is not False}
    return {o.field: _parse_one(o, given.get(o.name, o.default)) for o in OPTIONS}, set(given)


def _parse_one(opt: Option, raw: object) -> Any:
    if opt.kind == "switch" or opt.parse is None:
        return bool(raw)
    if opt.kind == "list":
        items = raw if isinstance(raw, list | tuple) else () if raw is None else (raw,)
        return opt.parse(opt.flag, [str(v) for v in items])
    return None if raw is None else opt.parse(opt.flag, str(raw))


def _size(f: Fields, given: set[str]) -> None:
    """Resolve world size, GPUs per node and nodes from the two or three the user gave."""
    world_size, g, nodes = f["world_size"], f["gpus_per_node"], f["nodes"]
    g_text = (
        f" --gpus-per-node {g}"
        if "gpus_per_node" in given
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
        size = _fits(world_size, g, world_size // g, f"--world-size {world_size}{g_text}")
    else:
        size = _fits(nodes * g, g, nodes, f"--nodes {nodes}{g_text}")
    f["world_size"], f["gpus_per_node"], f["nodes"] = size


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


#: `--min-busbw auto` (deploy, render, nodes check): the expected floor of the run's platform,
#: resolved where the platform is known (results.floors.with_floor); a number until then.
MIN_BUSBW_AUTO = "auto"
_MIN_BUSBW = "--min-busbw"


def min_busbw_auto_at(args: Sequence[str]) -> int | None:
    """The index of the `auto` value of --min-busbw among engine arguments, or None."""
    for i, a in enumerate(args):
        if a == f"{_MIN_BUSBW}={MIN_BUSBW_AUTO}":
            return i
        if a == MIN_BUSBW_AUTO and i > 0 and args[i - 1] == _MIN_BUSBW:
            return i
    return None


def engine_numeric(args: Sequence[str]) -> list[str]:
    """Engine arguments as the engine's parser takes them: `--min-busbw auto`'s value a number."""
    at = min_busbw_auto_at(args)
    out = [str(a) for a in args]
    if at is not None:
        out[at] = "0" if out[at] == MIN_BUSBW_AUTO else f"{_MIN_BUSBW}=0"
    return out


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
        config = parse_args(engine_numeric(argv))
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


def _only_with(f: Fields, given: set[str]) -> None:
    """Options that apply with one value of another (the Job's deadline and TTL, the
    StatefulSet's interval): refused when given otherwise, else unset."""
    for opt in OPTIONS:
        if opt.only_with is None:
            continue
        other, value = opt.only_with
        have = f[OPTION_BY_NAME[other].field]
        if have != value:
            if opt.name in given:
                raise UsageError(
                    f"{opt.flag}: applies to {OPTION_BY_NAME[other].flag} {value}, not {have}",
                    key=opt.flag,
                )
            f[opt.field] = None


def _platform(f: Fields, given: set[str] | frozenset[str], devices: int | None = None) -> None:
    """The platform's defaults, each only where the user gave none: its network preset, its
    privilege profile, its image, and its fabric devices per pod (from `devices`, read off the
    nodes, else the machine type's table; a --rdma-resource of the same name wins)."""
    platform = PLATFORMS.get(f["platform"])
    if platform is None:  # auto, not resolved yet: generic until then
        return
    if "network" not in given and platform.network != "auto":
        f["network"] = platform.network
    if "security" not in given and platform.security is not None:
        f["security"] = platform.security
    if "security" in given and platform.escalation and f["security"] != "privileged":
        raise UsageError(
            f"--security {f['security']} --platform {platform.name}: its pods need "
            f"{platform.escalation} ({platform.privilege_reason}); expected --security "
            "privileged, or no --security",
            key="--security",
        )
    if "image" not in given and platform.image is not None:
        f["image"] = platform.image
    # An unknown machine type is refused wherever the platform's table matters: its devices,
    # its per-machine annotations or NCCL environment.
    instance = _instance(platform, f) if platform.instances else None
    if platform.resource is None or any(k == platform.resource for k, _ in f["rdma_resources"]):
        return
    if platform.devices_per_pod is not None:
        count: int | None = platform.devices_per_pod
    elif platform.devices_per_gpu is not None:
        count = platform.devices_per_gpu * f["gpus_per_node"]
    else:
        count = devices if devices is not None else _instance_devices(platform, instance, f)
    if count:
        f["rdma_resources"] = (*f["rdma_resources"], (platform.resource, count))


def _instance(platform: Platform, f: Fields) -> Instance | None:
    """--instance-type's machine in the platform's table (None when not given); one the table
    lacks is refused where the platform's pieces depend on the machine."""
    name = f["instance_type"]
    if name is None:
        return None
    return _known_instance(platform, name)


def _instance_devices(platform: Platform, instance: Instance | None, f: Fields) -> int | None:
    """The fabric devices a pod requests on --instance-type's machines, None when not given."""
    if instance is None:
        return None
    if not platform.per_gpu_devices:
        return instance.devices
    gpus: int = f["gpus_per_node"]
    return max(1, instance.devices * gpus // instance.gpus)


def _known_instance(platform: Platform, name: str) -> Instance:
    """The platform's machine type `name`, or UsageError naming the ones it knows."""
    instance = platform.instance(name)
    if instance is None:
        known = ", ".join(i.name for i in platform.instances) or "none"
        other = f", or --rdma-resource {platform.resource}=COUNT" if platform.resource else ""
        raise UsageError(
            f"--instance-type {quote(name)} --platform {platform.name}: not a machine type "
            f"{platform.name} knows (known: {known}); expected one of them{other}",
            key="--instance-type",
        )
    return instance


def _security(f: Fields, given: set[str] | frozenset[str]) -> None:
    """The privilege profile: given, else the least the fabric needs; RDMA needs its devices
    (a platform's come with its entry once their count is known: see `missing_devices`)."""
    if f["security"] is None:
        f["security"] = "rdma" if f["network"] in ("ib", "roce") else "socket"
    platform = PLATFORMS.get(f["platform"])
    if platform is not None and platform.brings_devices:
        return  # a platform's devices come with its entry (a resource, or GKE's networks)
    if f["security"] == "rdma" and not f["rdma_resources"]:
        why = (
            "--security rdma"
            if "security" in given
            else f"--network {f['network']} uses --security rdma"
        )
        raise UsageError(
            f"{why}: expected --rdma-resource NAME=COUNT (e.g. rdma/ib=1) for the RDMA devices, "
            "or --security host|privileged where devices are reached otherwise",
            key="--rdma-resource",
        )


def missing_devices(spec: RunSpec) -> str | None:
    """What a spec for a platform cannot know without the nodes: the machine type, where the
    pods' annotations depend on it, and the count of its fabric devices, when neither
    --instance-type nor --rdma-resource gave it; None when known."""
    platform = PLATFORMS.get(spec.platform)
    if platform is None:
        return None
    known = ", ".join(i.name for i in platform.instances)
    if platform.per_instance_annotations and platform.instance(spec.instance_type or "") is None:
        return (
            f"--platform {platform.name}: the pods' annotations (the network interfaces of "
            f"its GPU NICs) depend on the machine; expected --instance-type TYPE ({known})"
        )
    if platform.resource is None or platform.devices_per_pod is not None:
        return None
    if platform.devices_per_gpu is not None or any(
        k == platform.resource for k, _ in spec.rdma_resources
    ):
        return None
    types = f"--instance-type TYPE ({known})" if known else "--instance-type TYPE"
    return (
        f"--platform {platform.name}: how many {platform.resource} devices a pod requests "
        f"depends on the machine; expected {types} or --rdma-resource {platform.resource}=COUNT"
    )


def with_platform(
    spec: RunSpec, platform: str, *, devices: int | None = None, instance_type: str | None = None
) -> RunSpec:
    """`spec` for `platform` (what --platform auto chose, or the nodes' device count for a named
    one): the defaults that follow the platform derived again, every option the user gave kept."""
    f: Fields = {fld.name: getattr(spec, fld.name) for fld in dataclasses.fields(spec)}
    for name in ("network", "security", "image"):
        if name not in spec.given:
            opt = OPTION_BY_NAME[name]
            f[opt.field] = _parse_one(opt, opt.default)
    f["platform"] = platform
    if instance_type is not None and "instance_type" not in spec.given:
        f["instance_type"] = instance_type
    _platform(f, spec.given, devices)
    _security(f, spec.given)
    _image(f)
    return RunSpec(**f)


def _image(f: Fields) -> None:
    """The image: given, else one that can use the fabric; never one known to lack it."""
    network, image = f["network"], f["image"]
    rdma = network in ("ib", "roce")
    if image is None:
        if f["engine"] == "image":
            raise UsageError(
                "--engine image: expected --image naming an image with nccl-k8s installed "
                f"(the default {DEFAULT_IMAGE} has only torch)",
                key="--image",
            )
        f["image"] = RDMA_IMAGE if rdma else DEFAULT_IMAGE
        return
    repository = image.split("@")[0].rsplit(":", 1)[0] if "/" in image else image
    if rdma and repository in NO_IBVERBS_REPOSITORIES:
        raise UsageError(
            f"--image {quote(image)} --network {network}: the pytorch/pytorch images carry no "
            f"libibverbs (rdma-core), so NCCL cannot open an HCA; expected an image with "
            f"rdma-core, e.g. {RDMA_IMAGE} (the default for --network {network})",
            key="--image",
        )


def _placement(f: Fields) -> None:
    """Multus networks set once; pinned nodes enough for one pod each when spread is required."""
    annotations = f["annotations"] + f["pod_annotations"]
    if f["network_attachments"] and any(k == NETWORKS_ANNOTATION for k, _ in annotations):
        raise UsageError(
            f"--network-attachment and an annotation {NETWORKS_ANNOTATION}: both set the pods' "
            "Multus networks; expected one of them",
            key="--network-attachment",
        )
    names, n = f["node_names"], f["nodes"]
    if names and f["spread"] == "required" and len(names) < n:
        raise UsageError(
            f"--node {' --node '.join(names)}: {len(names)} node(s) for {n} pods, one per node "
            "(--spread required); expected at least as many --node as pods, or --spread none",
            key="--node",
        )


def _resources(f: Fields) -> None:
    """CPU and memory per pod: given, else sized per GPU; memory always above /dev/shm, which
    the kernel charges to the pod's memory cgroup (a tmpfs page is the pod's memory)."""
    gpus, shm = f["gpus_per_node"], f["shm_size"]
    if f["cpu"] is None:
        f["cpu"] = cpu_quantity(CPU_PER_GPU * gpus)
    memory = f["memory"]
    if memory is None:
        f["memory"] = bytes_quantity(quantity_value(MEMORY_PER_GPU) * gpus + quantity_value(shm))
    elif quantity_value(memory) <= quantity_value(shm):
        at_least = bytes_quantity(quantity_value(shm) + Fraction(2**30))
        raise UsageError(
            f"--memory {memory}: not more than --shm-size {shm}, and /dev/shm counts against "
            f"the pod's memory limit; expected more (at least {at_least}), or a smaller "
            "--shm-size",
            key="--memory",
        )


#: Engine flags the deployer sets itself: the metrics port follows --metrics-port (the pods'
#: port and annotations must name the one the engine serves), the GPUs a rank must see follow
#: --gpus-per-node, the sweeps follow --workload.
_DEPLOY_SETS = {
    "--gpus-requested": "the deploy option --gpus-per-node (the GPUs each pod asks for)",
    "--metrics-port": "the deploy option --metrics-port (the pods' containerPort and "
    "annotations follow it)",
}
_STATEFULSET_SETS = ("--sweeps", "--sweep-interval")


def _monitoring(f: Fields, engine_args: Sequence[str]) -> None:
    """--pod-monitor needs a metrics port; the engine flags the deploy options and the workload
    own are refused among the engine arguments."""
    kind = f["workload"]
    if f["pod_monitor"] and not f["metrics_port"]:
        raise UsageError(
            "--pod-monitor with --metrics-port 0: the PodMonitor scrapes the metrics port; "
            "expected a port",
            key="--pod-monitor",
        )
    if f["metrics_from"] and f["network_policy"] == "off":
        raise UsageError(
            "--metrics-from with --network-policy off: it says who the NetworkPolicy lets reach "
            "the metrics port; expected --network-policy auto or on",
            key="--metrics-from",
        )
    if f["metrics_from"] and not f["metrics_port"]:
        raise UsageError(
            "--metrics-from with --metrics-port 0: there is no metrics port to let anyone "
            "reach; expected a port",
            key="--metrics-from",
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

    if kind == "job" and parse_args(engine_numeric(engine_args)).sweeps == 0:
        raise UsageError(
            "engine arguments: --sweeps 0 sweeps until stopped, which a Job never is (its "
            "--active-deadline fails it): expected --workload statefulset for continuous sweeps",
            key="engine_args",
        )


def build_run_spec(
    *,
    engine_args: Sequence[str] = (),
    now: datetime.datetime | None = None,
    **values: object,
) -> RunSpec:
    """Validate the options' values (keyed by `Option.name`, as typed: strings, lists of
    strings, bools) into a RunSpec, or raise UsageError naming the value and the expected form.
    Absent options (or None) take their table default (OPTIONS)."""
    f, given = _parse(values)
    _size(f, given)
    if f["run_id"] is None:
        f["run_id"] = generate_run_id(now)
    _only_with(f, given)
    _platform(f, given)
    _security(f, given)
    _image(f)
    _placement(f)
    _resources(f)
    checked_args = _engine_args(engine_args, world_size=f["world_size"])
    _monitoring(f, engine_args)
    when = now or datetime.datetime.now(datetime.timezone.utc)
    since = int(when.timestamp()) - f["healthy_within_s"] if f["healthy_only"] else None
    return RunSpec(
        **f,
        healthy_since=since,
        master_port=master_port_for(f["run_id"]),
        engine_args=checked_args,
        given=frozenset(given),
    )
