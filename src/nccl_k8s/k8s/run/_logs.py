"""logs: every pod's log, fetched whole (bounded concurrency) or followed, lines tagged by rank.

Following (`logs -f`) watches the run's pods: a pod that has not started yet (unscheduled,
pulling its image, creating its container) is waited for, and why it waits is said once per
change; once its container runs, its log is followed until it ends. A rank whose pod is
replaced (a lost node) is followed again in the new pod. It ends when every rank's pod has been
followed to its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from typing import Any

from nccl_k8s.errors import ClusterError, NotFound
from nccl_k8s.k8s.api._client import ClientSettings, KubeClient
from nccl_k8s.k8s.api._sync import run_sync
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.rendering._names import CONTAINER_NAME
from nccl_k8s.k8s.run._culprit import started
from nccl_k8s.k8s.run._plumbing import (
    ListWatch,
    bounded,
    get_pods,
    get_workload,
    namespace_of,
    no_run,
    resolve_run,
    run_labels,
)
from nccl_k8s.k8s.run._pods import PodInfo, latest_per_rank, pod_info
from nccl_k8s.k8s.run._watch import informer

LineFn = Callable[[int | None, str], None]


def logs(
    run_id: str | None = None,
    *,
    client: ClientSettings,
    namespace: str | None = None,
    rank: int | None = None,
    follow: bool = False,
    tail: int | None = None,
    on_line: LineFn,
    on_wait: LineFn | None = None,
    concurrency: int = 32,
) -> str:
    """Every pod's log (one pod per rank, the newest), each line handed to `on_line(rank, line)`:
    rank by rank, or interleaved as written with `follow`. While following, `on_wait(rank, why)`
    hears why a pod has no log yet. Returns the run id."""

    async def main(kc: KubeClient) -> str:
        ns = await namespace_of(kc, namespace)
        rid = await resolve_run(kc, ns, run_id)
        if follow:
            await _follow_run(kc, ns, rid, rank, tail, on_line, on_wait or (lambda r, t: None))
            return rid
        pods = latest_per_rank(await get_pods(kc, ns, rid))
        if rank is not None:
            pods = [p for p in pods if p.rank == rank]
            if not pods:
                raise NotFound(f"run {rid} has no pod of rank {rank}", namespace=ns, name=rid)
        if not pods:
            if await get_workload(kc, ns, rid) is None:
                raise no_run(kc, ns, rid)
            raise NotFound(f"run {rid} has no pods (yet)", namespace=ns, name=rid)
        texts = await bounded(
            concurrency, [functools.partial(_fetch_or_reason, kc, ns, p, tail) for p in pods]
        )
        for p, text in zip(pods, texts, strict=True):
            for line in text.splitlines():
                on_line(p.rank, line)
        return rid

    return run_sync(main, client)


async def _fetch_or_reason(kc: KubeClient, ns: str, pod: PodInfo, tail: int | None) -> str:
    try:
        return await kc.logs(pod.name, namespace=ns, container=CONTAINER_NAME, tail_lines=tail)
    except ClusterError as e:
        if e.status == 400:  # not started yet: say why
            return f"(no log: {waiting_words(pod)})"
        raise


def waiting_words(pod: PodInfo) -> str:
    """Why a pod has no log yet, in a user's words."""
    if pod.problem is not None and pod.problem.reason == "Unschedulable":
        return f"unscheduled: {pod.problem.message}"
    if pod.reason == "NotScheduled":
        return "not scheduled yet"
    if pod.reason in ("ErrImagePull", "ImagePullBackOff"):
        return f"pulling its image failed, the kubelet retries: {pod.message or pod.reason}"
    if pod.reason == "ContainerCreating":
        return "creating its container (pulling the image, mounting volumes)"
    if pod.reason:
        return f"{pod.reason}: {pod.message}" if pod.message else pod.reason
    return pod.phase


async def _follow_run(
    kc: KubeClient,
    ns: str,
    rid: str,
    rank: int | None,
    tail: int | None,
    on_line: LineFn,
    on_wait: LineFn,
) -> None:
    pods_now, _ = await kc.list("Pod", namespace=ns, labels=run_labels(rid))
    if not pods_now and await get_workload(kc, ns, rid) is None:
        raise no_run(kc, ns, rid)
    f = _LogFollower(kc, ns, rank, tail, on_line, on_wait)

    async def pump() -> None:
        source = ListWatch(kc, "Pod", ns, run_labels(rid))
        try:
            async with contextlib.aclosing(informer(source)) as updates:
                async for update in updates:
                    await f.queue.put(("pods", update.objects))
        except Exception as e:
            await f.queue.put(("error", e))

    watcher = asyncio.create_task(pump())
    try:
        current: list[PodInfo] = []
        while True:
            what, value = await f.queue.get()
            if what == "error":
                raise value
            if what == "ended":
                f.ended.add(value)
            elif what == "retry":
                f.following.pop(value, None)
            else:
                current = f.take(value)
            # Done when every stream followed has ended and no rank's pod is still to start.
            following = f.following
            if (
                following
                and set(following) <= f.ended
                and all(p.name in following for p in current)
            ):
                return
    finally:
        for task in [watcher, *f.following.values()]:
            task.cancel()
        await asyncio.gather(watcher, *f.following.values(), return_exceptions=True)


class _LogFollower:
    """`logs -f`'s state: the pods whose log is followed (a task each), those ended, what was
    said of each pod still waiting to start."""

    def __init__(
        self,
        kc: KubeClient,
        ns: str,
        rank: int | None,
        tail: int | None,
        on_line: LineFn,
        on_wait: LineFn,
    ) -> None:
        self.kc, self.ns, self.rank, self.tail = kc, ns, rank, tail
        self.on_line, self.on_wait = on_line, on_wait
        self.queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.following: dict[str, asyncio.Task[None]] = {}
        self.ended: set[str] = set()
        self.told: dict[str, str] = {}

    def take(self, objs: dict[str, Obj]) -> list[PodInfo]:
        """A change of the run's pods: follow each rank's pod once it runs, say why the others
        wait (once per change); the current pod of each rank."""
        rank, on_wait = self.rank, self.on_wait
        current = [
            p
            for p in latest_per_rank(pod_info(o) for o in objs.values())
            if rank is None or p.rank == rank
        ]
        if not current and not self.following and "" not in self.told:
            self.told[""] = "none"
            which = "pods" if rank is None else f"pod of rank {rank}"
            on_wait(rank, f"waiting: no {which} yet (the workload has not created it)")
        for p in current:
            if p.name in self.following:
                continue
            if started(objs[p.name]):
                self.following[p.name] = asyncio.create_task(self._one(p))
            elif p.phase in ("Succeeded", "Failed"):  # ended without ever running
                self.following[p.name] = asyncio.create_task(asyncio.sleep(0))
                self.ended.add(p.name)
                on_wait(p.rank, f"no log: it ended without running ({waiting_words(p)})")
            elif self.told.get(p.name) != (why := waiting_words(p)):
                self.told[p.name] = why
                on_wait(p.rank, f"waiting: {why}")
        return current

    async def _one(self, p: PodInfo) -> None:
        try:
            async for line in self.kc.follow_logs(
                p.name, namespace=self.ns, container=CONTAINER_NAME, tail_lines=self.tail
            ):
                self.on_line(p.rank, line.rstrip("\n"))
        except ClusterError as e:
            if e.status != 400:
                await self.queue.put(("error", e))
                return
            await self.queue.put(("retry", p.name))  # raced its start: follow on the next change
            return
        await self.queue.put(("ended", p.name))
