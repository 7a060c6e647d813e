"""What every run function shares: one event loop per call, the run's labels, finding runs,
their workload and pods, a list+watch source, bounded concurrency.

Selection is by label only: `app.kubernetes.io/name=nccl-k8s`, `app.kubernetes.io/managed-by=
nccl-k8s` and `app.kubernetes.io/instance=<run-id>`; nothing without them is read, changed or
deleted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

from nccl_k8s.errors import NotFound
from nccl_k8s.k8s._client import ClientSettings, KubeClient
from nccl_k8s.k8s._manifests import APP_NAME
from nccl_k8s.k8s._pods import PodInfo, pod_info, rank_key
from nccl_k8s.k8s._types import Kind, Obj
from nccl_k8s.spec import LABEL_INSTANCE, LABEL_MANAGED_BY, LABEL_NAME

T = TypeVar("T")

WORKLOADS: tuple[Kind, ...] = ("Job", "StatefulSet")
#: Delete order: the workload first (its pods go with it), then what it used.
RUN_KINDS: tuple[Kind, ...] = ("Job", "StatefulSet", "Service", "ConfigMap")


def run_sync(factory: Callable[[KubeClient], Awaitable[T]], settings: ClientSettings) -> T:
    """Connect (reading the kubeconfig sends nothing), run `factory(client)`, close."""
    client = KubeClient.connect(settings)

    async def main() -> T:
        async with client:
            return await factory(client)

    return asyncio.run(main())


def run_labels(run_id: str | None = None) -> dict[str, str]:
    labels = {LABEL_NAME: APP_NAME, LABEL_MANAGED_BY: APP_NAME}
    if run_id is not None:
        labels[LABEL_INSTANCE] = run_id
    return labels


class ListWatch:
    """A WatchSource over the client: one kind, one namespace, our labels."""

    def __init__(self, kc: KubeClient, kind: Kind, namespace: str, labels: dict[str, str]):
        self.kc, self.kind, self.namespace, self.labels = kc, kind, namespace, labels

    async def list(self) -> tuple[list[Obj], str]:
        return await self.kc.list(self.kind, namespace=self.namespace, labels=self.labels)

    def watch(self, resource_version: str) -> AsyncIterator[tuple[str, Obj]]:
        return self.kc.watch(
            self.kind,
            namespace=self.namespace,
            labels=self.labels,
            resource_version=resource_version,
            server_timeout_s=300,
        )


async def namespace_of(kc: KubeClient, namespace: str | None) -> str:
    return namespace or kc.namespace


async def runs_in(kc: KubeClient, namespace: str) -> dict[str, dict[str, Obj]]:
    """run id -> {kind: object} for every labelled object of every run in the namespace."""
    found: dict[str, dict[str, Obj]] = {}
    lists = await asyncio.gather(
        *(kc.list(kind, namespace=namespace, labels=run_labels()) for kind in RUN_KINDS)
    )
    for kind, (items, _) in zip(RUN_KINDS, lists, strict=True):
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
    runs = await runs_in(kc, namespace)
    if not runs:
        raise NotFound(
            f"no nccl-k8s runs in namespace {namespace} (deploy one, or pass -n/--namespace)",
            namespace=namespace,
            server=kc.server,
        )
    return max(runs, key=lambda rid: (created_of(runs[rid]), rid))


async def get_workload(kc: KubeClient, namespace: str, run_id: str) -> Obj | None:
    for kind in WORKLOADS:
        items, _ = await kc.list(kind, namespace=namespace, labels=run_labels(run_id))
        if items:
            return items[0]
    return None


async def get_pods(kc: KubeClient, namespace: str, run_id: str) -> list[PodInfo]:
    items, _ = await kc.list("Pod", namespace=namespace, labels=run_labels(run_id))
    return sorted((pod_info(p) for p in items), key=rank_key)


def no_run(kc: KubeClient, namespace: str, run_id: str) -> NotFound:
    return NotFound(
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


def keep_note(run_id: str) -> str:
    return (
        f"(the run's objects stay for `nccl-k8s status/logs --run {run_id}`; "
        f"`nccl-k8s cleanup --run {run_id}` removes them)"
    )


def rank_text(p: PodInfo) -> str:
    return "?" if p.rank is None else str(p.rank)
