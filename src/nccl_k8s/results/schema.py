"""The results schema: the one shape every measured run takes on disk, whoever measured it.

`run` and `results` write it, `import` turns nccl-tests output into it, and `compare`, `report` and the
gates read nothing else. It is versioned (`SCHEMA_VERSION`) and documented in docs/results-schema.md;
a reader refuses a version it does not know rather than guessing.

A file is one JSON object:

    {"schema": "nccl-k8s/results", "schema_version": 1, "meta": {...RunMeta...},
     "rows": [{...Row...}, ...], "summaries": [{...Summary...}, ...], "soak": [{...}, ...]}

Unknown keys are ignored on load (a later version may add some); removing or changing one: a new version.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args

from nccl_k8s.bench.options import OPTIONS
from nccl_k8s.errors import ResultsError

SCHEMA_VERSION = 1
SCHEMA_NAME = "nccl-k8s/results"

Placement = Literal["out", "in"]
Source = Literal["nccl-k8s", "nccl-tests"]
Backend = Literal["nccl", "gloo"]
#: How an imported table's collective was identified (most to least direct).
IdentifiedBy = Literal["header", "footer", "command", "file-name", "table", "text", "unknown"]
PLACEMENTS: tuple[Placement, ...] = get_args(Placement)
SOURCES: tuple[Source, ...] = get_args(Source)
BACKENDS: tuple[Backend, ...] = get_args(Backend)
IDENTIFIED_BY: tuple[IdentifiedBy, ...] = get_args(IdentifiedBy)


@dataclass
class Device:
    """One rank's GPU (or CPU process), as the header of the table lists it."""

    rank: int
    host: str | None = None
    pid: int | None = None
    #: Local device index (CUDA ordinal); None for CPU ranks.
    device: int | None = None
    #: Device name, e.g. "NVIDIA H200"; "cpu" for gloo ranks.
    name: str | None = None
    #: The Kubernetes node the rank ran on (its pod's spec.nodeName), for runs on a cluster.
    node: str | None = None
    #: That node's topology label -> value, coarse to fine (deploy's rank plan, docs/topology.md).
    domain: dict[str, str] = field(default_factory=dict)


@dataclass
class RunConfig:
    """What was asked for: the engine's flags (nccl-tests' letters). None where unknown."""

    minbytes: int | None = None
    maxbytes: int | None = None
    stepbytes: int | None = None
    stepfactor: int | None = None
    iters: int | None = None
    warmup: int | None = None
    #: Checked iterations per size (nccl-tests -c); 0 = no check, so #wrong is N/A.
    check: int | None = None
    dtype: str | None = None
    redop: str | None = None
    #: -1 = all roots (nccl-tests -r).
    root: int | None = None
    #: nccl-tests -z: 0 no wait, 1 wait and barrier, 2 wait, 3 wait and untimed barrier. Files
    #: that say true/false (nccl-tests' -J, our older runs) read as 1/0, as older nccl-tests -z.
    blocking: int | None = None
    #: Cross-rank time combination (nccl-tests -a): 0 rank 0, 1 avg, 2 min, 3 max.
    average: int | None = None
    #: CUDA-graph launches per measurement (nccl-tests -G); 0 = none.
    graph: int | None = None
    ops: list[str] = field(default_factory=list)
    #: --min-busbw: the floor (GB/s) each op's average busbw had to reach; None: no gate.
    min_busbw: float | None = None


@dataclass
class OpIdentification:
    """How `import` knew which collective a table measured (added in nccl-k8s 0.1, optional)."""

    op: str
    #: "header"/"footer" (# Collective test starting/concluded), "command" (an `<op>_perf` command
    #: or banner before the table), "file-name", "table" (from redop, root, count, busbw/algbw),
    #: "text" (the table fits several, the text around it names one of them), or "unknown".
    by: IdentifiedBy
    #: The evidence in words, e.g. "from the table: redop sum, root -1, busbw/algbw 1.75 at 8 ranks".
    detail: str = ""
    #: The table had no column header: the columns as read from its rows ("" with a header).
    columns: str = ""


@dataclass
class RunMeta:
    """Where and how a run was measured."""

    source: Source = "nccl-k8s"
    run_id: str | None = None
    #: ISO 8601 start time as the producer wrote it.
    time: str | None = None
    nccl_k8s: str | None = None
    #: nccl-tests' own version when source == "nccl-tests".
    nccl_tests: str | None = None
    torch: str | None = None
    #: NCCL library version, e.g. "2.28.9"; None for gloo runs or when not printed. Our runs give
    #: the version of the libnccl the engine loaded (ncclGetVersion), not torch's build.
    nccl: str | None = None
    #: Path of the libnccl our engine loaded (its direct driver's); None for imports and gloo.
    nccl_library: str | None = None
    cuda: str | None = None
    #: "nccl" or "gloo"; nccl-tests runs are always "nccl".
    backend: Backend | None = None
    world_size: int | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    gpu_model: str | None = None
    devices: list[Device] = field(default_factory=list)
    #: The effective NCCL_* environment of rank 0 (what NCCL read), not what the user typed.
    env: dict[str, str] = field(default_factory=dict)
    config: RunConfig = field(default_factory=RunConfig)
    #: Files this run was read from (import), for the reader's benefit.
    inputs: list[str] = field(default_factory=list)
    #: Per imported table, how its collective was identified (empty for our own runs).
    op_identified: list[OpIdentification] = field(default_factory=list)
    #: The run's own failure line when the output holds one ("Test NCCL failure common.cu:392
    #: 'unhandled cuda error ...'"): the rows before it are kept, but the run did not finish.
    failure: str | None = None
    #: The run stopped before its sweep ended (interrupted, or a rank failed): the rows are
    #: those measured until then, and `failure` says why it stopped. False for complete runs.
    partial: bool = False
    #: Which sweep of a run of several (engine --sweeps, the StatefulSet's continuous mode) this
    #: is, counted from 0 by the engine process that measured it; None for a run of one sweep.
    sweep: int | None = None
    #: What carried the inter-node traffic, as the pods' NCCL INFO lines show it (results.fabrics:
    #: efa, ib, roce, socket ..., "mixed" when ranks disagree); None when the logs do not say.
    fabric: str | None = None
    #: The fabric platform the pods were rendered for (spec.platforms), when one was.
    platform: str | None = None


@dataclass
class Row:
    """One cell group of the table: one op, one size, one placement."""

    op: str
    size_bytes: int
    placement: Placement
    time_us: float
    algbw: float
    busbw: float
    dtype: str | None = None
    redop: str | None = None
    root: int | None = None
    #: Elements per rank, as nccl-tests prints it.
    count: int | None = None
    #: Wrong elements summed over ranks; None where the table says N/A (no check, or not defined).
    wrong: int | None = None
    #: Fastest and slowest rank's time, when the producer reports them.
    time_us_min: float | None = None
    time_us_max: float | None = None
    #: Old nccl-tests (before #wrong) printed the largest absolute error instead of a count.
    max_error: float | None = None


@dataclass
class Summary:
    """The closing lines of one op's table."""

    op: str
    out_of_bounds: int | None = None
    avg_busbw: float | None = None
    ok: bool | None = None


@dataclass
class Run:
    meta: RunMeta = field(default_factory=RunMeta)
    rows: list[Row] = field(default_factory=list)
    summaries: list[Summary] = field(default_factory=list)
    #: Soak-mode records, free-form as the engine emits them.
    soak: list[dict[str, Any]] = field(default_factory=list)

    def ops(self) -> list[str]:
        """The ops in this run, in first-seen order."""
        seen: dict[str, None] = {}
        for row in self.rows:
            seen.setdefault(row.op, None)
        return list(seen)


# --------------------------------------------------------------------------------------------
# to and from plain JSON


def _finite(x: float | None) -> float | None:
    # JSON has no NaN/Infinity; a non-finite time means "not measured".
    return x if x is None or math.isfinite(x) else None


def to_dict(run: Run) -> dict[str, Any]:
    rows = []
    for row in run.rows:
        d = asdict(row)
        for k in ("time_us", "algbw", "busbw", "time_us_min", "time_us_max", "max_error"):
            d[k] = _finite(d[k])
        rows.append(d)
    return {
        "schema": SCHEMA_NAME,
        "schema_version": SCHEMA_VERSION,
        "meta": asdict(run.meta),
        "rows": rows,
        "summaries": [asdict(s) for s in run.summaries],
        "soak": list(run.soak),
    }


def dumps(run: Run) -> str:
    return json.dumps(to_dict(run), indent=1, allow_nan=False) + "\n"


def umask_mode() -> int:
    """The mode open() gives a new file (0o666 less the umask). A file written through a temporary
    file (mkstemp: 0o600) is given it, so that teammates sharing a runs directory read it as the
    umask says. Read from /proc where it can be (setting the umask to read it is process-wide)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def dump(run: Run, path: str | os.PathLike[str]) -> Path:
    """Write `run` to `path` atomically (a reader never sees half a file), with the mode the
    umask gives; returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        os.fchmod(fd, umask_mode())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(dumps(run))
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


class Reader:
    """Typed access to one JSON object, naming the path of any bad field in the error."""

    def __init__(self, obj: object, where: str, origin: str) -> None:
        if not isinstance(obj, dict):
            raise ResultsError(f"{origin}: {where} is not an object", path=origin)
        self.d = cast(dict[str, Any], obj)
        self.where = where
        self.origin = origin

    def _bad(self, key: str, want: str) -> ResultsError:
        got, at = type(self.d[key]).__name__, f"{self.where}.{key}"
        return ResultsError(f"{self.origin}: {at} should be {want}, not {got}", path=self.origin)

    def _present(self, key: str, required: bool) -> bool:
        if key not in self.d or self.d[key] is None:
            if required:
                raise ResultsError(f"{self.origin}: {self.where} has no {key!r}", path=self.origin)
            return False
        return True

    def str_(self, key: str, *, required: bool = False) -> str | None:
        if not self._present(key, required):
            return None
        v = self.d[key]
        if not isinstance(v, str):
            raise self._bad(key, "a string")
        return v

    def int_(self, key: str, *, required: bool = False) -> int | None:
        if not self._present(key, required):
            return None
        v = self.d[key]
        if isinstance(v, bool) or not isinstance(v, int | float) or v != int(v):
            raise self._bad(key, "an integer")
        return int(v)

    def float_(self, key: str, *, required: bool = False) -> float | None:
        if not self._present(key, required):
            return None
        v = self.d[key]
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self._bad(key, "a number")
        return float(v)

    def bool_(self, key: str) -> bool | None:
        if not self._present(key, False):
            return None
        v = self.d[key]
        if isinstance(v, bool) or (isinstance(v, int) and v in (0, 1)):
            return bool(v)
        raise self._bad(key, "true or false")

    def mode_(self, key: str, modes: Mapping[int, str]) -> int | None:
        """One of `modes`; true/false (the older form of a 0/1 flag) read as 1/0."""
        if self._present(key, False) and isinstance(self.d[key], bool):
            return int(self.d[key])
        v = self.int_(key)
        if v is not None and v not in modes:
            want = ", ".join(map(str, modes))
            raise ResultsError(
                f"{self.origin}: {self.where}.{key} is {v}, expected one of {want}",
                path=self.origin,
            )
        return v

    def list_(self, key: str) -> list[Any]:
        if not self._present(key, False):
            return []
        v = self.d[key]
        if not isinstance(v, list):
            raise self._bad(key, "a list")
        return v

    def obj(self, key: str) -> Reader:
        return Reader(self.d.get(key) or {}, f"{self.where}.{key}", self.origin)

    def str_map(self, key: str) -> dict[str, str]:
        if not self._present(key, False):
            return {}
        v = self.d[key]
        if not isinstance(v, dict):
            raise self._bad(key, "an object")
        return {str(k): "" if x is None else str(x) for k, x in v.items()}


def device_from(r: Reader) -> Device:
    return Device(
        rank=cast(int, r.int_("rank", required=True)),
        host=r.str_("host"),
        pid=r.int_("pid"),
        device=r.int_("device"),
        name=r.str_("name"),
        node=r.str_("node"),
        domain=r.str_map("domain"),
    )


def config_from(r: Reader) -> RunConfig:
    """Each engine option results keep, read as its entry in bench.options says."""
    values: dict[str, Any] = {}
    for o in OPTIONS:
        if o.meta is None or o.read is None:
            continue
        if o.read == "mode":
            values[o.meta] = r.mode_(o.meta, o.modes or {})
        elif o.read == "strs":
            values[o.meta] = [str(x) for x in r.list_(o.meta)]
        else:
            read = {"int": r.int_, "number": r.float_, "str": r.str_}[o.read]
            values[o.meta] = read(o.meta)
    return RunConfig(**values)


def row_from(r: Reader, *, size_key: str = "size_bytes") -> Row:
    placement = r.str_("placement", required=True)
    if placement not in PLACEMENTS:
        raise ResultsError(
            f"{r.origin}: {r.where}.placement is {placement!r}, expected 'out' or 'in'",
            path=r.origin,
        )
    return Row(
        op=cast(str, r.str_("op", required=True)),
        size_bytes=cast(int, r.int_(size_key, required=True)),
        placement=placement,
        time_us=cast(float, r.float_("time_us", required=True)),
        algbw=cast(float, r.float_("algbw", required=True)),
        busbw=cast(float, r.float_("busbw", required=True)),
        dtype=r.str_("dtype"),
        redop=r.str_("redop"),
        root=r.int_("root"),
        count=r.int_("count"),
        wrong=r.int_("wrong"),
        time_us_min=r.float_("time_us_min"),
        time_us_max=r.float_("time_us_max"),
        max_error=r.float_("max_error"),
    )


def summary_from(r: Reader) -> Summary:
    return Summary(
        op=cast(str, r.str_("op", required=True)),
        out_of_bounds=r.int_("out_of_bounds"),
        avg_busbw=r.float_("avg_busbw"),
        ok=r.bool_("ok"),
    )


def meta_from(r: Reader) -> RunMeta:
    source = r.str_("source") or "nccl-k8s"
    if source not in SOURCES:
        raise ResultsError(
            f"{r.origin}: {r.where}.source is {source!r}, expected one of {', '.join(SOURCES)}",
            path=r.origin,
        )
    backend = backend_from(r)
    return RunMeta(
        source=source,
        run_id=r.str_("run_id"),
        time=r.str_("time"),
        nccl_k8s=r.str_("nccl_k8s"),
        nccl_tests=r.str_("nccl_tests"),
        torch=r.str_("torch"),
        nccl=r.str_("nccl"),
        nccl_library=r.str_("nccl_library"),
        cuda=r.str_("cuda"),
        backend=backend,
        world_size=r.int_("world_size"),
        nodes=r.int_("nodes"),
        gpus_per_node=r.int_("gpus_per_node"),
        gpu_model=r.str_("gpu_model"),
        devices=[
            device_from(Reader(d, f"{r.where}.devices[{i}]", r.origin))
            for i, d in enumerate(r.list_("devices"))
        ],
        env=r.str_map("env"),
        config=config_from(r.obj("config")),
        inputs=[str(x) for x in r.list_("inputs")],
        op_identified=[
            identification_from(Reader(d, f"{r.where}.op_identified[{i}]", r.origin))
            for i, d in enumerate(r.list_("op_identified"))
        ],
        failure=r.str_("failure"),
        partial=bool(r.bool_("partial")),
        sweep=r.int_("sweep"),
        fabric=r.str_("fabric"),
        platform=r.str_("platform"),
    )


def as_backend(value: str | None) -> Backend | None:
    """The backend named by `value`, or None for None and anything else."""
    for b in BACKENDS:
        if value == b:
            return b
    return None


def backend_from(r: Reader) -> Backend | None:
    value = r.str_("backend")
    backend = as_backend(value)
    if value is not None and backend is None:
        raise ResultsError(
            f"{r.origin}: {r.where}.backend is {value!r}, expected one of {', '.join(BACKENDS)}",
            path=r.origin,
        )
    return backend


def identification_from(r: Reader) -> OpIdentification:
    by = r.str_("by") or "unknown"
    if by not in IDENTIFIED_BY:
        raise ResultsError(
            f"{r.origin}: {r.where}.by is {by!r}, expected one of {', '.join(IDENTIFIED_BY)}",
            path=r.origin,
        )
    op, detail, columns = r.str_("op", required=True), r.str_("detail"), r.str_("columns")
    return OpIdentification(cast(str, op), by, detail or "", columns or "")


def from_dict(obj: object, *, origin: str = "<results>") -> Run:
    """Validate and convert a parsed results document. Raises ResultsError naming the bad field."""
    if not isinstance(obj, dict) or "schema_version" not in obj:
        raise ResultsError(
            f"{origin} is not an nccl-k8s results file (no schema_version); "
            "nccl-tests output is read with `nccl-k8s import`",
            path=origin,
        )
    version = obj["schema_version"]
    if version != SCHEMA_VERSION:
        raise ResultsError(
            f"{origin} has results schema version {version!r}; this nccl-k8s reads version "
            f"{SCHEMA_VERSION}: use the nccl-k8s release that wrote it, or upgrade",
            path=origin,
        )
    top = Reader(obj, "results", origin)
    return Run(
        meta=meta_from(top.obj("meta")),
        rows=[row_from(Reader(x, f"rows[{i}]", origin)) for i, x in enumerate(top.list_("rows"))],
        summaries=[
            summary_from(Reader(x, f"summaries[{i}]", origin))
            for i, x in enumerate(top.list_("summaries"))
        ],
        soak=[cast(dict[str, Any], x) for x in top.list_("soak") if isinstance(x, dict)],
    )


def loads(text: str, *, origin: str = "<results>") -> Run:
    stripped = text.strip()
    if not stripped:
        raise ResultsError(f"{origin} is empty: not a results file", path=origin)
    try:
        obj = json.loads(stripped)
    except json.JSONDecodeError as e:
        # A decoder that runs out of input mid-document has been handed a cut-off file; one that
        # trips earlier was handed something that is not JSON at all.
        if stripped.startswith("{") and (not stripped.endswith("}") or e.pos >= len(stripped) - 1):
            raise ResultsError(
                f"{origin} is truncated (JSON ends at byte {len(stripped)} inside the document): "
                "re-collect or re-run it",
                path=origin,
            ) from None
        raise ResultsError(
            f"{origin} is not a results file (not JSON: {e.msg} at line {e.lineno}); "
            "nccl-tests output is read with `nccl-k8s import`",
            path=origin,
        ) from None
    return from_dict(obj, origin=origin)


def load(path: str | os.PathLike[str]) -> Run:
    """Read a results file. Raises ResultsError (one line, exit 2) for anything unreadable."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsError(f"{p}: no such results file", path=str(p)) from None
    except IsADirectoryError:
        raise ResultsError(f"{p} is a directory, not a results file", path=str(p)) from None
    except UnicodeDecodeError:
        raise ResultsError(f"{p} is not a results file (not text)", path=str(p)) from None
    except OSError as e:
        raise ResultsError(f"{p}: cannot read: {e.strerror}", path=str(p)) from None
    return loads(text, origin=str(p))


#: What tells two runs' clusters apart, as (what, RunMeta attribute).
CLUSTER_FIELDS: tuple[tuple[str, str], ...] = (
    ("world size", "world_size"),
    ("GPU model", "gpu_model"),
    ("NCCL version", "nccl"),
    ("node count", "nodes"),
)


def meta_differences(
    a: RunMeta, b: RunMeta, fields: tuple[tuple[str, str], ...] = CLUSTER_FIELDS
) -> list[tuple[str, Any, Any]]:
    """(what, a's value, b's value) for each of `fields` both runs know and disagree on."""
    out = []
    for what, attr in fields:
        x, y = getattr(a, attr), getattr(b, attr)
        if x is not None and y is not None and x != y:
            out.append((what, x, y))
    return out


__all__ = [
    "BACKENDS",
    "CLUSTER_FIELDS",
    "IDENTIFIED_BY",
    "PLACEMENTS",
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "Backend",
    "Device",
    "IdentifiedBy",
    "OpIdentification",
    "Placement",
    "Reader",
    "Row",
    "Run",
    "RunConfig",
    "RunMeta",
    "Source",
    "Summary",
    "as_backend",
    "backend_from",
    "dump",
    "dumps",
    "from_dict",
    "load",
    "loads",
    "meta_differences",
    "to_dict",
]
