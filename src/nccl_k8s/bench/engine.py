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
import datetime
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from nccl_k8s import __version__
from nccl_k8s.bench import report
from nccl_k8s.bench.collectives import COLLECTIVES
from nccl_k8s.bench.config import DTYPES, BenchConfig, Op
from nccl_k8s.bench.counts import memory_limit, rotation_shifts
from nccl_k8s.bench.metrics import NULL as NULL_METRICS
from nccl_k8s.bench.metrics import Metrics
from nccl_k8s.bench.native import native_loop
from nccl_k8s.bench.ops import Bound, Collectives
from nccl_k8s.bench.trace import stage
from nccl_k8s.bench.watch import Watchdog

#: Exceptions a collective raises when a peer went away or timed out (gloo: RuntimeError).
PEER_ERRORS: tuple[type[BaseException], ...] = (RuntimeError, OSError, TimeoutError)


@dataclasses.dataclass
class OpSummary:
    op: Op
    out_of_bounds: int
    avg_busbw: float
    rows: list[report.TableRow]
    error: str | None = None
    """Why the op stopped before its table was complete (world size 1 carries on)."""

    @property
    def ok(self) -> bool:
        return self.out_of_bounds == 0 and self.error is None


@dataclasses.dataclass
class RunOutcome:
    summaries: list[OpSummary]
    min_busbw: float | None
    maxbytes: int
    failed_in_earlier_sweeps: list[str] = dataclasses.field(default_factory=list)
    """Ops that failed in an earlier sweep of the run and passed in this, the last one."""

    @property
    def failed_ops(self) -> list[str]:
        bad: list[str] = []
        for s in self.summaries:
            if not s.ok or (self.min_busbw is not None and s.avg_busbw < self.min_busbw):
                bad.append(s.op)
        return bad

    @property
    def exit_code(self) -> int:
        return 1 if self.failed_ops or self.failed_in_earlier_sweeps else 0


class Printer:
    """Rank 0's output: the nccl-tests table, and result lines (with several sweeps, kept back
    and printed as one block when the sweep ends: `end_block`)."""

    def __init__(self, enabled: bool, stream: TextIO, result_lines: bool) -> None:
        self.enabled = enabled
        self.stream = stream
        self.result_lines = result_lines
        self.block: list[str] | None = None

    def begin_block(self) -> None:
        self.block = []

    def end_block(self) -> None:
        lines, self.block = self.block, None
        if lines:
            self.lines(report.block_lines(report.RESULTS_BLOCK, lines))

    def line(self, text: str = "") -> None:
        if self.enabled:
            self.stream.write(text + "\n")
            self.stream.flush()

    def lines(self, texts: Sequence[str]) -> None:
        for t in texts:
            self.line(t)

    def result(self, kind: str, payload: dict[str, Any]) -> None:
        if not self.result_lines:
            return
        if self.block is not None:
            if self.enabled:
                self.block.append(report.result_line(kind, payload))
            return
        self.line(report.result_line(kind, payload))


_BLOCKING_NOTES = {
    1: "# Blocking Enabled: wait and barrier after each inner iteration (-m) ",
    2: "# Blocking Enabled: wait after each inner iteration (-m), no barrier ",
    3: "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier ",
}


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
        self.native = False
        """The direct driver's timed loop runs in C (bench.native)."""

    # -- setup ---------------------------------------------------------------------------
    def header(self) -> None:
        c, v = self.cfg, self.versions
        lib = f"nccl-library={v['nccl_code']}" if v["nccl"] else "nccl-library=none"
        torch_v = v["torch"] or "none"
        driver = f" driver={self.r.driver}" if self.r.driver else ""
        if self.r.comm is not None:
            driver += f" timer={'c' if self.native else 'python'}"
        version_line = (
            f"# nccl-k8s version {__version__} {lib} torch={torch_v} "
            f"backend={self.r.backend}{driver} world={self.r.world}"
        )
        step = c.stepfactor if c.stepfactor > 1 else c.stepbytes
        config_line = (
            f"# nThread 1 nGpus 1 minBytes {c.minbytes} maxBytes {c.maxbytes} step: {step}"
            f"({'factor' if c.stepfactor > 1 else 'bytes'}) warmup iters: {c.warmup} iters: {c.iters}"
            f" agg iters: 1 validation: {c.check} graph: {c.graph} unalign: 0"
        )
        notes = [_BLOCKING_NOTES[self.blocking]] if self.blocking else []
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
    def _timed(self, b: Bound) -> float:
        """Seconds per op on this rank."""
        cfg, r, z = self.cfg, self.r, self.blocking
        b.first()
        r.complete()
        r.barrier()
        sequence = [b.calls[i % len(b.calls)] for i in range(cfg.iters)]
        if cfg.graph:
            graph = r.capture(sequence)
            try:
                launcher = (
                    self.coll.graph_program(graph.exec_handle()) if self.coll is not None else None
                )
                r.barrier()
                with self.wd.timed():
                    if launcher is not None:  # G launches and the wait, timed in C (bench.native)
                        elapsed = launcher.timed(cfg.graph)
                    else:  # launched from Python, on the stream it was captured on
                        t0 = time.perf_counter()
                        for _ in range(cfg.graph):
                            graph.launch()
                        r.complete()
                        elapsed = time.perf_counter() - t0
            finally:
                graph.close()
            return elapsed / (cfg.iters * cfg.graph)
        with self.wd.timed():
            if z == 0 and b.native is not None:  # the same ops, issued and timed in C
                return b.native.timed(cfg.iters) / cfg.iters
            if z == 0:
                t0 = time.perf_counter()
                for call in sequence:
                    call()
                r.finish()
                return (time.perf_counter() - t0) / cfg.iters
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
        return elapsed / cfg.iters

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
    def run_op(self, op: Op, coll: Collectives, first: bool) -> OpSummary:
        cfg, r = self.cfg, self.r
        shape = COLLECTIVES[op]
        elt = coll.elt
        program = f"{op}_perf"
        if not first:
            self.p.line(f"# Collective test starting: {program}")
        self.p.lines(report.table_header())
        rooted = shape.rooted
        roots = list(range(r.world)) if rooted and cfg.root == -1 else [cfg.root if rooted else -1]
        sizes = [s for s in cfg.sizes() if s <= self.maxbytes] or [self.maxbytes]
        summary = OpSummary(op, 0, 0.0, [])
        self.summaries.append(summary)
        busbws: list[float] = []
        local_errors = 0
        for root in roots:
            data_root = max(root, 0)
            self._warm_up(op, coll, data_root)
            for size in sizes:
                counts = shape.counts(size, elt, r.world)
                shifts = rotation_shifts(counts, elt, self.maxbytes, cfg.iters)
                cells: list[report.Cell] = []
                for in_place in (False, True):
                    where = f"{op} {size} B {'in-place' if in_place else 'out-of-place'}"
                    self.wd.progress(f"{where} timing")
                    b = coll.bind(op, counts, shifts, data_root, in_place)
                    if cfg.check:
                        coll.init(b, data_root, self.next_rep())
                        r.complete()
                    local_t = self._timed(b)
                    self.wd.progress(f"{where} checking")
                    wrong = self._checked(coll, b, data_root) if cfg.check else 0
                    gathered = r.gather_floats([local_t, float(wrong)])
                    times = [g[0] for g in gathered]
                    wrongs = [int(g[1]) for g in gathered]
                    t = self._combine(times)
                    algbw, busbw = shape.bandwidth(counts, elt, r.world, t)
                    checked = bool(cfg.check) and (shape.inplace_checked or not in_place)
                    if checked and wrong:
                        local_errors += 1
                    if checked:
                        self._count_wrong(wrongs)
                    if self.metrics.enabled:
                        self.metrics.cell(
                            self._labels(op, shape.prints_redop, counts.size_bytes(elt), in_place),
                            time_s=t, algbw=algbw, busbw=busbw, rank_times=times,
                            rank_busbw=[shape.bandwidth(counts, elt, r.world, x)[1] for x in times],
                            rank_wrong=wrongs if checked else None,
                        )  # fmt: skip
                    cells.append(
                        report.Cell(
                            time_us=t * 1e6, algbw=algbw, busbw=busbw,
                            wrong=sum(wrongs) if checked else None,
                            time_us_min=min(times) * 1e6, time_us_max=max(times) * 1e6,
                        )
                    )  # fmt: skip
                    busbws.append(busbw)
                row = report.TableRow(
                    op=op, size=counts.size_bytes(elt), count=counts.param, dtype=cfg.dtype,
                    redop=cfg.redop if shape.prints_redop else "none", root=root,
                    out=cells[0], inp=cells[1],
                )  # fmt: skip
                summary.rows.append(row)
                self.p.line(report.row_line(row))
                stage("row")
        summary.out_of_bounds = int(sum(v[0] for v in r.gather_floats([float(local_errors)])))
        summary.avg_busbw = sum(busbws) / len(busbws) if busbws else 0.0
        self.p.lines(
            report.footer_lines(
                out_of_bounds=summary.out_of_bounds, avg_busbw=summary.avg_busbw,
                min_busbw=cfg.min_busbw, program=program,
            )
        )  # fmt: skip
        for row in summary.rows:
            for payload in report.row_payloads(row):
                self.p.result("row", payload)
        self._summary_line(summary)
        return summary

    def _labels(self, op: Op, prints_redop: bool, size: int, in_place: bool | None) -> list[str]:
        """The metrics labels of a row (op, dtype, redop, size and, unless None, placement)."""
        redop = self.cfg.redop if prints_redop else "none"
        labels = [op, self.cfg.dtype, redop, str(size)]
        return labels if in_place is None else [*labels, "in" if in_place else "out"]

    def _count_wrong(self, wrongs: Sequence[int]) -> None:
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
        self.header()
        stage("header")
        if cfg.blocking == 3 and cfg.graph and r.rank == 0:
            print(
                "blocking mode (-z 3) is incompatible with CUDA graph mode (-G). Disabling.",
                file=sys.stderr,
            )
        self.maxbytes = self.limit_maxbytes()

        elt = DTYPES[cfg.dtype]
        send_bytes = recv_bytes = 16
        for op in cfg.ops:
            s, rv = COLLECTIVES[op].buffer_bytes(self.maxbytes, elt, r.world)
            send_bytes, recv_bytes = max(send_bytes, s), max(recv_bytes, rv)
        coll = Collectives(
            rank=r.rank, nranks=r.world, dtype=cfg.dtype, redop=cfg.redop,
            sendbuf=r.buffer(send_bytes), recvbuf=r.buffer(recv_bytes),
            group=r.data_group, comm=r.comm, stream=r.stream, memory=r.memory(cfg.dtype),
        )  # fmt: skip
        self.coll = coll
        if not self.native:
            coll.native = None  # without cudaStreamQuery the C loop cannot time: Python does
        if self.metrics.enabled:
            self.metrics.run_started(
                info=self._info(),
                world=r.world,
                hosts={int(d["rank"]): str(d["host"]) for d in self.devices},
                nodes={int(d["rank"]): str(d.get("node") or d["host"]) for d in self.devices},
                host=r.host,
            )

    def sweep(self, index: int | None = None) -> RunOutcome:
        """Every op at every size once. `index` numbers the sweep when the run has several:
        its result lines then form one block, its own meta line first and a `sweep` line last."""
        from nccl_k8s.bench.soak import soak_op

        cfg, r, coll = self.cfg, self.r, self.coll
        assert coll is not None, "setup() first"
        self.sweep_index = index
        self.summaries = []
        self.wrong_by_rank = {}
        started = time.time()
        if index is not None:
            self.wd.progress(f"sweep {index}")
            self.p.line(f"# nccl-k8s sweep {index} starting")
            self.p.begin_block()
        self.p.result("meta", self._meta())
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
                    self.summaries.append(soak_op(self, op, coll))
                else:
                    self.run_op(op, coll, first=first)
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
                    "wrong_ranks": self._wrong_ranks(),
                    "time": _iso(time.time()),
                },
            )  # fmt: skip
            self.p.end_block()
            self.p.line(f"# nccl-k8s sweep {index} ended after {duration:.1f} s: {verdict}")
        return outcome

    def outcome(self) -> RunOutcome:
        return RunOutcome(list(self.summaries), self.cfg.min_busbw, self.maxbytes)

    def _wrong_ranks(self) -> list[dict[str, Any]]:
        """The ranks whose checks found wrong elements this sweep, where they ran: what
        `status` names without reading the meta line."""
        where = {int(d["rank"]): d for d in self.devices}
        return [
            {
                "rank": rank,
                "host": where.get(rank, {}).get("host"),
                "node": where.get(rank, {}).get("node"),
                "wrong": n,
            }
            for rank, n in sorted(self.wrong_by_rank.items())
        ]

    def _info(self) -> dict[str, str]:
        v, r = self.versions, self.r
        return {
            "run_id": os.environ.get("NCCL_K8S_RUN_ID") or "",
            "nccl_k8s_version": str(v.get("nccl_k8s") or __version__),
            "nccl_version": str(v.get("nccl") or ""),
            "torch_version": str(v.get("torch") or ""),
            "backend": r.backend,
            "driver": r.driver or "torch",
        }

    def _meta(self) -> dict[str, Any]:
        cfg, r = self.cfg, self.r
        hosts = sorted({d["host"] for d in self.devices})
        return {
            "time": _iso(time.time()),
            **({"sweep": self.sweep_index} if self.sweep_index is not None else {}),
            **self.versions,
            "driver": r.driver or "torch",
            "world_size": r.world,
            "nodes": len(hosts),
            "local_world_size": r.local_world,
            "gpu_model": self.devices[0]["name"] if r.cuda else None,
            "devices": [{k: d[k] for k in ("rank", "host", "pid", "device", "name")} for d in self.devices],
            "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
            "run_id": os.environ.get("NCCL_K8S_RUN_ID") or None,
            "timeout_s": self.wd.timeout_s,
            "buffers": r.allocator,
            "native_loop": self.native,
            "config": {
                "minbytes": cfg.minbytes, "maxbytes": self.maxbytes, "stepbytes": cfg.stepbytes,
                "stepfactor": cfg.stepfactor, "iters": cfg.iters, "warmup": cfg.warmup, "check": cfg.check,
                "dtype": cfg.dtype, "redop": cfg.redop, "root": cfg.root, "blocking": self.blocking,
                "average": cfg.average, "graph": cfg.graph, "ops": list(cfg.ops),
                "duration_s": cfg.duration_s, "sweeps": cfg.sweeps,
                "sweep_interval_s": cfg.sweep_interval_s,
            },
        }  # fmt: skip


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="seconds")


__all__ = [
    "PEER_ERRORS",
    "Engine",
    "OpSummary",
    "Printer",
    "RunOutcome",
]
