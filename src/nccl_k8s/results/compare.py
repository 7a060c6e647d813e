"""Compare a run with a baseline, row by row, and the gates that turn results into an exit code.

Rows are matched on (op, dtype, redop, root, size, placement): the same question asked of both
runs, so a `-d all` / `-o all` / `-r -1` sweep compares each dtype, reduction and root with itself.
For each pair the ratio current/baseline of the metric decides:

- busbw (higher is better): ratio < 1 - tolerance is "regressed", > 1 + tolerance "improved";
- time (lower is better):   ratio > 1 + tolerance is "regressed", < 1 - tolerance "improved";
- a row present in only one run is "missing" (which side says `missing_in`).

A busbw of zero on either side says nothing (one rank, where nccl-tests' bus factor is 0, or
8 B rows printed as 0.00; a ratio against it would be infinite or zero): such a row is decided on
time instead, and the row says so (`metric`). 0-byte rows (nccl-tests prints them for split
collectives at small sizes) move nothing and are skipped, counted in `skipped_empty`.

Runs of a different backend, device, world size or fabric are refused (a UsageError, exit 2,
naming each difference) unless `allow_different`; then, as for a different NCCL version or node
count, each difference is a warning (results.comparable holds the facts and which refuse).

Speed is not all a gate checks: a run whose results are wrong (`#wrong` > 0 in a row, nccl-tests'
"Out of bounds values : N FAILED", or its own failure line) fails whatever its speed
(`data_check`, kept in `Comparison.data_check` and apart from the speed verdicts); a baseline with
wrong results is a warning, since it is no trustworthy reference.

`min_busbw_gate` is nccl-tests' NCCL_TESTS_MIN_BW check on a stored run: the average bus bandwidth
of each op (over every printed cell, as nccl-tests averages) must reach the floor.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from nccl_k8s.errors import ResultsError, UsageError
from nccl_k8s.results.comparable import differences, refusal
from nccl_k8s.results.schema import Placement, Row, Run

Metric = Literal["busbw", "time"]
METRICS: tuple[Metric, ...] = get_args(Metric)
Verdict = Literal["ok", "regressed", "improved", "missing"]
Side = Literal["current", "baseline"]

Key = tuple[str, str | None, str | None, int | None, int, str]


@dataclass
class DataCheck:
    """Whether a run's results are correct, as nccl-tests itself judged them."""

    #: Rows with wrong elements (#wrong > 0).
    wrong_rows: list[Row] = field(default_factory=list)
    #: Ops whose footer said "Out of bounds values : N FAILED", with N.
    out_of_bounds: dict[str, int] = field(default_factory=dict)
    #: The run's own failure line.
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return not (self.wrong_rows or self.out_of_bounds or self.failure)

    @property
    def wrong_elements(self) -> int:
        return sum(r.wrong or 0 for r in self.wrong_rows)

    def text(self, *, with_failure: bool = True) -> str:
        """One line: what failed, which rows and how many wrong elements (and the run's failure
        line, unless said apart)."""
        parts = []
        if self.wrong_rows:
            several = len({(r.dtype, r.redop, r.root) for r in self.wrong_rows}) > 1
            names = []
            for r in self.wrong_rows[:8]:
                variant = " ".join(x for x in (r.dtype, r.redop) if x) if several else ""
                what = " ".join(
                    x for x in (r.op, variant, human_size(r.size_bytes), r.placement) if x
                )
                names.append(f"{what} {r.wrong}")
            more = f" and {len(self.wrong_rows) - 8} more" if len(self.wrong_rows) > 8 else ""
            dtypes = "/".join(sorted({r.dtype for r in self.wrong_rows if r.dtype}))
            parts.append(
                f"{self.wrong_elements} wrong elements in {len(self.wrong_rows)} rows"
                f"{' (' + dtypes + ')' if dtypes and not several else ''}: {', '.join(names)}{more}"
            )
        for op, n in self.out_of_bounds.items():
            parts.append(f"{op}: out of bounds values {n} FAILED")
        if self.failure and with_failure:
            parts.append(f"the run failed: {self.failure}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "wrong_elements": self.wrong_elements,
            "wrong_rows": [
                {
                    "op": r.op,
                    "dtype": r.dtype,
                    "redop": r.redop,
                    "root": r.root,
                    "size_bytes": r.size_bytes,
                    "placement": r.placement,
                    "wrong": r.wrong,
                }
                for r in self.wrong_rows
            ],
            "out_of_bounds_failed": dict(self.out_of_bounds),
            "failure": self.failure,
            "text": self.text(),
        }


def data_check(run: Run) -> DataCheck:
    """The run's own verdict on its results: rows with #wrong > 0, footers that said FAILED, the
    failure line it printed."""
    floor = run.meta.config.min_busbw
    # Our result lines' summary says ok=false for a --min-busbw miss too: that is the gate's
    # verdict (run_failures), not a data check that failed.
    missed = {
        s.op
        for s in run.summaries
        if floor is not None and s.avg_busbw is not None and s.avg_busbw < floor
    }
    oob = {
        s.op: s.out_of_bounds or 0
        for s in run.summaries
        if (s.ok is False and s.op not in missed) or (s.out_of_bounds or 0) > 0
    }
    return DataCheck(
        wrong_rows=[r for r in run.rows if (r.wrong or 0) > 0],
        out_of_bounds=oob,
        failure=run.meta.failure,
    )


@dataclass
class RowComparison:
    op: str
    size_bytes: int
    placement: Placement
    baseline: float | None
    current: float | None
    #: current / baseline; None when either side is missing.
    ratio: float | None
    verdict: Verdict
    #: The metric that decided this row: the one asked for, or time where busbw is 0 on either
    #: side.
    metric: Metric
    #: For verdict "missing": the run that lacks the row.
    missing_in: Side | None = None
    dtype: str | None = None
    redop: str | None = None
    root: int | None = None

    @property
    def variant(self) -> str:
        """dtype/redop (and root) as a label, e.g. "float sum"; "" when none is known."""
        parts = [x for x in (self.dtype, self.redop) if x]
        if self.root is not None and self.root >= 0:
            parts.append(f"root {self.root}")
        return " ".join(parts)


@dataclass
class Comparison:
    metric: Metric
    tolerance: float
    rows: list[RowComparison] = field(default_factory=list)
    #: Rows of 0 bytes left out (both runs together).
    skipped_empty: int = 0
    #: Differences between the runs that make the comparison less meaningful (NCCL version, node
    #: count; backend, device, world size and fabric where allowed), and a baseline whose own
    #: results were wrong.
    warnings: list[str] = field(default_factory=list)
    #: The current run's own check of its results: wrong results fail the gate whatever the speed.
    data_check: DataCheck = field(default_factory=DataCheck)

    def count(self, verdict: Verdict) -> int:
        return sum(1 for r in self.rows if r.verdict == verdict)

    @property
    def regressed(self) -> list[RowComparison]:
        return [r for r in self.rows if r.verdict == "regressed"]

    @property
    def ok(self) -> bool:
        """The CI gate: the current run's results are right and no row regressed past the
        tolerance."""
        return not self.regressed and self.data_check.ok

    @property
    def fell_back(self) -> int:
        """Rows decided on time because the asked metric was 0 on either side."""
        return sum(1 for r in self.rows if r.verdict != "missing" and r.metric != self.metric)

    def summary(self) -> str:
        head = f"{len(self.rows)} rows compared on {self.metric}"
        if self.fell_back:
            head += f", {self.fell_back} of them on time because {self.metric} is 0 on either side"
        counts = ", ".join(f"{self.count(v)} {v}" for v in get_args(Verdict))
        tail = (
            f"; {self.skipped_empty} rows of 0 bytes skipped (both runs)"
            if self.skipped_empty
            else ""
        )
        return f"{head} (tolerance {self.tolerance * 100:g}%): {counts}{tail}"

    @property
    def has_variants(self) -> bool:
        """Whether some op was compared in more than one dtype/redop/root (a -d all run)."""
        seen: dict[str, set[str]] = {}
        for r in self.rows:
            seen.setdefault(r.op, set()).add(r.variant)
        return any(len(v) > 1 for v in seen.values())

    def regression_text(self) -> str:
        """One line naming every regressed row and the metric that decided it."""
        used = {r.metric for r in self.regressed}
        if used <= {self.metric}:
            on = f"on {self.metric}"
        elif used == {"time"}:
            on = f"on time ({self.metric} is 0 on either side)"
        else:
            on = f"on {self.metric} (time where {self.metric} is 0 on either side)"
        several = self.has_variants

        def name(r: RowComparison) -> str:
            parts = [r.op, r.variant if several else "", human_size(r.size_bytes), r.placement]
            ratio = f" ({r.ratio:.2f}x)" if r.ratio is not None else ""
            return " ".join(p for p in parts if p) + ratio

        names = ", ".join(name(r) for r in self.regressed)
        return f"{len(self.regressed)} rows past {self.tolerance * 100:g}% {on}: {names}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "tolerance": self.tolerance,
            "ok": self.ok,
            "counts": {v: self.count(v) for v in get_args(Verdict)},
            "decided_on_time": self.fell_back if self.metric != "time" else None,
            "skipped_empty": self.skipped_empty,
            "warnings": list(self.warnings),
            "data_check": self.data_check.to_dict(),
            "summary": self.summary(),
            "rows": [asdict(r) for r in self.rows],
        }


def _key(row: Row) -> Key:
    return (row.op, row.dtype, row.redop, row.root, row.size_bytes, row.placement)


def _index(run: Run, name: str) -> dict[Key, Row]:
    out: dict[Key, Row] = {}
    for row in run.rows:
        key = _key(row)
        if key in out:
            raise ResultsError(
                f"{name} has two rows for {row.op} {row.size_bytes} B {row.placement}-of-place "
                f"(dtype {row.dtype}, redop {row.redop}, root {row.root}): two runs concatenated? "
                "import or collect them separately"
            )
        out[key] = row
    return out


def _value(row: Row, metric: Metric) -> float:
    return row.busbw if metric == "busbw" else row.time_us


def _verdict(cur: float, base: float, metric: Metric, tol: float) -> tuple[float | None, Verdict]:
    if base == 0:
        # Only a time of 0 (a row printed as 0.00 us) gets here: busbw rows with a 0 went to time.
        return None, "ok" if cur == 0 else "regressed"
    ratio = cur / base
    worse, better = (ratio < 1 - tol, ratio > 1 + tol)
    if metric == "time":
        worse, better = (ratio > 1 + tol, ratio < 1 - tol)
    return ratio, "regressed" if worse else "improved" if better else "ok"


def _empty(row: Row) -> bool:
    return row.size_bytes == 0


def _differences(current: Run, baseline: Run, *, allow_different: bool) -> list[str]:
    """The warnings; a UsageError when the runs differ in a fact that refuses and that was not
    allowed."""
    found = differences(current.meta, baseline.meta)
    if not allow_different and (why := refusal(found)) is not None:
        raise UsageError(why, key="allow_different")
    out = [d.text() for d in found]
    # Runs on a cluster name each rank's Kubernetes node: a regression can point at one.
    nodes = [sorted({d.node for d in r.meta.devices if d.node}) for r in (current, baseline)]
    if all(nodes) and nodes[0] != nodes[1]:
        out.append(
            f"Kubernetes nodes differ: current {', '.join(nodes[0])}, baseline {', '.join(nodes[1])}"
        )
    return out


def select(
    run: Run, *, dtype: str | None = None, redop: str | None = None, name: str = "run"
) -> Run:
    """The run restricted to one dtype and/or reduction (the `--dtype/--redop` filters). A value
    the run does not hold is a usage error that lists the ones it does."""
    rows = run.rows
    for flag, value, attr in (("--dtype", dtype, "dtype"), ("--redop", redop, "redop")):
        if value is None:
            continue
        have = sorted({str(getattr(r, attr)) for r in rows if getattr(r, attr) is not None})
        if value not in have:
            raise UsageError(
                f"{flag} {value!r}: the {name} has no such rows (it has {', '.join(have) or 'none'})",
                key=attr,
            )
        rows = [r for r in rows if getattr(r, attr) == value]
    return Run(meta=run.meta, rows=list(rows), summaries=run.summaries, soak=run.soak)


def compare(
    current: Run,
    baseline: Run,
    *,
    tolerance: float = 0.05,
    metric: Metric = "busbw",
    dtype: str | None = None,
    redop: str | None = None,
    allow_different: bool = False,
) -> Comparison:
    """Compare `current` with `baseline` per op x dtype x redop x root x size x placement;
    runs of a different backend, device, world size or fabric only when `allow_different`."""
    if metric not in METRICS:
        raise UsageError(f"--metric {metric!r}: expected busbw or time", key="metric")
    if not 0 <= tolerance < 1:
        raise UsageError(
            f"tolerance {tolerance!r}: expected a fraction in [0, 1), e.g. 0.05 for 5%",
            key="tolerance",
        )
    current = select(current, dtype=dtype, redop=redop, name="current run")
    baseline = select(baseline, dtype=dtype, redop=redop, name="baseline")
    result = Comparison(metric=metric, tolerance=tolerance)
    result.warnings = _differences(current, baseline, allow_different=allow_different)
    result.data_check = data_check(current)
    if not (base_check := data_check(baseline)).ok:
        result.warnings.append(
            f"the baseline's own data check failed, it is no trustworthy reference: "
            f"{base_check.text()}"
        )
    result.skipped_empty = sum(1 for run in (current, baseline) for r in run.rows if _empty(r))
    cur = _index(Run(rows=[r for r in current.rows if not _empty(r)]), "the current run")
    base = _index(Run(rows=[r for r in baseline.rows if not _empty(r)]), "the baseline")
    either = {**cur, **base}
    keys = sorted(
        either, key=lambda k: (k[0], str(k[1]), str(k[2]), k[3] or 0, k[4], k[5] != "out")
    )
    for key in keys:
        b, c, row = base.get(key), cur.get(key), either[key]
        used = metric
        if b is not None and c is not None and 0 in (_value(b, metric), _value(c, metric)):
            used = "time"
        cmp = RowComparison(
            row.op,
            row.size_bytes,
            row.placement,
            None if b is None else _value(b, used),
            None if c is None else _value(c, used),
            None,
            "missing",
            used,
            dtype=row.dtype,
            redop=row.redop,
            root=row.root,
        )
        if b is None or c is None:
            cmp.missing_in = "baseline" if b is None else "current"
        else:
            cmp.ratio, cmp.verdict = _verdict(_value(c, used), _value(b, used), used, tolerance)
        result.rows.append(cmp)
    if not any(r.verdict != "missing" for r in result.rows):
        raise ResultsError(
            "the two runs have no row in common (op, dtype, redop, root, size, placement): "
            "nothing to compare"
        )
    return result


def parse_metric(text: str) -> Metric:
    for m in METRICS:
        if text.strip().lower() == m:
            return m
    raise UsageError(f"--metric {text!r}: expected busbw or time", key="metric")


def human_size(n: int) -> str:
    """Bytes as nccl-tests' flags write them: 8, 64K, 1M, 8G (binary), exact or with a decimal."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            q = n / scale
            return f"{q:g}{unit}" if q == int(q) else f"{q:.1f}{unit}"
    return str(n)


def parse_tolerance(text: str) -> float:
    """'5%', '5 %', '0.05' -> 0.05. A bare number above 1 is taken as percent ('5' -> 0.05)."""
    s = text.strip()
    try:
        value = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise UsageError(
            f"--tolerance {text!r}: expected a percentage such as 5% or a fraction such as 0.05",
            key="tolerance",
        ) from None
    if not s.endswith("%") and value >= 1:
        value /= 100
    if not 0 <= value < 1:
        raise UsageError(f"--tolerance {text!r}: expected between 0% and 100%", key="tolerance")
    return value


@dataclass
class GateResult:
    floor_gbps: float
    #: op -> average busbw over its printed cells (GB/s).
    averages: dict[str, float]
    failed_ops: list[str]
    #: op -> its rows (the sizes the average is over).
    rows: dict[str, list[Row]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed_ops

    def summary(self) -> str:
        avgs = ", ".join(f"{op} {bw:.2f}" for op, bw in self.averages.items())
        verdict = "ok" if self.ok else "FAILED for " + ", ".join(self.failed_ops)
        return f"min busbw {self.floor_gbps:g} GB/s: average busbw {avgs} GB/s: {verdict}"

    def failure_text(self) -> str:
        """One line naming the gate, each op below it with the sizes its average is over and
        the busbw at the largest, measured against the floor."""
        parts = []
        for op in self.failed_ops:
            rows = self.rows.get(op, [])
            sizes = sorted({r.size_bytes for r in rows})
            largest = human_size(sizes[-1])
            if len(sizes) == 1:
                parts.append(f"{op} averaged {self.averages[op]:.2f} GB/s at {largest}")
                continue
            top = max(r.busbw for r in rows if r.size_bytes == sizes[-1])
            parts.append(
                f"{op} averaged {self.averages[op]:.2f} GB/s over {len(sizes)} sizes, "
                f"{human_size(sizes[0])} to {largest} ({top:.2f} GB/s at {largest})"
            )
        return f"--min-busbw {self.floor_gbps:g} GB/s missed: {'; '.join(parts)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "floor_gbps": self.floor_gbps,
            "averages": self.averages,
            "failed_ops": self.failed_ops,
            "ok": self.ok,
        }


def min_busbw_gate(run: Run, floor_gbps: float) -> GateResult:
    """Each op's average busbw (over out- and in-place cells, as nccl-tests' closing line) >= floor."""
    if floor_gbps < 0:
        raise UsageError(f"--min-busbw {floor_gbps}: expected GB/s >= 0", key="min_busbw")
    rows: dict[str, list[Row]] = {}
    for row in run.rows:
        rows.setdefault(row.op, []).append(row)
    if not rows:
        raise ResultsError("the run has no rows: nothing to gate")
    averages = {op: sum(r.busbw for r in v) / len(v) for op, v in rows.items()}
    failed = [op for op, avg in averages.items() if avg < floor_gbps]
    return GateResult(floor_gbps, averages, failed, rows)


@dataclass
class CompareOutcome:
    """What `nccl-k8s compare` decides: the comparison with a baseline and the min-busbw gate
    (each where asked), and the current run's own data check, which fails a run whatever its
    speed."""

    comparison: Comparison | None
    gate: GateResult | None
    data_check: DataCheck

    @property
    def ok(self) -> bool:
        return (
            self.data_check.ok
            and (self.comparison is None or self.comparison.ok)
            and (self.gate is None or self.gate.ok)
        )

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    @property
    def warnings(self) -> list[str]:
        return list(self.comparison.warnings) if self.comparison is not None else []

    def failures(self) -> list[tuple[str, str]]:
        """Why it failed, each as (what, detail): "data check failed", "regressed:", "min busbw:"."""
        found: list[tuple[str, str]] = []
        if not self.data_check.ok:
            found.append(("data check failed", f"in the current run: {self.data_check.text()}"))
        if self.comparison is not None and self.comparison.regressed:
            found.append(("regressed:", self.comparison.regression_text()))
        if self.gate is not None and not self.gate.ok:
            ops = ", ".join(self.gate.failed_ops)
            found.append(("min busbw:", f"{ops} below {self.gate.floor_gbps:g} GB/s"))
        return found

    def to_dict(self) -> dict[str, Any]:
        """`compare -o json`."""
        doc: dict[str, Any] = {"ok": self.ok, "data_check": self.data_check.to_dict()}
        if self.comparison is not None:
            doc["compare"] = self.comparison.to_dict()
        if self.gate is not None:
            doc["min_busbw"] = self.gate.to_dict()
        return doc


def run_failures(run: Run) -> list[str]:
    """Why a run that printed its table failed, one line each: its own data check (wrong
    elements, out of bounds FAILED) and its --min-busbw gate (`meta.config.min_busbw`)."""
    found = []
    check = data_check(run)
    if check.wrong_rows or check.out_of_bounds:
        found.append(f"data check failed: {check.text(with_failure=False)}")
    floor = run.meta.config.min_busbw
    if floor is not None and run.rows and not (gate := min_busbw_gate(run, floor)).ok:
        found.append(gate.failure_text())
    return found


def judge(
    current: str,
    baseline: str | None,
    *,
    tolerance: float,
    metric: Metric = "busbw",
    dtype: str | None = None,
    redop: str | None = None,
    min_busbw: float | None = None,
    allow_different: bool = False,
) -> CompareOutcome:
    """Compare the run `current` (a results file or run id) with `baseline` and/or gate it on
    `min_busbw` (GB/s); at least one of the two is asked (UsageError otherwise). The data check
    always applies."""
    from nccl_k8s.results.schema import load
    from nccl_k8s.results.store import resolve

    if baseline is None and min_busbw is None:
        raise UsageError("compare needs --baseline RUN, --min-busbw GBPS, or both", key="baseline")
    cur = load(resolve(current))
    cmp = None
    if baseline is not None:
        base = load(resolve(baseline))
        cmp = compare(
            cur, base, tolerance=tolerance, metric=metric, dtype=dtype, redop=redop,
            allow_different=allow_different,
        )  # fmt: skip
    selected = select(cur, dtype=dtype, redop=redop)
    gate = min_busbw_gate(selected, min_busbw) if min_busbw is not None else None
    check = cmp.data_check if cmp is not None else data_check(selected)
    return CompareOutcome(cmp, gate, check)


__all__ = [
    "METRICS",
    "CompareOutcome",
    "Comparison",
    "DataCheck",
    "GateResult",
    "Metric",
    "RowComparison",
    "compare",
    "data_check",
    "human_size",
    "judge",
    "min_busbw_gate",
    "parse_metric",
    "parse_tolerance",
    "run_failures",
    "select",
]
