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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from nccl_k8s.errors import ClusterError, FailureReason, NotFound, ResultsError, RunFailed
from nccl_k8s.k8s.api._client import ClientSettings, KubeClient
from nccl_k8s.k8s.api._sync import run_sync
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.rendering._names import CONTAINER_NAME, PLATFORM_ANNOTATION
from nccl_k8s.k8s.rendering._topology import rank_plan_of
from nccl_k8s.k8s.rendering._wrapper import BLOCK_END
from nccl_k8s.k8s.run._outcomes import Collected, CollectedSweep
from nccl_k8s.k8s.run._plumbing import (
    bounded,
    get_workload,
    namespace_of,
    no_run,
    rank_text,
    resolve_run,
    run_labels,
)
from nccl_k8s.k8s.run._podlist import read_pods
from nccl_k8s.k8s.run._pods import PodInfo, latest_per_rank, run_phase
from nccl_k8s.k8s.run._tracing import annotate, span


def _nccl_lines(text: str) -> list[str]:
    """The lines of `text` (split at `\\n` alone) that hold `NCCL INFO` or `NCCL WARN`: what
    `^.*NCCL (?:INFO|WARN).*$` (MULTILINE) finds, at a fraction of its cost. The regex tried
    each position of the log in turn (~90 us for a pod's 16 KB at 4,096 pods: 0.4 s); a split
    and two substring tests per line take half of that."""
    return [x for x in text.split("\n") if "NCCL INFO" in x or "NCCL WARN" in x]


def name_nodes(run: Any, pods: list[PodInfo]) -> None:
    """Give every rank of `run` its Kubernetes node, from its pod (global rank r runs in pod
    rank r // G), where the engine's meta line did not name it (an engine older than the rank
    plan: with one, pods are numbered by their nodes, and only the engine knows which is which)."""
    per_pod = run.meta.gpus_per_node or 1
    node_of = {p.rank: p.node for p in pods if p.rank is not None}
    for device in run.meta.devices:
        if device.node is None:
            device.node = node_of.get(device.rank // per_pod)


def name_domains(run: Any, workload: Obj | None) -> None:
    """Give every rank its node's topology label values, from the rank plan the deploy put
    into the run's workload (rendering._topology); none without one."""
    levels, plan = rank_plan_of(workload)
    for device in run.meta.devices:
        values = plan.get(device.node or "")
        if values is not None:
            device.domain = dict(zip(levels, values, strict=True))


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
    """`collect_async` over a client of its own."""
    return run_sync(
        lambda kc: collect_async(
            kc,
            run_id,
            namespace=namespace,
            runs_dir=runs_dir,
            concurrency=concurrency,
            sweep=sweep,
            all_sweeps=all_sweeps,
        ),
        client,
    )


async def collect_async(
    kc: KubeClient,
    run_id: str | None = None,
    *,
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
    # results' modules, not its facade: that one also offers the report (matplotlib).
    from nccl_k8s.results.store import runs_dir as default_runs_dir

    with span("collect", run_id=run_id, namespace=namespace) as trace:
        start = time.monotonic()
        ns = await namespace_of(kc, namespace)
        rid = await resolve_run(kc, ns, run_id)
        annotate(trace, run_id=rid, namespace=ns)
        # The pods as table rows (whole objects only for those not Running or Succeeded): a
        # tenth of the bytes of a list of whole pods, and all that is read of them here.
        workload, listed = await asyncio.gather(
            get_workload(kc, ns, rid), read_pods(kc, ns, run_labels(rid), scheduler=None)
        )
        pods = latest_per_rank(listed.infos)
        if not pods:
            raise no_run(kc, ns, rid)
        continuous = (workload or {}).get("kind") == "StatefulSet"
        base = (runs_dir if runs_dir is not None else default_runs_dir()) / rid
        log_dir = base / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        reader = _Diagnosis()
        read = [
            functools.partial(_read_log, kc, ns, p, log_dir, continuous, reader.take(i))
            for i, p in enumerate(pods)
        ]
        parts = await bounded(concurrency, read)
        found = [block for r in parts for block in r]
        if not found:
            raise _nothing_yet(rid, run_phase(workload, pods), len(pods), log_dir, continuous)
        sweeps = _parse_sweeps(found, rid, pods)
        diagnosis = reader.diagnosis()
        platform = ((workload or {}).get("metadata", {}).get("annotations") or {}).get(
            PLATFORM_ANNOTATION
        )
        for s in sweeps:  # every run's results say what carried it, and what it was made for
            s.run.meta.fabric = diagnosis.inter_node if diagnosis is not None else None
            s.run.meta.platform = platform
            name_domains(s.run, workload)
        chosen = _chosen(sweeps, sweep, rid, log_dir)
        running = _still_running(chosen.run, run_phase(workload, pods), continuous)
        written = _write_sweeps(sweeps, chosen, base, sweep=sweep, all_sweeps=all_sweeps)
        path = _dump(chosen.run, base / "results.json") if sweep is None else None
        if path is None:
            path = next(w.path for w in written if w.run is chosen.run and w.path is not None)
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
            still_running=running,
        )


@functools.cache
def _result_line() -> re.Pattern[str]:
    from nccl_k8s.results.lines import RESULT_PREFIX

    return re.compile(f"^.*{re.escape(RESULT_PREFIX)}.*$", re.MULTILINE)


async def _read_log(
    kc: KubeClient,
    ns: str,
    p: PodInfo,
    log_dir: Path,
    continuous: bool,
    nccl_lines: Callable[[list[str]], None],
) -> list[list[str]]:
    """Fetch one pod's log into `log_dir`, written as it arrives; its NCCL lines go to
    `nccl_lines` once it has all arrived, and only its result blocks (each a list of result
    lines) are kept."""
    from nccl_k8s.results.lines import RESULT_PREFIX, blocks, last_block

    path = log_dir / f"rank-{rank_text(p)}-{p.name}.log"
    chunks: list[bytes] = []
    try:
        # Written in the loop, not a worker thread: a page-cache write costs less than the
        # regexes below that run here anyway, and `nodes check` composes collects without threads.
        with contextlib.ExitStack() as files:
            async for data in kc.log_chunks(p.name, namespace=ns, container=CONTAINER_NAME):
                if not chunks:
                    out = files.enter_context(_rewritten(path))
                out.write(data)
                chunks.append(data)
    except ClusterError as e:
        if e.status == 400:  # never started: no log to collect
            nccl_lines([])
            return []
        raise
    if not chunks:
        with _rewritten(path):
            pass
    text = b"".join(chunks).decode("utf-8", errors="replace")
    del chunks
    # Whole-text regexes (C speed) rather than a Python loop over every line.
    results = blocks(text, "results") if BLOCK_END in text else []
    if not results and not continuous and RESULT_PREFIX in text:
        # An older image, or a run that failed before its block: the scattered lines.
        scattered = _result_line().findall(text)
        results = [scattered] if scattered else []
    nccl = last_block(text, "nccl") if BLOCK_END in text else None
    if nccl is None:
        nccl = _nccl_lines(text) if "NCCL " in text else []
    nccl_lines(nccl)
    return results


@contextlib.contextmanager
def _rewritten(path: Path) -> Iterator[BinaryIO]:
    """`path` opened for writing; what was written is all it holds once closed. A log collected
    before (`results` run again) is written over and cut to its new length at the end, not
    truncated first: ext4 writes a file truncated to nothing and written again out to disk as
    it is closed (its auto_da_alloc heuristic, for programs that replace a file's contents),
    ~0.2 ms a log where writing over it takes ~0.02 ms: 0.7 s of a second `results` at 4,096
    pods (and unlinking it first costs as much: its blocks are freed)."""
    out: BinaryIO
    try:
        out = path.open("r+b")
    except FileNotFoundError:
        out = path.open("wb")
    with out:
        try:
            yield out
        finally:
            out.truncate()


class _Diagnosis:
    """The pods' NCCL lines, read as each pod's log arrives (only facts are kept), in the
    pods' order whatever order they arrive in (a pod that came early waits for those before
    it: the same findings, in the same order, every time)."""

    def __init__(self) -> None:
        from nccl_k8s.results.diagnose import log_reader

        self.parser = log_reader()
        self.fed = False
        self.next = 0
        self.waiting: dict[int, list[str]] = {}

    def take(self, i: int) -> Callable[[list[str]], None]:
        """Where the lines of the `i`th pod go."""
        return functools.partial(self._arrived, i)

    def _arrived(self, i: int, lines: list[str]) -> None:
        self.waiting[i] = lines
        while self.next in self.waiting:
            lines = self.waiting.pop(self.next)
            self.next += 1
            if lines:
                self.parser.feed("\n".join(lines))
                self.fed = True

    def diagnosis(self) -> Any:
        """The diagnosis; None without any NCCL line (or when they say nothing)."""
        from nccl_k8s.results.diagnose import analyse

        if not self.fed:
            return None
        with contextlib.suppress(ResultsError):
            return analyse(self.parser.finish())
        return None


#: A Job's phases (run_phase) once it has ended: its results are all it will ever print.
_ENDED = frozenset({"Succeeded", "Failed", "Orphaned"})


def _still_running(run: Any, phase: str, continuous: bool) -> str | None:
    """The phase of a Job that has not ended (its rows are those measured so far: the run is
    marked partial, and says why), else None. A continuous run's sweeps are each complete."""
    if continuous or phase in _ENDED:
        return None
    run.meta.partial = True
    run.meta.failure = run.meta.failure or (
        f"run {run.meta.run_id} is still {phase}: {len(run.rows)} rows measured so far"
    )
    return phase


def _nothing_yet(
    rid: str, phase: str, pods: int, log_dir: Path, continuous: bool
) -> RunFailed | ResultsError:
    """No results block in any log: a continuous run's first sweep has not ended (RunFailed),
    or a run printed no result lines (ResultsError)."""
    if continuous:
        return RunFailed(
            f"run {rid} ({phase}): no sweep has ended yet, so there are no results to "
            f"collect (raw logs in {log_dir}); each sweep's results are printed when it "
            f"ends: `nccl-k8s logs --run {rid} --rank 0 -f` shows the current one",
            reason=FailureReason.NO_RESULTS_YET,
        )
    return ResultsError(
        f"run {rid} ({phase}): no result lines in the logs of its {pods} pod(s) "
        f"(raw logs in {log_dir}); rank 0 prints them when its sweep ends",
        path=str(log_dir),
    )


def _parse_sweeps(found: list[list[str]], rid: str, pods: list[PodInfo]) -> list[CollectedSweep]:
    """Each results block as a run, its ranks' nodes named."""
    from nccl_k8s.results.lines import parse_result_lines

    sweeps: list[CollectedSweep] = []
    for i, lines in enumerate(found):
        run = parse_result_lines("\n".join(lines), origin=f"run {rid} (block {i + 1})")
        run.meta.run_id = rid
        name_nodes(run, pods)
        sweeps.append(CollectedSweep(run.meta.sweep, run, None))
    return sweeps


def _chosen(
    sweeps: list[CollectedSweep], sweep: int | None, rid: str, log_dir: Path
) -> CollectedSweep:
    """The latest sweep, or sweep number `sweep` (ResultsError when the log has not got it)."""
    if sweep is None:
        return sweeps[-1]
    match = [s for s in sweeps if s.index == sweep]
    if match:
        return match[-1]
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


def _write_sweeps(
    sweeps: list[CollectedSweep],
    chosen: CollectedSweep,
    base: Path,
    *,
    sweep: int | None,
    all_sweeps: bool,
) -> list[CollectedSweep]:
    """Write sweep-<N>.json for every sweep (`all_sweeps`) or the one asked for (`sweep`)."""
    written: list[CollectedSweep] = []
    for s in sweeps:
        if all_sweeps or (sweep is not None and s is chosen):
            name = f"sweep-{s.index}.json" if s.index is not None else "results.json"
            written.append(dataclasses.replace(s, path=_dump(s.run, base / name)))
    return written


def _dump(run: Any, path: Path) -> Path:
    from nccl_k8s.results.schema import dump

    return dump(run, path)


async def keep_measured(kc: KubeClient, namespace: str, run_id: str, why: str) -> list[str]:
    """Before a failed deploy's objects go: the rows its ranks measured, collected into
    runs/<id>/results.json (as `results` would), so that deleting the run loses no number.

    The run is marked failed with its own verdict (a --min-busbw miss, wrong results: the
    table ended) or, when its table did not end (a rank failed mid-run, an op without its
    footer), partial with `why`. Returns what the failure message adds: a note where the rows
    are, then one line per verdict (results.run_failures: the gate, its sizes, measured
    against wanted); nothing when no rank printed a row."""
    from nccl_k8s.results.compare import run_failures

    try:
        got = await collect_async(kc, run_id, namespace=namespace)
        run = got.run
        if not run.rows:
            return []
        verdicts = run_failures(run)
        ended = {s.op for s in run.summaries}
        run.meta.partial = not verdicts or any(r.op not in ended for r in run.rows)
        # What collect said of a Job not yet marked ended ("still Running") is not why it failed.
        run.meta.failure = "; ".join(verdicts) if verdicts else why
        _dump(run, got.results_path)
    except (ResultsError, RunFailed, NotFound):
        return []
    except (ClusterError, OSError) as e:
        return [f"(its measured rows were not kept: {e})"]
    marked = "partial" if run.meta.partial else "failed"
    note = f"(its {len(run.rows)} measured rows kept in {got.results_path}, marked {marked})"
    return [note, *verdicts]
