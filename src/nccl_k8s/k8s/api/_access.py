"""The permissions this tool uses: one table of every (API group, resource, verb) its requests
need, read by `nccl-k8s rbac` (the Role and ClusterRoles it prints, rendering._rbac) and by
doctor (a SelfSubjectAccessReview per entry, preflight._access).

Each entry says where it applies (`scope`: the run's namespace, or the cluster) and which part of
the tool needs it (`feature`): "run" is every command about a run (deploy, wait, status, list,
logs, results, cleanup, bundle, doctor and doctor --run); the others are granted only when asked
(`nccl-k8s rbac --render-apply`, `--cluster-reads`, `--create-namespace`, `--label-nodes`,
`--remove-schedule`): "render-apply" is the namespace's, "remove-schedule" both (the CronJob in
the namespace, the schedule's ClusterRole, binding and admission policy at the cluster scope),
the others the cluster's. `tests/test_rbac.py`
runs the commands on the test cluster as a user bound to exactly what `rbac` prints, records
every request, and fails when a request is missing here or an entry is never used: add the
entry with the request, in the same commit. The optional kinds' entries (PodGroups, PodMonitor,
ComputeDomain, LocalQueue, ResourceSlice ...) are derived from spec.CUSTOM_KINDS: verbs from
whether a run creates the kind, the option from the entry's flag.

Pure data: importing this module loads no client (the `rbac` command works without the extra).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from nccl_k8s.spec import CUSTOM_KINDS
from nccl_k8s.spec.platforms import PLATFORMS

Scope = Literal["namespace", "cluster"]
#: Which part of the tool needs an entry; "run" ones make the namespace's Role.
Feature = Literal[
    "run", "render-apply", "cluster-reads", "create-namespace", "label-nodes", "remove-schedule"
]
FEATURES: tuple[Feature, ...] = (
    "run",
    "render-apply",
    "cluster-reads",
    "create-namespace",
    "label-nodes",
    "remove-schedule",
)


@dataclasses.dataclass(frozen=True)
class Access:
    """Verbs on one resource (`pods/log` for a subresource) of one API group ("" is core)."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    why: str
    """Which commands send these requests, and for what."""
    scope: Scope = "namespace"
    feature: Feature = "run"
    optional: str = ""
    """Non-empty: only runs with this option send these requests, and doctor asks about them
    only for such a run: `--gang NAME`, `--pod-monitor`, `--queue`, `--scheduler/--gang`;
    RENDER_APPLY: no command sends them, `kubectl apply` of `render`'s output does."""

    @property
    def qualified(self) -> str:
        """`jobs.batch`, `pods/log`, as kubectl and the API server's messages name it."""
        base, _, sub = self.resource.partition("/")
        name = f"{base}.{self.group}" if self.group else base
        return f"{name}/{sub}" if sub else name


def _platform_objects() -> dict[tuple[str, str], list[str]]:
    """(API group, plural) of every cluster-scoped object a platform's doctor prerequisites
    read (spec.platforms, `object` kind: `group/version/plural`), and the platforms."""
    found: dict[tuple[str, str], list[str]] = {}
    for platform in PLATFORMS.values():
        for p in platform.prerequisites:
            if p.kind == "object" and p.api is not None:
                key = (p.api.split("/")[0], p.api.split("/")[-1])
                if platform.name not in found.setdefault(key, []):
                    found[key].append(platform.name)
    return found


#: The `optional` of doctor's domain-fit read: a run of more than one pod with a topology level
#: (--topology, the platform's, eks-efa's zone, --compute-domain's clique: preflight._domainfit).
DOMAIN_FIT = "--topology/--placement"

_RUN_WRITES = "deploy creates it, sets its owner (patch), deletes it when the deploy fails"

#: The `optional` of the entries a user needs to apply `render`'s output with kubectl (which
#: gets each object, then creates or patches it) beyond what deploy needs: its adoption objects
#: (rendering._adopt) and get on every kind. RBAC's escalation rule asks the same of whoever
#: creates the run's Role: it must hold the get and patch that Role grants.
RENDER_APPLY = "render | kubectl apply"
_APPLY_WHY = "kubectl apply of render's output (get, then create or patch)"
_ADOPTION_WHY = (
    "a rendered run's adoption objects: kubectl apply of render's output creates them (get, "
    "create, patch); cleanup deletes them"
)

#: The ServiceAccount, Role and RoleBinding a schedule has are listed and deleted with the
#: "run" entries (a rendered run's adoption objects are the same kinds).
_UNSCHEDULE_WHY = (
    "cleanup --schedule NAME lists by the schedule's label and deletes what `nodes schedule` "
    "printed"
)

ACCESS: tuple[Access, ...] = (
    Access(
        "",
        "configmaps",
        ("create", "delete", "get", "list", "patch"),
        f"{_RUN_WRITES}; a taken run id is named from it (get); list, cleanup, bundle list it; "
        "nodes check --label adds its verdicts to configmap nccl-k8s-node-history (get, then "
        "create or patch), nodes history reads it (get)",
    ),
    Access(
        "",
        "services",
        ("create", "delete", "list", "patch"),
        f"{_RUN_WRITES}; list, cleanup, bundle list it",
    ),
    Access(
        "batch",
        "jobs",
        ("create", "delete", "list", "patch", "watch"),
        "deploy creates and watches it, stops a failed run's ranks (patch), deletes it when "
        "the deploy fails; wait, status, results, list, cleanup, bundle read it",
    ),
    Access(
        "apps",
        "statefulsets",
        ("create", "delete", "list", "patch", "watch"),
        "as jobs, for --workload statefulset (a failed run is scaled to 0: patch)",
    ),
    Access(
        "",
        "pods",
        ("list", "watch"),
        "deploy, wait, status, logs, results, cleanup, bundle, doctor --run: the run's pods",
    ),
    Access(
        "",
        "pods/log",
        ("get",),
        "logs, results (the ranks' result lines), deploy and wait (a failed rank's last lines), "
        "bundle",
    ),
    Access(
        "",
        "events",
        ("list", "watch"),
        "deploy and wait (why a pod is Pending), doctor --run, bundle",
    ),
    Access(
        "",
        "namespaces",
        ("get",),
        "deploy and doctor read the namespace's Pod Security labels (a RoleBinding in the "
        "namespace grants get on the namespace itself)",
    ),
    Access(
        "",
        "resourcequotas",
        ("list",),
        "deploy and doctor: will the quota admit the pods",
    ),
    Access(
        "",
        "limitranges",
        ("list",),
        "deploy and doctor: will the limit ranges admit the pods",
    ),
    *(
        Access(k.group, k.plural, ("create", "delete", "list", "patch"), k.why, optional=k.flag)
        for k in CUSTOM_KINDS
        if k.created
    ),
    *(
        Access(
            group,
            resource,
            ("delete", "list"),
            f"{_ADOPTION_WHY} (list, delete); cleanup --schedule NAME deletes a schedule's",
        )
        for group, resource in (
            ("", "serviceaccounts"),
            ("rbac.authorization.k8s.io", "roles"),
            ("rbac.authorization.k8s.io", "rolebindings"),
        )
    ),
    *(
        Access(group, resource, verbs, why, feature="render-apply", optional=RENDER_APPLY)
        for group, resource, verbs, why in (
            ("", "serviceaccounts", ("create", "get", "patch"), _ADOPTION_WHY),
            ("rbac.authorization.k8s.io", "roles", ("create", "get", "patch"), _ADOPTION_WHY),
            (
                "rbac.authorization.k8s.io",
                "rolebindings",
                ("create", "get", "patch"),
                _ADOPTION_WHY,
            ),
            ("", "services", ("get",), _APPLY_WHY),
            ("batch", "jobs", ("get",), _APPLY_WHY),
            ("apps", "statefulsets", ("get",), _APPLY_WHY),
            *(
                (k.group, k.plural, ("get",), f"{_APPLY_WHY}, {k.flag}")
                for k in CUSTOM_KINDS
                if k.created
            ),
        )
    ),
    *(
        Access(k.group, k.plural, ("list",), k.why, optional=k.flag)
        for k in CUSTOM_KINDS
        if not k.created and k.scope == "Namespaced"
    ),
    Access(
        "",
        "nodes",
        ("get", "list"),
        "doctor (GPU nodes, taints, fit, their last check), nodes check, doctor --run, bundle, "
        "deploy --healthy-only (the nodes that qualify) and a failed deploy (the node a pod "
        "ran on)",
        scope="cluster",
        feature="cluster-reads",
    ),
    Access(
        "",
        "pods",
        ("list",),
        "doctor --scheduler/--gang: has the scheduler placed any pod (all namespaces)",
        scope="cluster",
        feature="cluster-reads",
        optional="--scheduler/--gang",
    ),
    Access(
        "",
        "pods",
        ("list",),
        "doctor --topology/--placement: the GPUs live pods hold on the nodes of the run's "
        "topology domains (one list of the live pods of every namespace, when a node carries "
        "the level)",
        scope="cluster",
        feature="cluster-reads",
        optional=DOMAIN_FIT,
    ),
    Access(
        "",
        "pods",
        ("list",),
        "nodes check --idle-only: which nodes another pod's GPU requests hold (one list of the "
        "live pods of every namespace)",
        scope="cluster",
        feature="cluster-reads",
        optional="--idle-only",
    ),
    Access(
        "coordination.k8s.io",
        "leases",
        ("list",),
        "doctor --scheduler/--gang: does the scheduler hold its leader Lease (all namespaces)",
        scope="cluster",
        feature="cluster-reads",
        optional="--scheduler/--gang",
    ),
    *(
        Access(
            k.group,
            k.plural,
            ("list",),
            k.why,
            scope="cluster",
            feature="cluster-reads",
            optional=k.flag,
        )
        for k in CUSTOM_KINDS
        if not k.created and k.scope == "Cluster"
    ),
    Access(
        "apps",
        "daemonsets",
        ("list",),
        "doctor --platform: is the platform's add-on (device plugin, NCCL plugin installer) "
        "running (all namespaces)",
        scope="cluster",
        feature="cluster-reads",
        optional="--platform",
    ),
    Access(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        ("get",),
        "doctor --platform: does the cluster serve the kinds the platform needs",
        scope="cluster",
        feature="cluster-reads",
        optional="--platform",
    ),
    *(
        Access(
            group,
            plural,
            ("get",),
            f"doctor --platform {'|'.join(names)}: the cluster-scoped objects it needs",
            scope="cluster",
            feature="cluster-reads",
            optional="--platform",
        )
        for (group, plural), names in _platform_objects().items()
    ),
    Access(
        "",
        "namespaces",
        ("create",),
        "deploy --create-namespace (the namespace only: a Role and RoleBinding in it, applied "
        "once it exists, grant the run's requests there)",
        scope="cluster",
        feature="create-namespace",
    ),
    Access(
        "",
        "nodes",
        ("patch",),
        "nodes check --label/--taint writes the verdict on the nodes",
        scope="cluster",
        feature="label-nodes",
    ),
    Access(
        "batch",
        "cronjobs",
        ("delete", "list"),
        f"{_UNSCHEDULE_WHY}: its CronJob (its Jobs and their pods go with it)",
        feature="remove-schedule",
    ),
    *(
        Access(
            group,
            resource,
            ("delete", "list"),
            f"{_UNSCHEDULE_WHY}: {what}",
            scope="cluster",
            feature="remove-schedule",
        )
        for group, resource, what in (
            ("rbac.authorization.k8s.io", "clusterroles", "its ClusterRole"),
            ("rbac.authorization.k8s.io", "clusterrolebindings", "its ClusterRoleBinding"),
            (
                "admissionregistration.k8s.io",
                "validatingadmissionpolicies",
                "its node admission policy (a schedule of nodes check --label/--taint)",
            ),
            (
                "admissionregistration.k8s.io",
                "validatingadmissionpolicybindings",
                "that policy's binding",
            ),
        )
    ),
)


#: What one `nodes check` sends, per (group, resource, scope): its pair tests' deploy, collect
#: and cleanup (a Job each, in the namespace: deploy watches the StatefulSet kind too, cleanup
#: lists every kind a run may own), its node reads, `--platform auto`'s ResourceSlices. Verbs of
#: ACCESS's entries only (tests/test_nodes_schedule.py). Some are sent only on a failure path:
#: configmaps get (a taken run id is named), jobs patch (a failed test's ranks are stopped).
#: A scheduled check (`nodes schedule`) is granted exactly these (nodes_check_access).
_NODES_CHECK_SENDS: dict[tuple[str, str, Scope], tuple[str, ...]] = {
    ("", "configmaps", "namespace"): ("create", "delete", "get", "list", "patch"),
    ("", "services", "namespace"): ("create", "delete", "list", "patch"),
    ("batch", "jobs", "namespace"): ("create", "delete", "list", "patch", "watch"),
    ("apps", "statefulsets", "namespace"): ("list", "watch"),
    ("", "pods", "namespace"): ("list", "watch"),
    ("", "pods/log", "namespace"): ("get",),
    ("", "events", "namespace"): ("list", "watch"),
    ("", "namespaces", "namespace"): ("get",),
    ("", "resourcequotas", "namespace"): ("list",),
    ("", "limitranges", "namespace"): ("list",),
    **{(k.group, k.plural, "namespace"): ("list",) for k in CUSTOM_KINDS if k.created},
    ("", "serviceaccounts", "namespace"): ("list",),
    ("rbac.authorization.k8s.io", "roles", "namespace"): ("list",),
    ("rbac.authorization.k8s.io", "rolebindings", "namespace"): ("list",),
    ("", "nodes", "cluster"): ("get", "list"),
    **{
        (k.group, k.plural, "cluster"): ("list",)
        for k in CUSTOM_KINDS
        if not k.created and k.scope == "Cluster" and not k.flag
    },
}
#: `nodes check --label/--taint` writes the verdicts: nodes patch.
_NODES_CHECK_WRITES: dict[tuple[str, str, Scope], tuple[str, ...]] = {
    ("", "nodes", "cluster"): ("patch",)
}
#: `nodes check --idle-only` lists the pods of every namespace once (one request, whatever the
#: node count: a field selector on spec.nodeName per node would need the same grant N times).
_NODES_CHECK_IDLE: dict[tuple[str, str, Scope], tuple[str, ...]] = {
    ("", "pods", "cluster"): ("list",)
}


#: Each pair test is a run with its NetworkPolicy (on by default on the pod network:
#: rendering.renders_network_policy): deploy creates it and sets its owner, cleanup deletes it.
_NODES_CHECK_NETPOL: dict[tuple[str, str, Scope], tuple[str, ...]] = {
    ("networking.k8s.io", "networkpolicies", "namespace"): ("create", "delete", "patch")
}


def nodes_check_access(
    *, label: bool, idle_only: bool, network_policy: bool = True
) -> list[Access]:
    """ACCESS's entries cut to what one `nodes check` with these options sends, in the table's
    order; the verbs of an entry it does not send are dropped, and entries without any.
    `network_policy`: its pair tests make a NetworkPolicy (not with --network-policy off)."""
    sends: dict[tuple[str, str, Scope], set[str]] = {}
    tables: tuple[tuple[dict[tuple[str, str, Scope], tuple[str, ...]], bool], ...] = (
        (_NODES_CHECK_SENDS, True),
        (_NODES_CHECK_WRITES, label),
        (_NODES_CHECK_IDLE, idle_only),
        (_NODES_CHECK_NETPOL, network_policy),
    )
    for table, asked in tables:
        for key, verbs in table.items():
            if asked:
                sends.setdefault(key, set()).update(verbs)
    out: list[Access] = []
    for a in ACCESS:
        verbs = tuple(v for v in a.verbs if v in sends.get((a.group, a.resource, a.scope), ()))
        # doctor's own reads and kubectl's: never a check's
        if verbs and a.optional not in (RENDER_APPLY, "--scheduler/--gang", DOMAIN_FIT):
            out.append(dataclasses.replace(a, verbs=verbs))
    return out


def access_for(features: tuple[Feature, ...] | list[Feature]) -> list[Access]:
    """The entries of these features, in the table's order."""
    return [a for a in ACCESS if a.feature in features]


__all__ = [
    "ACCESS",
    "DOMAIN_FIT",
    "FEATURES",
    "RENDER_APPLY",
    "Access",
    "Feature",
    "Scope",
    "access_for",
    "nodes_check_access",
]
