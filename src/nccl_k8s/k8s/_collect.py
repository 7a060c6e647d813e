"""collect (`results`): every pod's log into runs/<id>/logs/, the engine's result lines merged
into runs/<id>/results.json, the NCCL lines diagnosed.

Kubelets rotate container logs and the log API serves only the newest file, so the lines a
long or noisy run printed first may be gone from what we can fetch. The pod wrapper
(_wrapper.POD_WRAPPER) therefore prints, last, rank 0's result lines as one block and a digest
of the NCCL lines as another; `last_block` takes the last complete one of each and only then
falls back to the lines scattered through the log (an older image, a run that failed).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import time
from pathlib import Path
from typing import Any

from nccl_k8s.errors import ClusterError, ResultsError
from nccl_k8s.k8s._client import ClientSettings, KubeClient
from nccl_k8s.k8s._manifests import CONTAINER_NAME
from nccl_k8s.k8s._outcomes import Collected
from nccl_k8s.k8s._plumbing import (
    bounded,
    get_pods,
    get_workload,
    namespace_of,
    no_run,
    rank_text,
    resolve_run,
    run_sync,
)
from nccl_k8s.k8s._pods import PodInfo, latest_per_rank, run_phase
from nccl_k8s.k8s._wrapper import BLOCK_BEGIN, BLOCK_END

_NCCL_LINE = re.compile(r"^.*NCCL (?:INFO|WARN).*$", re.MULTILINE)
_BLOCK_END = re.compile(rf"^.*{BLOCK_END} (\S+) (\d+)$", re.MULTILINE)


def last_block(text: str, name: str) -> list[str] | None:
    """The lines of the last complete `name` block in `text` (BEGIN, exactly n lines, END n),
    or None when there is none. A block cut by log rotation has no BEGIN in the text, or the
    wrong number of lines after it, and is passed over for an earlier complete one."""
    ends = [m for m in _BLOCK_END.finditer(text) if m.group(1) == name]
    for end in reversed(ends):
        n = int(end.group(2))
        before = text[: end.start()].rstrip("\n").rsplit("\n", n + 1)
        if n == 0 or len(before) <= n:
            continue
        begin = before[-n - 1]
        if begin.endswith(f"{BLOCK_BEGIN} {name} {n}"):
            return before[-n:]
    return None


def name_nodes(run: Any, pods: list[PodInfo]) -> None:
    """Give every rank of `run` its Kubernetes node, from its pod (global rank r runs in pod
    rank r // G), where the engine's meta line did not name it."""
    per_pod = run.meta.gpus_per_node or 1
    node_of = {p.rank: p.node for p in pods if p.rank is not None}
    for device in run.meta.devices:
        if device.node is None:
            device.node = node_of.get(device.rank // per_pod)


def collect(
    run_id: str | None = None,
    *,
    client: ClientSettings,
    namespace: str | None = None,
    runs_dir: Path | None = None,
    concurrency: int = 32,
) -> Collected:
    """Fetch every pod's log concurrently (at most `concurrency` at once) into
    `<runs_dir>/<run-id>/logs/`, merge the engine's result lines into `results.json` there, and
    diagnose the NCCL lines. A whole log is in memory only while it is in flight (at most
    `concurrency` of them); afterwards only its result and NCCL lines are kept."""
    from nccl_k8s.results import RESULT_PREFIX, collect_results, diagnose_text
    from nccl_k8s.results.schema import dump
    from nccl_k8s.results.store import runs_dir as default_runs_dir

    result_line = re.compile(f"^.*{re.escape(RESULT_PREFIX)}.*$", re.MULTILINE)

    async def main(kc: KubeClient) -> Collected:
        start = time.monotonic()
        ns = await namespace_of(kc, namespace)
        rid = await resolve_run(kc, ns, run_id)
        pods = latest_per_rank(await get_pods(kc, ns, rid))
        if not pods:
            raise no_run(kc, ns, rid)
        base = (runs_dir if runs_dir is not None else default_runs_dir()) / rid
        log_dir = base / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)

        async def one(p: PodInfo) -> tuple[list[str], list[str]]:
            try:
                text = await kc.logs(p.name, namespace=ns, container=CONTAINER_NAME)
            except ClusterError as e:
                if e.status == 400:  # never started: no log to collect
                    return [], []
                raise
            name = f"rank-{rank_text(p)}-{p.name}.log"
            await asyncio.to_thread((log_dir / name).write_text, text)
            # Whole-text regexes (C speed) rather than a Python loop over every line.
            results = last_block(text, "results") if BLOCK_END in text else None
            if results is None:
                results = result_line.findall(text) if RESULT_PREFIX in text else []
            nccl = last_block(text, "nccl") if BLOCK_END in text else None
            if nccl is None:
                nccl = _NCCL_LINE.findall(text) if "NCCL " in text else []
            return results, nccl

        parts = await bounded(concurrency, [functools.partial(one, p) for p in pods])
        result_texts = ["\n".join(r) for r, _ in parts if r]
        if not result_texts:
            phase = run_phase(await get_workload(kc, ns, rid), pods)
            raise ResultsError(
                f"run {rid} ({phase}): no result lines in the logs of its {len(pods)} pod(s) "
                f"(raw logs in {log_dir}); rank 0 prints them when its sweep ends",
                path=str(log_dir),
            )
        run, _ = collect_results(result_texts, run_id=rid, origin=f"run {rid}")
        name_nodes(run, pods)
        path = dump(run, base / "results.json")
        nccl_texts = ["\n".join(n) for _, n in parts if n]
        diagnosis = None
        if nccl_texts:
            with contextlib.suppress(ResultsError):
                diagnosis = diagnose_text(nccl_texts)
        return Collected(
            rid, ns, run, path, log_dir, len(pods), diagnosis, time.monotonic() - start
        )

    return run_sync(main, client)
