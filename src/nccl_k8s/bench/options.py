"""The engine's options: each declared once, with everything every layer needs to know of it.

One `EngineOption` per flag the engine honours: its spellings, how its text is converted and
checked (each error names the value and the form expected), its default and --help line, the
BenchConfig field it fills, its key in our meta line (what `results` reads back, and how), and
its key in nccl-tests' -J layout where nccl-tests has one. The parser (bench.config), BenchConfig,
rank 0's meta line (bench.outcome), its --json file (bench.runner), and results' readers of both
(results.schema, results.nccltests_json) all read `OPTIONS`; adding an option is one entry here
(plus, where unavoidable, the code that does what it asks). nccl-tests' flags the engine accepts
but does not honour are bench.compat's. Standard library only: it travels inside pods.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, get_args

from nccl_k8s.bench.collectives import ALL_OPS, Op
from nccl_k8s.bench.compat import ConfigError
from nccl_k8s.bench.dtypes import DEFAULT_DTYPE, DTYPE_ALIASES, DTYPES, Dtype

#: nccl-tests' reduction names (its `-o` values).
RedOp = Literal["sum", "prod", "max", "min", "avg"]
#: --backend: NCCL, gloo, or NCCL when CUDA devices exist.
Backend = Literal["auto", "nccl", "gloo"]
#: --driver: with NCCL, libnccl through ctypes (as nccl-tests calls it) or torch.distributed.
Driver = Literal["direct", "torch"]
#: How results read an option's value back from our meta line: an integer, a string, a list of
#: strings, or a mode (an integer of the option's `modes`; true/false read as 1/0: the form
#: nccl-tests' -J gives -z, and our runs stored before the mode was kept).
Reader = Literal["int", "str", "strs", "mode"]

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

_T = TypeVar("_T", bound=str)


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

    @property
    def arg_dest(self) -> str:
        if self.dest:
            return self.dest
        long = next(f for f in self.flags if f.startswith("--"))
        return long[2:].replace("-", "_")

    def shown(self, value: Any) -> Any:
        return self.show(value) if self.show else value


# -- converters: each names the flag and the form it expects


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


def _size(flag: str) -> Callable[[str], int]:
    return lambda text: parse_size(text, flag=flag)


def _one_of(choices: Any, message: str) -> Callable[[Any], Any]:
    """A value among `choices`, else ConfigError(message with {v} the value)."""

    def check(value: Any) -> Any:
        if value not in choices:
            raise ConfigError(message.format(v=value))
        return value

    return check


def _literal(flag: str, choices: tuple[_T, ...], expected: str) -> Callable[[str], _T]:
    def convert(text: str) -> _T:
        member = _member(text, choices)
        if member is None:
            raise ConfigError(f"{flag} {text!r}: expected {expected}")
        return member

    return convert


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
    E(("-b", "--minbytes"), "minbytes", "32M", "smallest size (8, 64K, 1M, 8G)", value=_size("-b"),
      metavar="SIZE", meta="minbytes", read="int", json_key="minimum_bytes"),
    E(("-e", "--maxbytes"), "maxbytes", "32M", "largest size", value=_size("-e"), metavar="SIZE",
      meta="maxbytes", read="int", json_key="maximum_bytes"),
    E(("-i", "--stepbytes"), "stepbytes", "1M", "additive step when -f is 1", value=_size("-i"),
      metavar="SIZE", meta="stepbytes", read="int", json_key="step_bytes", to_json=_step_bytes),
    E(("-f", "--stepfactor"), "stepfactor", 1, "multiplicative step", _int("-f", minimum=1),
      meta="stepfactor", read="int", json_key="step_factor", to_json=_step_factor),
    E(("-n", "--iters"), "iters", 20, "timed ops per size", _int("-n", minimum=1), meta="iters",
      read="int", json_key="iterations"),
    E(("-w", "--warmup_iters"), "warmup", 1, "warm-up ops", _int("-w", minimum=0), meta="warmup",
      read="int", json_key="warmup_iters"),
    E(("-c", "--check"), "check", 1, "checked ops per size", _int("-c", minimum=0), meta="check",
      read="int", json_key="validation"),
    E(("-d", "--datatype"), "dtypes", DEFAULT_DTYPE, ", ".join(DTYPES) + " or all", value=_dtypes,
      metavar="TYPE", meta="dtype", show=label, read="str", json_key="datatype"),
    E(("-o", "--op"), "redops", "sum", ", ".join(REDOPS) + " or all", value=_redops,
      metavar="REDOP", meta="redop", show=label, read="str", json_key="redop"),
    E(("-r", "--root"), "root", 0, "root rank, -1 = all", _int("-r", minimum=-1), meta="root",
      read="int"),
    E(("-z", "--blocking"), "blocking", 0, _Z_HELP, _int("-z", minimum=0),
      _one_of(BLOCKING_MODES, "-z {v}: expected 0, 1, 2 or 3 (nccl-tests' blocking modes)"),
      meta="blocking", read="mode", modes=BLOCKING_MODES, json_key="blocking_collectives",
      to_json=_bool_text, json_own=True),
    E(("-a", "--average"), "average", 1, "0 rank0 1 avg 2 min 3 max", _int("-a", minimum=0),
      _one_of(AVERAGE_MODES, "-a {v}: expected 0 (rank 0), 1 (avg), 2 (min) or 3 (max)"),
      meta="average", read="mode", modes=AVERAGE_MODES),
    E(("-G", "--cudagraph"), "graph", 0, "CUDA graph launches", _int("-G", minimum=0),
      meta="graph", read="int", json_key="graph"),
    E(("-T", "--timeout"), "timeout_s", 0, _T_HELP, _int("-T", minimum=0)),
    E(("-m", "--agg_iters"), "agg_iters", 1, "ops per timed iteration (one NCCL group)",
      _int("-m", minimum=1), json_key="aggregated_iterations"),
    E(("-C", "--report_cputime"), "cputime", 0,
      "1: report the time to issue the ops, without the final wait", _int("-C", minimum=0),
      lambda v: bool(_one_of((0, 1), "-C {v}: expected 0 or 1")(v))),
    E(("-u", "--unalign"), "unalign", 0, "misalign both buffers by N elements",
      _int("-u", minimum=0), metavar="N"),
    E(("-R", "--local_register"), "register", 0,
      "register buffers with NCCL: 1 local, 2 symmetric (direct driver)", _int("-R", minimum=0),
      _one_of((0, 1, 2), "-R {v}: expected 0 (off), 1 (local) or 2 (symmetric)")),
    E(("-p", "--parallel_init"), "parallel_init", 0,
      "accepted: ranks are processes and always initialise in parallel", _int("-p", minimum=0)),
    E(("-g", "--ngpus"), "ngpus", 1, "GPUs per process: one here; `nccl-k8s run` starts -g x -t "
      "ranks", _int("-g", minimum=1), json_key="ngpus", to_json=_per_process),
    E(("-t", "--nthreads"), "nthreads", 1, "threads per process: one here; as -g",
      _int("-t", minimum=1), json_key="nthreads", to_json=_per_process),
)  # fmt: skip

#: Ours: collectives, backend, outputs, soak and continuous modes, metrics.
OWN_OPTIONS: tuple[EngineOption, ...] = (
    E(("--ops",), "ops", "all_reduce", "comma-separated collectives, or 'all': "
      + ",".join(ALL_OPS), value=_parse_ops, meta="ops", show=list, read="strs"),
    E(("--backend",), "backend", "auto", "nccl, gloo or auto",
      value=_literal("--backend", BACKENDS, "one of " + ", ".join(BACKENDS))),
    E(("--driver",), "driver", "direct",
      "NCCL only: direct (libnccl, as nccl-tests) or torch (torch.distributed)",
      value=_literal("--driver", DRIVERS, "direct or torch")),
    E(("-J", "--json", "--output_file"), "json_path", None, "nccl-tests -J style JSON",
      metavar="PATH", dest="json_path"),
    E(("--min-busbw",), "min_busbw", None, "fail when an op's average busbw is lower",
      _float("--min-busbw"), metavar="GBPS"),
    E(("--duration",), "duration_s", 0.0, "soak mode: repeat each op and size for this long",
      _float("--duration"), metavar="SECONDS", meta="duration_s"),
    E(("--report-interval",), "report_interval_s", 10.0, "soak mode: seconds between busbw "
      "reports", _float("--report-interval", minimum=0.1), metavar="SECONDS"),
    E(("-N", "--sweeps", "--run_cycles"), "sweeps", 1, "run the whole sweep N times, 0: until "
      "stopped (continuous mode; nccl-tests' -N)", _int("--sweeps", minimum=0), metavar="N",
      dest="sweeps", meta="sweeps"),
    E(("--sweep-interval",), "sweep_interval_s", 0.0, "pause between two sweeps",
      _float("--sweep-interval"), metavar="SECONDS", meta="sweep_interval_s"),
    E(("--metrics-port",), "metrics_port", 0, "serve Prometheus metrics on this port (one server "
      "per node; 0: none); needs prometheus_client", _int("--metrics-port", minimum=0),
      _one_of(range(65536), "--metrics-port {v}: expected a TCP port, 1 to 65535"),
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
        p.add_argument(*o.flags, **kwargs)


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
    "OMIT",
    "OPTIONS",
    "OWN_OPTIONS",
    "POD_TIMEOUT_S",
    "REDOPS",
    "Backend",
    "Driver",
    "EngineOption",
    "Reader",
    "RedOp",
    "add_options",
    "field_values",
    "label",
    "meta_config",
    "nccl_tests_config",
    "parse_size",
]
