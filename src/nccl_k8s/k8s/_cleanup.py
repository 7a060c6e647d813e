"""cleanup: delete a run's objects, workload first, and wait by watch until its pods are gone."""

from __future__ import annotations

import asyncio
import contextlib
import time

from nccl_k8s.errors import RunFailed
from nccl_k8s.k8s._client import ClientSettings, KubeClient
from nccl_k8s.k8s._outcomes import Cleaned
from nccl_k8s.k8s._plumbing import (
    RUN_KINDS,
    ListWatch,
    namespace_of,
    no_run,
    resolve_run,
    run_labels,
    run_sync,
    runs_in,
)
from nccl_k8s.k8s._types import Obj
from nccl_k8s.k8s._watch import WatchSettings, informer, within
from nccl_k8s.spec import LABEL_INSTANCE


def cleanup(
    run_id: str | None = None,
    *,
    client: ClientSettings,
    namespace: str | None = None,
    all_runs: bool = False,
    timeout_s: float = 120.0,
    watch: WatchSettings | None = None,
) -> Cleaned:
    """Delete the run's labelled objects (every run's with `all_runs`), workload first, then wait
    by watch until their pods are gone. Objects without our labels are never touched."""

    async def main(kc: KubeClient) -> Cleaned:
        start = time.monotonic()
        ns = await namespace_of(kc, namespace)
        runs = await runs_in(kc, ns)
        if all_runs:
            rids = sorted(runs)
        else:
            rid = await resolve_run(kc, ns, run_id)
            pods, _ = await kc.list("Pod", namespace=ns, labels=run_labels(rid))
            if rid not in runs and not pods:
                raise no_run(kc, ns, rid)
            rids = [rid]
        deleted: list[str] = []
        for rid in rids:
            for kind in RUN_KINDS:
                obj = runs.get(rid, {}).get(kind)
                if obj is not None:
                    # False: already gone with the workload (ownerReferences cascade).
                    await kc.delete(
                        kind, obj["metadata"]["name"], namespace=ns, propagation="Background"
                    )
                    deleted.append(f"{kind}/{obj['metadata']['name']}")
        labels = run_labels(rids[0]) if len(rids) == 1 else run_labels()
        await _wait_pods_gone(kc, ns, labels, set(rids), deleted, timeout_s, watch)
        return Cleaned(ns, rids, deleted, time.monotonic() - start)

    return run_sync(main, client)


async def _wait_pods_gone(
    kc: KubeClient,
    ns: str,
    labels: dict[str, str],
    rids: set[str],
    deleted: list[str],
    timeout_s: float,
    watch: WatchSettings | None,
) -> None:
    """Until no pod of the runs is left; pods the garbage collector has not reached (or that
    belong to no workload) are deleted here too."""
    if not rids:
        return
    asked: set[str] = set()

    def ours(pod: Obj) -> bool:
        return (pod["metadata"].get("labels") or {}).get(LABEL_INSTANCE) in rids

    async def until_gone() -> None:
        source = ListWatch(kc, "Pod", ns, labels)
        async with contextlib.aclosing(informer(source, watch)) as updates:
            async for update in updates:
                left = [p for p in update.objects.values() if ours(p)]
                if not left:
                    return
                for pod in left:
                    name = pod["metadata"]["name"]
                    owned = pod["metadata"].get("ownerReferences")
                    if (
                        name not in asked
                        and not owned
                        and not pod["metadata"].get("deletionTimestamp")
                    ):
                        asked.add(name)
                        if await kc.delete("Pod", name, namespace=ns):
                            deleted.append(f"Pod/{name}")

    try:
        await within(until_gone(), timeout_s)
    except asyncio.TimeoutError:
        raise RunFailed(
            f"the pods of {', '.join(sorted(rids))} are still terminating after {timeout_s:g}s "
            "(a node may be unreachable); their objects are deleted"
        ) from None
