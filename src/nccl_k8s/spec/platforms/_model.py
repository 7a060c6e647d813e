"""What a platform entry is: the pieces a pod needs for NCCL to reach one platform's fabric.

A platform (EKS with EFA, GKE with GPUDirect-TCPXO, an InfiniBand cloud ...) is one `Platform`
value. It states, as the vendor's reference manifests do, what a pod of a run carries there:
extended resources and their counts per machine type, annotations, init containers and sidecars,
volumes, privileges, NCCL environment (or a vendor script to source), a default image, the node
labels, resources and DRA drivers that identify the platform's nodes, the prerequisites doctor
checks, and the fabric its NCCL logs must show. Every reader takes its facts from the entry:
the renderer (k8s.rendering._platform), `--platform auto` (`detect`), doctor's prerequisite checks
and diagnose's fabric gate. Facts only (strings, dicts as the API spells them); no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from nccl_k8s.fabrics import Fabric, member

#: A Kubernetes object or fragment as the API spells it (camelCase keys).
Obj = dict[str, Any]

#: The NCCL fabric preset a platform implies (RunSpec.network's values).
NetworkPreset = Literal["auto", "ib", "roce", "socket"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Instance:
    """A machine type the platform knows: what a node of it has, so `render` (which reads no
    cluster) can count the fabric devices a pod requests."""

    name: str
    """The node's `node.kubernetes.io/instance-type` label (p5.48xlarge, a3-megagpu-8g ...)."""
    gpus: int
    """GPUs per node."""
    devices: int
    """Fabric devices per node: the count of the platform's `resource` a whole-node pod
    requests (EFA interfaces, HCAs, GPU NICs)."""
    note: str = ""
    """Where the figure comes from (the vendor's table)."""
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """NCCL environment the vendor sets for this machine type only (the HCA list of its
    fabric ports, which differs per shape), over the platform's `env`; the user's --env wins."""
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Pod annotations that depend on the machine (GKE's networking.gke.io/interfaces names
    one interface per GPU NIC); they replace the platform's of the same key. A platform
    whose machines differ here needs the machine type (--instance-type, or the nodes')."""
    node_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Placement on the machine's nodes beyond the platform's (GKE A4X: kubernetes.io/arch
    arm64, whose taint GKE tolerates only for pods that select it)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Detect:
    """What marks a node as the platform's. A node matches when any one of these holds."""

    labels: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """Label key -> the values that mark it (an empty tuple: any value)."""
    resources: tuple[str, ...] = ()
    """Extended resources whose non-zero allocatable marks it (vpc.amazonaws.com/efa)."""
    drivers: tuple[str, ...] = ()
    """DRA drivers whose ResourceSlices on the node mark it."""


PrerequisiteKind = Literal["daemonset", "crd", "resource", "driver", "object"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Prerequisite:
    """One thing a run on the platform needs from the cluster that the API shows; doctor checks
    each and prints `hint` when it is missing."""

    kind: PrerequisiteKind
    """daemonset: a DaemonSet whose name contains `name` (Helm prefixes its release name,
    other installers add a suffix; any namespace unless `namespace`) with ready pods;
    crd: the CustomResourceDefinition `name`; resource: nodes with allocatable `name`;
    driver: ResourceSlices of the DRA driver `name`; object: an object `name` of `api` (for
    cluster-scoped kinds such as GKE's Network objects)."""
    name: str
    what: str
    """How doctor names it ("the EFA device plugin")."""
    hint: str
    """What to do when it is missing (a command, a doc link)."""
    namespace: str | None = None
    api: str | None = None
    """For kind object: `group/version/plural` of the object."""
    severity: Literal["fail", "warn"] = "fail"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Platform:
    """One platform: what its pods carry and how its nodes are recognised (see the module)."""

    name: str
    """The --platform value."""
    title: str
    """How messages name it ("Amazon EKS with EFA")."""
    fabric: Fabric | None
    """What its NCCL logs must show the run used (an entry of the fabric table,
    `nccl_k8s.fabrics`); None: no expectation (generic). The deploy's fabric gate and `diagnose
    --platform` judge a log against it with one rule (results.rules.gates.fabric_gate)."""
    network: NetworkPreset = "auto"
    """The --network preset the platform implies when the user gives none."""
    security: Literal["socket", "rdma", "host", "privileged"] | None = None
    """The --security profile the platform implies when the user gives none (None: the one the
    network preset implies)."""
    resource: str | None = None
    """The extended resource of the fabric devices, requested = limited per pod; its count comes
    from --rdma-resource, the instance type, or (--platform auto) the node's allocatable."""
    devices_per_pod: int | None = None
    """A count every pod requests whatever the machine and the node's allocatable, where the
    resource marks a node's fabric rather than counting its HCAs (CoreWeave's `rdma/ib: 1`
    "is used as a boolean"); None: the count follows the machine (see `resource`)."""
    per_gpu_devices: bool = False
    """Whether a pod with fewer GPUs than the node requests devices in proportion (True) or
    always the node's count (False)."""
    instances: tuple[Instance, ...] = ()
    """The machine types whose device count render knows."""
    detect: Detect = Detect()
    extra_resources: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Other resources per pod, requested = limited (hugepages-2Mi ...)."""
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Pod annotations (GKE's networking.gke.io/interfaces ...)."""
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """NCCL and provider environment; the user's --env wins."""
    source: str | None = None
    """A vendor script the container sources before the engine starts (it exports the NCCL
    environment the vendor tunes per machine), or None."""
    volumes: tuple[Obj, ...] = ()
    """Pod volumes the platform needs (host paths of its NCCL plugin, shared sockets ...)."""
    mounts: tuple[Obj, ...] = ()
    """The benchmark container's mounts of those volumes."""
    init_containers: tuple[Obj, ...] = ()
    """Init containers, run before the benchmark (a native sidecar has restartPolicy Always)."""
    sidecars: tuple[Obj, ...] = ()
    """Containers beside the benchmark (GKE's RxDM daemon). A Job's pod ends when its
    benchmark ends only if each sidecar is told to stop: prefer native sidecars in
    `init_containers`."""
    capabilities: tuple[str, ...] = ()
    """Linux capabilities the benchmark container adds (IPC_LOCK for RDMA memory pinning)."""
    privileged: bool = False
    """The benchmark container runs privileged (a vendor reference that requires it)."""
    host_network: bool = False
    """The pods share the node's network namespace (GKE TCPX)."""
    privilege_reason: str = ""
    """Why its pods need a privileged container or the node's network (`escalation`), from its
    vendor's reference: said when an explicit lesser --security is refused for the platform and
    when --platform auto does not choose it. Required where `escalation` is not empty."""
    node_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
    tolerations: tuple[Obj, ...] = ()
    image: str | None = None
    """The default image where the stock one cannot reach the fabric (None: the stock one)."""
    image_note: str = ""
    """Why that image (what it carries that the stock image lacks)."""
    prerequisites: tuple[Prerequisite, ...] = ()
    fallback: str = ""
    """What a run rendered for the platform most likely lacks when its logs show another fabric
    (said after "rendered for P, but ranks ... used NET/Socket: ")."""
    topology: tuple[str, ...] = ()
    """The node labels of the platform's network topology, coarse to fine (a domain of a later
    label lies inside one of an earlier label), as its vendor documents them; docs/topology.md
    lists each with its source. `--topology auto` places the pods by them (k8s.rendering.
    _topology)."""
    one_zone: bool = False
    """Every pod of a run must share one availability zone whatever --topology says: the
    fabric does not cross zones (EFA)."""
    devices_per_gpu: int | None = None
    """A count every pod requests per GPU it takes, whatever the machine (Together's
    `nvidia.com/rdma_ib`); None: see `devices_per_pod` and `resource`."""
    sources: tuple[str, ...] = ()
    """The vendor references the entry follows, each `repo@version path` or a URL with its date."""

    def __post_init__(self) -> None:
        # The table's member for a name, so a typo fails at import rather than at the gate.
        if self.fabric is not None and not isinstance(self.fabric, Fabric):
            object.__setattr__(self, "fabric", member(self.fabric))
        if self.escalation and not self.privilege_reason:
            raise ValueError(f"platform {self.name}: needs {self.escalation}: say why")

    @property
    def escalation(self) -> str:
        """What its pods need that no lesser --security gives: "a privileged container",
        "the node's network", both, or "" for nothing."""
        needs = [
            what
            for what, needed in (
                ("a privileged container", self.privileged or self.security == "privileged"),
                ("the node's network (hostNetwork)", self.host_network),
            )
            if needed
        ]
        return " and ".join(needs)

    def instance(self, name: str) -> Instance | None:
        return next((i for i in self.instances if i.name == name), None)

    @property
    def per_instance_annotations(self) -> bool:
        """Whether the pods' annotations depend on the machine type."""
        return any(i.annotations for i in self.instances)

    @property
    def brings_devices(self) -> bool:
        """Whether the entry itself gives the pods their fabric devices: an extended resource,
        or the platform's network annotations (GKE's GPU NICs come with multi-networking)."""
        return self.resource is not None or bool(self.annotations) or self.per_instance_annotations

    def pod_annotations(self, instance_type: str | None) -> dict[str, str]:
        """The pod annotations on `instance_type`'s machines: the platform's, the machine's over
        them."""
        instance = self.instance(instance_type) if instance_type else None
        return {**self.annotations, **(instance.annotations if instance else {})}

    def pod_node_selector(self, instance_type: str | None) -> dict[str, str]:
        """The node selector on `instance_type`'s machines: the platform's and the machine's."""
        instance = self.instance(instance_type) if instance_type else None
        return {**self.node_selector, **(instance.node_selector if instance else {})}


#: Kubernetes' well-known zone label (kubernetes.io/docs/reference/labels-annotations-taints/).
ZONE_LABEL = "topology.kubernetes.io/zone"

#: NVIDIA Topograph's labels (NVIDIA/topograph v1.0.0, aab33e18e83ee3bc88794d001caa16954850f0b4,
#: docs/reference/node-labels.md): fabric tier 0 is the switch closest to the node, each higher
#: tier the next one outward ("no fixed maximum depth"; three tiers listed here, as its NVSentinel
#: example does); the accelerator domain is the NVLink domain. Coarse to fine.
TOPOGRAPH_LABELS = (
    "fabric.topograph.run/tier-2",
    "fabric.topograph.run/tier-1",
    "fabric.topograph.run/tier-0",
    "accelerator.topograph.run/domain",
)

__all__ = [
    "TOPOGRAPH_LABELS",
    "ZONE_LABEL",
    "Detect",
    "Instance",
    "NetworkPreset",
    "Obj",
    "Platform",
    "Prerequisite",
    "PrerequisiteKind",
]
