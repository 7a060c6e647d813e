"""The engine's flags: nccl-tests' letters and meanings, parsed and validated once.

This module is the one definition of the engine's command line. The per-rank entry point
(`python -m nccl_k8s.bench`), `nccl-k8s run` and the deployer all parse engine flags here, so a
flag means the same everywhere. Standard library only: it travels inside pods as a zipapp.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Literal, NoReturn, TypeVar, get_args

# The collectives and element types are registries of their own; the flags name their entries.
from nccl_k8s.bench.collectives import ALL_OPS, REDUCING_OPS, ROOTED_OPS, Op, refused
from nccl_k8s.bench.compat import (
    NCCL_NO_FP8_AVG,
    NOT_HONOURED,
    ConfigError,
    add_compat_flags,
    refuse_not_honoured,
    skipped,
)
from nccl_k8s.bench.dtypes import DTYPE_ALIASES, DTYPES, Dtype

#: nccl-tests' reduction names (its `-o` values).
RedOp = Literal["sum", "prod", "max", "min", "avg"]
#: --backend: NCCL, gloo, or NCCL when CUDA devices exist.
Backend = Literal["auto", "nccl", "gloo"]
#: --driver: with NCCL, libnccl through ctypes (as nccl-tests calls it) or torch.distributed.
Driver = Literal["direct", "torch"]

REDOPS: tuple[RedOp, ...] = get_args(RedOp)
BACKENDS: tuple[Backend, ...] = get_args(Backend)
DRIVERS: tuple[Driver, ...] = get_args(Driver)
AVERAGE_MODES = {0: "rank 0", 1: "average", 2: "minimum", 3: "maximum"}
#: -z, as nccl-tests 2.19.6 reads it.
BLOCKING_MODES = {
    0: "no wait between ops",
    1: "wait and barrier after each op (time includes the barrier)",
    2: "wait after each op, no barrier",
    3: "wait and barrier after each op; time excludes the barrier",
}
#: Seconds a pod waits on a collective that never completes before it aborts (-T 0 in a pod):
#: torch's own NCCL default, so both drivers and gloo give up at the same time.
POD_TIMEOUT_S = 600
#: Where the metrics server listens when --metrics-addr is not given (e.g. a pod's own address,
#: `$(POD_IP)`, on clusters whose pods share a network stack); unset: 0.0.0.0.
METRICS_ADDR_ENV = "NCCL_K8S_METRICS_ADDR"
#: The pod's Kubernetes node, when the deployer puts it in the environment (the `node` of the
#: metrics and of the culprit lines; else the host name).
NODE_NAME_ENV = "NCCL_K8S_NODE_NAME"
#: Where rank 0 writes every result line as soon as it is known (set by `nccl-k8s run`): what a
#: run stopped half-way leaves for its stored results.
JOURNAL_ENV = "NCCL_K8S_JOURNAL"
#: The command line the user typed (a JSON list), set by `nccl-k8s run`: the `args` of the -J file.
#: The ranks' own argv also holds what run adds (--backend, --no-result-lines, CPU sizes).
ARGS_ENV = "NCCL_K8S_ARGS"

_T = TypeVar("_T", bound=str)


def _member(value: str, choices: tuple[_T, ...]) -> _T | None:
    """`value` as a member of a Literal's values, or None."""
    for choice in choices:
        if choice == value:
            return choice
    return None


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kKmMgG]?)[bB]?\s*$")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str, *, flag: str = "size") -> int:
    """Parse a byte size as nccl-tests does: a number with an optional binary K/M/G suffix."""
    match = _SIZE_RE.match(text)
    if not match:
        raise ConfigError(f"{flag} {text!r}: expected a byte size such as 8, 64K, 1M, 8G")
    number, unit = match.groups()
    return int(float(number) * _UNITS[unit.lower()])


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    """One engine run. Field names follow nccl-tests; units are in the names where they matter."""

    minbytes: int = 32 << 20
    """-b: smallest message size in bytes (nccl-tests' default 32M)."""
    maxbytes: int = 32 << 20
    """-e: largest message size in bytes."""
    stepbytes: int = 1 << 20
    """-i: additive step between sizes, used when stepfactor is 1."""
    stepfactor: int = 1
    """-f: multiplicative step between sizes; > 1 wins over stepbytes."""
    iters: int = 20
    """-n: timed operations per size and placement."""
    warmup: int = 1
    """-w: untimed operations at every size from -b doubling up to -e, before the sweep
    (nccl-tests 2.19.6; default 1)."""
    check: int = 1
    """-c: checked operations per size after timing; 0 turns checking off."""
    dtype: Dtype = "float"
    """-d: element type, nccl-tests' name (the first of `dtypes`; the engine sets it to the
    type being measured)."""
    redop: RedOp = "sum"
    """-o: reduction for the reducing collectives (the first of `redops`, as `dtype`)."""
    dtypes: tuple[Dtype, ...] = ("float",)
    """-d: every type to measure, in order (`-d all`: every type, as nccl-tests)."""
    redops: tuple[RedOp, ...] = ("sum",)
    """-o: every reduction to measure with the reducing collectives (`-o all`: every one)."""
    agg_iters: int = 1
    """-m: ops per timed iteration, issued in one NCCL group with the direct driver (nccl-tests'
    aggregated iterations); the time is divided by -n x -m."""
    cputime: bool = False
    """-C 1: report the host time to issue the ops (without the final wait), as nccl-tests."""
    unalign: int = 0
    """-u: offset of the first element of the send and receive buffers, in elements."""
    register: int = 0
    """-R: register the buffers with NCCL: 1 ncclCommRegister, 2 a symmetric window (direct
    driver only)."""
    parallel_init: int = 0
    """-p: accepted for nccl-tests' command lines: ranks here are processes, which always
    initialise in parallel."""
    ngpus: int = 1
    """-g: GPUs per process in nccl-tests; here each rank drives one GPU (`nccl-k8s run` turns
    -g x -t into its rank count; the engine itself refuses more than 1)."""
    nthreads: int = 1
    """-t: threads per process in nccl-tests; as -g."""
    root: int = 0
    """-r: root rank for rooted collectives; -1 sweeps every root."""
    blocking: int = 0
    """-z: 0 no wait, 1 wait + barrier after each op, 2 wait only, 3 wait + barrier, barrier untimed."""
    average: int = 1
    """-a: how per-rank times combine: 0 rank 0, 1 average, 2 minimum, 3 maximum."""
    graph: int = 0
    """-G: capture the timed ops in a CUDA graph and launch it this many times (NCCL only)."""
    timeout_s: int = 0
    """-T: seconds a rank waits on a collective before it names the culprit and aborts; 0: none
    (POD_TIMEOUT_S inside a Kubernetes pod)."""
    ops: tuple[Op, ...] = ("all_reduce",)
    """--ops: collectives to run, in order."""
    backend: Backend = "auto"
    """--backend: nccl, gloo, or auto (NCCL when CUDA devices exist)."""
    driver: Driver = "direct"
    """--driver: with NCCL, call libnccl directly (direct) or go through torch.distributed (torch)."""
    json_path: str | None = None
    """--json: also write results in nccl-tests' -J layout to this path (rank 0)."""
    min_busbw: float | None = None
    """--min-busbw: fail the run when an op's average bus bandwidth (GB/s) is lower."""
    duration_s: float = 0.0
    """--duration: soak mode: repeat each op at each size for this many seconds."""
    report_interval_s: float = 10.0
    """--report-interval: soak mode: seconds between bus-bandwidth reports."""
    result_lines: bool = True
    """Print machine-readable result lines (prefix NCCL_K8S_RESULT) after the table."""
    sweeps: int = 1
    """--sweeps: how many sweeps (every op at every size) to run; 0 runs them until stopped
    (continuous mode). With more than one, each sweep's result lines are one framed block
    (SWEEP_BLOCK) that starts with its own meta line, so every sweep reads on its own."""
    sweep_interval_s: float = 0.0
    """--sweep-interval: seconds between the end of one sweep and the start of the next."""
    metrics_port: int = 0
    """--metrics-port: serve Prometheus metrics on this TCP port (local rank 0 of each node);
    0: no metrics server."""
    metrics_addr: str | None = None
    """--metrics-addr: the address the metrics server listens on; None: $NCCL_K8S_METRICS_ADDR,
    else every IPv4 address (0.0.0.0)."""

    def sizes(self) -> list[int]:
        """The size column's inputs, exactly as nccl-tests walks them."""
        sizes: list[int] = []
        size = self.minbytes
        while size <= self.maxbytes:
            sizes.append(size)
            if self.stepfactor > 1:
                size *= self.stepfactor
            else:
                size += self.stepbytes
            if len(sizes) > 100_000:  # a 0-size start with factor steps never grows
                break
        return sizes

    def warmup_sizes(self, maxbytes: int) -> list[int]:
        """nccl-tests 2.19.6 warms every size from -b doubling up to the largest (x2 steps)."""
        sizes: list[int] = []
        size = min(self.minbytes, maxbytes)
        while size <= maxbytes and len(sizes) < 64:
            sizes.append(size)
            size = size * 2 if size else 1
        return sizes

    @property
    def dtype_label(self) -> str:
        """What -d asked for, as nccl-tests names it: one type, or `all`."""
        return self.dtypes[0] if len(self.dtypes) == 1 else "all"

    @property
    def redop_label(self) -> str:
        """What -o asked for: one reduction, or `all`."""
        return self.redops[0] if len(self.redops) == 1 else "all"


class _Parser(argparse.ArgumentParser):
    """argparse that fails with one line and exit code 2, the way our CLI fails."""

    def error(self, message: str) -> NoReturn:
        # Our converters already name the flag and the expected form; argparse's own
        # "argument -b/--minbytes: " prefix would only repeat it.
        if ": -" in message or ": --" in message:
            message = re.sub(r"^argument [^:]+: ", "", message)
        raise ConfigError(message)


def _int(flag: str, *, minimum: int | None = None) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: expected an integer") from None
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: expected an integer >= {minimum}")
        return value

    return convert


def _float(flag: str, *, minimum: float = 0.0) -> Callable[[str], float]:
    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: expected a number") from None
        if not math.isfinite(value) or value < minimum:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: expected a number >= {minimum:g}")
        return value

    return convert


def build_parser(prog: str = "python -m nccl_k8s.bench") -> argparse.ArgumentParser:
    """The engine's flags; `nccl-k8s run` adds its own on top of these."""
    p = _Parser(
        prog=prog,
        description="Benchmark NCCL/gloo collectives with nccl-tests' flags, formulas and table.",
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_nccl_tests_flags(p)
    add_compat_flags(p, _int)
    _add_own_flags(p)
    return p


def _add_nccl_tests_flags(p: argparse.ArgumentParser) -> None:
    """nccl-tests' flags, with its spellings and defaults."""
    add = p.add_argument
    add("-b", "--minbytes", default="32M", metavar="SIZE", help="smallest size (8, 64K, 1M, 8G)")
    add("-e", "--maxbytes", default="32M", metavar="SIZE", help="largest size")
    add("-i", "--stepbytes", default="1M", metavar="SIZE", help="additive step when -f is 1")
    add("-f", "--stepfactor", type=_int("-f", minimum=1), default=1, help="multiplicative step")
    add("-n", "--iters", type=_int("-n", minimum=1), default=20, help="timed ops per size")
    add("-w", "--warmup_iters", type=_int("-w", minimum=0), default=1, help="warm-up ops")
    add("-c", "--check", type=_int("-c", minimum=0), default=1, help="checked ops per size")
    add("-d", "--datatype", default="float", metavar="TYPE", help=", ".join(DTYPES) + " or all")
    add("-o", "--op", default="sum", metavar="REDOP", help=", ".join(REDOPS) + " or all")
    add("-r", "--root", type=_int("-r", minimum=-1), default=0, help="root rank, -1 = all")
    add(
        "-z",
        "--blocking",
        type=_int("-z", minimum=0),
        default=0,
        help="0 none, 1 wait+barrier, 2 wait, 3 wait+barrier (untimed)",
    )
    add("-a", "--average", type=_int("-a", minimum=0), default=1, help="0 rank0 1 avg 2 min 3 max")
    add("-G", "--cudagraph", type=_int("-G", minimum=0), default=0, help="CUDA graph launches")
    add(
        "-T",
        "--timeout",
        type=_int("-T", minimum=0),
        default=0,
        help=f"seconds a stuck collective may wait before the run names the culprit and aborts "
        f"(0: none, {POD_TIMEOUT_S} inside a Kubernetes pod)",
    )


def _add_own_flags(p: argparse.ArgumentParser) -> None:
    """Ours: collectives, backend, outputs, soak and continuous modes, metrics."""
    add = p.add_argument
    add(
        "--ops",
        default="all_reduce",
        help="comma-separated collectives, or 'all': " + ",".join(ALL_OPS),
    )
    add("--backend", default="auto", help="nccl, gloo or auto")
    add(
        "--driver",
        default="direct",
        help="NCCL only: direct (libnccl, as nccl-tests) or torch (torch.distributed)",
    )
    add(
        "-J",
        "--json",
        "--output_file",
        dest="json_path",
        default=None,
        metavar="PATH",
        help="nccl-tests -J style JSON",
    )
    add(
        "--min-busbw",
        type=_float("--min-busbw"),
        default=None,
        metavar="GBPS",
        help="fail when an op's average busbw is lower",
    )
    add(
        "--duration",
        type=_float("--duration"),
        default=0.0,
        metavar="SECONDS",
        help="soak mode: repeat each op and size for this long",
    )
    add(
        "--report-interval",
        type=_float("--report-interval", minimum=0.1),
        default=10.0,
        metavar="SECONDS",
        help="soak mode: seconds between busbw reports",
    )
    add(
        "-N",
        "--sweeps",
        "--run_cycles",
        dest="sweeps",
        type=_int("--sweeps", minimum=0),
        default=1,
        metavar="N",
        help="run the whole sweep N times, 0: until stopped (continuous mode; nccl-tests' -N)",
    )
    add(
        "--sweep-interval",
        type=_float("--sweep-interval"),
        default=0.0,
        metavar="SECONDS",
        help="pause between two sweeps",
    )
    add(
        "--metrics-port",
        type=_int("--metrics-port", minimum=0),
        default=0,
        metavar="PORT",
        help="serve Prometheus metrics on this port (one server per node; 0: none); "
        "needs prometheus_client",
    )
    add(
        "--metrics-addr",
        default=None,
        metavar="ADDR",
        help=f"address the metrics server listens on (default: ${METRICS_ADDR_ENV}, else 0.0.0.0)",
    )
    add("--no-result-lines", action="store_true", help="omit the NCCL_K8S_RESULT lines")


def config_from_namespace(ns: argparse.Namespace) -> BenchConfig:
    """Validate parsed flags into a BenchConfig; every error names the value and the form."""
    minbytes = parse_size(ns.minbytes, flag="-b")
    maxbytes = parse_size(ns.maxbytes, flag="-e")
    stepbytes = parse_size(ns.stepbytes, flag="-i")
    if maxbytes < minbytes:
        raise ConfigError(
            f"-e {ns.maxbytes!r} is smaller than -b {ns.minbytes!r}: expected -b <= -e"
        )
    if ns.stepfactor == 1 and stepbytes == 0:
        raise ConfigError("-i 0 with -f 1: expected a step size > 0 or a factor > 1")
    if ns.stepfactor > 1 and minbytes == 0:
        raise ConfigError("-b 0 with -f > 1: a factor never grows 0, expected -b >= 1")

    dtypes, redops = _dtypes(ns.datatype), _redops(ns.op)
    refuse_not_honoured(ns)
    if ns.local_register not in (0, 1, 2):
        raise ConfigError(f"-R {ns.local_register}: expected 0 (off), 1 (local) or 2 (symmetric)")
    if ns.report_cputime not in (0, 1):
        raise ConfigError(f"-C {ns.report_cputime}: expected 0 or 1")
    if ns.average not in AVERAGE_MODES:
        raise ConfigError(f"-a {ns.average}: expected 0 (rank 0), 1 (avg), 2 (min) or 3 (max)")
    if ns.blocking not in BLOCKING_MODES:
        raise ConfigError(f"-z {ns.blocking}: expected 0, 1, 2 or 3 (nccl-tests' blocking modes)")
    backend = _member(ns.backend, BACKENDS)
    if backend is None:
        raise ConfigError(f"--backend {ns.backend!r}: expected one of {', '.join(BACKENDS)}")
    driver = _member(ns.driver, DRIVERS)
    if driver is None:
        raise ConfigError(f"--driver {ns.driver!r}: expected direct or torch")
    if ns.blocking in (1, 2) and ns.cudagraph:
        raise ConfigError(
            f"-z {ns.blocking} with -G {ns.cudagraph}: a CUDA graph cannot wait inside its "
            "capture; expected -z 0 or 3 with -G"
        )
    ops = _parse_ops(ns.ops)
    if ns.metrics_port > 65535:
        raise ConfigError(f"--metrics-port {ns.metrics_port}: expected a TCP port, 1 to 65535")
    if ns.metrics_addr is not None and not ns.metrics_port:
        raise ConfigError(f"--metrics-addr {ns.metrics_addr!r}: expected --metrics-port too")
    return BenchConfig(
        minbytes=minbytes,
        maxbytes=maxbytes,
        stepbytes=stepbytes,
        stepfactor=ns.stepfactor,
        iters=ns.iters,
        warmup=ns.warmup_iters,
        check=ns.check,
        dtype=dtypes[0],
        redop=redops[0],
        dtypes=dtypes,
        redops=redops,
        agg_iters=ns.agg_iters,
        cputime=bool(ns.report_cputime),
        unalign=ns.unalign,
        register=ns.local_register,
        parallel_init=ns.parallel_init,
        ngpus=ns.ngpus,
        nthreads=ns.nthreads,
        root=ns.root,
        blocking=ns.blocking,
        average=ns.average,
        graph=ns.cudagraph,
        timeout_s=ns.timeout,
        ops=ops,
        backend=backend,
        driver=driver,
        json_path=ns.json_path,
        min_busbw=ns.min_busbw,
        duration_s=ns.duration,
        report_interval_s=ns.report_interval,
        result_lines=not ns.no_result_lines,
        sweeps=ns.sweeps,
        sweep_interval_s=ns.sweep_interval,
        metrics_port=ns.metrics_port,
        metrics_addr=ns.metrics_addr,
    )


def _dtypes(text: str) -> tuple[Dtype, ...]:
    if text == "all":
        return tuple(DTYPES)
    dtype = DTYPE_ALIASES.get(text) or _member(text, tuple(DTYPES))
    if dtype is None:
        raise ConfigError(f"-d {text!r}: expected one of {', '.join(DTYPES)}, or all")
    return (dtype,)


def _redops(text: str) -> tuple[RedOp, ...]:
    if text == "all":
        return REDOPS
    redop = _member(text, REDOPS)
    if redop is None:
        raise ConfigError(f"-o {text!r}: expected one of {', '.join(REDOPS)}, or all")
    return (redop,)


def _parse_ops(text: str) -> tuple[Op, ...]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise ConfigError(f"--ops {text!r}: expected a collective name or 'all'")
    if names == ["all"]:
        return ALL_OPS
    ops: list[Op] = []
    for name in names:
        canonical = _member(name.removesuffix("_perf"), ALL_OPS)
        if canonical is None:
            raise ConfigError(
                f"--ops {name!r}: unknown collective, expected 'all' or {', '.join(ALL_OPS)}"
            )
        if canonical not in ops:
            ops.append(canonical)
    return tuple(ops)


def parse_args(argv: Sequence[str]) -> BenchConfig:
    """Parse and validate engine flags; raises ConfigError with one line."""
    ns = build_parser().parse_args(list(argv))
    return config_from_namespace(ns)


def timeout_for(config: BenchConfig, environ: Mapping[str, str] | None = None) -> int:
    """The collective timeout in effect: -T, or POD_TIMEOUT_S inside a pod when -T is 0."""
    env = os.environ if environ is None else environ
    if config.timeout_s:
        return config.timeout_s
    return POD_TIMEOUT_S if env.get("KUBERNETES_SERVICE_HOST") else 0


def check_backend(config: BenchConfig, backend: str, *, world_size: int) -> None:
    """Refuse what the resolved backend cannot do, before any rank starts."""
    n = config.ngpus * config.nthreads
    if (
        n > 1 and n != world_size
    ):  # -g x -t ranks is how `nccl-k8s run` reads them (the header says)
        raise ConfigError(
            f"-g {config.ngpus} -t {config.nthreads}: each rank here is one process driving one "
            f"GPU, and this run has {world_size}; for {n} ranks: nccl-k8s run -g {n} (or --nproc "
            f"{n}), torchrun --nproc-per-node {n}, or deploy --gpus-per-node {n}"
        )
    if config.register and (backend != "nccl" or config.driver != "direct"):
        raise ConfigError(
            f"-R {config.register}: buffer registration is NCCL's, through the direct driver; "
            f"this run uses {backend}"
            + (f" with --driver {config.driver}" if backend == "nccl" else "")
        )
    if config.graph and backend != "nccl":
        raise ConfigError(
            f"-G {config.graph}: CUDA graphs need the NCCL backend, this run uses {backend}"
        )
    if backend == "gloo" and len(config.dtypes) == 1 and len(config.redops) == 1:
        if config.dtype.startswith("f8"):
            raise ConfigError(
                f"-d {config.dtype!r}: gloo has no 8-bit floats; use the NCCL backend"
            )
        if config.redop == "avg" and config.dtype in ("int8", "uint8", "int32", "int64"):
            needs = [op for op in config.ops if op in REDUCING_OPS]
            if needs:
                raise ConfigError(
                    f"-o avg with -d {config.dtype}: gloo averages only floating types"
                )
    if (
        backend == "nccl"
        and len(config.dtypes) == 1
        and config.dtype.startswith("f8")
        and config.redops == ("avg",)
        and any(op in REDUCING_OPS for op in config.ops)
    ):
        raise ConfigError(f"-o avg with -d {config.dtype}: {NCCL_NO_FP8_AVG}")
    if config.root >= world_size:
        raise ConfigError(
            f"-r {config.root}: expected a rank below the world size {world_size}, or -1"
        )
    # Named ops only: `--ops all` skips what this world size cannot run (the engine says so).
    why = refused(config.ops, world_size) if config.ops != ALL_OPS else None
    if why:
        raise ConfigError(why)


__all__ = [
    "ALL_OPS",
    "BACKENDS",
    "BLOCKING_MODES",
    "DRIVERS",
    "DTYPES",
    "JOURNAL_ENV",
    "METRICS_ADDR_ENV",
    "NOT_HONOURED",
    "POD_TIMEOUT_S",
    "REDOPS",
    "REDUCING_OPS",
    "ROOTED_OPS",
    "Backend",
    "BenchConfig",
    "ConfigError",
    "Driver",
    "Dtype",
    "Op",
    "RedOp",
    "build_parser",
    "check_backend",
    "config_from_namespace",
    "parse_args",
    "parse_size",
    "skipped",
    "timeout_for",
]
