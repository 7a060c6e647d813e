"""Ingest NVIDIA nccl-tests output (text tables of any version, and `-J` JSON) into the results schema.

So a user can put a run of `all_reduce_perf` next to one of ours, whatever the launcher and the
nccl-tests version (1.x to 2.19). The parser follows nccl-tests' print formats (src/common.cu and
the per-collective `print_header`/`print_line_header`):

- header:   `# nccl-tests version %s nccl-headers=%d nccl-library=%d` (2.13+),
            `# nThread %d nGpus %d minBytes %ld maxBytes %ld step: %ld(%s) warmup iters: %d ...`
            (the first nccl-tests printed it without `#`),
            `#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s` (older: no Group, no Pid;
            rccl-tests leaves the name empty where HIP gives none).
- columns:  a `#` line naming them, read rather than assumed, because they changed over time:
            `size count type redop root` (2.11+); before, per collective, `size count type redop`,
            `size count type root`, `size count type` (all_gather); NCCL 1's `bytes N type op`;
            then per placement `time algbw busbw` and `#wrong`, `error` (largest absolute error,
            `%5.0le`, `*` when past the threshold) or NCCL 1's `res`.
- rows:     size and count, then per placement `%7s %6.2f %6.2f %6g|N/A` (newer versions print
            large bandwidths as `2627.4`, `10447`, `1e+06`: any float literal).
- footer:   `# Out of bounds values : %d %s`, `# Avg bus bandwidth    : %g %s`.

What users paste is rarely that clean, so every line first loses the prefixes launchers add (Open
MPI's `[1,0]<stdout>:`, `srun -l`'s ` 0: `, `[155] `, `kubectl logs --timestamps`/`--prefix`,
indentation), NCCL INFO/WARN lines between rows are skipped, and the run's own failure line
(`Test NCCL failure common.cu:392 'unhandled cuda error'`) is kept and reported (`pastes` does
that line cleaning). Reading files, and several files as one run, is `imports`.

Each table's collective comes, in this order, from `# Collective test starting: <op>_perf`
(2.14+), from a line naming `<op>_perf` since the previous table (a command echoed in a log, a
`===begin <op>_perf test===` banner), from the file name (`all_reduce_perf_2nodes.log`), or from
the table itself (`collectives.identify_op`); `meta.op_identified` says which, per table.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from nccl_k8s.errors import ResultsError
from nccl_k8s.results.collectives import (
    FACTS,
    Collective,
    identify_op,
    op_in_command,
    op_in_file_name,
    ops_in_words,
)
from nccl_k8s.results.cutoff import CutOff, cut_off
from nccl_k8s.results.layouts import (
    Layout,
    layout_from_header,
    layout_from_labels,
    layout_from_row,
    looks_numeric,
    redop_left_blank,
    undecorated,
)
from nccl_k8s.results.nccltests_json import (
    fill_world,
    nccl_version_from_code,
    opt_int,
)
from nccl_k8s.results.pastes import (
    failure_in,
    labelled_footer,
    pipe_row,
    role_paragraphs,
    strip_prefixes,
    with_hash,
)
from nccl_k8s.results.schema import (
    Device,
    IdentifiedBy,
    OpIdentification,
    Placement,
    Row,
    Run,
    RunMeta,
    Summary,
    as_backend,
)
from nccl_k8s.results.world import hosts_from_device_indices, ranks_per_process, world_from_counts

_VERSION = re.compile(
    r"^#\s*nccl-tests version (?P<v>\S+)(?:.*?nccl-library=(?P<lib>\d+))?", re.IGNORECASE
)
# Our engine prints its own first line in the same table format (`nccl-k8s run` output).
_OUR_VERSION = re.compile(
    r"^#\s*nccl-k8s version (?P<v>\S+)(?:.*?\btorch=(?P<torch>\S+))?(?:.*?\bbackend=(?P<b>\w+))?"
)
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(?P<name>\S+)")
_CONCLUDED = re.compile(r"^#\s*Collective test concluded:\s*(?P<name>\S*)")
# rccl-tests on parts whose marketing name HIP leaves empty (MI355X) print no name after the bus id.
_DEVICE = re.compile(
    r"^#\s+Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+(?P<pid>\d+)\s+)?on\s+(?P<host>\S+)"
    r"\s+device\s+(?P<dev>\d+)\s+\[(?P<bus>[^\]]*)\](?:\s+(?P<name>.*?))?\s*$"
)
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<n>\d+)\s*(?P<ok>OK|FAILED)?")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<bw>\S+)")
_REDUCED = re.compile(r"^#\s*Reducing maxBytes to (?P<n>\d+)")
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


def op_from_name(name: str) -> str | None:
    return op_in_file_name(Path(name).name)


@dataclass
class _Table:
    layout: Layout
    op: str | None
    by: IdentifiedBy
    detail: str
    #: Where its column header is ("file:line").
    where: str
    rows: list[Row] = field(default_factory=list)
    #: The collectives the table alone fits, when it fits several (the first one chosen).
    also: list[Collective] = field(default_factory=list)
    #: Its footer's summary, once read.
    summary: Summary | None = None


_THREADS_GPUS = re.compile(r"\bnThread\s+(?P<t>\d+)\s+nGpus\s+(?P<g>\d+)")


def _num(tok: str, what: str, where: str) -> float:
    try:
        return float(tok)
    except ValueError:
        raise ResultsError(f"{where}: {what} {tok!r} is not a number", path=where) from None


class _TextParser:
    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.run = Run(meta=RunMeta(source="nccl-tests", backend="nccl", inputs=[origin]))
        self.table: _Table | None = None
        self.last_op: str | None = None
        self.starting_op: str | None = None
        self.mention: tuple[str, str] | None = None
        self.headers = 0
        self.world_from_count: int | None = None
        self.devices: dict[int, Device] = {}
        #: Lines that name exactly one collective (as `<op>_perf` or in words), with the number of
        #: tables closed before them.
        self.words: list[tuple[Collective, str, int]] = []
        #: The tables read so far, with rows.
        self.tables: list[_Table] = []
        self.cfg = self.run.meta.config
        #: Ranks one process drives: nThread x nGpus of the config line, or `-t`/`-g` of a
        #: command line naming the test.
        self.per_process: int | None = None
        #: The maxBytes nccl-tests lowered for memory (`# Reducing maxBytes to N`).
        self.reduced_max: int | None = None
        #: The last line, when it is a table row cut in the middle ("file:line").
        self.cut_row: str | None = None
        #: How the last table was cut off, when it was (cutoff.cut_off).
        self.cut: CutOff | None = None

    def feed(self, text: str) -> Run:
        lines = text.splitlines()
        if ":`" in text:  # a reStructuredText paste, its lines in roles (pastes.role_paragraphs)
            lines = role_paragraphs(lines)
        last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
        for i, raw in enumerate(lines):
            where = f"{self.origin}:{i + 1}"
            try:
                self._line(strip_prefixes(raw.rstrip("\r")), where)
            except ResultsError:
                # The output ends inside a row (a log cut while a rank printed): the rows
                # before it are the run's, the table is cut off. Anywhere else it is refused.
                if i != last or self.table is None or not self.table.rows:
                    raise
                self.cut_row = where
        self._close()
        self._finish()
        return self.run

    def _line(self, line: str, where: str) -> None:
        s = line.strip()
        if not s:
            return
        s = with_hash(s)
        if "|" in s and (labelled := layout_from_labels(s)) is not None:
            self._open(labelled, where)
            return
        s = labelled_footer(s) or s
        if s.startswith("#"):
            self._comment(s, where)
            return
        if self.table is not None and "|" in s:
            s = pipe_row(s)
        failure = failure_in(s)
        if failure is not None:
            self.run.meta.failure = self.run.meta.failure or failure
            return
        toks = [undecorated(t) for t in s.split()]
        if self.table is not None and self._maybe_row(self.table, toks, where):
            return
        if self.table is None and (layout := layout_from_row(toks)) is not None:
            # Rows without a header (the tail of an output): the columns the row implies.
            self._open(layout, where)
            self._maybe_row(self._current(), toks, where)
            return
        if s.startswith("nThread "):  # the first nccl-tests printed its config line without '#'
            self._config(s)
        for e in _NCCL_ENV.finditer(s):
            self.run.meta.env.setdefault(e.group("k"), e.group("v"))
        m = _NCCL_VERSION.search(s)
        if m and ("NCCL INFO" in s or s.startswith("NCCL version")) and self.run.meta.nccl is None:
            self.run.meta.nccl = m.group("v")
            self.run.meta.cuda = m.group("cuda") or self.run.meta.cuda
        if "NCCL INFO" not in s and "NCCL WARN" not in s:
            op = op_in_command(s)
            if op is not None:
                self.mention = (op, s)
                if self.per_process is None:
                    self.per_process = ranks_per_process(s)
            named = ops_in_words(s)
            if len(named) == 1:
                self.words.append((named[0], s, len(self.tables)))

    def _maybe_row(self, table: _Table, toks: list[str], where: str) -> bool:
        if not toks[0].isdigit():
            return False
        if len(toks) == table.layout.width - 1 and redop_left_blank(table.layout, toks):
            at = table.layout.lead.index("redop")
            toks = [*toks[:at], "", *toks[at:]]
        if len(toks) == table.layout.width:
            table.rows.extend(self._row(table.layout, toks, where))
            return True
        if len(toks) > len(table.layout.lead) and looks_numeric(toks):
            raise ResultsError(
                f"{where}: table row has {len(toks)} columns, the header announced "
                f"{table.layout.width}: file cut off or edited?",
                path=self.origin,
            )
        return False

    def _comment(self, s: str, where: str) -> None:
        if m := _VERSION.match(s):
            self._close()
            self.run.meta.nccl_tests = m.group("v")
            if m.group("lib") and int(m.group("lib")) > 0:
                self.run.meta.nccl = nccl_version_from_code(int(m.group("lib")))
        elif m := _OUR_VERSION.match(s):
            self._close()
            meta = self.run.meta
            meta.source, meta.nccl_k8s = "nccl-k8s", m.group("v")
            meta.torch = m.group("torch") or meta.torch
            meta.backend = as_backend(m.group("b")) or meta.backend
        elif m := _STARTING.match(s):
            self._close()
            self.starting_op = op_in_command(m.group("name"))
        elif m := _CONCLUDED.match(s):
            self._close()
            self._concluded(m.group("name"))
        elif s.startswith("# nThread"):
            self._config(s)
        elif m := _DEVICE.match(s):
            rank = int(m.group("rank"))
            self.devices[rank] = Device(
                rank=rank,
                host=m.group("host"),
                pid=int(m.group("pid")) if m.group("pid") else None,
                device=int(m.group("dev")),
                name=m.group("name") or None,
            )
        elif m := _OOB.match(s):
            self._close()
            self._summary().out_of_bounds = int(m.group("n"))
            if m.group("ok"):
                self._summary().ok = m.group("ok") == "OK"
        elif m := _REDUCED.match(s):
            self.reduced_max = int(m.group("n"))
        elif m := _AVG.match(s):
            self._close()
            with contextlib.suppress(ValueError):
                self._summary().avg_busbw = float(m.group("bw"))
        elif (layout := layout_from_header(s)) is not None:
            self._open(layout, where)
        # other comment lines (units, "out-of-place", "Using devices") carry nothing we need

    def _open(self, layout: Layout, where: str) -> None:
        """A column header: a new table, whose collective the nearest announcement names."""
        self._close()
        self.headers += 1
        by: IdentifiedBy
        if self.starting_op is not None:
            op, by, detail = self.starting_op, "header", "# Collective test starting"
        elif self.mention is not None:
            op, by = self.mention[0], "command"
            detail = f"named before the table: {self.mention[1][:100]}"
        elif (named := op_from_name(self.origin)) is not None:
            op, by, detail = named, "file-name", f"file name {Path(self.origin).name}"
        else:
            op, by, detail = None, "table", ""
        self.table = _Table(layout, op, by, detail, where)
        self.starting_op = self.mention = None

    def _current(self) -> _Table:
        if self.table is None:  # _open has just set it
            raise AssertionError("no open table")
        return self.table

    def _concluded(self, name: str) -> None:
        """`# Collective test concluded: <op>_perf` (2.14+): nccl-tests' own word for the table
        just closed, which a paste cut above its header (a tail) names nowhere else."""
        op = op_in_command(name)
        if op is None or not self.tables or self.tables[-1].by in ("header", "command"):
            return
        table = self.tables[-1]
        table.op, table.by, table.also = op, "footer", []
        table.detail = f"# Collective test concluded: {name}"
        for row in table.rows:
            row.op = op
        if table.summary is not None:
            table.summary.op = op
        self.last_op = op

    def _close(self) -> None:
        """End the current table: decide its collective if nothing named it, label its rows."""
        table, self.table = self.table, None
        if table is None or not table.rows:
            return
        by, detail = table.by, table.detail
        if table.op is not None:
            op = table.op
        else:
            lead = table.layout.lead
            found = identify_op(
                table.rows,
                has_redop="redop" in lead,
                has_root="root" in lead,
                world_size=self._known_world(),
            )
            op, detail = found.op or "unknown", found.detail
            table.also = found.also
            if found.op is None:
                by = "unknown"
            if found.world_from_count and self.world_from_count is None:
                self.world_from_count = found.world_from_count
        table.op, table.by, table.detail = op, by, detail
        if self.world_from_count is None and op in FACTS and FACTS[op].per_rank_count:
            self.world_from_count = world_from_counts(table.rows)
        for row in table.rows:
            row.op = op
        self._no_repeat(table)
        self.tables.append(table)
        self.last_op = op

    def _known_world(self) -> int | None:
        """The world size the device lines give, when they are all there (ranks 0..n-1)."""
        if not self.devices or sorted(self.devices) != list(range(len(self.devices))):
            return None
        return len(self.devices)

    def _no_repeat(self, table: _Table) -> None:
        """Refuse a table that measures again what an earlier one did (same op, dtype, redop, root,
        size): two runs in one file, which one results file cannot hold apart."""
        keys = {row_key(r) for r in table.rows}
        for earlier in self.tables:
            if earlier.op == table.op and keys & {row_key(r) for r in earlier.rows}:
                raise ResultsError(
                    f"{table.where}: this {table.op} table measures the same sizes as the one at "
                    f"{earlier.where.rsplit(':', 1)[-1]}: two runs in one file; import each run "
                    "from its own file (cut the file between the tables)",
                    path=self.origin,
                )

    def _named_in_text(self, index: int, table: _Table) -> tuple[Collective, str] | None:
        """The one collective, of those the table fits, that the text names: before the table
        (since the previous one) first, then anywhere in the file."""
        fits = {table.op, *table.also}
        near = [(op, s) for op, s, n in self.words if n == index and op in fits]
        for found in (near, [(op, s) for op, s, _ in self.words if op in fits]):
            if len({op for op, _ in found}) == 1:
                return found[0]
        return None

    def _config(self, s: str) -> None:
        toks = s.lstrip("#").split()
        if (m := _THREADS_GPUS.search(s)) is not None:
            self.per_process = int(m.group("t")) * int(m.group("g"))
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

    def _world(self) -> None:
        """World size, nodes and GPUs per node: the device list, else the tables' counts, the
        ranks per process (`nThread` x `nGpus`, `-g N`) where the tables agree."""
        meta = self.run.meta
        fill_world(meta, list(self.devices.values()))
        if self.devices and self._known_world() is None:
            # Device lines from the middle of the list (a paste cut above them): the world is at
            # least the highest rank + 1, and that exactly when an all_reduce table's
            # busbw/algbw (2(n-1)/n) says so; hosts and GPUs per node are unknown.
            meta.world_size = meta.nodes = meta.gpus_per_node = None
            least = max(self.devices) + 1
            if self._all_reduce_ranks(least):
                meta.world_size = least
                hosts = hosts_from_device_indices(self.devices, least)
                if hosts is not None:
                    per_host = Counter(hosts.values())
                    meta.nodes = len(per_host)
                    if len(set(per_host.values())) == 1:
                        meta.gpus_per_node = least // meta.nodes
        if meta.world_size is None and self.world_from_count is not None:
            meta.world_size = self.world_from_count
        n = self.per_process
        if self.devices or n is None:
            return
        if meta.world_size is None and self._all_reduce_ranks(n):
            meta.world_size = n
        if meta.world_size == n:
            # As many ranks as one process drives: one process, so one node.
            meta.nodes, meta.gpus_per_node = 1, n

    def _all_reduce_ranks(self, n: int) -> bool:
        """Whether the all_reduce rows' busbw/algbw (2(n-1)/n) says `n` ranks: every row where
        it is readable agrees with n given the printed decimals, and one pins it to n."""
        pinned = False
        for r in self.run.rows:
            if r.op != "all_reduce" or r.placement != "out" or r.algbw < 1:
                continue
            lo = (r.busbw - 0.005) / (r.algbw + 0.005)
            hi = (r.busbw + 0.005) / (r.algbw - 0.005)
            if hi >= 2:
                continue
            n_lo, n_hi = 2 / (2 - lo), 2 / (2 - hi)
            if not n_lo <= n <= n_hi:
                return False
            pinned = pinned or n_hi - n_lo < 1
        return pinned

    def _summary(self) -> Summary:
        op = self.last_op or "unknown"
        for s in self.run.summaries:
            if s.op == op:
                return s
        s = Summary(op=op)
        self.run.summaries.append(s)
        if self.tables and self.tables[-1].op == op:
            self.tables[-1].summary = s
        return s

    def _row(self, layout: Layout, toks: list[str], where: str) -> list[Row]:
        lead = dict(zip(layout.lead, toks, strict=False))
        if layout.size_unit == 1:
            size = int(lead["size"])
        else:  # a pasted table's `Message Size (GB)`
            size = round(_num(lead["size"], "size", where) * layout.size_unit)
        count = int(lead["count"]) if lead.get("count", "").isdigit() else None
        root = opt_int(lead.get("root"))
        base = len(layout.lead)
        out = []
        for g in range(layout.groups):
            time_t, alg_t, bus_t, w_t = toks[base + 4 * g : base + 4 * g + 4]
            wrong: int | None = None
            max_error: float | None = None
            if w_t != "N/A":
                if layout.check == "#wrong":
                    wrong = int(_num(w_t, "#wrong", where))
                else:
                    max_error = _num(w_t.rstrip("*"), layout.check, where)
            out.append(
                Row(
                    op="",  # set when the table ends and its collective is known
                    size_bytes=size,
                    placement=_PLACEMENTS[min(g, len(_PLACEMENTS) - 1)],
                    time_us=_num(time_t, "time", where),
                    algbw=_num(alg_t, "algbw", where),
                    busbw=_num(bus_t, "busbw", where),
                    dtype=lead.get("type"),
                    redop=lead.get("redop") or None,
                    root=root,
                    count=count,
                    wrong=wrong,
                    max_error=max_error,
                )
            )
        return out

    def _finish(self) -> None:
        meta = self.run.meta
        for i, table in enumerate(self.tables):
            if table.also and (named := self._named_in_text(i, table)) is not None:
                op, line = named
                fits = ", ".join(sorted({str(table.op), *table.also}))
                table.op, table.by = op, "text"
                table.detail = f"the table fits {fits}; the text names {op}: {line[:100]}"
                for row in table.rows:
                    row.op = op
                if table.summary is not None:
                    table.summary.op = op
            self.run.rows.extend(table.rows)
            columns = table.layout.describe() if table.layout.from_row else ""
            meta.op_identified.append(
                OpIdentification(str(table.op), table.by, table.detail, columns)
            )
        if not self.run.rows:
            if meta.failure:
                raise ResultsError(
                    f"{self.origin}: the run failed before its first result: {meta.failure}",
                    path=self.origin,
                )
            if self.headers:
                raise ResultsError(
                    f"{self.origin}: nccl-tests printed its table header but no result row: the "
                    "run stopped before its first size (hung, killed, or the output is cut off)",
                    path=self.origin,
                )
            raise ResultsError(
                f"{self.origin}: no nccl-tests table found (expected a '#  size  count  type ...' "
                "header followed by rows)",
                path=self.origin,
            )
        self._world()
        self._cut_off(self.tables[-1])
        meta.config.ops = self.run.ops()
        first = self.run.rows[0]
        self.cfg.dtype = first.dtype
        self.cfg.redop = first.redop
        self.cfg.root = first.root

    def _cut_off(self, table: _Table) -> None:
        """Whether the last table was cut off (cutoff.cut_off): the run is then partial."""
        self.cut = cut_off(
            str(table.op),
            [r.size_bytes for r in table.rows[:: table.layout.groups]],
            self.cfg,
            footer=table.summary is not None,
            world_size=self.run.meta.world_size,
            reduced_max=self.reduced_max,
            cut_row=self.cut_row,
        )
        if self.cut is not None:
            self.run.meta.partial = True


def row_key(r: Row) -> tuple[str | None, str | None, int | None, int, str]:
    return (r.dtype, r.redop, r.root, r.size_bytes, r.placement)


def parse_text(text: str, *, origin: str = "<nccl-tests>") -> Run:
    """Parse nccl-tests' text output (one or several collectives) into a Run."""
    return read_text(text, origin=origin)[0]


def read_text(text: str, *, origin: str = "<nccl-tests>") -> tuple[Run, CutOff | None]:
    """parse_text, and where its last table was cut off (the Run is then marked partial)."""
    parser = _TextParser(origin)
    run = parser.feed(text)
    return run, parser.cut


__all__ = ["nccl_version_from_code", "op_from_name", "parse_text", "read_text", "row_key"]
