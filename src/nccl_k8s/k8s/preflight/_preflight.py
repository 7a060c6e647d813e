"""doctor's verdicts before a deploy: what the API server, its admission and the cluster's
add-ons will do with the run's objects. Pure: what was read (`Facts`) and the RunSpec in,
`Check`s out; preflight._doctor reads the facts.

Each check passes, warns or fails with one line saying what was found and, where something is
wrong, one line of hint saying what to do. A fail marked `certain` is one the deploy cannot
survive whatever happens meanwhile (Pod Security admission, a ResourceQuota or LimitRange that
refuses the pods, a Kueue queue that does not exist): `deploy` checks those first and refuses
with the same words. Scarcity (too few GPUs, an RDMA resource on too few nodes) is not certain:
a cluster autoscaler may add nodes, and deploy waits --schedule-timeout for that.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Literal, get_args

from nccl_k8s.k8s.api._types import Obj, timestamp
from nccl_k8s.k8s.rendering._gangs import scheduler_name
from nccl_k8s.k8s.rendering._presets import (
    PsaLevel,
    forbidden_annotations,
    pod_security_level,
    security_profile,
)
from nccl_k8s.k8s.rendering._resources import pod_resources
from nccl_k8s.spec import (
    GANG_KINDS,
    LOCAL_QUEUE,
    CustomKind,
    RunSpec,
    Security,
    bytes_quantity,
    cpu_quantity,
    quantity_value,
)

Status = Literal["pass", "warn", "fail", "skip"]
"""skip: the check could not look (its object is absent) and says why; not a pass."""

PSA_ENFORCE = "pod-security.kubernetes.io/enforce"
PSA_LEVELS: tuple[PsaLevel, ...] = ("restricted", "baseline", "privileged")


@dataclasses.dataclass(frozen=True)
class Check:
    """One line of doctor's report."""

    name: str
    status: Status
    message: str
    hint: str = ""
    certain: bool = False
    """A fail no waiting can cure: deploy refuses the run on it."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def text(self) -> str:
        """The check as one line: `pod-security: ...; hint: ...`."""
        return f"{self.name}: {self.message}" + (f"; hint: {self.hint}" if self.hint else "")


@dataclasses.dataclass(frozen=True)
class Read:
    """What one read found: the objects, or why there are none to look at."""

    items: list[Obj] | None = None
    forbidden: bool = False
    """RBAC denied the read: the check is skipped with a warning."""
    absent: bool = False
    """The cluster does not serve that resource (a CRD not installed)."""

    @property
    def ok(self) -> bool:
        return self.items is not None


def _q(value: object) -> Fraction:
    try:
        return quantity_value(str(value))
    except ValueError:
        return Fraction(0)


def _amount(resource: str, value: Fraction) -> str:
    if resource.endswith("memory") or resource.endswith("storage"):
        return bytes_quantity(value)
    if resource.endswith("cpu"):
        return cpu_quantity(value)
    return str(int(value)) if value.denominator == 1 else f"{float(value):g}"


# ---- the API server and the namespace ------------------------------------------------------


def check_api(server: str, version: Obj | None, error: str | None) -> Check:
    if version is None:
        return Check(
            "api",
            "fail",
            f"cannot reach the API server at {server}: {error}",
            "check the kubeconfig context (--context, --kubeconfig) and that the server is up",
        )
    return Check("api", "pass", f"{server} answers: Kubernetes {version.get('gitVersion', '?')}")


def check_namespace(namespace: str, ns: Read, *, create: bool) -> Check:
    if ns.forbidden:
        return Check(
            "namespace",
            "warn",
            f"may not read namespace {namespace} (RBAC): its existence and Pod Security level are "
            "not checked",
        )
    if ns.items:
        return Check("namespace", "pass", f"{namespace} exists")
    if create:
        return Check(
            "namespace", "pass", f"{namespace} does not exist; --create-namespace makes it"
        )
    return Check(
        "namespace",
        "fail",
        f"namespace {namespace} does not exist",
        "create it (kubectl create namespace ...) or deploy with --create-namespace",
        certain=True,
    )


def _psa_need(spec: RunSpec) -> str:
    """Why the run's pods need the level they need, in a few words."""
    level = pod_security_level(spec)
    if level == "restricted":
        return "pass 'restricted'"
    profile = security_profile(spec.security)
    if forbidden_annotations(spec):
        why = f"the annotation {forbidden_annotations(spec)[0]}"
    elif profile.host_network or spec.host_network:
        why = "host network"
    elif spec.security == "privileged":
        why = "a privileged container"
    else:
        why = "the IPC_LOCK capability"
    return f"need '{level}' ({why})"


def check_pod_security(spec: RunSpec, namespace: str, ns: Read) -> Check:
    """The namespace's Pod Security enforce level against the level the run's pods pass."""
    need = pod_security_level(spec)
    what = f"the pods of --security {spec.security} {_psa_need(spec)}"
    if ns.forbidden:
        return Check("pod-security", "warn", f"not checked (namespace not readable); {what}")
    if not ns.items:
        return Check(
            "pod-security",
            "skip",
            f"not checked: namespace {namespace} does not exist (a new one has no "
            f"{PSA_ENFORCE} label; a cluster-wide default may apply); {what}",
        )
    labels = ns.items[0]["metadata"].get("labels") or {}
    enforce = labels.get(PSA_ENFORCE)
    if enforce is None:
        return Check(
            "pod-security",
            "pass",
            f"namespace {namespace} has no {PSA_ENFORCE} label (a cluster-wide default may "
            f"still apply); {what}",
        )
    if enforce not in PSA_LEVELS:
        return Check(
            "pod-security",
            "warn",
            f"namespace {namespace} enforces an unknown Pod Security level {enforce!r}; {what}",
        )
    if PSA_LEVELS.index(need) <= PSA_LEVELS.index(enforce):
        return Check("pod-security", "pass", f"namespace {namespace} enforces '{enforce}'; {what}")
    admitted = [p for p in get_args(Security) if _admits(enforce, p)]
    if spec.network in ("ib", "roce"):
        fix = (
            "RDMA needs IPC_LOCK, which only 'privileged' admits: deploy in a namespace that "
            "allows it, or measure TCP with --network socket --security socket"
        )
    elif spec.host_network and admitted:
        fix = f"deploy without --host-network, with --security {' or '.join(admitted)}"
    elif admitted:
        fix = f"deploy with --security {' or '.join(admitted)} (docs/deploy.md gives each profile's level)"
    else:
        fix = "deploy in another namespace"
    return Check(
        "pod-security",
        "fail",
        f"namespace {namespace} enforces Pod Security level '{enforce}' ({PSA_ENFORCE}) and "
        f"{what}: PodSecurity admission refuses them",
        f"{fix}, or have an admin label the namespace {PSA_ENFORCE}={need}",
        certain=True,
    )


def _admits(enforce: str, security: Security) -> bool:
    profile = security_profile(security)
    level = "privileged" if profile.host_network else profile.pod_security
    return PSA_LEVELS.index(level) <= PSA_LEVELS.index(enforce)


# ---- quotas and limit ranges ---------------------------------------------------------------


def _pod_amounts(spec: RunSpec) -> tuple[dict[str, Fraction], dict[str, Fraction]]:
    """(requests, limits) of one pod: the ones the renderer writes into it."""
    return pod_resources(spec).amounts()


def _scoped_out(quota: Obj, spec: RunSpec) -> bool:
    """The quota's scopes leave the run's pods out (they are NotTerminating, NotBestEffort)."""
    qspec = quota.get("spec") or {}
    scopes = list(qspec.get("scopes") or [])
    for expr in (qspec.get("scopeSelector") or {}).get("matchExpressions") or []:
        name, op, values = expr.get("scopeName"), expr.get("operator"), expr.get("values") or []
        if name == "PriorityClass":
            have = spec.priority_class
            inside = (
                have in values
                if op == "In"
                else have not in values
                if op == "NotIn"
                else (have is not None) == (op == "Exists")
            )
            if not inside:
                return True
        else:
            scopes.append(name if op != "DoesNotExist" else f"Not{name}")
    return any(s in ("Terminating", "BestEffort", "CrossNamespacePodAffinity") for s in scopes)


def quota_needs(spec: RunSpec) -> dict[str, Fraction]:
    """What the run's objects count against a ResourceQuota, by the quota's resource names."""
    requests, limits = _pod_amounts(spec)
    n = Fraction(spec.nodes)
    out: dict[str, Fraction] = {"pods": n, "count/pods": n}
    for name, value in requests.items():
        out[f"requests.{name}"] = value * n
        if name in ("cpu", "memory"):
            out[name] = value * n
    for name, value in limits.items():
        if name in ("cpu", "memory"):
            out[f"limits.{name}"] = value * n
    workload = "count/jobs.batch" if spec.workload == "job" else "count/statefulsets.apps"
    out[workload] = Fraction(1)
    out["services"] = out["count/services"] = Fraction(1)
    if spec.engine == "zipapp":
        out["configmaps"] = out["count/configmaps"] = Fraction(1)
    return out


def check_quotas(spec: RunSpec, quotas: Read) -> Check:
    if quotas.forbidden:
        return Check("quota", "warn", "may not list ResourceQuotas (RBAC): not checked")
    found: list[str] = []
    needs = quota_needs(spec)
    for quota in quotas.items or []:
        name = quota["metadata"]["name"]
        if _scoped_out(quota, spec):
            continue
        hard = (quota.get("spec") or {}).get("hard") or {}
        used = (quota.get("status") or {}).get("used") or {}
        if "limits.cpu" in hard and spec.qos != "guaranteed":
            return Check(
                "quota",
                "fail",
                f"ResourceQuota {name} limits limits.cpu, so every pod must set a CPU limit, and "
                "the pods of --qos burstable set none: admission refuses them",
                "deploy with --qos guaranteed (CPU limit = request)",
                certain=True,
            )
        for resource, limit in hard.items():
            need = needs.get(resource)
            if need is None:
                continue
            left = _q(limit) - _q(used.get(resource, "0"))
            if need > left:
                return Check(
                    "quota",
                    "fail",
                    f"ResourceQuota {name}: the run needs {resource} {_amount(resource, need)}, "
                    f"{_amount(resource, max(left, Fraction(0)))} of {limit} is left "
                    f"({used.get(resource, '0')} used): the pods would be refused",
                    "ask for a smaller run (--world-size, --cpu, --memory) or for more quota",
                    certain=True,
                )
        found.append(name)
    if not found:
        return Check("quota", "pass", "no ResourceQuota applies to the pods")
    return Check("quota", "pass", f"the run fits ResourceQuota {', '.join(found)}")


def _limit_violation(
    kind: str, item: Obj, requests: dict[str, Fraction], limits: dict[str, Fraction]
) -> str | None:
    """LimitRanger's verdict on the pod's container (or the pod), as its messages word it."""
    if kind == "Container":
        for name, value in (item.get("default") or {}).items():
            limits.setdefault(name, _q(value))
        for name, value in (item.get("defaultRequest") or {}).items():
            requests.setdefault(name, limits.get(name, _q(value)))
        for name, value in requests.items():
            if name in limits and value > limits[name]:
                return (
                    f"its {name} request {_amount(name, value)} is above the {name} limit "
                    f"{_amount(name, limits[name])} the LimitRange's default sets"
                )
    for name, value in (item.get("min") or {}).items():
        if name not in requests:
            return f"minimum {name} usage per {kind} is {value}, no request is specified"
        if requests[name] < _q(value):
            return f"minimum {name} usage per {kind} is {value}, the pods ask for {_amount(name, requests[name])}"
    for name, value in (item.get("max") or {}).items():
        if name not in limits:
            return f"maximum {name} usage per {kind} is {value}, no limit is specified"
        top = max(limits[name], requests.get(name, Fraction(0)))
        if top > _q(value):
            return (
                f"maximum {name} usage per {kind} is {value}, the pods ask for {_amount(name, top)}"
            )
    for name, value in (item.get("maxLimitRequestRatio") or {}).items():
        if name not in limits or not requests.get(name):
            return f"{name} max limit to request ratio per {kind} is {value}, no limit is specified"
        if limits[name] / requests[name] > _q(value):
            return f"{name} max limit to request ratio per {kind} is {value}"
    return None


def check_limit_ranges(spec: RunSpec, ranges: Read) -> Check:
    if ranges.forbidden:
        return Check("limit-range", "warn", "may not list LimitRanges (RBAC): not checked")
    requests, limits = _pod_amounts(spec)
    for lr in ranges.items or []:
        for item in (lr.get("spec") or {}).get("limits") or []:
            kind = item.get("type")
            if kind not in ("Container", "Pod"):
                continue
            why = _limit_violation(kind, item, dict(requests), dict(limits))
            if why is not None:
                no_limit = "no limit is specified" in why and "cpu" in why
                hint = (
                    "deploy with --qos guaranteed (a CPU limit = request)"
                    if no_limit and spec.qos != "guaranteed"
                    else "change --cpu/--memory/--gpus-per-node to fit, or ask for another LimitRange"
                )
                return Check(
                    "limit-range",
                    "fail",
                    f"LimitRange {lr['metadata']['name']}: {why}: admission refuses the pods",
                    hint,
                    certain=True,
                )
    names = [lr["metadata"]["name"] for lr in ranges.items or []]
    if not names:
        return Check("limit-range", "pass", "no LimitRange in the namespace")
    return Check("limit-range", "pass", f"the pods pass LimitRange {', '.join(names)}")


# ---- add-ons: the scheduler, gang scheduling, Kueue --------------------------------------------


#: A Lease renewed within this many seconds has a live holder (kube-scheduler renews every 2 s,
#: a lease lasts 15 s).
LEASE_FRESH_S = 60


def check_scheduler(spec: RunSpec, leases: Read, placed: Read, now: datetime.datetime) -> Check:
    """Signs that the named scheduler runs: its leader-election Lease renewed lately, or pods it
    has bound. A pod that asks for a scheduler nobody runs stays Pending with no event."""
    name = scheduler_name(spec)
    if name is None:
        return Check("scheduler", "pass", "the pods use the cluster's default scheduler")
    flag = (
        f"--scheduler {name}" if spec.scheduler_name else f"--gang {spec.gang} (scheduler {name})"
    )
    for lease in leases.items or []:
        lspec = lease.get("spec") or {}
        holder = str(lspec.get("holderIdentity") or "")
        meta = lease["metadata"]
        if meta["name"] != name and not holder.startswith(name):
            continue
        renewed = timestamp(lspec.get("renewTime"))
        if renewed is not None and (now - renewed).total_seconds() <= LEASE_FRESH_S:
            age = max(0, int((now - renewed).total_seconds()))
            return Check(
                "scheduler",
                "pass",
                f"{name} runs: its Lease {meta.get('namespace')}/{meta['name']} was renewed "
                f"{age}s ago",
            )
    bound = [p for p in placed.items or [] if (p.get("spec") or {}).get("nodeName")]
    if bound:
        return Check("scheduler", "pass", f"{name} has placed {len(bound)} pod(s) running now")
    if leases.forbidden and placed.forbidden:
        return Check("scheduler", "warn", f"may not list Leases or pods (RBAC): {name} not checked")
    waiting = len(placed.items or [])
    also = f"; {waiting} pod(s) asking for it wait unbound" if waiting else ""
    return Check(
        "scheduler",
        "fail",
        f"no sign of scheduler {name}: no leader-election Lease of it renewed in the last "
        f"{LEASE_FRESH_S}s and no running pod placed by it{also}",
        f"install {name} (its Helm chart) or deploy without {flag.split(' (')[0]}: pods that ask "
        "for a scheduler nobody runs stay Pending with no event",
    )


def check_served(name: str, kind: CustomKind, read: Read) -> Check:
    """Does the cluster serve an optional kind the run creates (a LIST of it: absent means
    its CRD is not installed)? `name` is the check's."""
    what = kind.resource
    if read.forbidden:
        return Check(name, "warn", f"may not list {what} (RBAC): not checked")
    if read.absent:
        return Check(
            name,
            "fail",
            f"the cluster does not serve {what}: {kind.install.removeprefix('install ')} is not "
            f"installed (no {kind.kind} CRD)",
            kind.hint,
            certain=True,
        )
    return Check(name, "pass", f"{what} is served (the {kind.kind} CRD is installed)")


def check_gang(spec: RunSpec, groups: Read) -> Check | None:
    if spec.gang is None:
        return None
    return check_served("gang", GANG_KINDS[spec.gang], groups)


def check_queue(spec: RunSpec, namespace: str, queues: Read) -> Check | None:
    if spec.queue is None:
        return None
    if queues.forbidden:
        return Check("queue", "warn", f"may not list {LOCAL_QUEUE.crd_name} (RBAC): not checked")
    if queues.absent:
        return Check(
            "queue",
            "warn",
            f"Kueue is not installed (no {LOCAL_QUEUE.crd_name}): --queue {spec.queue} has "
            "no effect and the Job runs unqueued",
            f"drop --queue, or {LOCAL_QUEUE.install}",
        )
    names = sorted(str(q["metadata"]["name"]) for q in queues.items or [])
    if spec.queue in names:
        return Check("queue", "pass", f"LocalQueue {spec.queue} exists in {namespace}")
    there = f" (there: {', '.join(names)})" if names else " (it has none)"
    return Check(
        "queue",
        "fail",
        f"no LocalQueue {spec.queue} in namespace {namespace}{there}: Kueue keeps the Job "
        "suspended for ever",
        "--queue one of those, or ask an admin for the LocalQueue",
        certain=True,
    )


def certain_failures(checks: Sequence[Check]) -> list[Check]:
    return [c for c in checks if c.status == "fail" and c.certain]


__all__ = [
    "LEASE_FRESH_S",
    "PSA_ENFORCE",
    "Check",
    "Read",
    "Status",
    "certain_failures",
    "check_api",
    "check_gang",
    "check_limit_ranges",
    "check_namespace",
    "check_pod_security",
    "check_queue",
    "check_quotas",
    "check_scheduler",
    "check_served",
    "quota_needs",
    "scheduler_name",
]
