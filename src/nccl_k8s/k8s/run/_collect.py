"""collect (`results`): every pod's log into runs/<id>/logs/, the engine's result lines merged
into runs/<id>/results.json, the NCCL lines diagnosed.

Kubelets rotate container logs and the log API serves only the newest file, so the lines a
long or noisy run printed first may be gone from what we can fetch. The pod wrapper
(rendering._wrapper.POD_WRAPPER) therefore prints, last, rank 0's result lines as one block and a digest
of the NCCL lines as another; the last complete one of each is read, and only without one the
lines scattered through the log (an older image, a run that failed).

A run of several sweeps (the StatefulSet's continuous mode, or `-- --sweeps N`) has one results
block per sweep, printed by the engine when the sweep ends, each starting with its own meta line:
every complete sweep still in the log can be read on its own, the latest by default. A sweep
still running has no block yet and is not read: before the first sweep ends there is nothing to
collect, which is an error (exit 1), never an empty results file.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import re
import time
from pathlib import Path
from typing import Any

from nccl_k8s.errors import ClusterError, ResultsError, RunFailed
from nccl_k8s.k8s.api._client import ClientSettings, KubeClient
from nccl_k8s.k8s.api._sync import run_sync
from nccl_k8s.k8s.rendering._names import CONTAINER_NAME
from nccl_k8s.k8s.rendering._wrapper import BLOCK_END
from nccl_k8s.k8s.run._outcomes import Collected, CollectedSweep
from nccl_k8s.k8s.run._plumbing import (
    bounded,
    get_pods,
    get_workload,
    namespace_of,
    no_run,
    rank_text,
    resolve_run,
)
from nccl_k8s.k8s.run._pods import PodInfo, latest_per_rank, run_phase
from nccl_k8s.k8s.run._tracing import annotate, span

_NCCL_LINE = re.compile(r"^.*NCCL (?:INFO|WARN).*$", re.MULTILINE)


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
    sweep: int | None = None,
    all_sweeps: bool = False,
) -> Collected:
    """Fetch every pod's log concurrently (at most `concurrency` at once) into
    `<runs_dir>/<run-id>/logs/`, merge the engine's result lines into `results.json` there, and
    diagnose the NCCL lines. A whole log is in memory only while it is in flight (at most
    `concurrency` of them); afterwards only its result and NCCL lines are kept.

    With several sweeps: the latest complete one goes to results.json; `sweep=N` takes sweep N
    instead (to `sweep-<N>.json`), `all_sweeps` writes every complete sweep to `sweep-<N>.json`
    and the latest to results.json too. RunFailed (exit 1) when no sweep has ended yet;
    ResultsError when sweep N is not in the log."""
    # The modules, not the results facade: that one also offers the report (matplotlib).
    from nccl_k8s.results.diagnose import diagnose_text
    from nccl_k8s.results.lines import RESULT_PREFIX, blocks, last_block, parse_result_lines
    from nccl_k8s.results.schema import dump
    from nccl_k8s.results.store import runs_dir as default_runs_dir

    result_line = re.compile(f"^.*{re.escape(RESULT_PREFIX)}.*$", re.MULTILINE)

    async def main(kc: KubeClient) -> Collected:
        with span("collect", run_id=run_id, namespace=namespace) as s:
            return await _collect(kc, s)

    async def _collect(kc: KubeClient, trace: Any) -> Collected:
        start = time.monotonic()
        ns = await namespace_of(kc, namespace)
        rid = await resolve_run(kc, ns, run_id)
        annotate(trace, run_id=rid, namespace=ns)
        pods = latest_per_rank(await get_pods(kc, ns, rid))
        if not pods:
            raise no_run(kc, ns, rid)
        workload = await get_workload(kc, ns, rid)
        continuous = (workload or {}).get("kind") == "StatefulSet"
        base = (runs_dir if runs_dir is not None else default_runs_dir()) / rid
        log_dir = base / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)

        async def one(p: PodInfo) -> tuple[list[list[str]], list[str]]:
            try:
                text = await kc.logs(p.name, namespace=ns, container=CONTAINER_NAME)
            except ClusterError as e:
                if e.status == 400:  # never started: no log to collect
                    return [], []
                raise
            name = f"rank-{rank_text(p)}-{p.name}.log"
            await asyncio.to_thread((log_dir / name).write_text, text)
            # Whole-text regexes (C speed) rather than a Python loop over every line.
            results = blocks(text, "results") if BLOCK_END in text else []
            if not results and not continuous and RESULT_PREFIX in text:
                # An older image, or a run that failed before its block: the scattered lines.
                scattered = result_line.findall(text)
                results = [scattered] if scattered else []
            nccl = last_block(text, "nccl") if BLOCK_END in text else None
            if nccl is None:
                nccl = _NCCL_LINE.findall(text) if "NCCL " in text else []
            return results, nccl

        parts = await bounded(concurrency, [functools.partial(one, p) for p in pods])
        found = [block for r, _ in parts for block in r]
        if not found:
            phase = run_phase(workload, pods)
            if continuous:
                raise RunFailed(
                    f"run {rid} ({phase}): no sweep has ended yet, so there are no results to "
                    f"collect (raw logs in {log_dir}); each sweep's results are printed when it "
                    f"ends: `nccl-k8s logs --run {rid} --rank 0 -f` shows the current one"
                )
            raise ResultsError(
                f"run {rid} ({phase}): no result lines in the logs of its {len(pods)} pod(s) "
                f"(raw logs in {log_dir}); rank 0 prints them when its sweep ends",
                path=str(log_dir),
            )
        origin = f"run {rid}"
        sweeps: list[CollectedSweep] = []
        for i, lines in enumerate(found):
            run = parse_result_lines("\n".join(lines), origin=f"{origin} (block {i + 1})")
            run.meta.run_id = rid
            name_nodes(run, pods)
            sweeps.append(CollectedSweep(run.meta.sweep, run, None))
        chosen = sweeps[-1]
        if sweep is not None:
            match = [s for s in sweeps if s.index == sweep]
            if not match:
                have = [s.index for s in sweeps if s.index is not None]
                which = (
                    f"sweeps {have[0]} to {have[-1]} are ({len(have)} complete)"
                    if have
                    else "it holds a run of one sweep"
                )
                raise ResultsError(
                    f"--sweep {sweep}: run {rid} has no complete sweep {sweep} in its log: "
                    f"{which} (older ones are gone with log rotation or a restarted pod)",
                    path=str(log_dir),
                )
            chosen = match[-1]
        written: list[CollectedSweep] = []
        for s in sweeps:
            if all_sweeps or (sweep is not None and s is chosen):
                name = f"sweep-{s.index}.json" if s.index is not None else "results.json"
                written.append(dataclasses.replace(s, path=dump(s.run, base / name)))
        path = dump(chosen.run, base / "results.json") if sweep is None else None
        if path is None:
            path = next(w.path for w in written if w.run is chosen.run and w.path is not None)
        nccl_texts = ["\n".join(n) for _, n in parts if n]
        diagnosis = None
        if nccl_texts:
            with contextlib.suppress(ResultsError):
                diagnosis = diagnose_text(nccl_texts)
        return Collected(
            rid,
            ns,
            chosen.run,
            path,
            log_dir,
            len(pods),
            diagnosis,
            time.monotonic() - start,
            sweeps=written if all_sweeps else [],
        )

    return run_sync(main, client)
