"""doctor: will this run deploy and start, and if not, why. Reads what the checks need (one
request each, at once) and hands it to the pure checks of preflight._preflight and preflight._nodechecks.

    API server    GET /version
    namespace     GET the namespace (its Pod Security labels)
    nodes         LIST nodes (GPU and RDMA resources, taints, labels, readiness)
    domain fit    LIST the live pods of all namespaces (their GPUs per node), when the run's
                  topology level is on some node (preflight._domainfit)
    scheduler     LIST Leases and pods with spec.schedulerName=NAME, all namespaces (--scheduler,
                  --gang only)
    custom kinds  LIST each optional kind the run uses (spec.CUSTOM_KINDS: --gang's PodGroups,
                  --pod-monitor's PodMonitors, --queue's LocalQueues, --compute-domain's
                  ComputeDomains and ResourceSlices): is it served, and what is there
    admission     LIST ResourceQuotas and LimitRanges in the namespace
    permissions   a SelfSubjectAccessReview per verb the run needs (preflight._access)

A read that RBAC denies makes its checks a warning, not an error: doctor says what it could not
see. `deploy` runs the part that is cheap and decisive (`refusal`: Pod Security from the
namespace it reads anyway, quotas, limit ranges, the Kueue queue) before it creates anything.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections.abc import Awaitable
from typing import Any, cast, get_args

from nccl_k8s.errors import ClusterError, Forbidden, NotFound
from nccl_k8s.k8s.api._client import ClientSettings, KubeClient
from nccl_k8s.k8s.api._sync import run_sync
from nccl_k8s.k8s.api._types import Kind, Obj
from nccl_k8s.k8s.preflight import _prereqs
from nccl_k8s.k8s.preflight._access import access_checks
from nccl_k8s.k8s.preflight._computedomain import check_compute_domain
from nccl_k8s.k8s.preflight._domainfit import domain_fit
from nccl_k8s.k8s.preflight._fleet import check_fleet
from nccl_k8s.k8s.preflight._nodechecks import check_nodes
from nccl_k8s.k8s.preflight._platforms import may_use, resolve_async
from nccl_k8s.k8s.preflight._preflight import (
    Check,
    Read,
    Status,
    certain_failures,
    check_api,
    check_gang,
    check_limit_ranges,
    check_namespace,
    check_pod_security,
    check_queue,
    check_quotas,
    check_scheduler,
    check_served,
    scheduler_name,
)
from nccl_k8s.spec import (
    COMPUTE_DOMAIN,
    CUSTOM_KINDS,
    GANG_KINDS,
    LOCAL_QUEUE,
    POD_MONITOR,
    RESOURCE_SLICE,
    TOPOLOGY,
    CustomKind,
    RunSpec,
)
from nccl_k8s.spec.platforms import GENERIC, PLATFORMS


@dataclasses.dataclass(frozen=True)
class Doctored:
    """doctor's report: every check, in order."""

    server: str
    namespace: str
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return not any(c.status == "fail" for c in self.checks)

    def summary(self) -> str:
        """The closing line: how many checks failed, warned and passed, and where."""
        count = {s: sum(1 for c in self.checks if c.status == s) for s in get_args(Status)}
        skipped = f", {count['skip']} skipped" if count["skip"] else ""
        return (
            f"doctor: {count['fail']} fail, {count['warn']} warn, {count['pass']} pass{skipped} "
            f"({self.server}, namespace {self.namespace})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "namespace": self.namespace,
            "ok": self.ok,
            "checks": [c.to_dict() for c in self.checks],
        }


async def _read(request: Awaitable[Any]) -> Read:
    try:
        got = await request
    except Forbidden:
        return Read(forbidden=True)
    except NotFound:
        return Read(absent=True)
    if isinstance(got, tuple):  # a list: (items, resourceVersion)
        return Read(items=list(got[0]))
    return Read(items=[] if got is None else [got])


async def _nothing() -> Read:
    return Read(items=[])


def custom_reads(kc: KubeClient, spec: RunSpec, namespace: str) -> dict[str, Awaitable[Read]]:
    """A LIST of every optional kind the run uses (spec.CUSTOM_KINDS' `used`), by its
    `resource`; in the namespace, or the cluster for a cluster-scoped kind. The LocalQueues
    are read with the admission reads (deploy's refusal reads them too)."""
    return {
        k.resource: _read(
            kc.list(cast(Kind, k.kind), namespace=namespace, api_version=k.api_version)
        )
        for k in CUSTOM_KINDS
        if k.used(spec) and k is not LOCAL_QUEUE
    }


async def _custom(kc: KubeClient, spec: RunSpec, namespace: str) -> dict[str, Read]:
    asks = custom_reads(kc, spec, namespace)
    return dict(zip(asks, await asyncio.gather(*asks.values()), strict=True))


def _of(reads: dict[str, Read], kind: CustomKind) -> Read:
    """What doctor read of `kind`; nothing where the run does not use it."""
    return reads.get(kind.resource, Read(items=[]))


async def _admission_reads(kc: KubeClient, spec: RunSpec, namespace: str) -> list[Read]:
    """Quotas, limit ranges and (with --queue) LocalQueues of the namespace, at once."""
    queue = (
        _read(kc.list("LocalQueue", namespace=namespace, api_version=LOCAL_QUEUE.api_version))
        if LOCAL_QUEUE.used(spec)
        else _nothing()
    )
    return list(
        await asyncio.gather(
            _read(kc.list("ResourceQuota", namespace=namespace)),
            _read(kc.list("LimitRange", namespace=namespace)),
            queue,
        )
    )


def _admission_checks(spec: RunSpec, namespace: str, ns: Read, reads: list[Read]) -> list[Check]:
    quotas, ranges, queues = reads
    checks = [
        check_pod_security(spec, namespace, ns),
        check_quotas(spec, quotas),
        check_limit_ranges(spec, ranges),
    ]
    queue = check_queue(spec, namespace, queues)
    return checks + ([queue] if queue is not None else [])


async def preflight(kc: KubeClient, spec: RunSpec, *, create_namespace: bool = False) -> Doctored:
    """Every check for deploying `spec` with this client."""
    namespace = spec.namespace or kc.namespace
    try:
        version = await kc.version()
    except ClusterError as e:
        return Doctored(kc.server, namespace, [check_api(kc.server, None, str(e))])
    name = scheduler_name(spec)
    if name is not None:
        by = {"spec.schedulerName": name}
        leases = _read(kc.list("Lease", all_namespaces=True))
        placed = _read(kc.list("Pod", all_namespaces=True, fields=by))
    else:
        leases, placed = _nothing(), _nothing()
    # Two gathers in one: typeshed types asyncio.gather's results up to six awaitables.
    first, custom = await asyncio.gather(
        asyncio.gather(
            _read(kc.get("Namespace", namespace)),
            _read(kc.list("Node")),
            leases,
            placed,
            _admission_reads(kc, spec, namespace),
        ),
        _custom(kc, spec, namespace),
    )
    ns, nodes, lease_read, placed_read, admission = first
    spec, platform_checks = await _platform(kc, spec, nodes)
    now = datetime.datetime.now(datetime.timezone.utc)
    absent = not ns.forbidden and not ns.items
    access = await access_checks(kc, spec, namespace, create_namespace=create_namespace and absent)
    checks = [
        check_api(kc.server, version, None),
        *access,
        check_namespace(namespace, ns, create=create_namespace),
        *_admission_checks(spec, namespace, ns, admission),
        *platform_checks,
        *check_nodes(spec, nodes),
        *await domain_fit(kc, spec, nodes),
        *filter(None, [check_fleet(spec, nodes)]),  # the nodes' last `nodes check` (issue 38)
        check_scheduler(spec, lease_read, placed_read, now),
    ]
    group = check_gang(spec, _of(custom, GANG_KINDS[spec.gang])) if spec.gang else None
    if group is not None:
        checks.append(group)
    if TOPOLOGY.used(spec):
        checks.append(_topologies(_of(custom, TOPOLOGY)))
    if POD_MONITOR.used(spec):
        checks.append(check_served("pod-monitor", POD_MONITOR, _of(custom, POD_MONITOR)))
    checks += check_compute_domain(
        spec, _of(custom, COMPUTE_DOMAIN), _of(custom, RESOURCE_SLICE), nodes
    )
    return Doctored(kc.server, namespace, checks)


def _topologies(read: Read) -> Check:
    """--queue: the Kueue TAS Topologies (their levels' node labels), which a queued run's
    placement may follow; none is no obstacle (Kueue then places without a topology)."""
    what = TOPOLOGY.crd_name
    if read.forbidden:
        return Check("topology", "warn", f"may not list {what} (RBAC): not checked")
    if read.absent or not read.items:
        return Check(
            "topology", "skip", f"no Kueue Topology ({what}): no Topology Aware Scheduling"
        )
    found = [
        f"{t['metadata']['name']} ("
        + " > ".join(str(lv.get("nodeLabel")) for lv in (t.get("spec") or {}).get("levels") or [])
        + ")"
        for t in read.items
    ]
    return Check("topology", "pass", f"Kueue Topology Aware Scheduling: {', '.join(found)}")


async def _platform(kc: KubeClient, spec: RunSpec, nodes: Read) -> tuple[RunSpec, list[Check]]:
    """The platform the run is for (--platform auto: what the nodes say) and the checks of its
    prerequisites; the spec resolved for it (node fit then counts its fabric devices)."""
    resolved = await resolve_async(kc, spec, nodes.items)
    spec = resolved.spec
    platform = PLATFORMS.get(spec.platform, GENERIC)
    checks = []
    if resolved.note:
        checks.append(Check("platform", "pass", resolved.note.removeprefix("platform ")))
    elif platform is not GENERIC:
        checks.append(Check("platform", "pass", f"{platform.name} (named)"))
    if platform.prerequisites:
        reads = await _prereqs.read(kc, platform)
        usable = Read(items=may_use(spec, nodes.items)) if nodes.items is not None else nodes
        checks += _prereqs.check(platform, spec, reads, usable)
    return spec, checks


def doctor(spec: RunSpec, *, client: ClientSettings, create_namespace: bool = False) -> Doctored:
    """Check the cluster and namespace for the run `spec` describes; nothing is written."""
    return run_sync(lambda kc: preflight(kc, spec, create_namespace=create_namespace), client)


async def refusal(
    kc: KubeClient, spec: RunSpec, namespace: str, namespace_obj: Obj | None
) -> Check | None:
    """deploy's cheap part of doctor: the first certain failure, or None. Pod Security from the
    namespace the deploy has read already, quotas and limit ranges (two lists), the Kueue queue
    (one list, with --queue)."""
    ns = Read(items=[namespace_obj] if namespace_obj is not None else [])
    reads = await _admission_reads(kc, spec, namespace)
    failed = certain_failures(_admission_checks(spec, namespace, ns, reads))
    return failed[0] if failed else None


__all__ = ["Doctored", "doctor", "preflight", "refusal"]
