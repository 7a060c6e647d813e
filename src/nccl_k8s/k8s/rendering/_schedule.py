"""`nccl-k8s nodes schedule`: what a cluster needs to check its own nodes on a schedule, as
objects (printed like `render`'s; nothing is applied here):

    ServiceAccount <name>                  the checker's identity, in the namespace
    Role, RoleBinding <name>               the namespaced requests of one `nodes check`
    ClusterRole(+Binding) nccl-k8s:<ns>:<name>   its cluster-scoped ones (nodes are)
    ValidatingAdmissionPolicy(+Binding)    with --label/--taint: its node updates may change
                                           only our labels (verdict, time, busbw, run) and taint
    CronJob <name>                         a pod that runs `nccl-k8s nodes check ARGS`

The RBAC is api._access.nodes_check_access: ACCESS cut to what one check with these options
sends (tests/test_nodes_schedule_e2e.py runs a check as the ServiceAccount and compares).
The checker's pod is the only one with a token (automountServiceAccountToken: true); the
pair-test pods it deploys carry none (rendering._manifests sets false on every run's pods).

The checker pod needs the CLI and its API client (lightkube, httpx, msgspec: a compiled
extension, so no zipapp in a ConfigMap can carry them as deploy carries the standard-library
engine): its image is one with nccl-k8s installed (the repository's Dockerfile), named by
`--image`. The pair tests it starts take the check's own options (the default image and the
engine in a ConfigMap unless those say otherwise).

The objects carry app.kubernetes.io/name and managed-by, and `nccl-k8s/schedule: <name>`, but
no app.kubernetes.io/instance: `cleanup --run/--all` (which select runs by that label) never take
a schedule's objects for a run's. `cleanup --schedule NAME` removes them (k8s.nodes._unschedule:
the objects `schedule_members` reads off this renderer), as does `kubectl delete -f` of the
same output.

Pure: no client.
"""

from __future__ import annotations

import dataclasses
import re

import yaml

from nccl_k8s.errors import UsageError
from nccl_k8s.k8s.api._access import Access, nodes_check_access
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.rendering._names import APP_NAME, RENDERED_ANNOTATION
from nccl_k8s.k8s.rendering._nodepolicy import node_policy_objects
from nccl_k8s.k8s.rendering._rbac import RBAC_GROUP, Subject
from nccl_k8s.spec import LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_NAME

#: The label every object of a schedule carries: which schedule (the CronJob's name).
SCHEDULE_LABEL = "nccl-k8s/schedule"
COMPONENT = "node-check-schedule"
DEFAULT_NAME = "nccl-k8s-node-check"

#: Options of `nodes check` a scheduled check may not carry: the pod's namespace and cluster
#: are the schedule's (in-cluster credentials), and the optional kinds' flags would need grants
#: the schedule does not print (not yet: their create/patch/delete).
_REFUSED = ("-n", "--namespace", "--kubeconfig", "--context", "--gang", "--pod-monitor",
            "--compute-domain", "--queue")  # fmt: skip

# Kubernetes' CronJob accepts the five-field form (robfig/cron's standard parser) and these
# macros: https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/#schedule-syntax
_MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
#: (field name, least, most, names; the first name's number) per field.
_FIELDS: tuple[tuple[str, int, int, tuple[str, ...]], ...] = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
_ITEM = re.compile(r"^(\*|\?|[0-9A-Za-z]+(?:-[0-9A-Za-z]+)?)(?:/([0-9]+))?$")


def _value(text: str, least: int, most: int, names: tuple[str, ...]) -> int | None:
    if text.upper() in names:
        return names.index(text.upper()) + (1 if names == _MONTHS else 0)
    if text.isdigit() and least <= int(text) <= most:
        return int(text)
    return None


def _field_ok(text: str, least: int, most: int, names: tuple[str, ...]) -> bool:
    for item in text.split(","):
        m = _ITEM.match(item)
        if not m or (m.group(2) is not None and int(m.group(2)) < 1):
            return False
        span = m.group(1)
        if span in ("*", "?"):
            continue
        ends = [_value(x, least, most, names) for x in span.split("-")]
        if any(e is None for e in ends) or (len(ends) == 2 and ends[0] > ends[1]):  # type: ignore[operator]
            return False
    return True


def cron_arg(value: str) -> str:
    """`--cron`: five fields (minute hour day-of-month month day-of-week) or a macro."""
    text = " ".join(value.split())
    if text in _MACROS:
        return text
    fields = text.split(" ")
    bad = [name for (name, lo, hi, names), f in zip(_FIELDS, fields, strict=False)
           if not _field_ok(f, lo, hi, names)]  # fmt: skip
    if len(fields) != 5 or bad:
        why = f"{len(fields)} fields" if len(fields) != 5 else f"bad {', '.join(bad)}"
        raise UsageError(
            f'--cron "{value}": expected five cron fields (minute hour day-of-month month '
            f'day-of-week) such as "0 */6 * * *", or @hourly/@daily/...; {why}',
            key="--cron",
        )
    return text


@dataclasses.dataclass(frozen=True)
class Schedule:
    """One scheduled check. `args`: the `nodes check` options and, after `--`, engine flags."""

    name: str
    namespace: str
    cron: str
    image: str
    args: tuple[str, ...] = ()
    starting_deadline_s: int = 600
    """A run that could not start within this long after its time is skipped, not started late
    (a controller down for hours does not start a burst of checks)."""
    history: int = 3
    """Finished Jobs kept, successful and failed each: their pods' logs hold the tables."""
    network_policy: bool = True
    """Whether the check's pair tests make a NetworkPolicy, which the Role then grants: the
    renderer's own decision (renders_network_policy) on the pair tests' spec, which
    nodes._pairspec.scheduled_check sets from the check's. Not with --network-policy off, nor on the node's network (--security
    host, --host-network, a platform named by --platform whose pods use it); --platform auto
    is read from the nodes when the check runs, so the grant stays."""

    @property
    def check_options(self) -> tuple[str, ...]:
        """`args` before the engine flags' `--`."""
        return self.args[: self.args.index("--")] if "--" in self.args else self.args

    @property
    def writes(self) -> bool:
        return any(a in ("--label", "--taint") for a in self.check_options)

    @property
    def idle_only(self) -> bool:
        return "--idle-only" in self.check_options

    @property
    def subject(self) -> Subject:
        return Subject("ServiceAccount", self.name, self.namespace)


_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def check_name(name: str, namespace: str, *, flag: str = "--name") -> None:
    """A schedule's name (it names the CronJob: 52 characters at most, a DNS-1123 label) and its
    namespace, or one line naming the value and the form (UsageError)."""
    if not _NAME.match(name) or len(name) > 52:  # a CronJob's name: 52 at most
        raise UsageError(
            f'{flag} "{name}": expected at most 52 lower case letters, digits and "-" (a '
            "schedule's name, as `nodes schedule --name` takes it)",
            key=flag,
        )
    if not _NAME.match(namespace) or len(namespace) > 63:
        raise UsageError(
            f'-n "{namespace}": expected a namespace name (lower case letters, digits, "-")',
            key="--namespace",
        )


def check_schedule(s: Schedule) -> None:
    """Refuse what a scheduled check cannot carry (one line, UsageError)."""
    check_name(s.name, s.namespace)
    for a in s.check_options:
        flag = a.split("=", 1)[0]
        if flag in _REFUSED:
            raise UsageError(
                f"nodes schedule: {flag} cannot be given to a scheduled check (its namespace "
                "is -n's, its credentials the pod's ServiceAccount, and the optional kinds' "
                "grants are not printed yet)",
                key=flag,
            )


def schedule_access(s: Schedule) -> list[Access]:
    """What the schedule's check sends: the entries its Role and ClusterRole grant."""
    return nodes_check_access(
        label=s.writes, idle_only=s.idle_only, network_policy=s.network_policy
    )


def _rules(entries: list[Access]) -> list[Obj]:
    return [
        {"apiGroups": [a.group], "resources": [a.resource], "verbs": sorted(a.verbs)}
        for a in entries
    ]


def _meta(s: Schedule, name: str, namespaced: bool = True) -> Obj:
    meta: Obj = {"name": name}
    if namespaced:
        meta["namespace"] = s.namespace
    meta["labels"] = {
        LABEL_NAME: APP_NAME,
        LABEL_MANAGED_BY: APP_NAME,
        LABEL_COMPONENT: COMPONENT,
        SCHEDULE_LABEL: s.name,
    }
    meta["annotations"] = {RENDERED_ANNOTATION: f"schedule/{s.name}"}
    return meta


def cluster_role_name(s: Schedule) -> str:
    return f"{APP_NAME}:{s.namespace}:{s.name}"


def _rbac(s: Schedule) -> list[Obj]:
    entries = schedule_access(s)
    ref = {"apiGroup": RBAC_GROUP}
    subject = s.subject.to_obj()
    crole = cluster_role_name(s)
    v1 = f"{RBAC_GROUP}/v1"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(s, s.name)},
        {"apiVersion": v1, "kind": "Role", "metadata": _meta(s, s.name),
         "rules": _rules([a for a in entries if a.scope == "namespace"])},
        {"apiVersion": v1, "kind": "RoleBinding", "metadata": _meta(s, s.name),
         "roleRef": {**ref, "kind": "Role", "name": s.name}, "subjects": [subject]},
        {"apiVersion": v1, "kind": "ClusterRole", "metadata": _meta(s, crole, False),
         "rules": _rules([a for a in entries if a.scope == "cluster"])},
        {"apiVersion": v1, "kind": "ClusterRoleBinding", "metadata": _meta(s, crole, False),
         "roleRef": {**ref, "kind": "ClusterRole", "name": crole}, "subjects": [subject]},
    ]  # fmt: skip


def _cronjob(s: Schedule) -> Obj:
    labels = {LABEL_NAME: APP_NAME, LABEL_COMPONENT: COMPONENT, SCHEDULE_LABEL: s.name}
    container: Obj = {
        "name": "check",
        "image": s.image,
        "command": ["nccl-k8s", "nodes", "check"],
        "args": ["-n", s.namespace, *s.args],
        # The checker only talks to the API server; its pair tests hold the GPUs.
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                      "limits": {"memory": "1Gi"}},
        "securityContext": {"allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"}},
    }  # fmt: skip
    pod = {
        "metadata": {"labels": dict(labels)},
        "spec": {
            "serviceAccountName": s.name,
            # The one pod of the tool that holds a token: it sends the check's requests.
            "automountServiceAccountToken": True,
            "restartPolicy": "Never",
            "containers": [container],
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": _meta(s, s.name),
        "spec": {
            "schedule": s.cron,
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": s.starting_deadline_s,
            "successfulJobsHistoryLimit": s.history,
            "failedJobsHistoryLimit": s.history,
            "jobTemplate": {
                "metadata": {"labels": labels},
                # A failed check is not retried: its exit 1 is a verdict (a bad node).
                "spec": {"backoffLimit": 0, "template": pod},
            },
        },
    }


def schedule_objects(s: Schedule) -> list[Obj]:
    """The ServiceAccount, its RBAC, (with --label/--taint) the node admission policy, and the
    CronJob, in apply order."""
    check_schedule(s)
    objs = _rbac(s)
    if s.writes:
        for policy in node_policy_objects(s.subject):
            policy["metadata"] = {**_meta(s, policy["metadata"]["name"], False)}
            objs.append(policy)
    return [*objs, _cronjob(s)]


@dataclasses.dataclass(frozen=True)
class Member:
    """One object a schedule may have, as `schedule_members` reads it off the renderer."""

    kind: str
    api_version: str
    name: str
    namespaced: bool
    mark: str
    """Its render mark (`nccl-k8s/rendered-for`), which says the renderer made it."""


def schedule_members(name: str, namespace: str) -> list[Member]:
    """Every object `nodes schedule --name NAME -n NAMESPACE` prints with any options, in apply
    order (`cleanup --schedule` deletes in reverse). Read off the renderer itself, with the
    options that print the most (`--label`: the admission policy and its binding; the other
    options change only rules and arguments), so the two cannot drift:
    tests/test_nodes_unschedule.py renders every combination against it."""
    widest = Schedule(name=name, namespace=namespace, cron="@daily", image="-", args=("--label",))
    return [
        Member(
            o["kind"],
            o["apiVersion"],
            o["metadata"]["name"],
            "namespace" in o["metadata"],
            o["metadata"]["annotations"][RENDERED_ANNOTATION],
        )
        for o in schedule_objects(widest)
    ]


def schedule_text(s: Schedule, objs: list[Obj]) -> str:
    """The objects as YAML, after a comment saying what they are and how to remove them."""
    head = (
        f'# nccl-k8s nodes schedule: `nodes check` in namespace {s.namespace} at "{s.cron}",\n'
        f"# as ServiceAccount {s.name} with exactly the requests one check sends.\n"
        f"# Apply: kubectl apply -f FILE; remove: nccl-k8s cleanup --schedule {s.name} -n "
        f"{s.namespace}\n# (or kubectl delete -f FILE).\n"
    )
    body = "---\n".join(
        yaml.safe_dump(o, sort_keys=False, default_flow_style=False, width=100) for o in objs
    )
    return head + body


__all__ = [
    "DEFAULT_NAME",
    "SCHEDULE_LABEL",
    "Member",
    "Schedule",
    "check_name",
    "cron_arg",
    "schedule_access",
    "schedule_members",
    "schedule_objects",
    "schedule_text",
]
