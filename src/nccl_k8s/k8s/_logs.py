"""logs: every pod's log, fetched whole (bounded concurrency) or followed, lines tagged by rank."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

from nccl_k8s.errors import ClusterError, NotFound
from nccl_k8s.k8s._client import ClientSettings, KubeClient
from nccl_k8s.k8s._manifests import CONTAINER_NAME
from nccl_k8s.k8s._plumbing import bounded, get_pods, namespace_of, resolve_run, run_sync
from nccl_k8s.k8s._pods import PodInfo, latest_per_rank

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
    concurrency: int = 32,
) -> str:
    """Every pod's log (one pod per rank, the newest), each line handed to `on_line(rank, line)`:
    rank by rank, or interleaved as written with `follow`. Returns the run id."""

    async def main(kc: KubeClient) -> str:
        ns = await namespace_of(kc, namespace)
        rid = await resolve_run(kc, ns, run_id)
        pods = latest_per_rank(await get_pods(kc, ns, rid))
        if rank is not None:
            pods = [p for p in pods if p.rank == rank]
            if not pods:
                raise NotFound(f"run {rid} has no pod of rank {rank}", namespace=ns, name=rid)
        if not pods:
            raise NotFound(f"run {rid} has no pods (yet)", namespace=ns, name=rid)
        if follow:
            await asyncio.gather(*(_follow(kc, ns, p, tail, on_line) for p in pods))
        else:
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
            return f"(no log: {pod.reason or pod.phase})"
        raise


async def _follow(kc: KubeClient, ns: str, pod: PodInfo, tail: int | None, on_line: LineFn) -> None:
    try:
        async for line in kc.follow_logs(
            pod.name, namespace=ns, container=CONTAINER_NAME, tail_lines=tail
        ):
            on_line(pod.rank, line.rstrip("\n"))
    except ClusterError as e:
        if e.status != 400:
            raise
        on_line(pod.rank, f"(no log: {pod.reason or pod.phase})")
