"""The deploy options, declared once: flag, help, metavar, panel and default of each. build_run_spec
reads them by name; the CLI derives its options from the same entries."""

from __future__ import annotations

import dataclasses
from typing import Literal

OptionKind = Literal["value", "list", "switch"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Option:
    """One deploy option, declared once. `build_run_spec` reads the user's value under `name`
    (and falls back to `default`); the CLI derives its flag, help, metavar, panel and the default
    it shows from the same entry, so the two cannot drift apart."""

    name: str
    """Keyword of build_run_spec and parameter name of the CLI commands."""
    flags: tuple[str, ...]
    """Command-line spellings, long first (`--namespace`, `-n`)."""
    help: str
    panel: str
    """The --help section it is listed in."""
    metavar: str = ""
    """What the value looks like in --help: N, SIZE, DURATION, QUANTITY, KEY=VALUE ..."""
    kind: OptionKind = "value"
    """value: one string; list: repeatable, a list of strings; switch: a flag (bool)."""
    default: str | None = None
    """The default as a user would type it; used when the option is absent and shown in --help.
    None: absent means unset (or a default that depends on other options: `default_note`)."""
    default_note: str | None = None
    """What --help says the default is when `default` is None."""

    @property
    def flag(self) -> str:
        return self.flags[0]

    @property
    def shown_default(self) -> str | None:
        return self.default if self.default is not None else self.default_note


SHAPE = "Run shape"
PODS = "Pods"
NETWORK = "Network and privilege"
LIFETIME = "Lifetime"
METADATA = "Metadata"
MONITORING = "Monitoring"

#: Every deploy option (`render` and `deploy` take them all), in --help order per panel.
OPTIONS: tuple[Option, ...] = (
    Option(name="world_size", flags=("--world-size",), metavar="N", panel=SHAPE,
           help="Total ranks (GPUs); a multiple of --gpus-per-node."),
    Option(name="gpus_per_node", flags=("--gpus-per-node",), metavar="N", panel=SHAPE, default="8",
           help="GPUs (ranks) per pod, one pod per node."),
    Option(name="nodes", flags=("--nodes",), metavar="N", panel=SHAPE,
           help="Pods (nodes), instead of --world-size."),
    Option(name="workload", flags=("--workload",), metavar="job|statefulset", panel=SHAPE,
           default="job", help="job: one sweep; statefulset: continuous sweeps."),
    Option(name="interval", flags=("--interval",), metavar="DURATION", panel=SHAPE,
           default_note="5m with statefulset",
           help="statefulset: pause between sweeps, e.g. 300, 5m. Frequent enough to catch a "
           "degrading link within minutes, sparse enough to leave the fabric to real work."),
    Option(name="run_id", flags=("--run-id",), metavar="ID", panel=METADATA,
           default_note="nccl-<time>-<hex>", help="Run name (a DNS-1123 label)."),
    Option(name="namespace", flags=("--namespace", "-n"), metavar="NAME", panel=METADATA,
           default_note="the kubeconfig context's", help="Target namespace."),
    Option(name="label", flags=("--label",), metavar="KEY=VALUE", kind="list", panel=METADATA,
           help="Label on every object (repeatable)."),
    Option(name="annotation", flags=("--annotation",), metavar="KEY=VALUE", kind="list",
           panel=METADATA, help="Annotation on every object (repeatable)."),
    Option(name="pod_annotation", flags=("--pod-annotation",), metavar="KEY=VALUE", kind="list",
           panel=METADATA,
           help="Annotation on the pods only, e.g. a Multus network or a mesh opt-out "
           "(repeatable)."),
    Option(name="image", flags=("--image",), metavar="IMAGE", panel=PODS,
           default_note="a pinned pytorch/pytorch image; for ib/roce a pinned NGC PyTorch image "
           "(it has libibverbs)", help="Container image."),
    Option(name="engine", flags=("--engine",), metavar="zipapp|image", panel=PODS,
           default="zipapp",
           help="zipapp: ship the engine in a ConfigMap; image: the image has nccl-k8s installed."),
    Option(name="scheduler", flags=("--scheduler",), metavar="NAME", panel=PODS,
           default_note="the cluster's default scheduler",
           help="Pod schedulerName, e.g. hami-scheduler."),
    Option(name="node_selector", flags=("--node-selector",), metavar="KEY=VALUE", kind="list",
           panel=PODS, help="Node label the pods require (repeatable)."),
    Option(name="node", flags=("--node",), metavar="NAME", kind="list", panel=PODS,
           help="Run only on these nodes, by node name (repeatable; node affinity on "
           "metadata.name)."),
    Option(name="toleration", flags=("--toleration",), metavar="KEY[=VALUE][:EFFECT]",
           kind="list", panel=PODS, help="Taint the pods tolerate (repeatable)."),
    Option(name="spread", flags=("--spread",), metavar="required|preferred|none", panel=PODS,
           default="required", help="One pod per node: required, preferred or none."),
    Option(name="gpu_resource", flags=("--gpu-resource",), metavar="NAME", panel=PODS,
           default="nvidia.com/gpu", help="Extended resource name of a GPU."),
    Option(name="cpu", flags=("--cpu",), metavar="QUANTITY", panel=PODS,
           default_note="2 per GPU",
           help="CPU request per pod, e.g. 16, 500m (no limit unless --qos guaranteed: limits "
           "throttle NCCL's proxy threads)."),
    Option(name="memory", flags=("--memory",), metavar="QUANTITY", panel=PODS,
           default_note="4Gi per GPU + --shm-size",
           help="Memory request = limit per pod, e.g. 64Gi; /dev/shm counts against it, so it "
           "must exceed --shm-size."),
    Option(name="qos", flags=("--qos",), metavar="burstable|guaranteed", panel=PODS,
           default="burstable",
           help="guaranteed: CPU limit = request too (exclusive cores under the static CPU "
           "manager; the recommendation on dedicated GPU nodes)."),
    Option(name="shm_size", flags=("--shm-size",), metavar="QUANTITY", panel=PODS, default="8Gi",
           help="Size of /dev/shm (NCCL's shared-memory transport; the runtime's 64Mi is too "
           "small for 8 GPUs)."),
    Option(name="env", flags=("--env",), metavar="KEY=VALUE", kind="list", panel=PODS,
           help="Environment variable in every pod; beats the presets (repeatable)."),
    Option(name="pvc", flags=("--pvc",), metavar="CLAIM", panel=PODS,
           help="PersistentVolumeClaim mounted at /workspace/results."),
    Option(name="network", flags=("--network",), metavar="auto|ib|roce|socket", panel=NETWORK,
           default="auto", help="The NCCL fabric preset (auto lets NCCL choose)."),
    Option(name="rdma_resource", flags=("--rdma-resource",), metavar="NAME=COUNT", kind="list",
           panel=NETWORK, help="RDMA device resource per pod, e.g. rdma/ib=1 (repeatable)."),
    Option(name="network_attachment", flags=("--network-attachment",), metavar="NAME[,NAME]",
           kind="list", panel=NETWORK,
           help="Multus network attachment(s) of the pods ([namespace/]name[@interface]), e.g. "
           "an SR-IOV network (repeatable)."),
    Option(name="host_network", flags=("--host-network",), kind="switch", panel=NETWORK,
           help="Run pods in the node's network namespace (the rendezvous port becomes a "
           "hostPort)."),
    Option(name="security", flags=("--security",), metavar="socket|rdma|host|privileged",
           panel=NETWORK, default_note="rdma for ib/roce, else socket",
           help="Privilege profile (docs/deploy.md lists what each needs)."),
    Option(name="queue", flags=("--queue",), metavar="NAME", panel=LIFETIME,
           help="Kueue LocalQueue name."),
    Option(name="gang", flags=("--gang",), metavar="volcano|coscheduling", panel=LIFETIME,
           help="Gang-schedule the pods (all or none) with a PodGroup of Volcano or of the "
           "scheduler-plugins coscheduling plugin."),
    Option(name="priority_class", flags=("--priority-class",), metavar="NAME", panel=LIFETIME,
           help="Pod priorityClassName."),
    Option(name="active_deadline", flags=("--active-deadline",), metavar="DURATION",
           panel=LIFETIME, default="1h",
           help="job: fail after this long however far it got (0 = never); bounds how long a "
           "hung run holds GPUs."),
    Option(name="ttl", flags=("--ttl",), metavar="DURATION", panel=LIFETIME, default="1d",
           help="job: delete it this long after it finished (time for results, logs, status)."),
    Option(name="rendezvous_timeout", flags=("--rendezvous-timeout",), metavar="DURATION",
           panel=LIFETIME, default="15m",
           help="How long pods wait for each other (cold nodes pull a multi-GB image first)."),
    Option(name="metrics_port", flags=("--metrics-port",), metavar="PORT", panel=MONITORING,
           default="8080",
           help="Port each pod serves Prometheus metrics on (a named containerPort `metrics` "
           "and the prometheus.io/* annotations; 0: none). docs/metrics.md lists the metrics."),
    Option(name="pod_monitor", flags=("--pod-monitor",), kind="switch", panel=MONITORING,
           help="Also create a Prometheus Operator PodMonitor (monitoring.coreos.com/v1) that "
           "scrapes the run's pods."),
)  # fmt: skip

OPTION_BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
