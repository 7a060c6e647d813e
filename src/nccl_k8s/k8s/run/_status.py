"""status and list: a run's phase and pods, and the runs of a namespace."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from typing import Any

from nccl_k8s.errors import ClusterError, Forbidden, UsageError
from nccl_k8s.k8s.api._client import ClientSettings, KubeClient
from nccl_k8s.k8s.api._sync import run_sync
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.rendering._names import CONTAINER_NAME, STOPPED_ANNOTATION
from nccl_k8s.k8s.run._outcomes import RunStatus, RunSummary
from nccl_k8s.k8s.run._plumbing import (
    created_of,
    get_workload,
    namespace_of,
    no_run,
    resolve_run,
    run_labels,
    runs_in,
)
from nccl_k8s.k8s.run._podlist import read_pods, template_scheduler
from nccl_k8s.k8s.run._pods import (
    PodInfo,
    condition,
    latest_per_rank,
    phase_counts,
    pod_info,
    rank_key,
    run_phase,
)


def status(
    run_id: str | None = None, *, client: ClientSettings, namespace: str | None = None
) -> RunStatus:
    async def main(kc: KubeClient) -> RunStatus:
        ns = await namespace_of(kc, namespace)
        rid = await resolve_run(kc, ns, run_id)
        workload = await get_workload(kc, ns, rid)
        if workload is None:  # no template to expect a scheduler from: every pod whole
            raw, _ = await kc.list("Pod", namespace=ns, labels=run_labels(rid))
            infos = [pod_info(p) for p in raw]
        else:
            scheduler = template_scheduler(workload)
            infos = (await read_pods(kc, ns, run_labels(rid), scheduler=scheduler)).infos
        pods = sorted(infos, key=rank_key)
        if workload is None and not pods:
            runs = await runs_in(kc, ns, whole=())
            if rid not in runs:
                raise no_run(kc, ns, rid)
        phase = run_phase(workload, pods)
        detail = await _detail(kc, ns, rid, workload, phase)
        created = (workload or {}).get("metadata", {}).get("creationTimestamp")
        sweep = None
        if (workload or {}).get("kind") == "StatefulSet":
            sweep = await last_sweep(kc, ns, pods)
        return RunStatus(
            rid,
            ns,
            workload.get("kind") if workload else None,
            phase,
            detail,
            created,
            pods,
            last_sweep=sweep,
            pod_sweeps=sweep_per_pod(sweep, pods) if sweep is not None else {},
        )

    return run_sync(main, client)


#: Lines of rank 0's log read first for its last sweep line: a sweep's table and results block
#: are far fewer for the sweeps continuous mode runs; the whole log is read only when they are not.
SWEEP_TAIL_LINES = 2000
_SWEEP_LINE = re.compile(r'NCCL_K8S_RESULT (\{"v":\d+,"kind":"sweep",.*\})\s*$')


async def last_sweep(kc: KubeClient, ns: str, pods: list[PodInfo]) -> dict[str, Any] | None:
    """The sweep line rank 0 printed last (engine --sweeps): which sweep, whether it passed, its
    failed ops and the ranks whose checks found wrong elements; None before the first ends."""
    rank0 = next((p for p in latest_per_rank(pods) if p.rank == 0), None)
    if rank0 is None:
        return None
    for tail in (SWEEP_TAIL_LINES, None):
        try:
            text = await kc.logs(
                rank0.name, namespace=ns, container=CONTAINER_NAME, tail_lines=tail
            )
        except ClusterError as e:
            if e.status == 400:  # not started (yet): no sweep
                return None
            raise
        for line in reversed(text.splitlines()):
            m = _SWEEP_LINE.search(line)
            if m is None:
                continue
            with contextlib.suppress(ValueError):
                found: dict[str, Any] = json.loads(m.group(1))
                found["pod"] = rank0.name
                return found
        if tail is None or text.count("\n") < tail:
            return None
    return None


def sweep_per_pod(sweep: dict[str, Any], pods: list[PodInfo]) -> dict[str, str]:
    """Each pod's part in the last sweep: the wrong elements its ranks found, else the sweep's
    verdict (a --min-busbw miss or a failed op is the run's, not one pod's)."""
    index = sweep.get("sweep")
    head = f"sweep {index}"
    wrong: dict[str, list[dict[str, Any]]] = {}
    for r in sweep.get("wrong_ranks") or []:
        wrong.setdefault(str(r.get("host")), []).append(r)
    out: dict[str, str] = {}
    for p in pods:
        mine = wrong.get(p.name)
        if mine:
            n = sum(int(r.get("wrong") or 0) for r in mine)
            ranks = ", ".join(str(r.get("rank")) for r in mine)
            out[p.name] = f"{head}: FAILED, {n} wrong elements on rank {ranks}"
        elif sweep.get("ok"):
            out[p.name] = f"{head}: ok"
        elif wrong:
            out[p.name] = f"{head}: failed elsewhere, its ranks were right"
        else:
            out[p.name] = f"{head}: FAILED ({', '.join(sweep.get('failed_ops') or [])})"
    return out


async def _detail(
    kc: KubeClient, ns: str, run_id: str, workload: Obj | None, phase: str
) -> str | None:
    """Why a run failed, as `deploy --wait` would have named it: the verdict nccl-k8s recorded
    when it stopped the run, else the culprit from the pods (read whole: only a failed run
    pays for that), else the Job's condition."""
    stopped = ((workload or {}).get("metadata", {}).get("annotations") or {}).get(
        STOPPED_ANNOTATION
    )
    if stopped:
        return f"stopped by nccl-k8s: {stopped}"
    if phase not in ("Failed", "Failing", "Degraded"):
        return None
    # The culprit's readers (and the engine's fault format they read) load only for a run
    # that failed: most `status` calls never need them.
    from nccl_k8s.k8s.run._settings import WaitSettings
    from nccl_k8s.k8s.run._verdicts import gather_verdict

    pods, _ = await kc.list("Pod", namespace=ns, labels=run_labels(run_id))
    verdict, _ = await gather_verdict(kc, ns, pods, WaitSettings())
    if verdict is not None:
        return verdict.text()
    cond = condition(workload, "Failed")
    return f"{cond.get('reason')}: {cond.get('message')}" if cond else None


async def require_namespace_async(kc: KubeClient, namespace: str | None) -> str:
    """The namespace a command will create runs in (the kubeconfig's when None), refused in one
    line (UsageError) when it does not exist: before the command starts anything. A user who
    may not read namespaces is not refused here (the creates will say)."""
    ns = await namespace_of(kc, namespace)
    with contextlib.suppress(Forbidden):
        if await kc.get("Namespace", ns) is None:
            raise UsageError(
                f"namespace {ns} does not exist on {kc.server}: create it (kubectl create "
                f"namespace {ns}) or name another with -n/--namespace",
                key="--namespace",
            )
    return ns


def list_runs(*, client: ClientSettings, namespace: str | None = None) -> list[RunSummary]:
    async def main(kc: KubeClient) -> list[RunSummary]:
        ns = await namespace_of(kc, namespace)
        runs, pods = await asyncio.gather(
            runs_in(kc, ns), read_pods(kc, ns, run_labels(), scheduler=None)
        )
        by_run: dict[str, list[PodInfo]] = {}
        for info in pods.infos:
            rid = pods.runs.get(info.name)
            if rid:
                by_run.setdefault(rid, []).append(info)
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
