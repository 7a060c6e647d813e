"""status and list: a run's phase and pods, and the runs of a namespace."""

from __future__ import annotations

import asyncio

from nccl_k8s.k8s._client import ClientSettings, KubeClient
from nccl_k8s.k8s._monitor import STOPPED_ANNOTATION
from nccl_k8s.k8s._outcomes import RunStatus, RunSummary
from nccl_k8s.k8s._plumbing import (
    created_of,
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
    rank_key,
    run_phase,
)
from nccl_k8s.k8s._settings import WaitSettings
from nccl_k8s.k8s._types import Obj
from nccl_k8s.k8s._verdicts import gather_verdict
from nccl_k8s.spec import LABEL_INSTANCE


def status(
    run_id: str | None = None, *, client: ClientSettings, namespace: str | None = None
) -> RunStatus:
    async def main(kc: KubeClient) -> RunStatus:
        ns = await namespace_of(kc, namespace)
        rid = await resolve_run(kc, ns, run_id)
        workload, (raw, _) = await asyncio.gather(
            get_workload(kc, ns, rid), kc.list("Pod", namespace=ns, labels=run_labels(rid))
        )
        pods = sorted((pod_info(p) for p in raw), key=rank_key)
        if workload is None and not pods:
            runs = await runs_in(kc, ns)
            if rid not in runs:
                raise no_run(kc, ns, rid)
        phase = run_phase(workload, pods)
        detail = await _detail(kc, ns, workload, raw, phase)
        created = (workload or {}).get("metadata", {}).get("creationTimestamp")
        return RunStatus(
            rid, ns, workload.get("kind") if workload else None, phase, detail, created, pods
        )

    return run_sync(main, client)


async def _detail(
    kc: KubeClient, ns: str, workload: Obj | None, pods: list[Obj], phase: str
) -> str | None:
    """Why a run failed, as `deploy --wait` would have named it: the verdict nccl-k8s recorded
    when it stopped the run, else the culprit from the pods, else the Job's condition."""
    stopped = ((workload or {}).get("metadata", {}).get("annotations") or {}).get(
        STOPPED_ANNOTATION
    )
    if stopped:
        return f"stopped by nccl-k8s: {stopped}"
    if phase not in ("Failed", "Failing", "Degraded"):
        return None
    verdict, _ = await gather_verdict(kc, ns, pods, WaitSettings())
    if verdict is not None:
        return verdict.text()
    cond = condition(workload, "Failed")
    return f"{cond.get('reason')}: {cond.get('message')}" if cond else None


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
