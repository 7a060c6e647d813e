"""A local run's results: the run id and runs directory checked before any rank starts, and
the engine's output stored as runs/<run-id>/results.json.

Every run that produced results (passed, or failed a check or a --min-busbw floor) is stored,
the schema `compare` and `report` read (`--no-save` skips it); a run stopped half-way (Ctrl-C,
a rank that failed) stores the rows it measured, marked partial, from rank 0's journal. Rank 0 writes them in nccl-tests'
-J layout, to the user's --json file or to one in the run's private directory; `save_results`
reads that file back through results.imports and completes the metadata the file cannot carry
(torch and CUDA versions; -r, -a and --ops, the options results keep that have no -J key).
Result lines would carry it all, but rank 0's stdout is the user's terminal, not ours to capture.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path

from nccl_k8s import launch as local
from nccl_k8s.bench.options import OPTIONS, meta_config
from nccl_k8s.errors import Interrupted, NcclK8sError, ResultsError, RunFailed
from nccl_k8s.launch import LocalRun
from nccl_k8s.results.compare import run_failures
from nccl_k8s.results.imports import import_file
from nccl_k8s.results.lines import parse_result_lines
from nccl_k8s.results.schema import Run, load
from nccl_k8s.results.store import (
    check_new_run_id,
    new_run_id,
    results_path,
    runs_dir,
    store_run,
)


@dataclasses.dataclass(frozen=True)
class Plan:
    """A local run ready to start: the launcher's part, and where its results go."""

    run: LocalRun
    #: The id the results are stored under (runs/<id>/results.json); None with --no-save.
    run_id: str | None


def plan(argv: Sequence[str]) -> Plan:
    """Validate everything before any rank starts: flags, rank count, the run id, and that the
    runs directory and --json can be written. Raises UsageError (one line, exit 2)."""

    prepared = local.prepare(argv)
    if prepared.no_save:
        return Plan(prepared, None)
    run_id = check_new_run_id(prepared.run_id or new_run_id())
    local.check_writable(
        runs_dir(),
        what="runs directory",
        is_dir=True,
        hint="set NCCL_K8S_RUNS_DIR to a writable directory, or pass --no-save",
    )
    return Plan(prepared, run_id)


def run_and_save(run_plan: Plan, work: Path) -> tuple[int, Path | None]:
    """Launch the run and store its results under runs/<run-id>/ (unless --no-save); returns the
    exit code and the results path (None: nothing stored).

    A run whose ranks crashed raises RunFailed and stores nothing: there is no table to store.
    """

    run = run_plan.run
    started = time.time()
    json_path = _json_path(run, work)
    extra = () if run.config.json_path else ("--json", str(json_path))
    if run_plan.run_id is None:  # the -J file is read only to say why a failed run failed
        return local.launch(run, work=work, extra_argv=extra), None
    try:
        code = local.launch(run, work=work, extra_argv=extra, run_id=run_plan.run_id)
    except (RunFailed, Interrupted) as exc:
        stored = save_partial(run_plan, work, reason=str(exc))
        if stored is None:
            raise
        raise _saying_stored(exc, stored) from None
    # An old --json file from an earlier run is not this run's result.
    if not json_path.is_file() or json_path.stat().st_mtime < started - 1:
        return code, None
    return code, save_results(run_plan, json_path, keep_input=bool(run.config.json_path))


def _json_path(run: LocalRun, work: Path) -> Path:
    """Where rank 0 writes its -J file: the user's --json, else one in the work directory."""
    return Path(run.config.json_path) if run.config.json_path else work / "engine.json"


def why_failed(run_plan: Plan, work: Path, results: Path | None) -> list[str]:
    """Why a run that printed its table exited 1, one line each (results.run_failures): read
    from the results stored, else from rank 0's -J file (--no-save); [] when neither says."""
    try:
        if results is not None:
            return run_failures(load(results))
        json_path = _json_path(run_plan.run, work)
        return (
            run_failures(results_from_json(json_path, run_plan.run)) if json_path.is_file() else []
        )
    except ResultsError:
        return []


def save_results(run_plan: Plan, json_path: Path, *, keep_input: bool = False) -> Path:
    """Store rank 0's -J style JSON as runs/<run-id>/results.json; returns the path."""

    stored = results_from_json(json_path, run_plan.run)
    if not keep_input:
        stored.meta.inputs = []  # a file in the run's private directory, gone after the run
    return _store(stored, run_plan)


def save_partial(run_plan: Plan, work: Path, *, reason: str) -> tuple[Path, int] | None:
    """A run that stopped half-way (interrupted, a rank failed): store every row rank 0 had
    measured, from its journal (bench.runner), marked partial with why it stopped. Returns the
    path and how many table rows (sizes) it holds; None when no row was measured."""

    journal = local.journal_path(work)
    try:
        text = journal.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if '"kind":"meta"' in line]
    if not starts:
        return None
    try:  # a later sweep's lines only (each sweep starts with its own meta line)
        stored = parse_result_lines("\n".join(lines[starts[-1] :]), origin=str(journal))
    except ResultsError:
        return None
    if not stored.rows:
        return None
    _complete(stored, run_plan.run)
    stored.meta.partial = True
    stored.meta.failure = reason
    sizes = {(r.op, r.dtype, r.redop, r.root, r.size_bytes) for r in stored.rows}
    return _store(stored, run_plan), len(sizes)


def _saying_stored(exc: RunFailed | Interrupted, stored: tuple[Path, int]) -> NcclK8sError:
    """The same error, its message saying where the rows measured before it went."""
    path, sizes = stored
    note = (
        f"the {sizes} size{'s' if sizes != 1 else ''} measured are stored, marked partial: {path}"
    )
    if isinstance(exc, Interrupted):
        detail = exc.detail
        return Interrupted(exc.signum, detail=f"{detail}; {note}" if detail else note)
    return RunFailed(
        f"{exc}; {note}", reason=exc.reason, rank=exc.rank, pod=exc.pod, node=exc.node,
        exit_status=exc.exit_status, global_rank=exc.global_rank,
    )  # fmt: skip


def _store(stored: Run, run_plan: Plan) -> Path:
    try:
        return store_run(stored, run_id=run_plan.run_id)
    except OSError as exc:
        target = results_path(str(run_plan.run_id))
        raise ResultsError(
            f"{target}: cannot store the results ({exc.strerror}); the table above is this "
            "run's record: check the runs directory (NCCL_K8S_RUNS_DIR)",
            path=str(target),
        ) from None


def results_from_json(json_path: Path, run: LocalRun) -> Run:
    """The engine's --json file as a results Run, with what the run asked for that the file's
    nccl-tests layout has no field for (-r, -a as given, the ops in order)."""

    stored = import_file(json_path)
    _complete(stored, run)
    return stored


def _complete(stored: Run, run: LocalRun) -> None:
    """What the engine's output cannot say about a local run: that we measured it, the
    versions of this interpreter, the flags as given."""

    config = run.config
    stored.meta.torch = run.torch_version
    stored.meta.cuda = run.cuda_version
    meta = stored.meta
    meta.source = "nccl-k8s"
    # The engine lists every NCCL_* variable; NCCL_K8S_* are ours (runs dir, run id), not NCCL's.
    meta.env = {k: v for k, v in meta.env.items() if not k.startswith("NCCL_K8S_")}
    if meta.backend == "gloo":
        meta.gpu_model = None  # gloo ranks' "device" is the CPU, as the result lines say
    asked = meta_config(config)
    for o in OPTIONS:  # what results keep that nccl-tests' -J layout has no key for
        if o.meta and o.read and o.json_key is None:
            setattr(meta.config, o.meta, asked[o.meta])


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What `nccl-k8s run` ended with."""

    exit_code: int
    #: runs/<id>/results.json as stored; None when nothing was stored.
    results: Path | None
    #: The results were to be stored (no --no-save): a None `results` then means the ranks wrote none.
    save_asked: bool
    #: Why a run that printed its table failed (exit 1), one line each: the data check, the
    #: --min-busbw gate naming each op, its sizes and its average against the floor.
    failures: list[str] = dataclasses.field(default_factory=list)


def run(argv: Sequence[str]) -> Outcome:
    """`nccl-k8s run ARGV`: validate, launch the ranks in a private work directory, store the
    results; Ctrl-C and SIGTERM end the ranks (the launcher's interruptible)."""
    with local.interruptible():
        run_plan = plan(argv)
        with local.workdir() as work:
            code, results = run_and_save(run_plan, work)
            failures = why_failed(run_plan, work, results) if code == 1 else []
    return Outcome(code, results, run_plan.run_id is not None, failures)
