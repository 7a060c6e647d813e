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

if TYPE_CHECKING:
    from nccl_k8s.bench.engine import Engine, OpSummary

#: Largest batch (ops between two control-plane decisions).
MAX_BATCH = 1 << 16


def soak_op(engine: Engine, op: Op, coll: Collectives) -> OpSummary:
    """Repeat one op at each size for --duration seconds; busbw per interval, op time percentiles."""
    from nccl_k8s.bench.engine import OpSummary

    cfg, r, p = engine.cfg, engine.r, engine.p
    shape = COLLECTIVES[op]
    elt = coll.elt
    root = max(cfg.root, 0) if shape.rooted else -1
    sizes = [s for s in cfg.sizes() if s <= engine.maxbytes] or [engine.maxbytes]
    summary = OpSummary(op, 0, 0.0, [])
    engine.summaries.append(summary)
    for size in sizes:
        counts = shape.counts(size, elt, r.world)
        shifts = rotation_shifts(counts, elt, engine.maxbytes, 64)
        b = coll.bind(op, counts, shifts, max(root, 0), False)
        nbytes = counts.size_bytes(elt)
        where = f"{op} {nbytes} B soak"
        engine.wd.progress(where)
        b.first()
        r.complete()
        r.barrier()
        samples: list[float] = []
        intervals: list[dict[str, float]] = []
        batch, checks, wrong_total = 1, 0, 0
        start = time.perf_counter()
        iv_start, iv_iters, total_iters = start, 0, 0
        while True:
            engine.wd.progress(where)
            per_op = _batch(engine, b, batch)
            samples.extend(per_op)
            total_iters += batch
            iv_iters += batch
            now = time.perf_counter()
            # Rank 0's clock and timings decide; every rank follows the same decision.
            stop_0 = now - start >= cfg.duration_s
            report_0 = stop_0 or now - iv_start >= cfg.report_interval_s
            target = min(cfg.report_interval_s / 4, 0.5)
            next_0 = min(batch * 2, MAX_BATCH) if sum(per_op) < target / 2 else batch
            stop_f, report_f, next_f = r.decide([float(stop_0), float(report_0), float(next_0)])
            if report_f:
                engine.wd.progress(f"{where} checking")
                local = (
                    engine.checked_op(coll, b, max(root, 0), engine.next_rep()) if cfg.check else 0
                )
                ranks_wrong = [int(v[0]) for v in r.gather_floats([float(local)])]
                wrong = sum(ranks_wrong)
                checks += 1 if cfg.check else 0
                wrong_total += wrong
                if cfg.check:
                    engine._count_wrong(ranks_wrong)
                secs = now - iv_start
                algbw, busbw = shape.bandwidth(counts, elt, r.world, secs / iv_iters)
                if engine.metrics.enabled:
                    engine.metrics.soak_interval(
                        engine._labels(op, shape.prints_redop, nbytes, None),
                        iters=iv_iters,
                        algbw=algbw,
                        busbw=busbw,
                        rank_wrong=ranks_wrong if cfg.check else None,
                    )
                intervals.append(
                    {
                        "t_s": now - start,
                        "iters": iv_iters,
                        "algbw": algbw,
                        "busbw": busbw,
                        "wrong": wrong,
                    }
                )
                check_text = f"  #wrong {wrong}" if cfg.check else ""
                p.line(
                    f"# soak {op} {nbytes} B  t={now - start:7.1f}s  iters {iv_iters:8d}"
                    f"  algbw {algbw:9.2f} GB/s  busbw {busbw:9.2f} GB/s{check_text}"
                )
                iv_start, iv_iters = time.perf_counter(), 0
            if stop_f or wrong_total:  # a wrong element ends the soak of this op on every rank
                break
            batch = int(next_f)
        samples.sort()
        med = statistics.median(samples)
        p99 = samples[min(len(samples) - 1, (len(samples) * 99 + 99) // 100 - 1)]
        mean = sum(samples) / len(samples)
        algbw, busbw = shape.bandwidth(counts, elt, r.world, mean)
        # Every rank's mean op time, once per size, for the per-rank (per-node) metrics: a
        # collective, so every rank takes part whether or not its process serves them.
        times = [v[0] for v in r.gather_floats([mean])] if cfg.metrics_port else []
        if engine.metrics.enabled:
            engine.metrics.cell(
                engine._labels(op, shape.prints_redop, nbytes, False),
                time_s=mean, algbw=algbw, busbw=busbw, rank_times=times,
                rank_busbw=[shape.bandwidth(counts, elt, r.world, t)[1] for t in times],
                rank_wrong=None,
            )  # fmt: skip
        p.line(
            f"# soak {op} {nbytes} B  iters {total_iters}  op time (us) min {samples[0] * 1e6:.2f}"
            f"  median {med * 1e6:.2f}  p99 {p99 * 1e6:.2f}  mean busbw {busbw:.2f} GB/s"
            f"  checks {checks}  #wrong {wrong_total}"
        )
        p.result(
            "soak",
            {
                "op": op, "size": nbytes, "count": counts.param, "dtype": cfg.dtype,
                "iters": total_iters, "duration_s": time.perf_counter() - start,
                "time_us_min": samples[0] * 1e6, "time_us_median": med * 1e6, "time_us_p99": p99 * 1e6,
                "busbw_mean": busbw, "checks": checks, "wrong": wrong_total, "intervals": intervals,
            },
        )  # fmt: skip
        cell = report.Cell(
            mean * 1e6,
            algbw,
            busbw,
            wrong_total if cfg.check else None,
            samples[0] * 1e6,
            samples[-1] * 1e6,
        )
        redop = cfg.redop if shape.prints_redop else "none"
        row = report.TableRow(op, nbytes, counts.param, cfg.dtype, redop, root, cell, cell)
        summary.rows.append(row)
        summary.out_of_bounds += 1 if wrong_total else 0
        if wrong_total:
            p.line(f"# soak {op}: {wrong_total} wrong elements at {nbytes} B: FAILED")
            break
    busbws = [row.out.busbw for row in summary.rows]
    summary.avg_busbw = sum(busbws) / len(busbws)
    return summary


def _batch(engine: Engine, b: Bound, n: int) -> list[float]:
    """Per-op seconds of n ops: CUDA events between ops on GPUs (no host sync per op)."""
    calls, m = b.calls, len(b.calls)
    r = engine.r
    with engine.wd.timed():
        if r.cuda:
            import torch

            events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]  # type: ignore[no-untyped-call]
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
