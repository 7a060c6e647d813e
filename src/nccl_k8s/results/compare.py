"""Compare a run with a baseline, row by row, and the gates that turn results into an exit code.

Rows are matched on (op, size, placement): the same question asked of both runs. For each pair the
ratio current/baseline of the chosen metric decides:

- busbw (higher is better): ratio < 1 - tolerance is "regressed", > 1 + tolerance "improved";
- time (lower is better):   ratio > 1 + tolerance is "regressed", < 1 - tolerance "improved";
- a row present in only one run is "missing" (which side says `missing_in`).

A zero on both sides (busbw of a one-GPU all_reduce) is "ok" with no ratio; zero on one side only
counts as regressed or improved. `min_busbw_gate` is nccl-tests' NCCL_TESTS_MIN_BW check on a stored
run: the average bus bandwidth of each op (over every printed cell, as nccl-tests averages) must
reach the floor.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from nccl_k8s.errors import ResultsError, UsageError
from nccl_k8s.results.schema import Row, Run

Metric = Literal["busbw", "time"]
METRICS: tuple[Metric, ...] = get_args(Metric)
Verdict = Literal["ok", "regressed", "improved", "missing"]

Key = tuple[str, int, str]


@dataclass
class RowComparison:
    op: str
    size_bytes: int
    placement: str
    baseline: float | None
    current: float | None
    #: current / baseline; None when either side is missing or both are zero.
    ratio: float | None
    verdict: Verdict
    #: For verdict "missing": the run that lacks the row ("current" or "baseline").
    missing_in: str | None = None


@dataclass
class Comparison:
    metric: Metric
    tolerance: float
    rows: list[RowComparison] = field(default_factory=list)

    def count(self, verdict: Verdict) -> int:
        return sum(1 for r in self.rows if r.verdict == verdict)

    @property
    def regressed(self) -> list[RowComparison]:
        return [r for r in self.rows if r.verdict == "regressed"]

    @property
    def ok(self) -> bool:
        """The CI gate: no row regressed past the tolerance."""
        return not self.regressed

    def summary(self) -> str:
        parts = [
            f"{len(self.rows)} rows compared on {self.metric} "
            f"(tolerance {self.tolerance * 100:g}%)",
            f"{self.count('ok')} ok",
            f"{self.count('regressed')} regressed",
            f"{self.count('improved')} improved",
            f"{self.count('missing')} missing",
        ]
        return ": ".join(parts[:1]) + ": " + ", ".join(parts[1:])

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "tolerance": self.tolerance,
            "ok": self.ok,
            "counts": {v: self.count(v) for v in get_args(Verdict)},
            "summary": self.summary(),
            "rows": [asdict(r) for r in self.rows],
        }


def _index(run: Run, name: str) -> dict[Key, Row]:
    out: dict[Key, Row] = {}
    for row in run.rows:
        key = (row.op, row.size_bytes, row.placement)
        if key in out:
            prev = out[key]
            raise ResultsError(
                f"{name} has two rows for {row.op} {row.size_bytes} B {row.placement}-of-place "
                f"(dtype {prev.dtype}/{row.dtype}, redop {prev.redop}/{row.redop}, root "
                f"{prev.root}/{row.root}): compare runs with one dtype, redop and root per op"
            )
        out[key] = row
    return out


def _value(row: Row, metric: Metric) -> float:
    return row.busbw if metric == "busbw" else row.time_us


def _verdict(cur: float, base: float, metric: Metric, tol: float) -> tuple[float | None, Verdict]:
    if base == 0 and cur == 0:
        return None, "ok"
    if base == 0:
        # Only busbw can be zero; time cannot. More bandwidth than none is better.
        return None, "improved" if metric == "busbw" else "regressed"
    ratio = cur / base
    if metric == "busbw":
        if ratio < 1 - tol:
            return ratio, "regressed"
        if ratio > 1 + tol:
            return ratio, "improved"
    else:
        if ratio > 1 + tol:
            return ratio, "regressed"
        if ratio < 1 - tol:
            return ratio, "improved"
    return ratio, "ok"


def compare(
    current: Run, baseline: Run, *, tolerance: float = 0.05, metric: Metric = "busbw"
) -> Comparison:
    """Compare `current` with `baseline` per op x size x placement."""
    if metric not in METRICS:
        raise UsageError(f"--metric {metric!r}: expected busbw or time", key="metric")
    if not 0 <= tolerance < 1:
        raise UsageError(
            f"tolerance {tolerance!r}: expected a fraction in [0, 1), e.g. 0.05 for 5%",
            key="tolerance",
        )
    cur = _index(current, "the current run")
    base = _index(baseline, "the baseline")
    result = Comparison(metric=metric, tolerance=tolerance)
    keys = list(base) + [k for k in cur if k not in base]
    keys.sort(key=lambda k: (k[0], k[1], 0 if k[2] == "out" else 1))
    for key in keys:
        op, size, placement = key
        b, c = base.get(key), cur.get(key)
        if b is None or c is None:
            result.rows.append(
                RowComparison(
                    op,
                    size,
                    placement,
                    None if b is None else _value(b, metric),
                    None if c is None else _value(c, metric),
                    None,
                    "missing",
                    "baseline" if b is None else "current",
                )
            )
            continue
        bv, cv = _value(b, metric), _value(c, metric)
        ratio, verdict = _verdict(cv, bv, metric, tolerance)
        result.rows.append(RowComparison(op, size, placement, bv, cv, ratio, verdict))
    if not any(r.verdict != "missing" for r in result.rows):
        raise ResultsError(
            "the two runs have no row in common (op, size, placement): nothing to compare"
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

    @property
    def ok(self) -> bool:
        return not self.failed_ops

    def summary(self) -> str:
        avgs = ", ".join(f"{op} {bw:.2f}" for op, bw in self.averages.items())
        verdict = "ok" if self.ok else "FAILED for " + ", ".join(self.failed_ops)
        return f"min busbw {self.floor_gbps:g} GB/s: average busbw {avgs} GB/s: {verdict}"


def min_busbw_gate(run: Run, floor_gbps: float) -> GateResult:
    """Each op's average busbw (over out- and in-place cells, as nccl-tests' closing line) >= floor."""
    if floor_gbps < 0:
        raise UsageError(f"--min-busbw {floor_gbps}: expected GB/s >= 0", key="min_busbw")
    sums: dict[str, list[float]] = {}
    for row in run.rows:
        sums.setdefault(row.op, []).append(row.busbw)
    if not sums:
        raise ResultsError("the run has no rows: nothing to gate")
    averages = {op: sum(v) / len(v) for op, v in sums.items()}
    failed = [op for op, avg in averages.items() if avg < floor_gbps]
    return GateResult(floor_gbps, averages, failed)


__all__ = [
    "METRICS",
    "Comparison",
    "GateResult",
    "Metric",
    "RowComparison",
    "compare",
    "human_size",
    "min_busbw_gate",
    "parse_metric",
    "parse_tolerance",
]
