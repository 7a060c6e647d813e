"""What every run function shares: the run's labels, finding runs, their workload and pods,
a list+watch source, bounded concurrency.

Selection is by label: `app.kubernetes.io/name=nccl-k8s`, `app.kubernetes.io/managed-by=
nccl-k8s` and `app.kubernetes.io/instance=<run-id>`; nothing without them is read. Labels are
not ownership, though (anyone can write them): what may be deleted is decided by `ours`, from
what the API server itself records (managedFields, ownerReferences).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from typing import TypeVar

from nccl_k8s.errors import ClusterError, NoSuchRun, NotFound
from nccl_k8s.k8s.api._client import FIELD_MANAGER, KubeClient
from nccl_k8s.k8s.api._lists import list_metadata
from nccl_k8s.k8s.api._translate import selector
from nccl_k8s.k8s.api._types import Kind, Obj
from nccl_k8s.k8s.rendering._names import APP_NAME, RENDERED_ANNOTATION
from nccl_k8s.k8s.run._outcomes import Created
from nccl_k8s.k8s.run._pods import PodInfo, pod_info, rank_key
from nccl_k8s.k8s.run._watch import WatchSettings, informer, within
from nccl_k8s.spec import LABEL_INSTANCE, LABEL_MANAGED_BY, LABEL_NAME

T = TypeVar("T")

WORKLOADS: tuple[Kind, ...] = ("Job", "StatefulSet")
#: Delete order: the workload first (its pods go with it), then what it used.
RUN_KINDS: tuple[Kind, ...] = ("Job", "StatefulSet", "Service", "ConfigMap")


def run_labels(run_id: str | None = None) -> dict[str, str]:
    labels = {LABEL_NAME: APP_NAME, LABEL_MANAGED_BY: APP_NAME}
    if run_id is not None:
        labels[LABEL_INSTANCE] = run_id
    return labels


class ListWatch:
    """A WatchSource over the client: one kind, one namespace, our labels (or fields)."""

    def __init__(
        self,
        kc: KubeClient,
        kind: Kind,
        namespace: str,
        labels: dict[str, str],
        fields: Mapping[str, str] | None = None,
    ):
        self.kc, self.kind, self.namespace, self.labels = kc, kind, namespace, labels
        self.fields = fields

    async def list(self) -> tuple[list[Obj], str]:
        return await self.kc.list(
            self.kind, namespace=self.namespace, labels=self.labels, fields=self.fields
        )

    def watch(self, resource_version: str) -> AsyncIterator[tuple[str, Obj]]:
        return self.kc.watch(
            self.kind,
            namespace=self.namespace,
            labels=self.labels,
            fields=self.fields,
            resource_version=resource_version,
            server_timeout_s=300,
        )


async def namespace_of(kc: KubeClient, namespace: str | None) -> str:
    return namespace or kc.namespace


async def runs_in(
    kc: KubeClient, namespace: str, *, whole: Collection[Kind] = WORKLOADS
) -> dict[str, dict[str, Obj]]:
    """run id -> {kind: object} for every labelled object of every run in the namespace; the
    kinds in `whole` whole, the others their metadata alone (a run's ConfigMap carries the
    engine: ~100 kB a run that only its labels and creationTimestamp are read of here)."""
    found: dict[str, dict[str, Obj]] = {}
    sel = selector(run_labels())

    async def one(kind: Kind) -> list[Obj]:
        if kind in whole:
            return (await kc.list(kind, namespace=namespace, label_selector=sel))[0]
        return (await list_metadata(kc, kind, namespace=namespace, label_selector=sel))[0]

    lists = await asyncio.gather(*(one(kind) for kind in RUN_KINDS))
    for kind, items in zip(RUN_KINDS, lists, strict=True):
        for obj in items:
            rid = (obj["metadata"].get("labels") or {}).get(LABEL_INSTANCE)
            if rid:
                found.setdefault(rid, {})[kind] = obj
    return found


def created_of(objs: dict[str, Obj]) -> str:
    return max(str(o["metadata"].get("creationTimestamp") or "") for o in objs.values())


async def resolve_run(kc: KubeClient, namespace: str, run_id: str | None) -> str:
    """The given run id, or the latest run in the namespace; NotFound when there is none."""
    if run_id is not None:
        return run_id
    runs = await runs_in(kc, namespace, whole=())
    if not runs:
        raise NotFound(
            f"no nccl-k8s runs in namespace {namespace} (deploy one, or pass -n/--namespace)",
            namespace=namespace,
            server=kc.server,
        )
    return max(runs, key=lambda rid: (created_of(runs[rid]), rid))


async def get_workload(kc: KubeClient, namespace: str, run_id: str) -> Obj | None:
    """The run's Job, else its StatefulSet (both asked at once), else None."""
    lists = await asyncio.gather(
        *(kc.list(kind, namespace=namespace, labels=run_labels(run_id)) for kind in WORKLOADS)
    )
    return next((items[0] for items, _ in lists if items), None)


async def get_pods(kc: KubeClient, namespace: str, run_id: str) -> list[PodInfo]:
    items, _ = await kc.list("Pod", namespace=namespace, labels=run_labels(run_id))
    return sorted((pod_info(p) for p in items), key=rank_key)


def no_run(kc: KubeClient, namespace: str, run_id: str) -> NotFound:
    return NoSuchRun(
        f"no run {run_id} in namespace {namespace} (`nccl-k8s list -n {namespace}` shows the runs)",
        namespace=namespace,
        name=run_id,
        server=kc.server,
    )


async def bounded(limit: int, factories: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
    """Run the coroutines, at most `limit` at a time, results in order."""
    sem = asyncio.Semaphore(limit)

    async def one(f: Callable[[], Awaitable[T]]) -> T:
        async with sem:
            return await f()

    return list(await asyncio.gather(*(one(f) for f in factories)))


def written_by_us(obj: Obj) -> bool:
    """The API server recorded a write by this tool's field manager (a create or an apply by
    nccl-k8s): a user's object that merely carries our labels has no such entry."""
    return any(
        m.get("manager") == FIELD_MANAGER for m in obj["metadata"].get("managedFields") or []
    )


def rendered_by_us(obj: Obj) -> bool:
    """The object came from `render` for the run its labels name (applied by kubectl or a
    GitOps tool, so no nccl-k8s field manager): it carries our render mark with that run id."""
    meta = obj["metadata"]
    run = (meta.get("labels") or {}).get(LABEL_INSTANCE)
    return run is not None and (meta.get("annotations") or {}).get(RENDERED_ANNOTATION) == run


def made_by_us(obj: Obj) -> bool:
    """Written by nccl-k8s (its field manager) or applied from its `render` (its mark)."""
    return written_by_us(obj) or rendered_by_us(obj)


def owned_by(obj: Obj, uids: Collection[str]) -> bool:
    """An ownerReference to one of these objects (by uid, which no one else can forge)."""
    return any(r.get("uid") in uids for r in obj["metadata"].get("ownerReferences") or [])


def ours(obj: Obj, workload_uids: Collection[str]) -> bool:
    """Whether nccl-k8s created `obj`: written by its field manager, applied from its render
    (the mark), or owned by one of the run workloads it created (the Job's pods; the ConfigMap
    and Service)."""
    return made_by_us(obj) or owned_by(obj, workload_uids)


async def wait_pods_gone(
    kc: KubeClient,
    namespace: str,
    run_ids: Collection[str],
    *,
    timeout_s: float,
    watch: WatchSettings | None = None,
    which: Callable[[Obj], bool] | None = None,
) -> list[str]:
    """Watch until no pod of the runs is left (of those `which` accepts: a pod that only
    carries the labels is not waited for); the names still there after `timeout_s` (empty: all
    gone)."""
    if not run_ids:
        return []
    labels = run_labels(next(iter(run_ids))) if len(run_ids) == 1 else run_labels()

    def mine(pod: Obj) -> bool:
        rid = (pod["metadata"].get("labels") or {}).get(LABEL_INSTANCE)
        return rid in run_ids and (which is None or which(pod))

    return await until_pods_gone(kc, namespace, labels, mine, timeout_s=timeout_s, watch=watch)


async def until_pods_gone(
    kc: KubeClient,
    namespace: str,
    labels: dict[str, str],
    mine: Callable[[Obj], bool],
    *,
    timeout_s: float,
    watch: WatchSettings | None = None,
) -> list[str]:
    """Watch the pods with `labels` until none that `mine` accepts is left; the names still
    there after `timeout_s` (empty: all gone)."""
    left: list[Obj] = []

    async def until_gone() -> None:
        nonlocal left
        source = ListWatch(kc, "Pod", namespace, labels)
        async with contextlib.aclosing(informer(source, watch)) as updates:
            async for update in updates:
                left = [p for p in update.objects.values() if mine(p)]
                if not left:
                    return

    try:
        await within(until_gone(), timeout_s)
    except asyncio.TimeoutError:
        return sorted(str(p["metadata"]["name"]) for p in left)
    return []


async def delete_created(kc: KubeClient, namespace: str, created: Sequence[Created]) -> list[str]:
    """Delete what a deploy created, newest first, each by its uid (an object of that name that
    is not the one the deploy made stays). Best effort: a failure here must not hide the error
    that caused it. Returns `Kind/name` of what is gone now (deleted here, or with the workload
    by its ownerReferences)."""
    gone: list[str] = []
    for ref in reversed(created):
        with contextlib.suppress(ClusterError):  # Conflict: replaced meanwhile, not ours
            await kc.delete(
                ref.kind, ref.name, namespace=namespace, uid=ref.uid, api_version=ref.api_version
            )
            gone.append(str(ref))
    return gone


def keep_note(run_id: str) -> str:
    return (
        f"(the run's objects stay for `nccl-k8s status/logs --run {run_id}`; "
        f"`nccl-k8s cleanup --run {run_id}` removes them)"
    )


def rank_text(p: PodInfo) -> str:
    return "?" if p.rank is None else str(p.rank)
