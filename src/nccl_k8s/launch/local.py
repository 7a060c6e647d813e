"""`nccl-k8s run`: N local ranks through torch's elastic launcher (the API behind torchrun).

Everything the ranks will refuse is refused here first, in this process, so a bad flag costs
one line and exit code 2 instead of N tracebacks. The ranks run `python -m nccl_k8s.bench`,
the same entry point pods run; rank 0's stdout is the run's output.

Every run that produced results (passed, or failed a check or a --min-busbw floor) is stored as
runs/<run-id>/results.json, the schema `compare` and `report` read (`--no-save` skips it). Rank 0
writes them in nccl-tests' -J layout, to the user's --json file or to a temporary one this module
passes; `save_results` reads that file back through results.nccltests and completes the metadata
the file cannot carry (torch and CUDA versions, dtype, redop, root, -a) from this process, which
runs the same interpreter and torch as the ranks. Result lines would carry it all, but capturing
rank 0's stdout through the elastic launcher prefixes every line of the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from nccl_k8s.bench.config import (
    BenchConfig,
    ConfigError,
    build_parser,
    check_backend,
    config_from_namespace,
)
from nccl_k8s.errors import RunFailed, UsageError
from nccl_k8s.results import Run, import_file, new_run_id, store_run
from nccl_k8s.results.store import check_new_run_id

#: CPU ranks when there is no GPU: two, so every collective really crosses ranks.
DEFAULT_CPU_RANKS = 2


@dataclasses.dataclass(frozen=True)
class LocalRun:
    """A validated local run: how many ranks, which backend, and the argv each rank gets."""

    nproc: int
    backend: str
    config: BenchConfig
    rank_argv: tuple[str, ...]
    #: The id the results are stored under (runs/<id>/results.json); None with --no-save.
    run_id: str | None = None


@dataclasses.dataclass(frozen=True)
class LocalOutcome:
    """How a local run ended: its exit code and where its results were stored (None: not saved)."""

    exit_code: int
    results: Path | None


def run_parser() -> argparse.ArgumentParser:
    """The engine's flags plus run's own; `nccl-k8s run --help` prints this."""
    parser = build_parser(prog="nccl-k8s run")
    parser.description = (
        "Run the benchmark on this machine: all local GPUs through NCCL, or CPU ranks through "
        "gloo when there is no GPU. Flags are nccl-tests' (same letters, same meaning)."
    )
    parser.add_argument(
        "--nproc", default=None, help="ranks to start (default: GPU count, or 2 on CPU)"
    )
    parser.add_argument(
        "--result-lines",
        action="store_true",
        help="also print the NCCL_K8S_RESULT lines pods print",
    )
    parser.add_argument(
        "--run-id",
        default=None,
        metavar="ID",
        help="store the results as runs/ID/results.json (default: a new id, "
        "nccl-<yyyymmdd-hhmmss>-<hex>; the runs directory is ./runs or $NCCL_K8S_RUNS_DIR)",
    )
    parser.add_argument(
        "--no-save",
        action="store_true",
        help="do not store the results under runs/ (for compare and report)",
    )
    return parser


def prepare(argv: Sequence[str]) -> LocalRun:
    """Validate `nccl-k8s run` arguments; raises UsageError (one line) on anything wrong."""
    try:
        ns, extra = run_parser().parse_known_args(list(argv))
        if extra:
            raise ConfigError(f"unrecognized arguments: {' '.join(extra)}")
        config = config_from_namespace(ns)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    try:
        import torch
    except ImportError:
        raise UsageError("nccl-k8s run needs torch: pip install 'nccl-k8s[engine]'") from None

    ngpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = config.backend if config.backend != "auto" else ("nccl" if ngpu else "gloo")
    if backend == "nccl" and not ngpu:
        raise UsageError("--backend nccl: no CUDA device is visible here; use --backend gloo")
    nproc = _nproc(ns.nproc, default=ngpu if backend == "nccl" else DEFAULT_CPU_RANKS)
    if backend == "nccl" and nproc > ngpu:
        raise UsageError(
            f"--nproc {nproc}: only {ngpu} GPU(s) visible; NCCL needs one GPU per rank"
        )
    try:
        check_backend(config, backend, world_size=nproc)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None

    if ns.no_save and ns.run_id is not None:
        raise UsageError("--run-id names the stored results; it cannot go with --no-save")
    run_id = None if ns.no_save else check_new_run_id(ns.run_id or new_run_id())

    rank_argv = _drop_value(list(argv), "--nproc")
    rank_argv = _drop_value(rank_argv, "--run-id")
    rank_argv = [a for a in rank_argv if a not in ("--result-lines", "--no-save")]
    rank_argv += ["--backend", backend]
    if not ns.result_lines:
        rank_argv.append("--no-result-lines")
    return LocalRun(
        nproc=nproc, backend=backend, config=config, rank_argv=tuple(rank_argv), run_id=run_id
    )


def _nproc(text: str | None, *, default: int) -> int:
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f"--nproc {text!r}: expected an integer >= 1")
    return value


def _drop_value(argv: list[str], flag: str) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == flag:
            skip = True
            continue
        if arg.startswith(flag + "="):
            continue
        out.append(arg)
    return out


def run_and_save(run: LocalRun) -> LocalOutcome:
    """Launch the run and store its results under runs/<run-id>/ (unless --no-save).

    A run whose ranks crashed raises RunFailed and stores nothing: there is no table to store.
    """
    if run.run_id is None:
        return LocalOutcome(launch(run), None)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="nccl-k8s-results-") as tmp:
        user_json = run.config.json_path
        json_path = Path(user_json) if user_json else Path(tmp, "engine.json")
        code = launch(run, extra_argv=() if user_json else ("--json", str(json_path)))
        # An old --json file from an earlier run is not this run's result.
        if not json_path.is_file() or json_path.stat().st_mtime < started - 1:
            return LocalOutcome(code, None)
        return LocalOutcome(code, save_results(run, json_path, keep_input=bool(user_json)))


def save_results(run: LocalRun, json_path: Path, *, keep_input: bool = False) -> Path:
    """Store rank 0's -J style JSON as runs/<run-id>/results.json; returns the path."""
    import torch

    stored = results_from_json(json_path, run.config)
    stored.meta.torch = str(torch.__version__)
    stored.meta.cuda = torch.version.cuda if run.backend == "nccl" else None
    if not keep_input:
        stored.meta.inputs = []  # a temporary file, gone after this call
    return store_run(stored, run_id=run.run_id)


def results_from_json(json_path: Path, config: BenchConfig) -> Run:
    """The engine's --json file as a results Run, with what the run asked for that the file's
    nccl-tests layout has no field for (-d, -o, -r, -a as given, the ops in order)."""
    stored = import_file(json_path)
    meta = stored.meta
    meta.source = "nccl-k8s"
    # The engine lists every NCCL_* variable; NCCL_K8S_* are ours (runs dir, run id), not NCCL's.
    meta.env = {k: v for k, v in meta.env.items() if not k.startswith("NCCL_K8S_")}
    if meta.backend == "gloo":
        meta.gpu_model = None  # gloo ranks' "device" is the CPU, as the result lines say
    cfg = meta.config
    cfg.dtype, cfg.redop, cfg.root = config.dtype, config.redop, config.root
    cfg.average, cfg.blocking = config.average, bool(config.blocking)
    cfg.ops = list(config.ops)
    return stored


def launch(run: LocalRun, *, extra_argv: Sequence[str] = ()) -> int:
    """Start the ranks and wait; returns the run's exit code, or raises RunFailed naming the rank."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    # The launcher logs every rank's exit at WARNING; we report failures ourselves, once.
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    log_dir = tempfile.mkdtemp(prefix="nccl-k8s-run-")
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=run.nproc,
        run_id=f"nccl-k8s-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d",
        rdzv_endpoint="127.0.0.1:0",
        rdzv_configs={"timeout": 120},
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
        logs_specs=DefaultLogsSpecs(log_dir=log_dir),
    )
    try:
        elastic_launch(config, entrypoint=sys.executable)(
            "-m", "nccl_k8s.bench", *run.rank_argv, *extra_argv
        )
        return 0
    except ChildFailedError as exc:
        return int(_failure(exc))
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)


def _failure(exc: object) -> int:
    """Exit codes 1 and 2 are verdicts the table already printed; anything else is a crash."""
    failures = getattr(exc, "failures", {})
    codes = {f.exitcode for f in failures.values()}
    verdicts = codes & {1, 2}
    # When one rank has exited with its verdict, the launcher stops the others with SIGTERM; a
    # rank caught in its own exit that way is not a crash either.
    if (
        verdicts
        and codes <= verdicts | {-signal.SIGTERM}
        and not any(_message(f) for f in failures.values())
    ):
        return int(max(verdicts))
    # A rank that dies takes its peers' connections with it; name the cause, not the echoes.
    rank, failure = min(
        failures.items(), key=lambda kv: (_secondary(_message(kv[1])), kv[1].timestamp, kv[0])
    )
    code = failure.exitcode
    how = f"exit code {code}"
    if code < 0:
        try:
            how = f"signal {signal.Signals(-code).name}"
        except ValueError:
            how = f"signal {-code}"
    msg = _message(failure) or "see its output above"
    others = sorted(r for r in failures if r != rank)
    also = (
        f" (then rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} failed too)"
        if others
        else ""
    )
    raise RunFailed(
        f"rank {rank} (pid {failure.pid}) failed with {how}: {msg}{also}",
        rank=rank,
        exit_status=code,
    )


_ECHOES = (
    "closed by peer",
    "reset by peer",
    "broken pipe",
    "connection refused",
    "remote process",
    "peer",
)


def _secondary(message: str) -> bool:
    """Errors that are consequences of another rank's death (its sockets closing)."""
    low = message.lower()
    return not low or any(e in low for e in _ECHOES)


def _message(failure: object) -> str:
    data = getattr(failure, "error_file_data", None)
    if isinstance(data, dict):
        inner = data.get("message", data)
        text = str(inner.get("message", "")) if isinstance(inner, dict) else str(inner)
        # torch fills in "<NONE>" when the rank wrote no error file: it exited, it did not raise.
        if text.strip() == "<NONE>":
            return ""
        return text.strip().splitlines()[-1] if text.strip() else ""
    return ""


__all__ = [
    "DEFAULT_CPU_RANKS",
    "LocalOutcome",
    "LocalRun",
    "launch",
    "prepare",
    "results_from_json",
    "run_and_save",
    "run_parser",
    "save_results",
]
