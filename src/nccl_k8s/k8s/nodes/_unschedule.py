"""`cleanup --schedule NAME`: remove a fleet-health schedule that `nodes schedule` printed and the
user applied, and nothing else.

What is deleted is read off the renderer (rendering._schedule.schedule_members: every object
`nodes schedule --name NAME -n NS` prints with any options, their kinds and names), so a kind the
renderer gains is a kind this removes. Each kind is listed by the schedule's label
(`nccl-k8s/schedule=NAME`), in the namespace or at the cluster scope as the renderer places it;
an object is deleted only when it is one the renderer prints for this name and namespace (kind
and name: a schedule of the same name in another namespace has ClusterRoles of other names) and
carries both our labels (`app.kubernetes.io/name` and `app.kubernetes.io/managed-by: nccl-k8s`)
and our render mark (`nccl-k8s/rendered-for: schedule/NAME`): labels alone are not ownership
(cleanup --run holds runs to the same rule). Anything else with the label is skipped and
listed. Each delete carries the object's uid (an object replaced meanwhile is not touched), in
the reverse of apply order: the CronJob first, so no new check starts while its grants go.

The CronJob is deleted with propagationPolicy Background, kubectl delete's default: the API
server removes the CronJob at once and the garbage collector its Jobs and their pods (their
ownerReferences); Foreground would hold the CronJob, marked for deletion, until every pod of
every Job is gone. Then this waits by watch, as cleanup --run does, until the checks' pods are
gone: a check interrupted by its pod's SIGTERM removes the pair-test runs it started (nodes
_nodecheck's abandon) within its grace period.

Not removed: the node labels and the `nccl-k8s-node-history` ConfigMap (the fleet's record,
which `deploy --healthy-only`, doctor and `nodes history` read, whoever wrote it), and pair-test
runs still in the namespace (labelled `nccl-k8s/nodes-check`): they are runs, which a manual
`nodes check` makes too, so they cannot be told to be this schedule's; the result names them for
`cleanup --run ID` or `--all`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import cast

from nccl_k8s.errors import Conflict, FailureReason, NoSuchSchedule, NotFound, RunFailed
from nccl_k8s.k8s.api._client import ClientSettings, KubeClient
from nccl_k8s.k8s.api._sync import run_sync
from nccl_k8s.k8s.api._types import Kind, Obj
from nccl_k8s.k8s.nodes._history import HISTORY_NAME
from nccl_k8s.k8s.nodes._nodecheck import CHECK_LABEL
from nccl_k8s.k8s.rendering._names import APP_NAME, RENDERED_ANNOTATION
from nccl_k8s.k8s.rendering._schedule import (
    SCHEDULE_LABEL,
    Member,
    check_name,
    schedule_members,
)
from nccl_k8s.k8s.run._plumbing import namespace_of, owned_by, runs_in, until_pods_gone
from nccl_k8s.k8s.run._watch import WatchSettings
from nccl_k8s.spec import LABEL_MANAGED_BY, LABEL_NAME

#: Kept, and said so: the fleet's record, not the schedule's.
KEPT = (
    f"the node labels and configmap {HISTORY_NAME} (the fleet's record, which deploy "
    "--healthy-only, doctor and nodes history read)"
)

_NOT_OURS = (
    f"carries {SCHEDULE_LABEL}={{name}} but not both {LABEL_NAME} and {LABEL_MANAGED_BY}: "
    f"{APP_NAME}: not made by nccl-k8s, left alone"
)
_NOT_PRINTED = "not an object `nodes schedule --name {name}` prints in this namespace, left alone"
_UNMARKED = (
    f"no render mark {RENDERED_ANNOTATION}: {{mark}}: not made by nodes schedule, left alone"
)


@dataclasses.dataclass
class Unscheduled:
    """What `cleanup --schedule` did."""

    name: str
    namespace: str
    deleted: list[str]
    """`Kind/name` of every object deleted, in delete order."""
    elapsed_s: float
    skipped: list[str] = dataclasses.field(default_factory=list)
    """`Kind/name: why` of every object with the schedule's label that was not deleted."""
    runs: list[str] = dataclasses.field(default_factory=list)
    """Pair-test runs of a nodes check still in the namespace (not deleted: runs)."""
    jobs: int | None = None
    """The Jobs of the deleted CronJob, gone with it with their pods; None: no CronJob deleted."""
    kept: str = KEPT

    def failure(self) -> str | None:
        """Why nothing was deleted though objects carry the label (every one someone else's)."""
        if self.deleted:
            return None
        return (
            f"cleanup --schedule {self.name}: nothing deleted in {self.namespace}: the "
            f"{len(self.skipped)} object(s) with its label were not made by nccl-k8s nodes "
            "schedule (listed above); delete them yourself if they are yours to delete"
        )


def cleanup_schedule(
    name: str,
    *,
    client: ClientSettings,
    namespace: str | None = None,
    timeout_s: float = 120.0,
    watch: WatchSettings | None = None,
) -> Unscheduled:
    """`cleanup_schedule_async` over a client of its own."""
    check_name(name, namespace or "default", flag="--schedule")
    return run_sync(
        lambda kc: cleanup_schedule_async(
            kc, name, namespace=namespace, timeout_s=timeout_s, watch=watch
        ),
        client,
    )


def _ours(obj: Obj) -> bool:
    """Both our labels: `app.kubernetes.io/name` and `managed-by` nccl-k8s."""
    labels = obj["metadata"].get("labels") or {}
    return labels.get(LABEL_NAME) == APP_NAME and labels.get(LABEL_MANAGED_BY) == APP_NAME


def _marked(obj: Obj, member: Member) -> bool:
    """The render mark `nodes schedule` prints on this object."""
    return (obj["metadata"].get("annotations") or {}).get(RENDERED_ANNOTATION) == member.mark


async def _list(kc: KubeClient, m: Member, ns: str, name: str) -> list[Obj]:
    try:
        items, _ = await kc.list(
            cast(Kind, m.kind),
            namespace=ns if m.namespaced else None,
            labels={SCHEDULE_LABEL: name},
            api_version=m.api_version,
        )
    except NotFound:
        return []  # a kind the cluster does not serve (admission policies before 1.30)
    return items


async def cleanup_schedule_async(
    kc: KubeClient,
    name: str,
    *,
    namespace: str | None = None,
    timeout_s: float = 120.0,
    watch: WatchSettings | None = None,
) -> Unscheduled:
    """Delete the objects of schedule `name` (module docstring), the CronJob first, and wait by
    watch until its checks' pods are gone. NoSuchSchedule when nothing carries its label."""
    start = time.monotonic()
    ns = await namespace_of(kc, namespace)
    check_name(name, ns, flag="--schedule")
    members = schedule_members(name, ns)
    kinds = list(dict.fromkeys((m.kind, m.api_version, m.namespaced) for m in members))
    lists = await asyncio.gather(
        *(_list(kc, Member(k, v, "", n, ""), ns, name) for k, v, n in kinds)
    )
    by_name = {(m.kind, m.name): m for m in members}
    doomed: list[tuple[Member, Obj]] = []
    skipped: list[str] = []
    for (kind, _, namespaced), items in zip(kinds, lists, strict=True):
        for obj in items:
            oname = str(obj["metadata"]["name"])
            member = by_name.get((kind, oname))
            if not _ours(obj):
                skipped.append(f"{kind}/{oname}: {_NOT_OURS.format(name=name)}")
            elif member is None:
                # A cluster-scoped one is the same-named schedule's of another namespace (its
                # ClusterRole names that namespace): not this one's, nor worth a line.
                if namespaced:
                    skipped.append(f"{kind}/{oname}: {_NOT_PRINTED.format(name=name)}")
            elif not _marked(obj, member):
                skipped.append(f"{kind}/{oname}: {_UNMARKED.format(mark=member.mark)}")
            else:
                doomed.append((member, obj))
    if not doomed and not skipped:
        raise NoSuchSchedule(
            f"no schedule {name} in namespace {ns}: no object carries {SCHEDULE_LABEL}={name} "
            f"(`kubectl get cronjobs -n {ns} -l {SCHEDULE_LABEL}` lists the schedules)",
            namespace=ns,
            name=name,
            server=kc.server,
        )
    order = {(m.kind, m.name): i for i, m in enumerate(members)}
    doomed.sort(key=lambda mo: order[(mo[0].kind, mo[0].name)], reverse=True)
    cronjobs = {str(o["metadata"]["uid"]) for m, o in doomed if m.kind == "CronJob"}
    jobs = await _jobs_of(kc, ns, name, cronjobs)
    deleted: list[str] = []
    for m, obj in doomed:
        try:
            await kc.delete(
                cast(Kind, m.kind),
                m.name,
                namespace=ns if m.namespaced else None,
                propagation="Background",
                uid=str(obj["metadata"]["uid"]),
                api_version=m.api_version,
            )
        except Conflict:
            skipped.append(f"{m.kind}/{m.name}: replaced by another object meanwhile")
            continue
        deleted.append(f"{m.kind}/{m.name}")
    left = await _wait_pods_gone(kc, ns, name, jobs, timeout_s=timeout_s, watch=watch)
    if left:
        raise RunFailed(
            f"{len(left)} pod(s) of schedule {name}'s checks are still terminating after "
            f"{timeout_s:g}s ({', '.join(left[:4])}{', ...' if len(left) > 4 else ''}; a node "
            "may be unreachable); the schedule's objects are deleted",
            reason=FailureReason.STILL_TERMINATING,
        )
    runs = await runs_in(kc, ns, whole=())
    tests = sorted(
        rid
        for rid, objs in runs.items()
        if any(CHECK_LABEL in (o["metadata"].get("labels") or {}) for o in objs.values())
    )
    took_jobs = len(jobs) if any(d.startswith("CronJob/") for d in deleted) else None
    return Unscheduled(name, ns, deleted, time.monotonic() - start, skipped, tests, took_jobs)


async def _jobs_of(kc: KubeClient, ns: str, name: str, cronjobs: set[str]) -> set[str]:
    """The uids of the Jobs the schedule's CronJob started (their jobTemplate carries the
    schedule's label; the CronJob controller makes the CronJob their owner)."""
    if not cronjobs:
        return set()
    items, _ = await kc.list("Job", namespace=ns, labels={SCHEDULE_LABEL: name})
    return {str(j["metadata"]["uid"]) for j in items if owned_by(j, cronjobs)}


async def _wait_pods_gone(
    kc: KubeClient,
    ns: str,
    name: str,
    jobs: set[str],
    *,
    timeout_s: float,
    watch: WatchSettings | None,
) -> list[str]:
    """Watch until no pod of those Jobs is left; the names still there after `timeout_s`."""
    if not jobs:
        return []
    return await until_pods_gone(
        kc,
        ns,
        {SCHEDULE_LABEL: name},
        lambda pod: owned_by(pod, jobs),
        timeout_s=timeout_s,
        watch=watch,
    )


__all__ = ["KEPT", "Unscheduled", "cleanup_schedule", "cleanup_schedule_async"]
