"""Ingest NVIDIA nccl-tests output (text tables and `-J` JSON) into the results schema.

So a user can put a run of `all_reduce_perf` next to one of ours. The parser follows nccl-tests'
print formats (src/common.cu and the per-collective `print_header`/`print_line_header`):

- header:   `# nccl-tests version %s nccl-headers=%d nccl-library=%d` (2.13+),
            `# nThread %d nGpus %d minBytes %ld maxBytes %ld step: %ld(%s) warmup iters: %d iters: %d ...`,
            `#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s` (older: no Group, `#   Rank`).
- columns:  a `#` line naming them, read rather than assumed, because they changed over time:
            `size count type redop root` (2.11+), `size count type redop` / `size count type root`
            (older, per collective), then per placement `time algbw busbw #wrong` or, before
            #wrong existed, `time algbw busbw error` where error is the largest absolute error
            (`%5.0le`, optionally followed by `*` when the check failed).
- rows:     the size and count columns, then per placement `  %7s  %6.2f  %6.2f  %6g|N/A` (newer
            versions print large bandwidths as `2627.4`, `10447`, `1e+06`: any float literal).
- footer:   `# Out of bounds values : %d %s`, `# Avg bus bandwidth    : %g %s`.

The collective's name comes from `# Collective test starting: <op>_perf` (2.14+), else from the
most recent `<op>_perf` mentioned on a non-table line (a command echoed in a log), else from the
file name. A file may hold several collectives one after another.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

from nccl_k8s.errors import ResultsError
from nccl_k8s.results.schema import (
    Device,
    Placement,
    Row,
    Run,
    RunConfig,
    RunMeta,
    Summary,
)

_VERSION = re.compile(
    r"^#\s*nccl-tests version (?P<v>\S+)(?:.*?nccl-library=(?P<lib>\d+))?", re.IGNORECASE
)
# Our engine prints its own first line in the same table format (`nccl-k8s run` output).
_OUR_VERSION = re.compile(
    r"^#\s*nccl-k8s version (?P<v>\S+)(?:.*?\btorch=(?P<torch>\S+))?(?:.*?\bbackend=(?P<b>\w+))?"
)
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(?P<op>\w+?)_perf\b")
_CONCLUDED = re.compile(r"^#\s*Collective test concluded:")
_OP_MENTION = re.compile(r"\b(?P<op>[a-z][a-z0-9_]*?)_perf(?:_mpi)?\b")
_DEVICE = re.compile(
    r"^#\s+Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)\s+"
    r"device\s+(?P<dev>\d+)\s+\[(?P<bus>[^\]]*)\]\s+(?P<name>.*?)\s*$"
)
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<n>\d+)\s*(?P<ok>OK|FAILED)?")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<bw>\S+)")
_NCCL_VERSION = re.compile(r"NCCL version (?P<v>\d+\.\d+\.\d+)(?:\S*?\+cuda(?P<cuda>\d+\.\d+))?")
_NCCL_ENV = re.compile(r"NCCL INFO (?P<k>NCCL_[A-Z0-9_]+) set by environment to (?P<v>\S*)")
_CFG_INT = {
    "minBytes": "minbytes",
    "maxBytes": "maxbytes",
    "iters:": "iters",
    "validation:": "check",
    "graph:": "graph",
}

#: The per-placement column groups nccl-tests prints, in order.
_PLACEMENTS: tuple[Placement, ...] = ("out", "in")
_GROUP = ("time", "algbw", "busbw")


def nccl_version_from_code(code: int) -> str:
    """nccl-tests prints NCCL_VERSION_CODE: major*10000+minor*100+patch since 2.9, *1000 before."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def op_from_name(name: str) -> str | None:
    m = _OP_MENTION.search(Path(name).name.lower())
    return m.group("op") if m else None


class _Table:
    """The column layout read from a header line."""

    def __init__(self, lead: list[str], wrong_kind: str, groups: int) -> None:
        self.lead = lead  # e.g. ["size", "count", "type", "redop", "root"]
        self.wrong_kind = wrong_kind  # "#wrong" or "error"
        self.groups = groups

    @property
    def width(self) -> int:
        return len(self.lead) + 4 * self.groups


def _table_from_header(line: str) -> _Table | None:
    toks = line.lstrip("#").split()
    if len(toks) < 6 or toks[0] != "size" or "time" not in toks:
        return None
    first = toks.index("time")
    lead, rest = toks[:first], toks[first:]
    if len(rest) % 4 or not rest:
        return None
    kinds = set()
    for g in range(len(rest) // 4):
        grp = rest[4 * g : 4 * g + 4]
        if tuple(grp[:3]) != _GROUP:
            return None
        kinds.add(grp[3])
    if len(kinds) != 1 or not kinds <= {"#wrong", "error"}:
        return None
    return _Table(lead, kinds.pop(), len(rest) // 4)


def _num(tok: str, what: str, where: str) -> float:
    try:
        return float(tok)
    except ValueError:
        raise ResultsError(f"{where}: {what} {tok!r} is not a number", path=where) from None


class _TextParser:
    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.run = Run(meta=RunMeta(source="nccl-tests", backend="nccl", inputs=[origin]))
        self.op: str | None = None
        self.starting_op: str | None = None
        self.mentioned_op: str | None = None
        self.table: _Table | None = None
        self.devices: dict[int, Device] = {}
        self.cfg = self.run.meta.config

    def feed(self, text: str) -> Run:
        for lineno, raw in enumerate(text.splitlines(), start=1):
            self._line(raw.rstrip("\r"), f"{self.origin}:{lineno}")
        self._finish()
        return self.run

    def _line(self, line: str, where: str) -> None:
        s = line.strip()
        if not s:
            return
        if s.startswith("#"):
            self._comment(s)
            return
        if self.table is not None:
            toks = s.split()
            if toks[0].isdigit() and len(toks) == self.table.width:
                self._row(toks, where)
                return
            if toks[0].isdigit() and len(toks) > len(self.table.lead) and _looks_numeric(toks):
                raise ResultsError(
                    f"{where}: table row has {len(toks)} columns, the header announced "
                    f"{self.table.width}: file cut off or edited?",
                    path=self.origin,
                )
        for e in _NCCL_ENV.finditer(s):
            self.run.meta.env.setdefault(e.group("k"), e.group("v"))
        m = _NCCL_VERSION.search(s)
        if m and "NCCL INFO" in s and self.run.meta.nccl is None:
            self.run.meta.nccl = m.group("v")
            self.run.meta.cuda = m.group("cuda") or self.run.meta.cuda
        if "NCCL INFO" not in s and "NCCL WARN" not in s:
            m2 = _OP_MENTION.search(s)
            if m2:
                self.mentioned_op = m2.group("op")

    def _comment(self, s: str) -> None:
        if m := _VERSION.match(s):
            self.run.meta.nccl_tests = m.group("v")
            if m.group("lib") and int(m.group("lib")) > 0:
                self.run.meta.nccl = nccl_version_from_code(int(m.group("lib")))
            self.table = None
        elif m := _OUR_VERSION.match(s):
            meta = self.run.meta
            meta.source, meta.nccl_k8s = "nccl-k8s", m.group("v")
            meta.torch = m.group("torch") or meta.torch
            meta.backend = m.group("b") or meta.backend
            self.table = None
        elif m := _STARTING.match(s):
            self.starting_op = m.group("op")
            self.table = None
        elif _CONCLUDED.match(s):
            self.table = None
        elif s.startswith("# nThread") or s.startswith("# nThreads"):
            self._config(s)
        elif m := _DEVICE.match(s):
            rank = int(m.group("rank"))
            self.devices[rank] = Device(
                rank=rank,
                host=m.group("host"),
                pid=int(m.group("pid")),
                device=int(m.group("dev")),
                name=m.group("name"),
            )
        elif m := _OOB.match(s):
            self._summary().out_of_bounds = int(m.group("n"))
            if m.group("ok"):
                self._summary().ok = m.group("ok") == "OK"
        elif m := _AVG.match(s):
            with contextlib.suppress(ValueError):
                self._summary().avg_busbw = float(m.group("bw"))
        elif (t := _table_from_header(s)) is not None:
            self.table = t
            # The nearest announcement wins: "Collective test starting", else a command line
            # naming <op>_perf since the previous table, else the file name.
            self.op = (
                self.starting_op or self.mentioned_op or op_from_name(self.origin) or "unknown"
            )
            self.starting_op = self.mentioned_op = None
        # other comment lines (units, "out-of-place", "Using devices") carry nothing we need

    def _config(self, s: str) -> None:
        toks = s.lstrip("#").split()
        for i, tok in enumerate(toks[:-1]):
            key = _CFG_INT.get(tok)
            if key and toks[i + 1].lstrip("-").isdigit():
                # "warmup iters: 5" and "agg iters: 1" share "iters:"; only the bare one is -n.
                if key == "iters" and i > 0 and toks[i - 1] in ("warmup", "agg"):
                    if toks[i - 1] == "warmup":
                        self.cfg.warmup = int(toks[i + 1])
                    continue
                setattr(self.cfg, key, int(toks[i + 1]))
            if tok == "step:":
                m = re.match(r"(\d+)\((factor|bytes)\)", toks[i + 1])
                if m:
                    if m.group(2) == "factor":
                        self.cfg.stepfactor = int(m.group(1))
                    else:
                        self.cfg.stepbytes = int(m.group(1))
            if tok == "warmupIters:" and toks[i + 1].isdigit():
                self.cfg.warmup = int(toks[i + 1])

    def _summary(self) -> Summary:
        op = self.op or "unknown"
        for s in self.run.summaries:
            if s.op == op:
                return s
        s = Summary(op=op)
        self.run.summaries.append(s)
        return s

    def _row(self, toks: list[str], where: str) -> None:
        table = self.table
        if table is None:
            return
        lead = dict(zip(table.lead, toks, strict=False))
        op = self.op or "unknown"
        size = int(lead["size"])
        count = int(lead["count"]) if lead.get("count", "").isdigit() else None
        dtype = lead.get("type")
        redop = lead.get("redop")
        root_tok = lead.get("root")
        root = int(root_tok) if root_tok and root_tok.lstrip("-").isdigit() else None
        base = len(table.lead)
        for g in range(table.groups):
            time_t, alg_t, bus_t, w_t = toks[base + 4 * g : base + 4 * g + 4]
            placement = _PLACEMENTS[g] if g < len(_PLACEMENTS) else "in"
            wrong: int | None = None
            max_error: float | None = None
            if w_t != "N/A":
                if table.wrong_kind == "#wrong":
                    wrong = int(_num(w_t, "#wrong", where))
                else:
                    max_error = _num(w_t.rstrip("*"), "error", where)
            self.run.rows.append(
                Row(
                    op=op,
                    size_bytes=size,
                    placement=placement,
                    time_us=_num(time_t, "time", where),
                    algbw=_num(alg_t, "algbw", where),
                    busbw=_num(bus_t, "busbw", where),
                    dtype=dtype,
                    redop=redop,
                    root=root,
                    count=count,
                    wrong=wrong,
                    max_error=max_error,
                )
            )

    def _finish(self) -> None:
        if not self.run.rows:
            raise ResultsError(
                f"{self.origin}: no nccl-tests table found (expected a '#  size  count  type ...' "
                "header followed by rows)",
                path=self.origin,
            )
        _fill_world(self.run.meta, list(self.devices.values()))
        self.run.meta.config.ops = self.run.ops()
        first = self.run.rows[0]
        self.cfg.dtype = first.dtype
        self.cfg.redop = first.redop
        self.cfg.root = first.root


def _looks_numeric(toks: list[str]) -> bool:
    return sum(1 for t in toks if re.fullmatch(r"[-+0-9.e]+|N/A", t)) >= len(toks) - 3


def _fill_world(meta: RunMeta, devices: list[Device]) -> None:
    devices.sort(key=lambda d: d.rank)
    meta.devices = devices
    if not devices:
        return
    meta.world_size = len(devices)
    hosts = {d.host for d in devices}
    meta.nodes = len(hosts)
    if meta.world_size % meta.nodes == 0:
        meta.gpus_per_node = meta.world_size // meta.nodes
    names = {d.name for d in devices if d.name}
    if len(names) == 1:
        meta.gpu_model = names.pop()


def parse_text(text: str, *, origin: str = "<nccl-tests>") -> Run:
    """Parse nccl-tests' text output (one or several collectives) into a Run."""
    return _TextParser(origin).feed(text)


def _f(x: object, what: str, origin: str) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise ResultsError(f"{origin}: {what} is {x!r}, expected a number", path=origin)
    return float(x)


def parse_json(obj: object, *, origin: str = "<nccl-tests.json>") -> Run:
    """Parse the document nccl-tests writes with `-J FILE` (format version 3 and compatible)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("results"), list):
        raise ResultsError(f"{origin} is not nccl-tests -J output (no 'results' list)", path=origin)
    d = cast(dict[str, Any], obj)
    meta = RunMeta(source="nccl-tests", backend="nccl", inputs=[origin])
    # Our engine's --json uses the same layout, with a generator field, `op` per row and `ops`.
    generator = d.get("generator")
    if isinstance(generator, str) and generator.startswith("nccl-k8s"):
        meta.source = "nccl-k8s"
        meta.nccl_k8s = generator.split()[-1]
        meta.backend = _opt_str(d.get("config", {}).get("backend")) or meta.backend
    meta.time = str(d["start_time"]) if d.get("start_time") else None
    code = d.get("nccl_version")
    if isinstance(code, int) and code > 0:  # our engine writes 0 for gloo runs
        meta.nccl = nccl_version_from_code(code)
    for kv in d.get("env") or []:
        if isinstance(kv, str) and "=" in kv:
            k, v = kv.split("=", 1)
            if k.startswith("NCCL_"):
                meta.env[k] = v
    args = [a for a in d.get("args") or [] if isinstance(a, str)]
    op = (op_from_name(args[0]) if args else None) or op_from_name(origin) or "unknown"
    raw_cfg = d.get("config")
    cfg_in: dict[str, Any] = cast(dict[str, Any], raw_cfg) if isinstance(raw_cfg, dict) else {}
    cfg = RunConfig(
        minbytes=_opt_int(cfg_in.get("minimum_bytes")),
        maxbytes=_opt_int(cfg_in.get("maximum_bytes")),
        stepfactor=_opt_int(cfg_in.get("step_factor")),
        stepbytes=_opt_int(cfg_in.get("step_bytes")),
        iters=_opt_int(cfg_in.get("iterations")),
        warmup=_opt_int(cfg_in.get("warmup_iters")),
        check=_opt_int(cfg_in.get("validation")),
        graph=_opt_int(cfg_in.get("graph")),
        blocking=_opt_bool(cfg_in.get("blocking_collectives")),
        ops=[op],
    )
    meta.config = cfg
    devices = []
    for dev in cfg_in.get("devices") or []:
        if isinstance(dev, dict) and isinstance(dev.get("rank"), int):
            devices.append(
                Device(
                    rank=dev["rank"],
                    host=_opt_str(dev.get("hostname")),
                    pid=_opt_int(dev.get("pid")),
                    device=_opt_int(dev.get("device")),
                    name=_opt_str(dev.get("device_info")),
                )
            )
    _fill_world(meta, devices)
    run = Run(meta=meta)
    for i, res in enumerate(d["results"]):
        where = f"{origin}: results[{i}]"
        if not isinstance(res, dict) or not isinstance(res.get("size"), int):
            raise ResultsError(f"{where} has no integer 'size'", path=origin)
        root_raw = res.get("root")
        root = _opt_int(str(root_raw).strip()) if root_raw is not None else None
        for key, placement in (("out_of_place", "out"), ("in_place", "in")):
            cell = res.get(key)
            if not isinstance(cell, dict):
                continue
            nwrong = cell.get("nwrong")
            wrong = int(nwrong) if isinstance(nwrong, int | float) and nwrong >= 0 else None
            run.rows.append(
                Row(
                    op=_opt_str(res.get("op")) or op,
                    size_bytes=res["size"],
                    placement=cast(Placement, placement),
                    time_us=_f(cell.get("time"), f"results[{i}].{key}.time", origin),
                    algbw=_f(cell.get("alg_bw"), f"results[{i}].{key}.alg_bw", origin),
                    busbw=_f(cell.get("bus_bw"), f"results[{i}].{key}.bus_bw", origin),
                    dtype=_opt_str(res.get("type")),
                    redop=_opt_str(res.get("redop")),
                    root=root,
                    count=_opt_int(res.get("count")),
                    wrong=wrong,
                    time_us_min=_opt_float(cell.get("time_min")),
                    time_us_max=_opt_float(cell.get("time_max")),
                )
            )
    if not run.rows:
        raise ResultsError(f"{origin}: nccl-tests JSON holds no results", path=origin)
    per_op = d.get("ops")
    if isinstance(per_op, list) and per_op:
        for entry in per_op:
            if isinstance(entry, dict) and isinstance(entry.get("op"), str):
                run.summaries.append(_json_summary(entry["op"], entry))
        run.meta.config.ops = run.ops()
        return run
    run.summaries.append(_json_summary(op, d))
    first = run.rows[0]
    cfg.dtype, cfg.redop, cfg.root = first.dtype, first.redop, first.root
    return run


def _json_summary(op: str, d: dict[str, Any]) -> Summary:
    summary = Summary(op=op)
    oob = d.get("out_of_bounds")
    if isinstance(oob, dict):
        summary.out_of_bounds = _opt_int(oob.get("count"))
        summary.ok = _opt_bool(oob.get("okay"))
    avg = d.get("average_bus_bandwidth")
    if isinstance(avg, dict):
        summary.avg_busbw = _opt_float(avg.get("bandwidth"))
    return summary


def _opt_float(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x)


def _opt_int(x: object) -> int | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, float) and x == int(x):
        return int(x)
    if isinstance(x, str) and x.strip().lstrip("-").isdigit():
        return int(x.strip())
    return None


def _opt_str(x: object) -> str | None:
    return x if isinstance(x, str) else None


def _opt_bool(x: object) -> bool | None:
    if isinstance(x, bool):
        return x
    if isinstance(x, str) and x.lower() in ("true", "false"):
        return x.lower() == "true"
    if isinstance(x, int):
        return bool(x)
    return None


def import_file(path: str | Path) -> Run:
    """Read one nccl-tests output file, text or `-J` JSON (decided by content, not extension)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise ResultsError(f"{p}: no such file", path=str(p)) from None
    except OSError as e:
        raise ResultsError(f"{p}: cannot read: {e.strerror}", path=str(p)) from None
    if text.lstrip().startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise ResultsError(
                f"{p}: nccl-tests JSON is not valid ({e.msg} at line {e.lineno}): truncated?",
                path=str(p),
            ) from None
        if isinstance(obj, dict) and "schema_version" in obj:
            raise ResultsError(
                f"{p} is already an nccl-k8s results file: use it directly", path=str(p)
            )
        return parse_json(obj, origin=str(p))
    return parse_text(text, origin=str(p))


def import_files(paths: Iterable[str | Path]) -> Run:
    """Import several files into one Run: rows and summaries concatenated, meta from the first
    file, completed by the others where the first left a field empty."""
    runs = [import_file(p) for p in paths]
    if not runs:
        raise ResultsError("no files to import")
    merged = runs[0]
    for other in runs[1:]:
        merged.rows.extend(other.rows)
        merged.summaries.extend(other.summaries)
        merged.meta.inputs.extend(other.meta.inputs)
        for k, v in other.meta.env.items():
            merged.meta.env.setdefault(k, v)
        for name in ("nccl", "cuda", "nccl_tests", "gpu_model", "world_size", "nodes", "time"):
            if getattr(merged.meta, name) is None:
                setattr(merged.meta, name, getattr(other.meta, name))
        if not merged.meta.devices:
            merged.meta.devices = other.meta.devices
            merged.meta.gpus_per_node = other.meta.gpus_per_node
    merged.meta.config.ops = merged.ops()
    return merged


__all__ = [
    "import_file",
    "import_files",
    "nccl_version_from_code",
    "parse_json",
    "parse_text",
]
