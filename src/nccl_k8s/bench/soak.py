"""Soak mode (--duration): one op at each size, repeated for a while, checked as it goes.

Every decision that changes which collective a rank calls next (how many ops the next batch
issues, whether to check now, whether to stop) is made by rank 0 and broadcast on the control
plane, once per batch; so the ranks always issue the same sequence of collectives and can never
end up in different ones. At the end of each report interval every rank runs one checked op
(fresh inputs, the op, the check, a sum of wrong elements), so a soak that starts corrupting
data fails within an interval.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING

from nccl_k8s.bench import report
from nccl_k8s.bench.collectives import COLLECTIVES, Op
from nccl_k8s.bench.counts import rotation_shifts
from nccl_k8s.bench.ops import Bound, Collectives
from nccl_k8s.bench.outcome import OpSummary

if TYPE_CHECKING:
    from nccl_k8s.bench.engine import Engine

#: Largest batch (ops between two control-plane decisions).
MAX_BATCH = 1 << 16


def soak_op(engine: Engine, op: Op, coll: Collectives) -> OpSummary:
    """Repeat one op at each size for --duration seconds; busbw per interval, op time percentiles."""
    cfg = engine.cfg
    root = max(cfg.root, 0) if COLLECTIVES[op].rooted else -1
    sizes = [s for s in cfg.sizes() if s <= engine.maxbytes] or [engine.maxbytes]
    summary = OpSummary(op, 0, 0.0, [])
    engine.summaries.append(summary)
    for size in sizes:
        soak = _Soak(engine, op, coll, size, root)
        soak.run()
        summary.rows.append(soak.finish())
        summary.out_of_bounds += 1 if soak.wrong_total else 0
        if soak.wrong_total:
            engine.p.line(
                f"# soak {op}: {soak.wrong_total} wrong elements at {soak.nbytes} B: FAILED"
            )
            break
    busbws = [row.out.busbw for row in summary.rows]
    summary.avg_busbw = sum(busbws) / len(busbws)
    return summary


class _Soak:
    """One op at one size, repeated until rank 0 says stop (or a check finds wrong data)."""

    def __init__(self, engine: Engine, op: Op, coll: Collectives, size: int, root: int) -> None:
        self.engine, self.op, self.coll, self.root = engine, op, coll, root
        self.shape, self.elt, r = COLLECTIVES[op], coll.elt, engine.r
        self.counts = self.shape.counts(size, self.elt, r.world)
        shifts = rotation_shifts(self.counts, self.elt, engine.maxbytes, 64)
        self.b = coll.bind(op, self.counts, shifts, max(root, 0), False)
        self.nbytes = self.counts.size_bytes(self.elt)
        self.where = f"{op} {self.nbytes} B soak"
        self.samples: list[float] = []
        self.intervals: list[dict[str, float]] = []
        self.checks = self.wrong_total = self.total_iters = self.iv_iters = 0
        self.start = self.iv_start = self.iv_ops_s = 0.0
        self.ranks_wrong: list[int] = []

    def run(self) -> None:
        """Batches of ops, each followed by rank 0's decision: report (and check), go on, stop.

        --duration holds within one report interval whatever a check costs (seconds for a
        256 MB check on a CPU): the first batch is checked at once, which tells rank 0 what a
        check costs; the interval's clock runs through the checks; and a report becomes the
        last one when the check after it would leave no time for another before the duration
        plus one interval (then the soak's wall time, checks included, stays within it)."""
        engine, cfg, r = self.engine, self.engine.cfg, self.engine.r
        engine.wd.progress(self.where)
        self.b.first()
        r.complete()
        r.barrier()
        batch = 1
        check_s = 0.0
        slack = cfg.duration_s + cfg.report_interval_s
        self.start = self.iv_start = last_report = time.perf_counter()
        while True:
            engine.wd.progress(self.where)
            t0 = time.perf_counter()
            per_op = _batch(engine, self.b, batch)
            now = time.perf_counter()
            self.samples.extend(per_op)
            self.total_iters += batch
            self.iv_iters += batch
            self.iv_ops_s += now - t0
            # Rank 0's clock and timings decide; every rank follows the same decision.
            elapsed = now - self.start
            due = now - last_report >= cfg.report_interval_s or (cfg.check > 0 and self.checks == 0)
            stop_0 = (
                elapsed >= cfg.duration_s
                or elapsed + check_s >= slack
                or (due and elapsed + 2 * check_s > slack)
            )
            report_0 = stop_0 or due
            target = min(cfg.report_interval_s / 4, 0.5)
            next_0 = min(batch * 2, MAX_BATCH) if sum(per_op) < target / 2 else batch
            stop_f, report_f, next_f = r.decide([float(stop_0), float(report_0), float(next_0)])
            if report_f:
                last_report = now
                check_s = max(check_s, self.interval(now))
            if stop_f or self.wrong_total:  # a wrong element ends the soak of this op everywhere
                break
            batch = int(next_f)

    def check(self) -> float:
        """One checked op on every rank (fresh inputs, the op, the check, the sum of wrong
        elements); returns the seconds it took here."""
        engine, r = self.engine, self.engine.r
        t0 = time.perf_counter()
        engine.wd.progress(f"{self.where} checking")
        local = engine.checked_op(self.coll, self.b, max(self.root, 0), engine.next_rep())
        self.ranks_wrong = [int(v[0]) for v in r.gather_floats([float(local)])]
        self.checks += 1
        self.wrong_total += sum(self.ranks_wrong)
        engine.record_wrong(self.ranks_wrong)
        return time.perf_counter() - t0

    def interval(self, now: float) -> float:
        """The end of a report interval: busbw of its ops, one checked op; returns the check's
        seconds (0 without checks)."""
        engine, cfg, r, op = self.engine, self.engine.cfg, self.engine.r, self.op
        wrong_before = self.wrong_total
        check_s = self.check() if cfg.check else 0.0
        wrong = self.wrong_total - wrong_before
        algbw, busbw = self.shape.bandwidth(
            self.counts, self.elt, r.world, self.iv_ops_s / self.iv_iters
        )
        if engine.metrics.enabled:
            engine.metrics.soak_interval(
                engine.metric_labels(op, self.shape.prints_redop, self.nbytes, None),
                iters=self.iv_iters, algbw=algbw, busbw=busbw,
                rank_wrong=self.ranks_wrong if cfg.check else None,
            )  # fmt: skip
        t_s = now - self.start
        self.intervals.append(
            {"t_s": t_s, "iters": self.iv_iters, "algbw": algbw, "busbw": busbw, "wrong": wrong}
        )
        check_text = f"  #wrong {wrong}" if cfg.check else ""
        engine.p.line(
            f"# soak {op} {self.nbytes} B  t={t_s:7.1f}s  iters {self.iv_iters:8d}"
            f"  algbw {algbw:9.2f} GB/s  busbw {busbw:9.2f} GB/s{check_text}"
        )
        self.iv_start, self.iv_iters, self.iv_ops_s = time.perf_counter(), 0, 0.0
        return check_s

    def finish(self) -> report.TableRow:
        """Op time percentiles and mean busbw of the size: metrics, lines, the table's row."""
        engine, cfg, r, op, shape = self.engine, self.engine.cfg, self.engine.r, self.op, self.shape
        samples, counts, elt, nbytes = sorted(self.samples), self.counts, self.elt, self.nbytes
        med = statistics.median(samples)
        p99 = samples[min(len(samples) - 1, (len(samples) * 99 + 99) // 100 - 1)]
        mean = sum(samples) / len(samples)
        algbw, busbw = shape.bandwidth(counts, elt, r.world, mean)
        # Every rank's mean op time, once per size, for the per-rank (per-node) metrics: a
        # collective, so every rank takes part whether or not its process serves them.
        times = [v[0] for v in r.gather_floats([mean])] if cfg.metrics_port else []
        if engine.metrics.enabled:
            engine.metrics.cell(
                engine.metric_labels(op, shape.prints_redop, nbytes, False),
                time_s=mean, algbw=algbw, busbw=busbw, rank_times=times,
                rank_busbw=[shape.bandwidth(counts, elt, r.world, t)[1] for t in times],
                rank_wrong=None,
            )  # fmt: skip
        engine.p.line(
            f"# soak {op} {nbytes} B  iters {self.total_iters}  op time (us) min {samples[0] * 1e6:.2f}"
            f"  median {med * 1e6:.2f}  p99 {p99 * 1e6:.2f}  mean busbw {busbw:.2f} GB/s"
            f"  checks {self.checks}  #wrong {self.wrong_total}"
        )
        engine.p.result(
            "soak",
            {
                "op": op, "size": nbytes, "count": counts.param, "dtype": cfg.dtype,
                "iters": self.total_iters, "duration_s": time.perf_counter() - self.start,
                "time_us_min": samples[0] * 1e6, "time_us_median": med * 1e6, "time_us_p99": p99 * 1e6,
                "busbw_mean": busbw, "checks": self.checks, "wrong": self.wrong_total,
                "intervals": self.intervals,
            },
        )  # fmt: skip
        wrong = self.wrong_total if cfg.check else None
        cell = report.Cell(mean * 1e6, algbw, busbw, wrong, samples[0] * 1e6, samples[-1] * 1e6)
        redop = cfg.redop if shape.prints_redop else "none"
        return report.TableRow(op, nbytes, counts.param, cfg.dtype, redop, self.root, cell, cell)


def _batch(engine: Engine, b: Bound, n: int) -> list[float]:
    """Per-op seconds of n ops: CUDA events between ops on GPUs (no host sync per op)."""
    calls, m = b.calls, len(b.calls)
    r = engine.r
    with engine.wd.timed():
        if r.cuda:
            events = [r.event() for _ in range(n + 1)]
            stream = r.stream  # direct NCCL calls go there; None: torch's current stream
            events[0].record(stream)
            for i in range(n):
                calls[i % m]()
                events[i + 1].record(stream)
            r.complete()
            return [events[i].elapsed_time(events[i + 1]) / 1e3 for i in range(n)]
        out = []
        t = time.perf_counter()
        for i in range(n):
            calls[i % m]()
            now = time.perf_counter()
            out.append(now - t)
            t = now
        return out


__all__ = ["MAX_BATCH", "soak_op"]
