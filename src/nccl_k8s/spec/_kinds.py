"""The optional kinds: every resource this tool reads or writes that a cluster may not serve,
one entry each (its API group, version, kind, plural and scope, where its CRD comes from, and
which option needs it).

Every reader takes its facts from here: the API client (one resource class per entry, which
gives each request's URL), `nccl-k8s rbac` and doctor's access review (api._access: the verbs
on each entry), doctor's checks that the cluster serves what the run needs, cleanup (it
deletes what the run created of every entry marked `created`), the debug bundle (it keeps
those objects), the install hint when a create is refused because the kind is not served
(api._translate) and the renderer (the apiVersion of what it writes).

The gang schedulers' PodGroups are derived from the gang table (spec.GANGS, which owns their
group, version and plural); the others are declared here. It lives in spec, below both the
Kubernetes layer and the gang table's option, and holds facts only (strings). A new custom
kind is one entry here plus, where unavoidable, its one use, and its CRD, verbatim, under
tests/data/crds (SOURCES.md), which tests/test_custom_kinds.py checks the entry against.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from nccl_k8s.spec._gangs import GANGS, GangScheduler

if TYPE_CHECKING:
    from nccl_k8s.spec._model import RunSpec

#: Whether the kind's objects live in a namespace (the CRD's `scope`).
Scope = Literal["Namespaced", "Cluster"]


@dataclasses.dataclass(frozen=True)
class Crd:
    """Where a kind's CustomResourceDefinition comes from: the vendor's repository and the file
    in it (the copy under tests/data/crds names the commit)."""

    project: str
    path: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class CustomKind:
    """One optional kind."""

    kind: str
    group: str
    version: str
    plural: str
    """The resource's plural: its URL and its CRD's name (`<plural>.<group>`)."""
    scope: Scope = "Namespaced"
    crd: Crd | None
    """Its CRD's source; None for a kind of a built-in API group of Kubernetes that a cluster
    serves from some version on (resource.k8s.io)."""
    created: bool
    """True: a run creates objects of it (deploy creates them, cleanup deletes them, the bundle
    keeps them, kubectl apply of `render`'s output needs get); False: it is only read."""
    flag: str
    """The option that makes the tool use it (`--pod-monitor`, `--gang volcano`); empty where
    no option does (read whenever the command looks, e.g. --platform auto's ResourceSlices)."""
    why: str
    """Which commands send which requests, and for what (`nccl-k8s rbac` prints it)."""
    install: str
    """What a user installs for the cluster to serve it (doctor's hint, a refused create's)."""
    used: Callable[[RunSpec], bool] = lambda spec: False
    """Does a run of this spec use it (doctor checks the cluster serves it)."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        """`podmonitors.monitoring.coreos.com`: the CRD's name, as doctor names it."""
        return f"{self.plural}.{self.group}"

    @property
    def hint(self) -> str:
        """What to do when the cluster does not serve it: `install Volcano, or deploy without
        --gang`."""
        return (
            f"{self.install}, or deploy without {self.flag.split()[0]}"
            if self.flag
            else self.install
        )

    @property
    def resource(self) -> str:
        """`podgroups.scheduling.volcano.sh/v1beta1`: the resource as doctor names it."""
        return f"{self.crd_name}/{self.version}"


_RUN_WRITES = "deploy creates it, sets its owner (patch), deletes it when the deploy fails"


def _gang(g: GangScheduler) -> CustomKind:
    """The PodGroup of a gang scheduler: its facts are the gang table's."""
    return CustomKind(
        kind=g.kind,
        group=g.group,
        version=g.version,
        plural=g.plural,
        crd=Crd(g.crd_project, g.crd_path),
        created=True,
        flag=f"--gang {g.name}",
        why=f"deploy --gang {g.name} creates the PodGroup ({_RUN_WRITES}); doctor, cleanup and "
        "bundle list them",
        install=f"install {g.shown}",
        used=lambda spec: spec.gang == g.name,
    )


#: --pod-monitor: the Prometheus Operator's PodMonitor.
POD_MONITOR = CustomKind(
    kind="PodMonitor",
    group="monitoring.coreos.com",
    version="v1",
    plural="podmonitors",
    crd=Crd(
        "prometheus-operator/prometheus-operator",
        "example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml",
    ),
    created=True,
    flag="--pod-monitor",
    why=f"deploy --pod-monitor creates the PodMonitor ({_RUN_WRITES}); doctor, cleanup and "
    "bundle list them",
    install="install the Prometheus Operator",
    used=lambda spec: spec.pod_monitor,
)
#: --compute-domain: NVIDIA's DRA driver's ComputeDomain (its CRD serves v1beta1).
COMPUTE_DOMAIN = CustomKind(
    kind="ComputeDomain",
    group="resource.nvidia.com",
    version="v1beta1",
    plural="computedomains",
    crd=Crd(
        "NVIDIA/k8s-dra-driver-gpu",
        "deployments/helm/dra-driver-nvidia-gpu/crds/resource.nvidia.com_computedomains.yaml",
    ),
    created=True,
    flag="--compute-domain",
    why=f"deploy --compute-domain creates the run's ComputeDomain ({_RUN_WRITES}); doctor, "
    "cleanup and bundle list them",
    install="install NVIDIA's DRA driver for GPUs (k8s-dra-driver-gpu)",
    used=lambda spec: spec.compute_domain,
)
#: --network-policy: the run's NetworkPolicy (built in: networking.k8s.io/v1 since Kubernetes
#: 1.7; whether it is enforced is the cluster's network plugin's). `used` is what the options
#: allow; whether this run renders one (not on the node's network) is the renderer's
#: (k8s.rendering.renders_network_policy), which the grants follow.
NETWORK_POLICY = CustomKind(
    kind="NetworkPolicy",
    group="networking.k8s.io",
    version="v1",
    plural="networkpolicies",
    crd=None,
    created=True,
    flag="--network-policy auto|on",
    why=f"deploy creates the run's NetworkPolicy ({_RUN_WRITES}; --network-policy off: none); "
    "doctor, cleanup and bundle list them",
    install="Kubernetes 1.7 or later (networking.k8s.io/v1)",
    used=lambda spec: spec.network_policy != "off",
)
#: --queue: Kueue's LocalQueue, only read (does the queue the Job names exist).
LOCAL_QUEUE = CustomKind(
    kind="LocalQueue",
    group="kueue.x-k8s.io",
    version="v1beta1",
    plural="localqueues",
    crd=Crd("kubernetes-sigs/kueue", "config/components/crd/bases/kueue.x-k8s.io_localqueues.yaml"),
    created=False,
    flag="--queue",
    why="deploy and doctor --queue: does the LocalQueue exist",
    install="install Kueue",
    used=lambda spec: spec.queue is not None,
)
#: --queue: Kueue's Topology (Topology Aware Scheduling: the node labels of each level), only read
#: (doctor says which topologies a queued run may be placed by).
TOPOLOGY = CustomKind(
    kind="Topology",
    group="kueue.x-k8s.io",
    version="v1beta2",
    plural="topologies",
    scope="Cluster",
    crd=Crd("kubernetes-sigs/kueue", "config/components/crd/bases/kueue.x-k8s.io_topologies.yaml"),
    created=False,
    flag="--queue",
    why="doctor --queue: the Topologies Kueue's Topology Aware Scheduling places by",
    install="install Kueue with Topology Aware Scheduling",
    used=lambda spec: spec.queue is not None,
)
#: Dynamic Resource Allocation's ResourceSlices (built in from Kubernetes 1.34, resource.k8s.io
#: v1): the DRA drivers' devices per node, read by --platform auto and doctor.
RESOURCE_SLICE = CustomKind(
    kind="ResourceSlice",
    group="resource.k8s.io",
    version="v1",
    plural="resourceslices",
    scope="Cluster",
    crd=None,
    created=False,
    flag="",
    why="--platform auto (deploy, doctor, nodes check): the DRA drivers' devices on each node; "
    "doctor's DRA-driver prerequisites and --compute-domain",
    install="Kubernetes 1.34 or later (resource.k8s.io/v1, Dynamic Resource Allocation)",
    used=lambda spec: spec.compute_domain,
)

#: Each --gang value's PodGroup.
GANG_KINDS: dict[str, CustomKind] = {name: _gang(g) for name, g in GANGS.items()}
#: Every optional kind: the gangs' PodGroups (from spec.GANGS), then the options' kinds.
CUSTOM_KINDS: tuple[CustomKind, ...] = (
    *GANG_KINDS.values(),
    POD_MONITOR,
    COMPUTE_DOMAIN,
    NETWORK_POLICY,
    LOCAL_QUEUE,
    TOPOLOGY,
    RESOURCE_SLICE,
)


def custom_kind(kind: str, api_version: str) -> CustomKind | None:
    """The table's entry of this kind and apiVersion, if any."""
    return next((k for k in CUSTOM_KINDS if k.kind == kind and k.api_version == api_version), None)


__all__ = [
    "COMPUTE_DOMAIN",
    "CUSTOM_KINDS",
    "GANG_KINDS",
    "LOCAL_QUEUE",
    "NETWORK_POLICY",
    "POD_MONITOR",
    "RESOURCE_SLICE",
    "TOPOLOGY",
    "Crd",
    "CustomKind",
    "Scope",
    "custom_kind",
]
