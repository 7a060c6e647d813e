"""The engine's flags: nccl-tests' letters and meanings, parsed and validated once.

The per-rank entry point (`python -m nccl_k8s.bench`), `nccl-k8s run` and the deployer all parse
engine flags here, so a flag means the same everywhere. Each flag is one entry of bench.options'
table (its spellings, conversion, default, help, BenchConfig field, meta and -J keys); this module
builds the parser from it and holds the rules between flags (-e >= -b, -z with -G, what a backend
cannot do). Standard library only: it travels inside pods as a zipapp.
"""

from __future__ import annotations

import argparse
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
    ConfigError,
    absent,
    skipped,
)
from nccl_k8s.bench.dtypes import DTYPE_FACTS, DTYPES, Dtype
from nccl_k8s.bench.options import (
    BACKENDS,
    BLOCKING_MODES,
    DRIVERS,
    METRICS_ADDR_ENV,
    NCCL_TESTS_OPTIONS,
    NOT_HONOURED,
    OWN_OPTIONS,
    POD_TIMEOUT_S,
    REDOPS,
    Backend,
    BenchConfig,
    Driver,
    RedOp,
    add_options,
    add_refused,
    field_values,
    parse_size,
    refuse_not_honoured,
)

#: The pod's Kubernetes node, when the deployer puts it in the environment (the `node` of the
#: metrics and of the culprit lines; else the host name).
NODE_NAME_ENV = "NCCL_K8S_NODE_NAME"
#: The pod's own address (the downward API's status.podIP), where the deployer renders it: the
#: metrics server's address, and the address torchrun's master is reached at when the pod of
#: node rank 0 is not the pod of completion index 0 (launch._place).
POD_IP_ENV = "POD_IP"
#: The deployer's rank plan (JSON: `{"levels": [label, ...], "nodes": [[node, [value, ...]],
#: ...]}`, the nodes in topology order, each with its label values coarse to fine): the pods'
#: launchers (launch._pod; launch._place before torchrun) number the nodes the pods landed on
#: in this order.
RANK_PLAN_ENV = "NCCL_K8S_RANK_PLAN"
#: Where rank 0 writes every result line as soon as it is known (set by `nccl-k8s run`): what a
#: run stopped half-way leaves for its stored results.
JOURNAL_ENV = "NCCL_K8S_JOURNAL"
#: The command line the user typed (a JSON list), set by `nccl-k8s run`: the `args` of the -J file.
#: The ranks' own argv also holds what run adds (--backend, --no-result-lines, CPU sizes).
ARGS_ENV = "NCCL_K8S_ARGS"


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
    add_refused(p)
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
    if cfg.report_interval_s != BenchConfig().report_interval_s and not cfg.duration_s:
        raise ConfigError(
            f"--report-interval {ns.report_interval:g} without --duration: the interval is soak "
            "mode's (--duration SECONDS); a sweep reports once per size"
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
    # A type the backend has not at all is refused whatever the reduction (-o all too).
    if len(config.dtypes) == 1 and (why := absent(backend, config.dtype, config.driver)):
        raise ConfigError(f"-d {config.dtype!r}: {why}")
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
    "POD_IP_ENV",
    "POD_TIMEOUT_S",
    "RANK_PLAN_ENV",
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
