"""status and list: a run's phase and pods, and the runs of a namespace."""

from __future__ import annotations

import asyncio

from nccl_k8s.k8s._client import ClientSettings, KubeClient
from nccl_k8s.k8s._outcomes import RunStatus, RunSummary
from nccl_k8s.k8s._plumbing import (
    created_of,
    get_pods,
    get_workload,
    namespace_of,
    no_run,
    resolve_run,
    run_labels,
    run_sync,
    runs_in,
)
from nccl_k8s.k8s._pods import (
    PodInfo,
    condition,
    latest_per_rank,
    phase_counts,
    pod_info,
    run_phase,
)
from nccl_k8s.spec import LABEL_INSTANCE


def status(
    run_id: str | None = None, *, client: ClientSettings, namespace: str | None = None
) -> RunStatus:
    async def main(kc: KubeClient) -> RunStatus:
        ns = await namespace_of(kc, namespace)
        rid = await resolve_run(kc, ns, run_id)
        workload, pods = await asyncio.gather(get_workload(kc, ns, rid), get_pods(kc, ns, rid))
        if workload is None and not pods:
            runs = await runs_in(kc, ns)
            if rid not in runs:
                raise no_run(kc, ns, rid)
        phase = run_phase(workload, pods)
        detail = None
        cond = condition(workload, "Failed")
        if cond:
            detail = f"{cond.get('reason')}: {cond.get('message')}"
        created = (workload or {}).get("metadata", {}).get("creationTimestamp")
        return RunStatus(
            rid, ns, workload.get("kind") if workload else None, phase, detail, created, pods
        )

    return run_sync(main, client)


def list_runs(*, client: ClientSettings, namespace: str | None = None) -> list[RunSummary]:
    async def main(kc: KubeClient) -> list[RunSummary]:
        ns = await namespace_of(kc, namespace)
        runs, (pods, _) = await asyncio.gather(
            runs_in(kc, ns), kc.list("Pod", namespace=ns, labels=run_labels())
        )
        by_run: dict[str, list[PodInfo]] = {}
        for pod in pods:
            rid = (pod["metadata"].get("labels") or {}).get(LABEL_INSTANCE)
            if rid:
                by_run.setdefault(rid, []).append(pod_info(pod))
        out = []
        for rid, objs in runs.items():
            workload = objs.get("Job") or objs.get("StatefulSet")
            infos = by_run.get(rid, [])
            out.append(
                RunSummary(
                    rid,
                    workload.get("kind") if workload else None,
                    run_phase(workload, infos),
                    created_of(objs),
                    phase_counts(latest_per_rank(infos)),
                )
            )
        return sorted(out, key=lambda r: (r.created or "", r.run_id))

    return run_sync(main, client)
