"""`nccl-k8s run`: N local ranks through torch's elastic launcher (the API behind torchrun).

Everything the ranks will refuse is refused here first, in this process, so a bad flag costs
one line and exit code 2 instead of N tracebacks. The ranks run `python -m nccl_k8s.bench`,
the same entry point pods run; rank 0's stdout is the run's output.
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
import uuid
from collections.abc import Sequence

from nccl_k8s.bench.config import (
    BenchConfig,
    ConfigError,
    build_parser,
    check_backend,
    config_from_namespace,
)
from nccl_k8s.errors import RunFailed, UsageError

#: CPU ranks when there is no GPU: two, so every collective really crosses ranks.
DEFAULT_CPU_RANKS = 2


@dataclasses.dataclass(frozen=True)
class LocalRun:
    """A validated local run: how many ranks, which backend, and the argv each rank gets."""

    nproc: int
    backend: str
    config: BenchConfig
    rank_argv: tuple[str, ...]


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

    rank_argv = [a for a in argv if not a.startswith("--nproc") and a != "--result-lines"]
    rank_argv = _drop_value(list(argv), "--nproc")
    rank_argv = [a for a in rank_argv if a != "--result-lines"]
    rank_argv += ["--backend", backend]
    if not ns.result_lines:
        rank_argv.append("--no-result-lines")
    return LocalRun(nproc=nproc, backend=backend, config=config, rank_argv=tuple(rank_argv))


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


def launch(run: LocalRun) -> int:
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
        elastic_launch(config, entrypoint=sys.executable)("-m", "nccl_k8s.bench", *run.rank_argv)
        return 0
    except ChildFailedError as exc:
        return int(_failure(exc))
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)


def _failure(exc: object) -> int:
    """Exit codes 1 and 2 are verdicts the table already printed; anything else is a crash."""
    failures = getattr(exc, "failures", {})
    codes = {f.exitcode for f in failures.values()}
    if codes and codes <= {1, 2} and not any(_message(f) for f in failures.values()):
        return int(max(codes))
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
        return text.strip().splitlines()[-1] if text.strip() else ""
    return ""


__all__ = ["DEFAULT_CPU_RANKS", "LocalRun", "launch", "prepare", "run_parser"]
