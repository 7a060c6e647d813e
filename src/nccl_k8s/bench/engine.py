"""The measuring loop, per rank: warm-up, timed ops, cross-rank combine, checks.

Timing follows nccl-tests 2.19.6: warm-up at every size from -b doubling to -e; then, for each
size and placement, one untimed op and a barrier, then `iters` ops issued back to back, then one
wait for the device (or, on CPU, for the last op), time = elapsed / iters on the host clock.
-z 1 waits and barriers after each op (time includes the barrier), -z 2 waits only, -z 3 waits
and barriers but times only up to the wait. With -G the same ops are captured once in a CUDA
graph and the graph is launched G times.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from nccl_k8s import __version__
from nccl_k8s.bench import report
from nccl_k8s.bench.collectives import COLLECTIVES
from nccl_k8s.bench.compat import GLOO_AVG_FLOATS_ONLY, NCCL_NO_FP8_AVG
from nccl_k8s.bench.config import DTYPES, BenchConfig, Dtype, Op, RedOp, skipped
from nccl_k8s.bench.counts import memory_limit, rotation_shifts
from nccl_k8s.bench.metrics import NULL as NULL_METRICS
from nccl_k8s.bench.metrics import Metrics
from nccl_k8s.bench.native import native_loop
from nccl_k8s.bench.ops import Bound, Collectives
from nccl_k8s.bench.outcome import (
    OpSummary,
    Printer,
    RunOutcome,
    iso,
    run_info,
    run_meta,
    wrong_ranks,
)
from nccl_k8s.bench.soak import soak_op
from nccl_k8s.bench.trace import stage
from nccl_k8s.bench.watch import Watchdog

#: Exceptions a collective raises when a peer went away or timed out (gloo: RuntimeError).
PEER_ERRORS: tuple[type[BaseException], ...] = (RuntimeError, OSError, TimeoutError)


_BLOCKING_NOTES = {
    1: "# Blocking Enabled: wait and barrier after each inner iteration (-m) ",
    2: "# Blocking Enabled: wait after each inner iteration (-m), no barrier ",
    3: "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier ",
}


#: -S: nccl-tests' TIME_STRING_FORMAT (src/util.cu).
_STAMP = "%Y-%m-%d %H:%M:%S"


class Engine:
    def __init__(
        self,
        config: BenchConfig,
        rank: Any,
        printer: Printer,
        watchdog: Watchdog,
        metrics: Metrics = NULL_METRICS,
    ) -> None:
        self.cfg = config
        """The flags, with `dtype` and `redop` those being measured (-d all/-o all: each in turn)."""
        self.base = config
        """The flags as given."""
        self.r = rank
        self.p = printer
        self.wd = watchdog
        self.metrics = metrics
        self.sweep_index: int | None = None
        """The sweep being measured when the run has several (--sweeps); None with one."""
        self.wrong_by_rank: dict[int, int] = {}
        """Wrong elements each rank's checks found in this sweep (ranks with some)."""
        self.summaries: list[OpSummary] = []
        self.versions: dict[str, Any] = {}
        self.devices: list[dict[str, Any]] = []
        self.maxbytes = config.maxbytes
        # nccl-tests 2.19.6 turns -z 3 off under -G (a graph cannot wait between its ops).
        self.blocking = 0 if (config.blocking == 3 and config.graph) else config.blocking
        self._rep = 0
        self.coll: Collectives | None = None
        self._colls: dict[tuple[Dtype, RedOp], Collectives] = {}
        self._buffers: tuple[Any, Any] | None = None
        self._skip_noted: set[str] = set()
        self.native = False
        """The direct driver's timed loop runs in C (bench.native)."""
        self.timer = "python"
        """Which loop times the ops: c-shipped, c-built (bench.native) or python."""

    # -- setup ---------------------------------------------------------------------------
    def header(self) -> None:
        c, v = self.cfg, self.versions
        lib = f"nccl-library={v['nccl_code']}" if v["nccl"] else "nccl-library=none"
        torch_v = v["torch"] or "none"
        driver = f" driver={self.r.driver}" if self.r.driver else ""
        if self.r.comm is not None:
            driver += f" timer={self.timer}"
        version_line = (
            f"# nccl-k8s version {__version__} {lib} torch={torch_v} "
            f"backend={self.r.backend}{driver} world={self.r.world}"
        )
        step = c.stepfactor if c.stepfactor > 1 else c.stepbytes
        config_line = (
            f"# nThread 1 nGpus 1 minBytes {c.minbytes} maxBytes {c.maxbytes} step: {step}"
            f"({'factor' if c.stepfactor > 1 else 'bytes'}) warmup iters: {c.warmup} iters: {c.iters}"
            f" agg iters: {c.agg_iters} validation: {c.check} graph: {c.graph} unalign: {c.unalign}"
        )
        notes = [_BLOCKING_NOTES[self.blocking]] if self.blocking else []
        if c.cputime:
            notes.append("# -C 1: time is the host time to issue the ops, without the final wait")
        if c.ngpus * c.nthreads > 1:
            notes.append(
                f"# -g {c.ngpus} -t {c.nthreads}: {self.r.world} ranks, one process and one GPU "
                "each (nccl-tests drives them from the threads of one process)"
            )
        if c.parallel_init:
            notes.append("# -p: ranks are processes here; they always initialise in parallel")
        if c.register:
            kind = "ncclCommRegister" if c.register == 1 else "symmetric window"
            notes.append(f"# -R {c.register}: buffers registered with NCCL ({kind})")
        if self.r.backend == "gloo" and self.r.world == 1 and "sendrecv" in c.ops:
            notes.append("# gloo has no pair to the same rank: sendrecv at world size 1 is a copy")
        device_lines = [
            f"#  Rank {d['rank']:2d} Group  0 Pid {d['pid']:6d} on {d['host']:>10} device {d['device']:2d}"
            f" [{d['pci']}] {d['name']}"
            for d in self.devices
        ]
        self.p.lines(
            report.header_lines(
                version_line=version_line, program=f"{c.ops[0]}_perf", config_line=config_line,
                device_lines=device_lines, notes=notes,
            )
        )  # fmt: skip

    def limit_maxbytes(self) -> int:
        """Shrink the largest size when the buffers would not fit, and say so (as nccl-tests does)."""
        mem = min(int(d["memory"]) for d in self.devices)
        limit = memory_limit(self.cfg.maxbytes, mem, check=bool(self.cfg.check))
        if limit is None:
            return self.cfg.maxbytes
        self.p.line("#")
        self.p.line(f"# Reducing maxBytes to {limit} due to memory limitation")
        return limit

    def next_rep(self) -> int:
        """A fresh repetition number: every checked op gets inputs no earlier op had."""
        self._rep += 1
        return self._rep

    # -- one measurement -----------------------------------------------------------------
    def _sequence(self, b: Bound) -> list[Callable[[], None]]:
        """The timed iterations: -n of them, each -m ops (one NCCL group with the direct driver,
        as nccl-tests aggregates them; on gloo and torch.distributed, one after the other)."""
        m, calls = self.cfg.agg_iters, b.calls
        flat = [calls[i % len(calls)] for i in range(self.cfg.iters * m)]
        if m == 1:
            return flat
        comm = self.r.comm
        return [
            comm.group(flat[i : i + m]) if comm is not None else _chain(flat[i : i + m])
            for i in range(0, len(flat), m)
        ]

    def _timed(self, b: Bound) -> float:
        """Seconds per op on this rank (-C: the seconds to issue it)."""
        cfg, r, z = self.cfg, self.r, self.blocking
        b.first()
        r.complete()
        r.barrier()
        sequence = self._sequence(b)
        n_ops = cfg.iters * cfg.agg_iters
        if cfg.graph:
            return self._timed_graph(sequence) / (n_ops * cfg.graph)
        with self.wd.timed():
            if z == 0 and b.native is not None and n_ops == cfg.iters and not cfg.cputime:
                return b.native.timed(cfg.iters) / cfg.iters  # the same ops, issued and timed in C
            if z == 0:
                t0 = time.perf_counter()
                for call in sequence:
                    call()
                issued = time.perf_counter() - t0
                r.finish()
                elapsed = time.perf_counter() - t0
                return (issued if cfg.cputime else elapsed) / n_ops
            coll_only = 0.0
            t0 = time.perf_counter()
            for call in sequence:
                t_i = time.perf_counter()
                call()
                r.complete()
                if z == 3:
                    coll_only += time.perf_counter() - t_i
                if z != 2:
                    r.barrier()
            elapsed = coll_only if z == 3 else time.perf_counter() - t0
        return elapsed / n_ops

    def _timed_graph(self, sequence: Sequence[Callable[[], None]]) -> float:
        """Seconds for -G launches of a graph capturing `sequence` (-C: to launch them)."""
        cfg, r = self.cfg, self.r
        graph = r.capture(sequence)
        try:
            launcher = (
                self.coll.graph_program(graph.exec_handle()) if self.coll is not None else None
            )
            r.barrier()
            with self.wd.timed():
                if launcher is not None and not cfg.cputime:  # G launches and the wait, in C
                    return float(launcher.timed(cfg.graph))
                t0 = time.perf_counter()  # launched from Python, on the stream it was captured on
                for _ in range(cfg.graph):
                    graph.launch()
                issued = time.perf_counter() - t0
                r.complete()
                return issued if cfg.cputime else time.perf_counter() - t0
        finally:
            graph.close()

    def checked_op(self, coll: Collectives, b: Bound, root: int, rep: int) -> int:
        """Fill, run once, check: this rank's wrong elements."""
        coll.init(b, root, rep)
        self.r.complete()
        self.r.barrier()
        if self.cfg.graph:
            graph = self.r.capture([b.calls[0]])
            try:
                graph.launch()
                self.r.complete()
            finally:
                graph.close()
        else:
            b.first()
            self.r.complete()
        return coll.check(b, root, rep)

    def _checked(self, coll: Collectives, b: Bound, root: int) -> int:
        """Local wrong elements over up to `check` verified ops (stops at the first failure)."""
        wrong = 0
        for _ in range(self.cfg.check):
            wrong = self.checked_op(coll, b, root, self.next_rep())
            total = sum(v[0] for v in self.r.gather_floats([float(wrong)]))
            if total:
                break
        return wrong

    def _combine(self, per_rank: list[float]) -> float:
        mode = self.cfg.average
        if mode == 0:
            return per_rank[0]
        if mode == 2:
            return min(per_rank)
        if mode == 3:
            return max(per_rank)
        return sum(per_rank) / len(per_rank)

    def _warm_up(self, op: Op, coll: Collectives, root: int) -> None:
        """nccl-tests 2.19.6: -w out-of-place ops at every x2 size from -b to the largest."""
        cfg, r, elt = self.cfg, self.r, coll.elt
        shape = COLLECTIVES[op]
        for size in cfg.warmup_sizes(self.maxbytes):
            self.wd.progress(f"{op} {size} B warm-up")
            counts = shape.counts(size, elt, r.world)
            shifts = rotation_shifts(counts, elt, self.maxbytes, max(cfg.warmup, 1))
            b = coll.bind(op, counts, shifts, root, False)
            for i in range(cfg.warmup):
                (b.first if i == 0 else b.calls[i % len(b.calls)])()
            r.complete()

    # -- the sweep -----------------------------------------------------------------------
    def combos(self, op: Op) -> list[tuple[Dtype, RedOp]]:
        """The types and reductions `op` is measured with, in nccl-tests' order (each -d type,
        then each -o reduction where the op reduces); what the backend cannot run is skipped
        with a line, once per run (a type or reduction named alone was refused before)."""
        reduces = COLLECTIVES[op].reduces
        redops = self.base.redops if reduces else self.base.redops[:1]
        out: list[tuple[Dtype, RedOp]] = []
        for dtype in self.base.dtypes:
            for redop in redops:
                why = skipped(self.r.backend, dtype, redop if reduces else None, self.base.driver)
                if why is None:
                    out.append((dtype, redop))
                    continue
                by_redop = why in (
                    NCCL_NO_FP8_AVG,
                    GLOO_AVG_FLOATS_ONLY,
                )  # the type's other ops run
                what = f"-d {dtype}" + (f" -o {redop}" if by_redop else "")
                if what not in self._skip_noted:
                    self._skip_noted.add(what)
                    self.p.line(f"# {what} skipped: {why}")
        return out

    def use(self, dtype: Dtype, redop: RedOp) -> Collectives:
        """Measure `dtype` and `redop` from now on: the flags and collectives say so."""
        self.cfg = dataclasses.replace(self.base, dtype=dtype, redop=redop)
        coll = self._colls.get((dtype, redop))
        if coll is None:
            assert self._buffers is not None, "setup() first"
            pad = self.base.unalign * DTYPES[dtype]  # -u: nccl-tests offsets both buffers
            sendbuf, recvbuf = self._buffers
            r = self.r
            coll = Collectives(
                rank=r.rank, nranks=r.world, dtype=dtype, redop=redop,
                sendbuf=sendbuf[pad:], recvbuf=recvbuf[pad:],
                group=r.data_group, comm=r.comm, stream=r.stream, memory=r.memory(dtype),
            )  # fmt: skip
            if not self.native:
                coll.native = None  # without cudaStreamQuery the C loop cannot time: Python does
            self._colls[(dtype, redop)] = coll
        self.coll = coll
        return coll

    def run_op(self, op: Op, first: bool) -> OpSummary:
        """One op's table: every type and reduction (-d, -o), root and size."""
        program = f"{op}_perf"
        if not first:
            self.p.line(f"# Collective test starting: {program}")
        head = report.table_header()
        if self.base.report_timestamps:  # -S: nccl-tests' column, headed by its format
            head[2:] = [head[2] + f"{'timestamp':>19}", head[3] + f"{_STAMP:>19}"]
        self.p.lines(head)
        summary = OpSummary(op, 0, 0.0, [])
        self.summaries.append(summary)
        busbws: list[float] = []
        local_errors = 0
        try:
            for dtype, redop in self.combos(op):
                local_errors += self._measure(op, self.use(dtype, redop), summary, busbws)
        finally:
            self.cfg = self.base
        gathered = self.r.gather_floats([float(local_errors)])
        summary.out_of_bounds = int(sum(v[0] for v in gathered))
        summary.avg_busbw = sum(busbws) / len(busbws) if busbws else 0.0
        self.p.lines(
            report.footer_lines(
                out_of_bounds=summary.out_of_bounds, avg_busbw=summary.avg_busbw,
                min_busbw=self.base.min_busbw, program=program,
            )
        )  # fmt: skip
        for row in summary.rows:
            for payload in report.row_payloads(row):
                self.p.result("row", payload)
        self._summary_line(summary)
        return summary

    def _measure(self, op: Op, coll: Collectives, summary: OpSummary, busbws: list[float]) -> int:
        """Every root and size of `op` with the current type and reduction: rows printed and
        added to `summary` (and the journal) as they are measured; returns this rank's count
        of placements with wrong elements."""
        cfg, r = self.cfg, self.r
        shape = COLLECTIVES[op]
        elt = coll.elt
        rooted = shape.rooted
        roots = list(range(r.world)) if rooted and cfg.root == -1 else [cfg.root if rooted else -1]
        sizes = [s for s in cfg.sizes() if s <= self.maxbytes] or [self.maxbytes]
        local_errors = 0
        for root in roots:
            data_root = max(root, 0)
            self._warm_up(op, coll, data_root)
            for size in sizes:
                counts = shape.counts(size, elt, r.world)
                shifts = rotation_shifts(counts, elt, self.maxbytes, cfg.iters * cfg.agg_iters)
                cells: list[report.Cell] = []
                for in_place in (False, True):
                    cell, erred = self._cell(op, coll, counts, shifts, data_root, in_place)
                    local_errors += erred
                    cells.append(cell)
                    busbws.append(cell.busbw)
                row = report.TableRow(
                    op=op, size=counts.size_bytes(elt), count=counts.param, dtype=cfg.dtype,
                    redop=cfg.redop if shape.prints_redop else "none", root=root,
                    out=cells[0], inp=cells[1],
                )  # fmt: skip
                summary.rows.append(row)
                self.p.measured(row)  # journaled first: a row printed is a row a stop keeps
                stamp = f"{time.strftime(_STAMP):>21}" if cfg.report_timestamps else ""
                self.p.line(report.row_line(row) + stamp)
                stage("row")
        return local_errors

    def _cell(
        self, op: Op, coll: Collectives, counts: Any, shifts: list[int], root: int, in_place: bool
    ) -> tuple[report.Cell, int]:
        """One placement of one size: timed, checked, combined across ranks; the cell and
        whether this rank found wrong elements (1) or not (0)."""
        cfg, r, shape, elt = self.cfg, self.r, COLLECTIVES[op], coll.elt
        where = f"{op} {counts.size_bytes(elt)} B {'in-place' if in_place else 'out-of-place'}"
        self.wd.progress(f"{where} timing")
        b = coll.bind(op, counts, shifts, root, in_place)
        if cfg.check:
            coll.init(b, root, self.next_rep())
            r.complete()
        local_t = self._timed(b)
        self.wd.progress(f"{where} checking")
        wrong = self._checked(coll, b, root) if cfg.check else 0
        gathered = r.gather_floats([local_t, float(wrong)])
        times = [g[0] for g in gathered]
        wrongs = [int(g[1]) for g in gathered]
        t = self._combine(times)
        algbw, busbw = shape.bandwidth(counts, elt, r.world, t)
        checked = bool(cfg.check) and (shape.inplace_checked or not in_place)
        if checked:
            self.record_wrong(wrongs)
        if self.metrics.enabled:
            self.metrics.cell(
                self.metric_labels(op, shape.prints_redop, counts.size_bytes(elt), in_place),
                time_s=t, algbw=algbw, busbw=busbw, rank_times=times,
                rank_busbw=[shape.bandwidth(counts, elt, r.world, x)[1] for x in times],
                rank_wrong=wrongs if checked else None,
            )  # fmt: skip
        cell = report.Cell(
            time_us=t * 1e6, algbw=algbw, busbw=busbw, wrong=sum(wrongs) if checked else None,
            time_us_min=min(times) * 1e6, time_us_max=max(times) * 1e6,
        )  # fmt: skip
        return cell, int(checked and wrong > 0)

    def metric_labels(
        self, op: Op, prints_redop: bool, size: int, in_place: bool | None
    ) -> list[str]:
        """The metrics labels of a row (op, dtype, redop, size and, unless None, placement)."""
        redop = self.cfg.redop if prints_redop else "none"
        labels = [op, self.cfg.dtype, redop, str(size)]
        return labels if in_place is None else [*labels, "in" if in_place else "out"]

    def record_wrong(self, wrongs: Sequence[int]) -> None:
        """Add each rank's wrong elements (one count per rank) to this sweep's tally."""
        for rank, n in enumerate(wrongs):
            if n:
                self.wrong_by_rank[rank] = self.wrong_by_rank.get(rank, 0) + n

    def _summary_line(self, s: OpSummary) -> None:
        ok = s.ok and (self.cfg.min_busbw is None or s.avg_busbw >= self.cfg.min_busbw)
        payload: dict[str, Any] = {
            "op": s.op, "out_of_bounds": s.out_of_bounds, "avg_busbw": s.avg_busbw, "ok": ok,
        }  # fmt: skip
        if s.error:
            payload["error"] = s.error
        self.p.result("summary", payload)

    # -- whole run -----------------------------------------------------------------------
    def run(self, on_sweep: Callable[[RunOutcome], None] | None = None) -> RunOutcome:
        """Every sweep (--sweeps; 0: until stopped); the last sweep's outcome, failed when any
        sweep failed. `on_sweep` hears each sweep's outcome as it ends (rank 0's --json)."""
        cfg = self.cfg
        self.setup()
        failed: list[str] = []
        index = 0
        while True:
            outcome = self.sweep(index if cfg.sweeps != 1 else None)
            failed += [op for op in outcome.failed_ops if op not in failed]
            if on_sweep is not None:
                on_sweep(outcome)
            index += 1
            if cfg.sweeps and index >= cfg.sweeps:
                break
            self.pause(index)
        outcome.failed_in_earlier_sweeps = [op for op in failed if op not in outcome.failed_ops]
        return outcome

    def pause(self, next_index: int) -> None:
        """--sweep-interval between two sweeps, then every rank starts the next one together."""
        self.wd.progress(f"waiting for sweep {next_index}")
        end = time.monotonic() + self.cfg.sweep_interval_s
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 1.0))
            self.wd.alive()
        self.r.barrier()

    def setup(self) -> None:
        """Once per run: versions, devices, the header, the buffers and the collectives."""
        cfg, r = self.cfg, self.r
        self.versions = r.versions()
        self.devices = r.gather_object(r.device_info())
        loop = native_loop() if r.comm is not None else None
        self.native = loop is not None and bool(loop.stream_query)  # the header says which timer
        self.timer = f"c-{loop.origin}" if loop is not None and self.native else "python"
        self.header()
        stage("header")
        if cfg.blocking == 3 and cfg.graph and r.rank == 0:
            print(
                "blocking mode (-z 3) is incompatible with CUDA graph mode (-G). Disabling.",
                file=sys.stderr,
            )
        self.maxbytes = self.limit_maxbytes()

        send_bytes = recv_bytes = 16
        for dtype in cfg.dtypes:
            for op in cfg.ops:
                s, rv = COLLECTIVES[op].buffer_bytes(self.maxbytes, DTYPES[dtype], r.world)
                send_bytes, recv_bytes = max(send_bytes, s), max(recv_bytes, rv)
        pad = 8 * cfg.unalign  # -u: room to offset by u elements of the widest type (nccl-tests)
        sendbuf, recvbuf = r.buffer(send_bytes + pad), r.buffer(recv_bytes + pad)
        if cfg.register and r.comm is not None:  # -R: NCCL registers what it will send from
            for buf in (sendbuf, recvbuf):
                r.comm.register(buf.data_ptr(), buf.numel(), symmetric=cfg.register == 2)
        self._buffers = (sendbuf, recvbuf)
        self.use(cfg.dtype, cfg.redop)
        self.cfg = self.base
        if self.metrics.enabled:
            self.metrics.run_started(
                info=run_info(self),
                world=r.world,
                hosts={int(d["rank"]): str(d["host"]) for d in self.devices},
                nodes={int(d["rank"]): str(d.get("node") or d["host"]) for d in self.devices},
                host=r.host,
            )

    def sweep(self, index: int | None = None) -> RunOutcome:
        """Every op at every size once. `index` numbers the sweep when the run has several:
        its result lines then form one block, its own meta line first and a `sweep` line last."""
        cfg, r = self.cfg, self.r
        assert self._buffers is not None, "setup() first"
        self.sweep_index = index
        self.summaries = []
        self.wrong_by_rank = {}
        started = time.time()
        if index is not None:
            self.wd.progress(f"sweep {index}")
            self.p.line(f"# nccl-k8s sweep {index} starting")
            self.p.begin_block()
        self.p.result("meta", run_meta(self))
        for i, op in enumerate(cfg.ops):
            first = i == 0 and not index
            why = COLLECTIVES[op].refuses(r.world)
            if why:  # only `--ops all` gets here (check_backend refuses a named op): skip it
                self.p.line(f"# {op}_perf skipped: {why}")
                continue
            try:
                if cfg.duration_s > 0:
                    if not first:
                        self.p.line(f"# Collective test starting: {op}_perf")
                    try:
                        for dtype, redop in self.combos(op):
                            soak_op(self, op, self.use(dtype, redop))  # adds its summary
                    finally:
                        self.cfg = self.base
                else:
                    self.run_op(op, first=first)
            except Exception as exc:
                if r.world > 1:  # the ranks may no longer agree on what comes next: stop here
                    raise
                # One rank cannot get out of step with itself: say so and measure the next op.
                failed = next((s for s in self.summaries if s.op == op), None)
                if failed is None:
                    failed = OpSummary(op, 0, 0.0, [])
                    self.summaries.append(failed)
                failed.error = f"{type(exc).__name__}: {exc}"
                self.p.line(f"# {op}_perf failed: {failed.error}")
                self.p.line(f"# Collective test concluded: {op}_perf")
                self._summary_line(failed)
        outcome = self.outcome()
        duration = time.time() - started
        self.metrics.sweep_ended(ok=not outcome.failed_ops, duration_s=duration)
        if index is not None:
            verdict = "ok" if not outcome.failed_ops else "FAILED: " + ", ".join(outcome.failed_ops)
            self.p.result(
                "sweep",
                {
                    "sweep": index, "ok": not outcome.failed_ops, "failed_ops": outcome.failed_ops,
                    "duration_s": duration,
                    "wrong_ranks": wrong_ranks(self),
                    "time": iso(time.time()),
                },
            )  # fmt: skip
            self.p.end_block()
            self.p.line(f"# nccl-k8s sweep {index} ended after {duration:.1f} s: {verdict}")
        return outcome

    def outcome(self) -> RunOutcome:
        return RunOutcome(list(self.summaries), self.cfg.min_busbw, self.maxbytes)


def _chain(calls: Sequence[Callable[[], None]]) -> Callable[[], None]:
    """-m ops one after the other (no NCCL group on gloo or torch.distributed)."""

    def chained() -> None:
        for call in calls:
            call()

    return chained


__all__ = [
    "PEER_ERRORS",
    "Engine",
    "OpSummary",
    "Printer",
    "RunOutcome",
]
