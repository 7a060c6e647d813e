"""The engine's flags: nccl-tests' letters and meanings, parsed and validated once.

The per-rank entry point (`python -m nccl_k8s.bench`), `nccl-k8s run` and the deployer all parse
engine flags here, so a flag means the same everywhere. Each flag is one entry of bench.options'
table (its spellings, conversion, default, help, BenchConfig field, meta and -J keys); this module
builds the parser from it, holds BenchConfig and the rules between flags (-e >= -b, -z with -G,
what a backend cannot do). Standard library only: it travels inside pods as a zipapp.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from typing import NoReturn

# The collectives and element types are registries of their own; the flags name their entries.
from nccl_k8s.bench.collectives import ALL_OPS, REDUCING_OPS, ROOTED_OPS, Op, refused
from nccl_k8s.bench.compat import (
    GLOO_AVG_FLOATS_ONLY,
    GLOO_NO_FP8,
    NCCL_NO_FP8_AVG,
    NOT_HONOURED,
    ConfigError,
    add_compat_flags,
    refuse_not_honoured,
    skipped,
)
from nccl_k8s.bench.dtypes import DEFAULT_DTYPE, DTYPE_FACTS, DTYPES, Dtype
from nccl_k8s.bench.options import (
    BACKENDS,
    BLOCKING_MODES,
    DRIVERS,
    METRICS_ADDR_ENV,
    NCCL_TESTS_OPTIONS,
    OWN_OPTIONS,
    POD_TIMEOUT_S,
    REDOPS,
    Backend,
    Driver,
    RedOp,
    add_options,
    field_values,
    label,
    parse_size,
)

#: The pod's Kubernetes node, when the deployer puts it in the environment (the `node` of the
#: metrics and of the culprit lines; else the host name).
NODE_NAME_ENV = "NCCL_K8S_NODE_NAME"
#: Where rank 0 writes every result line as soon as it is known (set by `nccl-k8s run`): what a
#: run stopped half-way leaves for its stored results.
JOURNAL_ENV = "NCCL_K8S_JOURNAL"
#: The command line the user typed (a JSON list), set by `nccl-k8s run`: the `args` of the -J file.
#: The ranks' own argv also holds what run adds (--backend, --no-result-lines, CPU sizes).
ARGS_ENV = "NCCL_K8S_ARGS"


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
    dtype: Dtype = DEFAULT_DTYPE
    """-d: element type, nccl-tests' name (the first of `dtypes`; the engine sets it to the
    type being measured)."""
    redop: RedOp = "sum"
    """-o: reduction for the reducing collectives (the first of `redops`, as `dtype`)."""
    dtypes: tuple[Dtype, ...] = (DEFAULT_DTYPE,)
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
        return label(self.dtypes)

    @property
    def redop_label(self) -> str:
        """What -o asked for: one reduction, or `all`."""
        return label(self.redops)


class _Parser(argparse.ArgumentParser):
    """argparse that fails with one line and exit code 2, the way our CLI fails."""

    def error(self, message: str) -> NoReturn:
        # Our converters already name the flag and the expected form; argparse's own
        # "argument -b/--minbytes: " prefix would only repeat it.
        if ": -" in message or ": --" in message:
            message = re.sub(r"^argument [^:]+: ", "", message)
        raise ConfigError(message)


def build_parser(prog: str = "python -m nccl_k8s.bench") -> argparse.ArgumentParser:
    """The engine's flags (bench.options' table); `nccl-k8s run` adds its own on top of these."""
    p = _Parser(
        prog=prog,
        description="Benchmark NCCL/gloo collectives with nccl-tests' flags, formulas and table.",
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(p, NCCL_TESTS_OPTIONS)
    add_compat_flags(p)
    add_options(p, OWN_OPTIONS)
    return p


def config_from_namespace(ns: argparse.Namespace) -> BenchConfig:
    """Validate parsed flags into a BenchConfig; every error names the value and the form."""
    refuse_not_honoured(ns)
    cfg = BenchConfig(**field_values(ns))
    if cfg.maxbytes < cfg.minbytes:
        raise ConfigError(
            f"-e {ns.maxbytes!r} is smaller than -b {ns.minbytes!r}: expected -b <= -e"
        )
    if cfg.stepfactor == 1 and cfg.stepbytes == 0:
        raise ConfigError("-i 0 with -f 1: expected a step size > 0 or a factor > 1")
    if cfg.stepfactor > 1 and cfg.minbytes == 0:
        raise ConfigError("-b 0 with -f > 1: a factor never grows 0, expected -b >= 1")
    if cfg.blocking in (1, 2) and cfg.graph:
        raise ConfigError(
            f"-z {cfg.blocking} with -G {cfg.graph}: a CUDA graph cannot wait inside its "
            "capture; expected -z 0 or 3 with -G"
        )
    if cfg.metrics_addr is not None and not cfg.metrics_port:
        raise ConfigError(f"--metrics-addr {cfg.metrics_addr!r}: expected --metrics-port too")
    return cfg


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
    facts = DTYPE_FACTS[config.dtype]
    if backend == "gloo" and len(config.dtypes) == 1 and len(config.redops) == 1:
        if facts.eight_bit_float:
            raise ConfigError(f"-d {config.dtype!r}: {GLOO_NO_FP8}; use the NCCL backend")
        if config.redop == "avg" and not facts.floating:
            needs = [op for op in config.ops if op in REDUCING_OPS]
            if needs:
                raise ConfigError(f"-o avg with -d {config.dtype}: {GLOO_AVG_FLOATS_ONLY}")
    if (
        backend == "nccl"
        and len(config.dtypes) == 1
        and facts.eight_bit_float
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
