"""The engine's options: each declared once, with everything every layer needs to know of it.

One `EngineOption` per flag the engine honours: its spellings, how its text is converted and
checked (each error names the value and the form expected), its default and --help line, the
BenchConfig field it fills, its key in our meta line (what `results` reads back, and how), and
its key in nccl-tests' -J layout where nccl-tests has one. BenchConfig, the run those entries
fill, sits beside them, and so do nccl-tests' flags the engine accepts but refuses (with why).
The parser (bench.config), rank 0's meta line (bench.outcome), its --json file (bench.runner),
results' readers of both (results.schema, results.nccltests_json) and the local run's results
(local) all read `OPTIONS`: adding an option is its entry and its field here, plus, where
unavoidable, the code that does what it asks. Standard library only: it travels inside pods.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Literal, get_args

from nccl_k8s.bench.collectives import ALL_OPS, Op
from nccl_k8s.bench.compat import ConfigError
from nccl_k8s.bench.convert import (
    dtypes_of,
    integer,
    literal,
    member,
    number,
    one_of,
    ops_of,
    parse_size,
    size,
)
from nccl_k8s.bench.dtypes import DEFAULT_DTYPE, DTYPES, Dtype

#: nccl-tests' reduction names (its `-o` values).
RedOp = Literal["sum", "prod", "max", "min", "avg"]
#: --backend: NCCL, gloo, or NCCL when CUDA devices exist.
Backend = Literal["auto", "nccl", "gloo"]
#: --driver: with NCCL, libnccl through ctypes (as nccl-tests calls it) or torch.distributed.
Driver = Literal["direct", "torch"]
#: How results read an option's value back from our meta line: an integer, a string, a list of
#: strings, or a mode (an integer of the option's `modes`; true/false read as 1/0: the form
#: nccl-tests' -J gives -z, and our runs stored before the mode was kept).
Reader = Literal["int", "number", "str", "strs", "mode"]

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
#: A `to_json` result that leaves the key out of the -J file.
OMIT = object()


@dataclasses.dataclass(frozen=True)
class EngineOption:
    """One engine flag, as the parser, BenchConfig, the meta line, -J and results know it."""

    flags: tuple[str, ...]
    """Its spellings, nccl-tests' letter and long name first."""
    field: str
    """The BenchConfig field it fills."""
    default: Any
    """argparse's default: the text a user would type (a size as "32M") or the value."""
    help: str
    convert: Callable[[str], Any] | None = None
    """argparse's `type`: the flag's text to a value (bad text: one line naming it)."""
    value: Callable[[Any], Any] | None = None
    """The parsed value to the field's (None: as parsed); raises ConfigError naming the value."""
    metavar: str | None = None
    dest: str | None = None
    """argparse's dest, where it is not the first long flag's."""
    store_true: bool = False
    meta: str | None = None
    """Its key in our meta line's `config` (and results' RunConfig field); None: not there."""
    show: Callable[[Any], Any] | None = None
    """The field's value as the meta line and our -J fields say it (None: as it is)."""
    read: Reader | None = None
    """How results read `meta` back; None: results keep no field for it."""
    modes: Mapping[int, str] | None = None
    """The values a `mode` option takes, and what each means."""
    json_key: str | None = None
    """Its key in nccl-tests' -J `config`, where nccl-tests has one."""
    to_json: Callable[[Any, Any], Any] | None = None
    """(field value, BenchConfig) to the -J value (OMIT: left out); None: as `show` says."""
    json_own: bool = False
    """nccl-tests' -J value cannot say it all (-z's bool): the -J file carries `meta` too."""
    once: bool = False
    """Given twice with two values, refused: an output file, of which argparse (and nccl-tests)
    would write only the last."""

    @property
    def arg_dest(self) -> str:
        if self.dest:
            return self.dest
        long = next(f for f in self.flags if f.startswith("--"))
        return long[2:].replace("-", "_")

    def shown(self, value: Any) -> Any:
        return self.show(value) if self.show else value


# -- what the table's entries use


def _redops(text: str) -> tuple[RedOp, ...]:
    if text == "all":
        return REDOPS
    redop = member(text, REDOPS)
    if redop is None:
        raise ConfigError(f"-o {text!r}: expected one of {', '.join(REDOPS)}, or all")
    return (redop,)


def label(values: tuple[str, ...]) -> str:
    """-d/-o as asked: one type (reduction), or `all`."""
    return values[0] if len(values) == 1 else "all"


def _bool_text(value: Any, _: Any) -> str:
    return "true" if value else "false"


def _per_process(_: Any, __: Any) -> int:
    """-g/-t in -J: each rank here is one process driving one GPU with one thread."""
    return 1


def _step_bytes(value: Any, cfg: Any) -> Any:
    return OMIT if cfg.stepfactor > 1 else value


def _step_factor(value: Any, _: Any) -> Any:
    return value if value > 1 else OMIT


# -- the config the options fill


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
    report_timestamps: bool = False
    """-S 1: each table row ends with the local time it was measured, as nccl-tests prints it."""
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
    """--backend: nccl, gloo, or auto (NCCL when CUDA devices exist; gloo only when no GPU was
    requested, see gpus_requested)."""
    gpus_requested: int = 0
    """--gpus-requested: GPUs the rank's pod asked for (`nccl-k8s deploy` sets it from
    --gpus-per-node); when more than 0, a rank whose CUDA driver sees no device fails at start
    with the likely causes, instead of measuring the CPU with gloo (unless --backend gloo)."""
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


# -- nccl-tests' flags the engine does not honour


#: nccl-tests flags the engine does not honour: (short, long, nccl-tests' default, why). The
#: default is accepted, so a pasted command line that spells it out still runs; any other value
#: is refused with the reason.
NOT_HONOURED: tuple[tuple[str, str, str | None, str], ...] = (
    ("-y", "--stream_null", "0", "NCCL ops run on the engine's own CUDA stream (nccl-tests' "
     "default); the legacy default stream is not offered"),
    ("-x", "--cta_policy", None, "the CTA policy is a communicator config "
     "(ncclCommInitRankConfig, NCCL 2.27+) the engine does not set"),
    ("-D", "--device_implementation", "0", "device-initiated collectives need kernels built "
     "against NCCL's device API; the engine calls the host API only"),
    ("-V", "--device_cta_count", "16", "it sizes the device implementation (-D), which the "
     "engine does not have"),
    ("-M", "--memory", "0", "NCCL's memory report is not gathered (nvidia-smi shows memory)"),
    ("-I", "--per_iter_timing", "0", "per-op times: --duration SECONDS times every op with "
     "CUDA events and reports min, median and p99"),
    ("-K", "--per_iter_skip", "0", "it trims -I's samples, which the engine does not take "
     "(see --duration)"),
)  # fmt: skip


def add_refused(p: argparse.ArgumentParser) -> None:
    """nccl-tests' flags the engine refuses, each with its reason as its help."""
    for short, long, default, why in NOT_HONOURED:
        p.add_argument(
            short,
            long,
            default=None,
            metavar="N",
            help=f"refused unless {default}: {why}" if default else f"refused: {why}",
        )


def refuse_not_honoured(ns: argparse.Namespace) -> None:
    """nccl-tests flags with no counterpart here: their default passes, any other value is
    refused naming the flag and why."""
    for short, long, default, why in NOT_HONOURED:
        value = getattr(ns, long.lstrip("-"))
        if value is None or (default is not None and _same_int(value, default)):
            continue
        raise ConfigError(f"{short} {value} ({long}): not supported by nccl-k8s: {why}")


def _same_int(text: str, default: str) -> bool:
    try:
        return int(text, 0) == int(default)
    except ValueError:
        return False


# -- the table: nccl-tests' flags (in its order), then ours; --help lists them in this order

E = EngineOption
_Z_HELP = "0 none, 1 wait+barrier, 2 wait, 3 wait+barrier (untimed)"
_T_HELP = (
    f"seconds a stuck collective may wait before the run names the culprit and aborts "
    f"(0: none, {POD_TIMEOUT_S} inside a Kubernetes pod)"
)
_METRICS_ADDR_HELP = (
    f"address the metrics server listens on (default: ${METRICS_ADDR_ENV}, else 0.0.0.0)"
)

#: nccl-tests' flags the engine honours, with its spellings and defaults.
NCCL_TESTS_OPTIONS: tuple[EngineOption, ...] = (
    E(("-b", "--minbytes"), "minbytes", "32M", "smallest size (8, 64K, 1M, 8G)", value=size("-b"),
      metavar="SIZE", meta="minbytes", read="int", json_key="minimum_bytes"),
    E(("-e", "--maxbytes"), "maxbytes", "32M", "largest size", value=size("-e"), metavar="SIZE",
      meta="maxbytes", read="int", json_key="maximum_bytes"),
    E(("-i", "--stepbytes"), "stepbytes", "1M", "additive step when -f is 1", value=size("-i"),
      metavar="SIZE", meta="stepbytes", read="int", json_key="step_bytes", to_json=_step_bytes),
    E(("-f", "--stepfactor"), "stepfactor", 1, "multiplicative step", integer("-f", minimum=1),
      meta="stepfactor", read="int", json_key="step_factor", to_json=_step_factor),
    E(("-n", "--iters"), "iters", 20, "timed ops per size", integer("-n", minimum=1), meta="iters",
      read="int", json_key="iterations"),
    E(("-w", "--warmup_iters"), "warmup", 1, "warm-up ops", integer("-w", minimum=0), meta="warmup",
      read="int", json_key="warmup_iters"),
    E(("-c", "--check"), "check", 1, "checked ops per size", integer("-c", minimum=0), meta="check",
      read="int", json_key="validation"),
    E(("-d", "--datatype"), "dtypes", DEFAULT_DTYPE, ", ".join(DTYPES) + " or all", value=dtypes_of,
      metavar="TYPE", meta="dtype", show=label, read="str", json_key="datatype"),
    E(("-o", "--op"), "redops", "sum", ", ".join(REDOPS) + " or all", value=_redops,
      metavar="REDOP", meta="redop", show=label, read="str", json_key="redop"),
    E(("-r", "--root"), "root", 0, "root rank, -1 = all", integer("-r", minimum=-1), meta="root",
      read="int"),
    E(("-z", "--blocking"), "blocking", 0, _Z_HELP, integer("-z", minimum=0),
      one_of(BLOCKING_MODES, "-z {v}: expected 0, 1, 2 or 3 (nccl-tests' blocking modes)"),
      meta="blocking", read="mode", modes=BLOCKING_MODES, json_key="blocking_collectives",
      to_json=_bool_text, json_own=True),
    E(("-a", "--average"), "average", 1, "0 rank0 1 avg 2 min 3 max", integer("-a", minimum=0),
      one_of(AVERAGE_MODES, "-a {v}: expected 0 (rank 0), 1 (avg), 2 (min) or 3 (max)"),
      meta="average", read="mode", modes=AVERAGE_MODES),
    E(("-G", "--cudagraph"), "graph", 0, "CUDA graph launches", integer("-G", minimum=0),
      meta="graph", read="int", json_key="graph"),
    E(("-T", "--timeout"), "timeout_s", 0, _T_HELP, integer("-T", minimum=0)),
    E(("-m", "--agg_iters"), "agg_iters", 1, "ops per timed iteration (one NCCL group)",
      integer("-m", minimum=1), json_key="aggregated_iterations"),
    E(("-C", "--report_cputime"), "cputime", 0,
      "1: report the time to issue the ops, without the final wait", integer("-C", minimum=0),
      lambda v: bool(one_of((0, 1), "-C {v}: expected 0 or 1")(v))),
    E(("-S", "--report_timestamps"), "report_timestamps", 0,
      "1: a timestamp column (local time of each row)", integer("-S", minimum=0),
      lambda v: bool(one_of((0, 1), "-S {v}: expected 0 or 1")(v))),
    E(("-u", "--unalign"), "unalign", 0, "misalign both buffers by N elements",
      integer("-u", minimum=0), metavar="N"),
    E(("-R", "--local_register"), "register", 0,
      "register buffers with NCCL: 1 local, 2 symmetric (direct driver)", integer("-R", minimum=0),
      one_of((0, 1, 2), "-R {v}: expected 0 (off), 1 (local) or 2 (symmetric)")),
    E(("-p", "--parallel_init"), "parallel_init", 0,
      "accepted: ranks are processes and always initialise in parallel", integer("-p", minimum=0)),
    E(("-g", "--ngpus"), "ngpus", 1, "GPUs per process: one here; `nccl-k8s run` starts -g x -t "
      "ranks", integer("-g", minimum=1), json_key="ngpus", to_json=_per_process),
    E(("-t", "--nthreads"), "nthreads", 1, "threads per process: one here; as -g",
      integer("-t", minimum=1), json_key="nthreads", to_json=_per_process),
)  # fmt: skip

#: Ours: collectives, backend, outputs, soak and continuous modes, metrics.
OWN_OPTIONS: tuple[EngineOption, ...] = (
    E(("--ops",), "ops", "all_reduce", "comma-separated collectives, or 'all': "
      + ",".join(ALL_OPS), value=ops_of, meta="ops", show=list, read="strs"),
    E(("--backend",), "backend", "auto", "nccl, gloo or auto",
      value=literal("--backend", BACKENDS, "one of " + ", ".join(BACKENDS))),
    E(("--gpus-requested",), "gpus_requested", 0, "GPUs the rank's pod asked for (set by "
      "`nccl-k8s deploy`): a rank that sees none fails at start (unless --backend gloo)",
      integer("--gpus-requested", minimum=0), metavar="N"),
    E(("--driver",), "driver", "direct",
      "NCCL only: direct (libnccl, as nccl-tests) or torch (torch.distributed)",
      value=literal("--driver", DRIVERS, "direct or torch")),
    E(("-J", "--json", "--output_file"), "json_path", None, "nccl-tests -J style JSON",
      metavar="PATH", dest="json_path", once=True),
    E(("--min-busbw",), "min_busbw", None, "fail when an op's average busbw is lower",
      number("--min-busbw"), metavar="GBPS", meta="min_busbw", read="number"),
    E(("--duration",), "duration_s", 0.0, "soak mode: repeat each op and size for this long",
      number("--duration"), metavar="SECONDS", meta="duration_s"),
    E(("--report-interval",), "report_interval_s", 10.0, "soak mode: seconds between busbw "
      "reports", number("--report-interval", minimum=0.1), metavar="SECONDS"),
    E(("-N", "--sweeps", "--run_cycles"), "sweeps", 1, "run the whole sweep N times, 0: until "
      "stopped (continuous mode; nccl-tests' -N)", integer("--sweeps", minimum=0), metavar="N",
      dest="sweeps", meta="sweeps"),
    E(("--sweep-interval",), "sweep_interval_s", 0.0, "pause between two sweeps",
      number("--sweep-interval"), metavar="SECONDS", meta="sweep_interval_s"),
    E(("--metrics-port",), "metrics_port", 0, "serve Prometheus metrics on this port (one server "
      "per node; 0: none); needs prometheus_client", integer("--metrics-port", minimum=0),
      one_of(range(65536), "--metrics-port {v}: expected a TCP port, 1 to 65535"),
      metavar="PORT"),
    E(("--metrics-addr",), "metrics_addr", None, _METRICS_ADDR_HELP, metavar="ADDR"),
    E(("--no-result-lines",), "result_lines", False, "omit the NCCL_K8S_RESULT lines",
      value=lambda v: not v, store_true=True),
)  # fmt: skip

#: Every option the engine honours.
OPTIONS: tuple[EngineOption, ...] = NCCL_TESTS_OPTIONS + OWN_OPTIONS
#: BenchConfig fields no flag fills: the type and reduction being measured (the engine sets
#: them; a config from flags starts with the first of -d's and -o's).
DERIVED = {"dtype": "dtypes", "redop": "redops"}


def add_options(p: argparse.ArgumentParser, options: tuple[EngineOption, ...]) -> None:
    """One argparse argument per entry."""
    for o in options:
        kwargs: dict[str, Any] = {"default": o.default, "help": o.help}
        if o.dest:
            kwargs["dest"] = o.dest
        if o.store_true:
            p.add_argument(*o.flags, action="store_true", **kwargs)
            continue
        if o.convert is not None:
            kwargs["type"] = o.convert
        if o.metavar is not None:
            kwargs["metavar"] = o.metavar
        if o.once:
            kwargs["action"] = _Once
        p.add_argument(*o.flags, **kwargs)


class _Once(argparse.Action):
    """An option whose second, different value is refused (EngineOption.once)."""

    def __call__(
        self, parser: argparse.ArgumentParser, ns: argparse.Namespace, values: Any, flag: Any = None
    ) -> None:
        seen = getattr(ns, f"_{self.dest}_given", None)
        if seen is not None and seen[1] != values:
            parser.error(
                f"{seen[0]} {seen[1]!r} and {flag} {values!r}: one output file, given twice; "
                "give it once"
            )
        setattr(ns, f"_{self.dest}_given", (flag, values))
        setattr(ns, self.dest, values)


def field_values(ns: argparse.Namespace) -> dict[str, Any]:
    """Every option's BenchConfig field from parsed flags, the derived ones included."""
    fields: dict[str, Any] = {}
    for o in OPTIONS:
        raw = getattr(ns, o.arg_dest)
        fields[o.field] = o.value(raw) if o.value else raw
    for derived, source in DERIVED.items():
        fields[derived] = fields[source][0]
    return fields


def meta_config(cfg: Any) -> dict[str, Any]:
    """The meta line's `config`: each option's `meta` key and value."""
    return {o.meta: o.shown(getattr(cfg, o.field)) for o in OPTIONS if o.meta}


def nccl_tests_config(cfg: Any) -> dict[str, Any]:
    """The options' part of nccl-tests' -J `config` (and ours where its form cannot say it)."""
    out: dict[str, Any] = {}
    for o in OPTIONS:
        if o.json_key is None:
            continue
        value = getattr(cfg, o.field)
        shown = o.to_json(value, cfg) if o.to_json else o.shown(value)
        if shown is not OMIT:
            out[o.json_key] = shown
        if o.json_own and o.meta:
            out[o.meta] = o.shown(value)
    return out


__all__ = [
    "AVERAGE_MODES",
    "BACKENDS",
    "BLOCKING_MODES",
    "DERIVED",
    "DRIVERS",
    "METRICS_ADDR_ENV",
    "NCCL_TESTS_OPTIONS",
    "NOT_HONOURED",
    "OMIT",
    "OPTIONS",
    "OWN_OPTIONS",
    "POD_TIMEOUT_S",
    "REDOPS",
    "Backend",
    "BenchConfig",
    "Driver",
    "EngineOption",
    "Reader",
    "RedOp",
    "add_options",
    "add_refused",
    "field_values",
    "label",
    "meta_config",
    "nccl_tests_config",
    "parse_size",
    "refuse_not_honoured",
]
