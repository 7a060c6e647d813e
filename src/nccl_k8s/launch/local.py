"""`nccl-k8s run`: N local ranks of `python -m nccl_k8s.bench`, the entry point pods run.

Everything the ranks would refuse is refused here first, in this process, so a bad flag costs
one line and exit code 2 instead of N tracebacks: the engine's flags, the rank count against
what the machine holds, and every file the run will write (--json) against what can be written.
Rank 0's stdout is the run's output.

This module returns plain facts (the exit code, the versions the ranks ran with); storing the
results is the caller's (cli), which owns the runs directory. How ranks are started, watched,
stopped and blamed is launch._procs and launch._culprit.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import importlib.util
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from nccl_k8s.bench.config import (
    BenchConfig,
    ConfigError,
    build_parser,
    check_backend,
    config_from_namespace,
)
from nccl_k8s.errors import UsageError, install_hint
from nccl_k8s.launch._procs import interruptible, journal_path, run_ranks, workdir

#: CPU ranks when there is no GPU: two, so every collective really crosses ranks.
DEFAULT_CPU_RANKS = 2
#: The sizes of a CPU run that names none (-b, -e, -i, -f): 8 B to 1 MiB, x4.
CPU_SIZES = ("-b", "8", "-e", "1M", "-f", "4")
_SIZE_FLAGS = ("-b", "--minbytes", "-e", "--maxbytes", "-i", "--stepbytes", "-f", "--stepfactor")
#: gloo ranks per CPU this process may use, at most: beyond that, ranks only time-share the
#: CPUs (each is a process holding its own copy of torch) and the figures mean nothing.
MAX_CPU_RANKS_PER_CPU = 4


@dataclasses.dataclass(frozen=True)
class LocalRun:
    """A validated local run: how many ranks, which backend, and the argv each rank gets."""

    nproc: int
    backend: str
    config: BenchConfig
    rank_argv: tuple[str, ...]
    #: --run-id as given (None: not given); --no-save turns storing off.
    run_id: str | None = None
    no_save: bool = False
    #: The torch and CUDA versions the ranks run with (the same interpreter as this process):
    #: torch "" on the direct NCCL path, which does not use it; CUDA as the driver reports it.
    torch_version: str = ""
    cuda_version: str | None = None
    #: The flags as the user typed them: what results and the -J file say the run was asked
    #: (rank_argv holds what run adds: --backend, --no-result-lines, CPU sizes).
    typed_argv: tuple[str, ...] = ()


def run_parser() -> argparse.ArgumentParser:
    """The engine's flags plus run's own; `nccl-k8s run --help` renders this."""
    parser = build_parser(prog="nccl-k8s run")
    parser.description = (
        "Run the benchmark on this machine: all local GPUs through NCCL, or CPU ranks through "
        "gloo when there is no GPU. Flags are nccl-tests' (same letters, same meaning)."
    )
    for action in parser._actions:
        if action.dest == "no_result_lines":
            action.help = argparse.SUPPRESS  # run prints no result lines unless --result-lines
    parser.add_argument(
        "--nproc",
        default=None,
        metavar="N",
        help=f"ranks to start (default: GPU count, or {DEFAULT_CPU_RANKS} on CPU; at most one "
        f"per GPU, or {MAX_CPU_RANKS_PER_CPU} per CPU with gloo)",
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


#: The flags `nccl-k8s run` adds to the engine's (dests of run_parser's own actions).
RUN_FLAGS = ("nproc", "result_lines", "run_id", "no_save")


def prepare(argv: Sequence[str]) -> LocalRun:
    """Validate `nccl-k8s run` arguments; raises UsageError (one line) on anything wrong."""
    from nccl_k8s.bench.trace import stage

    stage("launcher prepare")
    try:
        ns, extra = run_parser().parse_known_args(list(argv))
        if extra:
            raise ConfigError(f"unrecognized arguments: {' '.join(extra)}")
        config = config_from_namespace(ns)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    ngpu = gpu_count()
    backend = config.backend if config.backend != "auto" else ("nccl" if ngpu else "gloo")
    if backend == "nccl" and not ngpu:
        raise UsageError("--backend nccl: no CUDA device is visible here; use --backend gloo")
    uses_torch = backend != "nccl" or config.driver == "torch"
    if uses_torch and importlib.util.find_spec("torch") is None:
        what = "--backend gloo" if backend != "nccl" else "--driver torch"
        raise UsageError(f"{what} needs torch: {install_hint('engine')}")
    # nccl-tests' -g GPUs per process times -t threads: that many ranks here, one GPU each.
    per_process = config.ngpus * config.nthreads
    default = ngpu if backend == "nccl" else DEFAULT_CPU_RANKS
    nproc = _nproc(ns.nproc, default=per_process if per_process > 1 else default)
    if backend == "nccl" and nproc > ngpu:
        raise UsageError(
            f"--nproc {nproc}: only {ngpu} GPU(s) visible; NCCL needs one GPU per rank"
        )
    if backend == "gloo":
        cpus = usable_cpus()
        ceiling = MAX_CPU_RANKS_PER_CPU * cpus
        if nproc > ceiling:
            raise UsageError(
                f"--nproc {nproc}: this machine holds at most {ceiling} gloo ranks "
                f"({MAX_CPU_RANKS_PER_CPU} per CPU, {cpus} CPU{'s' if cpus != 1 else ''} usable): "
                f"expected --nproc <= {ceiling}"
            )
    try:
        check_backend(config, backend, world_size=nproc)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None

    if ns.no_save and ns.run_id is not None:
        raise UsageError("--run-id names the stored results; it cannot go with --no-save")
    if config.json_path:
        check_writable(Path(config.json_path), what="--json", is_dir=False)
    if config.metrics_port:
        from nccl_k8s.bench.metrics import check

        try:
            check(config.metrics_port, config.metrics_addr)
        except ConfigError as exc:
            raise UsageError(str(exc)) from None

    rank_argv = _drop_value(list(argv), "--nproc")
    if backend == "gloo" and not any(_names(a, _SIZE_FLAGS) for a in argv):
        # nccl-tests' 32 MiB default takes about a minute of two CPU ranks: a sweep that ends in
        # seconds instead (the table's header shows the sizes).
        rank_argv += list(CPU_SIZES)
        config = config_from_namespace(run_parser().parse_known_args([*argv, *CPU_SIZES])[0])
    rank_argv = _drop_value(rank_argv, "--run-id")
    rank_argv = [a for a in rank_argv if a not in ("--result-lines", "--no-save")]
    rank_argv += ["--backend", backend]
    if not ns.result_lines:
        rank_argv.append("--no-result-lines")
    return LocalRun(
        nproc=nproc,
        backend=backend,
        config=config,
        rank_argv=tuple(rank_argv),
        run_id=ns.run_id,
        no_save=bool(ns.no_save),
        torch_version=_installed("torch") if uses_torch else "",
        cuda_version=_cuda_version() if backend == "nccl" else None,
        typed_argv=tuple(argv),
    )


def gpu_count() -> int:
    """GPUs this machine offers the ranks (NVML, or the CUDA driver; no torch): bench.cuda."""
    from nccl_k8s.bench.cuda import gpu_count as count

    return count()


def _installed(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ""


def _cuda_version() -> str | None:
    """The CUDA version the ranks run with: what the driver supports (no torch asked)."""
    from nccl_k8s.bench.cuda import CudaError, driver_version

    try:
        return driver_version()
    except (OSError, CudaError):
        return None


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, as a cgroup-pinned container sees)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def check_writable(path: Path, *, what: str, is_dir: bool, hint: str = "") -> None:
    """Refuse, before any rank starts, an output path that cannot be written: a directory to
    create files in (`is_dir`), or a file whose directory must exist (the engine creates none).

    Writing is tried, not guessed from mode bits (root ignores them, a read-only mount does not):
    a probe file is created and removed in the nearest directory that exists.
    """
    todo = hint or "choose a writable path"
    if not is_dir and path.is_dir():
        raise UsageError(f"{what} {path}: is a directory: expected a file path")
    folder = path if is_dir else path.parent
    probe = folder
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"{what} {path}: {probe} is not a directory: {todo}")
    if not is_dir and probe != folder:
        raise UsageError(f"{what} {path}: directory {folder} does not exist: create it or {todo}")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".nccl-k8s-probe-", dir=probe)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise UsageError(
            f"{what} {path}: cannot write in {probe} ({exc.strerror}): {todo}"
        ) from None


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


def _names(arg: str, flags: Sequence[str]) -> bool:
    """`arg` is one of `flags`, alone, with `=VALUE`, or a short flag with its value attached."""
    return any(
        arg == f
        or arg.startswith(f + "=")
        or (len(f) == 2 and arg.startswith(f) and arg[2:3] != "-")
        for f in flags
    )


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


def launch(
    run: LocalRun, *, work: Path, extra_argv: Sequence[str] = (), run_id: str | None = None
) -> int:
    """Start the ranks and wait; returns the run's exit code (0, or the 1/2 verdict the table
    printed), or raises RunFailed naming the culprit rank, or Interrupted.

    `work` is the run's private directory (`workdir()`), which the caller removes; `run_id` the
    id its results are stored under, which the ranks see as NCCL_K8S_RUN_ID.
    """
    torch_store = run.backend != "nccl" or run.config.driver == "torch"
    return run_ranks(
        run.nproc,
        [*run.rank_argv, *extra_argv],
        work=work,
        run_id=run_id,
        torch_store=torch_store,
        typed=run.typed_argv,
    )


__all__ = [
    "CPU_SIZES",
    "DEFAULT_CPU_RANKS",
    "MAX_CPU_RANKS_PER_CPU",
    "RUN_FLAGS",
    "LocalRun",
    "check_writable",
    "interruptible",
    "journal_path",
    "launch",
    "prepare",
    "run_parser",
    "usable_cpus",
    "workdir",
]
