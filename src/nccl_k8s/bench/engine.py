"""The measuring loop, per rank: warm-up, timed ops, cross-rank combine, checks, soak.

Timing follows nccl-tests: for each size and placement, one untimed op and a barrier, then
`iters` ops issued back to back with no synchronisation between them, then one wait for the
device (or, on CPU, for the last op), time = elapsed / iters on the host clock. With -G the same
ops are captured once in a CUDA graph and the graph is launched G times.

Two process groups: the data plane (NCCL or gloo, what is measured) and a gloo control plane on
the CPU for barriers, time exchange and error counts, so bookkeeping never queues behind or
between the measured collectives on the GPU.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import socket
import statistics
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from nccl_k8s import __version__
from nccl_k8s.bench import report
from nccl_k8s.bench.config import DTYPES, ROOTED_OPS, BenchConfig, check_backend
from nccl_k8s.bench.counts import SHAPES, buffer_bytes, memory_limit, rotation_shifts
from nccl_k8s.bench.ops import Bound, Collectives, all_gather_fn

if TYPE_CHECKING:
    from nccl_k8s.bench.nccl import Communicator

GIB = 1 << 30


@dataclasses.dataclass
class OpSummary:
    op: str
    out_of_bounds: int
    avg_busbw: float
    rows: list[report.Row]

    @property
    def ok(self) -> bool:
        return self.out_of_bounds == 0


@dataclasses.dataclass
class RunOutcome:
    summaries: list[OpSummary]
    min_busbw: float | None
    maxbytes: int

    @property
    def failed_ops(self) -> list[str]:
        bad = []
        for s in self.summaries:
            if not s.ok or (self.min_busbw is not None and s.avg_busbw < self.min_busbw):
                bad.append(s.op)
        return bad

    @property
    def exit_code(self) -> int:
        return 1 if self.failed_ops else 0


class Rank:
    """This process's place in the run and the two process groups."""

    def __init__(self, backend: str, timeout_s: int, *, driver: str = "direct") -> None:
        import torch
        import torch.distributed as dist

        _default_env()
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(self.world)))
        self.backend = backend
        self.host = socket.gethostname()
        kwargs: dict[str, Any] = {}
        if timeout_s:
            kwargs["timeout"] = datetime.timedelta(seconds=timeout_s)
        if backend == "nccl":
            ndev = torch.cuda.device_count()
            self.device = torch.device("cuda", self.local_rank % ndev)
            torch.cuda.set_device(self.device)
            kwargs["device_id"] = self.device
        else:
            self.device = torch.device("cpu")
        self.timeout_s = timeout_s
        self.comm: Communicator | None = None
        self.stream: Any = None
        self.data_group: Any = None
        if backend == "nccl" and driver == "direct":
            # libnccl directly for the data plane; torch.distributed (gloo) only for the control plane.
            kwargs.pop("device_id", None)
            dist.init_process_group(backend="gloo", init_method="env://", **kwargs)
            from torch.distributed import distributed_c10d

            from nccl_k8s.bench.nccl import Communicator

            self.stream = torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]
            store = distributed_c10d._get_default_store()
            self.comm = Communicator(self.rank, self.world, store)
            self.ctrl: Any = dist.group.WORLD
        else:
            dist.init_process_group(backend=backend, init_method="env://", **kwargs)
            self.data_group = dist.group.WORLD
            timeout = {"timeout": kwargs["timeout"]} if timeout_s else {}
            self.ctrl = dist.new_group(backend="gloo", **timeout)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def complete(self) -> None:
        """Wait until every op issued so far has finished on this rank."""
        if self.comm is not None:
            self.comm.wait(self.stream, self.timeout_s)
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.device)

    def finish(self) -> None:
        """End of a timed loop: wait for the measured ops only (nccl-tests polls its stream)."""
        if self.comm is not None:
            self.comm.wait(self.stream, self.timeout_s)
        else:
            self.complete()

    def capture_stream(self) -> Any:
        """The stream CUDA graphs capture on: the one direct NCCL calls go to, else a side stream."""
        import torch

        if self.stream is not None:
            return self.stream
        return torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier(group=self.ctrl)

    def gather_floats(self, values: Sequence[float]) -> list[list[float]]:
        """Every rank's values, on every rank (control plane)."""
        import torch

        mine = torch.tensor(list(values), dtype=torch.float64)
        out = torch.empty(self.world * len(values), dtype=torch.float64)
        all_gather_fn()(out, mine, group=self.ctrl)
        return [out[i * len(values) : (i + 1) * len(values)].tolist() for i in range(self.world)]

    def gather_object(self, obj: Any) -> list[Any]:
        import torch.distributed as dist

        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj, group=self.ctrl)
        return out

    def close(self) -> None:
        import torch.distributed as dist

        if self.comm is not None:
            self.comm.destroy()
        if dist.is_initialized():
            dist.destroy_process_group()


def _default_env() -> None:
    """Run as a world of one when started without torchrun."""
    if "RANK" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )  # fmt: skip


def resolve_backend(requested: str) -> str:
    if requested != "auto":
        return requested
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def _device_info(r: Rank) -> dict[str, Any]:
    info: dict[str, Any] = {"rank": r.rank, "host": r.host, "pid": os.getpid()}
    if r.cuda:
        import torch

        props = torch.cuda.get_device_properties(r.device)
        info["device"] = r.device.index
        info["name"] = props.name
        domain = getattr(props, "pci_domain_id", 0)
        info["pci"] = (
            f"{domain:04x}:{getattr(props, 'pci_bus_id', 0):02x}:{getattr(props, 'pci_device_id', 0):02x}"
        )
        info["memory"] = int(props.total_memory)
    else:
        info["device"] = r.local_rank
        info["name"] = _cpu_name()
        info["pci"] = "cpu"
        info["memory"] = _host_available() // max(1, r.local_world)
    return info


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def _host_available() -> int:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * GIB


def _versions(backend: str) -> dict[str, Any]:
    import torch

    nccl = None
    if torch.cuda.is_available():
        try:
            v = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
            nccl = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        except Exception:  # torch built without NCCL
            nccl = None
    return {
        "nccl_k8s": __version__,
        "torch": torch.__version__,
        "nccl": nccl,
        "cuda": torch.version.cuda,
        "backend": backend,
    }


def _nccl_code(version: str | None) -> int:
    if not version:
        return 0
    major, minor, patch = (int(x) for x in version.split(".")[:3])
    return major * 10000 + minor * 100 + patch


class Printer:
    """Rank 0's output: the nccl-tests table, and result lines."""

    def __init__(self, enabled: bool, stream: TextIO, result_lines: bool) -> None:
        self.enabled = enabled
        self.stream = stream
        self.result_lines = result_lines

    def line(self, text: str = "") -> None:
        if self.enabled:
            self.stream.write(text + "\n")
            self.stream.flush()

    def lines(self, texts: Sequence[str]) -> None:
        for t in texts:
            self.line(t)

    def result(self, kind: str, payload: dict[str, Any]) -> None:
        if self.result_lines:
            self.line(report.result_line(kind, payload))


class Engine:
    def __init__(self, config: BenchConfig, rank: Rank, printer: Printer) -> None:
        self.cfg = config
        self.r = rank
        self.p = printer
        self.summaries: list[OpSummary] = []

    # -- setup ---------------------------------------------------------------------------
    def header(self, devices: list[dict[str, Any]], versions: dict[str, Any]) -> None:
        c = self.cfg
        first = f"{c.ops[0]}_perf"
        code = _nccl_code(versions["nccl"])
        version_line = (
            f"# nccl-k8s version {__version__} nccl-library={code} "
            f"torch={versions['torch']} backend={self.r.backend}{self._driver_note()} world={self.r.world}"
        )
        step = c.stepfactor if c.stepfactor > 1 else c.stepbytes
        config_line = (
            f"# nThread 1 nGpus 1 minBytes {c.minbytes} maxBytes {c.maxbytes} step: {step}"
            f"({'factor' if c.stepfactor > 1 else 'bytes'}) warmup iters: {c.warmup} iters: {c.iters}"
            f" agg iters: 1 validation: {c.check} graph: {c.graph} unalign: 0"
        )
        notes = []
        if c.blocking:
            notes.append(
                "# Blocking Enabled: wait for completion and barrier after each collective "
            )
        device_lines = [
            f"#  Rank {d['rank']:2d} Group  0 Pid {d['pid']:6d} on {d['host']:>10} device {d['device']:2d}"
            f" [{d['pci']}] {d['name']}"
            for d in devices
        ]
        self.p.lines(
            report.header_lines(
                version_line=version_line, program=first, config_line=config_line,
                device_lines=device_lines, notes=notes,
            )
        )  # fmt: skip

    def _driver_note(self) -> str:
        if self.r.backend != "nccl":
            return ""
        return " driver=direct" if self.r.comm is not None else " driver=torch"

    def limit_maxbytes(self, devices: list[dict[str, Any]]) -> int:
        """Shrink the largest size when the buffers would not fit, and say so (as nccl-tests does)."""
        mem = min(int(d["memory"]) for d in devices)
        limit = memory_limit(self.cfg.maxbytes, mem, check=bool(self.cfg.check))
        if limit is None:
            return self.cfg.maxbytes
        self.p.line("#")
        self.p.line(f"# Reducing maxBytes to {limit} due to memory limitation")
        return limit

    # -- one measurement -----------------------------------------------------------------
    def _timed(self, b: Bound) -> float:
        """Seconds per op on this rank."""
        cfg, r = self.cfg, self.r
        calls = b.calls
        m = len(calls)
        b.calls[0]()
        r.complete()
        r.barrier()
        if cfg.graph:
            import torch

            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=r.capture_stream()):
                for i in range(cfg.iters):
                    calls[i % m]()
            r.barrier()
            t0 = time.perf_counter()
            for _ in range(cfg.graph):
                graph.replay()
            r.complete()
            elapsed = time.perf_counter() - t0
            del graph
            return elapsed / (cfg.iters * cfg.graph)
        sequence = [calls[i % m] for i in range(cfg.iters)]
        t0 = time.perf_counter()
        if cfg.blocking:
            for call in sequence:
                call()
                r.complete()
                r.barrier()
        else:
            for call in sequence:
                call()
        r.finish()
        return (time.perf_counter() - t0) / cfg.iters

    def _checked(self, coll: Collectives, b: Bound, root: int, rep_base: int) -> int:
        """Local wrong elements over up to `check` verified ops (stops at the first failure)."""
        wrong = 0
        for c in range(self.cfg.check):
            rep = rep_base + c + 1
            coll.init(b, root, rep)
            self.r.complete()
            self.r.barrier()
            if self.cfg.graph:
                import torch

                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=self.r.capture_stream()):
                    b.calls[0]()
                graph.replay()
                self.r.complete()
                del graph
            else:
                b.calls[0]()
                self.r.complete()
            wrong = coll.check(b, root, rep)
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

    # -- the sweep -----------------------------------------------------------------------
    def run_op(self, op: str, coll: Collectives, maxbytes: int, first: bool) -> OpSummary:
        cfg, r = self.cfg, self.r
        shape = SHAPES[op]
        elt = coll.elt
        program = f"{op}_perf"
        if not first:
            self.p.line(f"# Collective test starting: {program}")
        self.p.lines(report.table_header())
        roots = (
            list(range(r.world))
            if (op in ROOTED_OPS and cfg.root == -1)
            else [cfg.root if op in ROOTED_OPS else -1]
        )
        sizes = [s for s in cfg.sizes() if s <= maxbytes] or [maxbytes]
        rows: list[report.Row] = []
        busbws: list[float] = []
        local_errors = 0
        rep_base = 0
        for root in roots:
            data_root = max(root, 0)
            # Warm-up at the largest, then the smallest size (nccl-tests' order).
            for wsize in (max(sizes), min(sizes)):
                wc = shape.counts(wsize, elt, r.world)
                wb = coll.bind(
                    op, wc, rotation_shifts(wc, elt, maxbytes, cfg.warmup or 1), data_root, False
                )
                for i in range(cfg.warmup):
                    wb.calls[i % len(wb.calls)]()
                r.complete()
            for size in sizes:
                counts = shape.counts(size, elt, r.world)
                shifts = rotation_shifts(counts, elt, maxbytes, cfg.iters)
                cells: list[report.Cell] = []
                for in_place in (False, True):
                    b = coll.bind(op, counts, shifts, data_root, in_place)
                    if cfg.check:
                        coll.init(b, data_root, rep_base)
                        r.complete()
                    local_t = self._timed(b)
                    wrong = self._checked(coll, b, data_root, rep_base) if cfg.check else 0
                    rep_base += cfg.check + 1
                    gathered = r.gather_floats([local_t, float(wrong)])
                    times = [g[0] for g in gathered]
                    wrongs = [int(g[1]) for g in gathered]
                    t = self._combine(times)
                    algbw, busbw = shape.bandwidth(counts, elt, r.world, t)
                    checked = bool(cfg.check) and (shape.inplace_checked or not in_place)
                    if checked and wrong:
                        local_errors += 1
                    cells.append(
                        report.Cell(
                            time_us=t * 1e6, algbw=algbw, busbw=busbw,
                            wrong=sum(wrongs) if checked else None,
                            time_us_min=min(times) * 1e6, time_us_max=max(times) * 1e6,
                        )
                    )  # fmt: skip
                    busbws.append(busbw)
                row = report.Row(
                    op=op, size=counts.size_bytes(elt), count=counts.param, dtype=cfg.dtype,
                    redop=cfg.redop if shape.reduces else "none", root=root,
                    out=cells[0], inp=cells[1],
                )  # fmt: skip
                rows.append(row)
                self.p.line(report.row_line(row))
        errors = int(sum(v[0] for v in r.gather_floats([float(local_errors)])))
        avg = sum(busbws) / len(busbws) if busbws else 0.0
        self.p.lines(
            report.footer_lines(
                out_of_bounds=errors, avg_busbw=avg, min_busbw=cfg.min_busbw, program=program
            )
        )
        for row in rows:
            for payload in report.row_payloads(row):
                self.p.result("row", payload)
        summary = OpSummary(op, errors, avg, rows)
        ok = summary.ok and (cfg.min_busbw is None or avg >= cfg.min_busbw)
        self.p.result("summary", {"op": op, "out_of_bounds": errors, "avg_busbw": avg, "ok": ok})
        return summary

    # -- soak ----------------------------------------------------------------------------
    def soak_op(self, op: str, coll: Collectives, maxbytes: int) -> OpSummary:
        """Repeat one op at each size for --duration seconds; busbw per interval, op time percentiles."""
        cfg, r = self.cfg, self.r
        shape = SHAPES[op]
        elt = coll.elt
        root = max(cfg.root, 0) if op in ROOTED_OPS else -1
        sizes = [s for s in cfg.sizes() if s <= maxbytes] or [maxbytes]
        rows: list[report.Row] = []
        for size in sizes:
            counts = shape.counts(size, elt, r.world)
            b = coll.bind(
                op, counts, rotation_shifts(counts, elt, maxbytes, 64), max(root, 0), False
            )
            b.calls[0]()
            r.complete()
            r.barrier()
            samples: list[float] = []
            intervals: list[dict[str, float]] = []
            batch = 1
            start = time.perf_counter()
            iv_start, iv_iters = start, 0
            total_iters = 0
            while True:
                per_op = self._soak_batch(b, batch)
                samples.extend(per_op)
                total_iters += batch
                iv_iters += batch
                now = time.perf_counter()
                # Rank 0's clock decides; one tiny control-plane exchange per batch, never per op.
                stop_local = 1.0 if now - start >= cfg.duration_s else 0.0
                stop = r.gather_floats([stop_local])[0][0] > 0
                if now - iv_start >= cfg.report_interval_s or stop:
                    secs = now - iv_start
                    algbw, busbw = shape.bandwidth(counts, elt, r.world, secs / iv_iters)
                    intervals.append(
                        {"t_s": now - start, "iters": iv_iters, "algbw": algbw, "busbw": busbw}
                    )
                    self.p.line(
                        f"# soak {op} {counts.size_bytes(elt)} B  t={now - start:7.1f}s  iters {iv_iters:8d}"
                        f"  algbw {algbw:9.2f} GB/s  busbw {busbw:9.2f} GB/s"
                    )
                    iv_start, iv_iters = now, 0
                if stop:
                    break
                batch_time = sum(per_op)
                target = min(cfg.report_interval_s / 4, 0.5)
                if batch_time < target / 2:
                    batch = min(batch * 2, 1 << 16)
            samples.sort()
            med = statistics.median(samples)
            p99 = samples[min(len(samples) - 1, (len(samples) * 99 + 99) // 100 - 1)]
            mean = sum(samples) / len(samples)
            algbw, busbw = shape.bandwidth(counts, elt, r.world, mean)
            self.p.line(
                f"# soak {op} {counts.size_bytes(elt)} B  iters {total_iters}  op time (us) min {samples[0] * 1e6:.2f}"
                f"  median {med * 1e6:.2f}  p99 {p99 * 1e6:.2f}  mean busbw {busbw:.2f} GB/s"
            )
            self.p.result(
                "soak",
                {
                    "op": op, "size": counts.size_bytes(elt), "count": counts.param, "dtype": cfg.dtype,
                    "iters": total_iters, "duration_s": time.perf_counter() - start,
                    "time_us_min": samples[0] * 1e6, "time_us_median": med * 1e6, "time_us_p99": p99 * 1e6,
                    "busbw_mean": busbw, "intervals": intervals,
                },
            )  # fmt: skip
            cell = report.Cell(mean * 1e6, algbw, busbw, None, samples[0] * 1e6, samples[-1] * 1e6)
            rows.append(report.Row(op, counts.size_bytes(elt), counts.param, cfg.dtype,
                                   cfg.redop if shape.reduces else "none", root, cell, cell))  # fmt: skip
        busbws = [row.out.busbw for row in rows]
        return OpSummary(op, 0, sum(busbws) / len(busbws), rows)

    def _soak_batch(self, b: Bound, n: int) -> list[float]:
        """Per-op seconds of n ops: CUDA events between ops on GPUs (no host sync per op)."""
        calls, m = b.calls, len(b.calls)
        if self.r.cuda:
            import torch

            events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]  # type: ignore[no-untyped-call]
            stream = self.r.stream  # direct NCCL calls go there; None: torch's current stream
            events[0].record(stream)
            for i in range(n):
                calls[i % m]()
                events[i + 1].record(stream)
            self.r.complete()
            return [events[i].elapsed_time(events[i + 1]) / 1e3 for i in range(n)]
        out = []
        t = time.perf_counter()
        for i in range(n):
            calls[i % m]()
            now = time.perf_counter()
            out.append(now - t)
            t = now
        return out

    # -- whole run -----------------------------------------------------------------------
    def run(self) -> RunOutcome:
        import torch

        cfg, r = self.cfg, self.r
        versions = _versions(r.backend)
        devices = r.gather_object(_device_info(r))
        self.header(devices, versions)
        maxbytes = self.limit_maxbytes(devices)
        self.p.result("meta", self._meta(devices, versions, maxbytes))

        elt = DTYPES[cfg.dtype]
        send_bytes = recv_bytes = 16
        for op in cfg.ops:
            s, rv = buffer_bytes(op, maxbytes, elt, r.world)
            send_bytes, recv_bytes = max(send_bytes, s), max(recv_bytes, rv)
        sendbuf = torch.zeros(send_bytes, dtype=torch.uint8, device=r.device)
        recvbuf = torch.zeros(recv_bytes, dtype=torch.uint8, device=r.device)
        coll = Collectives(
            rank=r.rank, nranks=r.world, dtype=cfg.dtype, redop=cfg.redop,
            sendbuf=sendbuf, recvbuf=recvbuf, group=r.data_group, comm=r.comm, stream=r.stream,
        )  # fmt: skip
        for i, op in enumerate(cfg.ops):
            if cfg.duration_s > 0:
                if i:
                    self.p.line(f"# Collective test starting: {op}_perf")
                self.summaries.append(self.soak_op(op, coll, maxbytes))
            else:
                self.summaries.append(self.run_op(op, coll, maxbytes, first=i == 0))
        return RunOutcome(self.summaries, cfg.min_busbw, maxbytes)

    def _meta(
        self, devices: list[dict[str, Any]], versions: dict[str, Any], maxbytes: int
    ) -> dict[str, Any]:
        cfg = self.cfg
        hosts = sorted({d["host"] for d in devices})
        return {
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **versions,
            "driver": "direct" if self.r.comm is not None else "torch",
            "world_size": self.r.world,
            "nodes": len(hosts),
            "local_world_size": self.r.local_world,
            "gpu_model": devices[0]["name"] if self.r.cuda else None,
            "devices": [{k: d[k] for k in ("rank", "host", "pid", "device", "name")} for d in devices],
            "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
            "run_id": os.environ.get("NCCL_K8S_RUN_ID") or None,
            "config": {
                "minbytes": cfg.minbytes, "maxbytes": maxbytes, "stepbytes": cfg.stepbytes,
                "stepfactor": cfg.stepfactor, "iters": cfg.iters, "warmup": cfg.warmup, "check": cfg.check,
                "dtype": cfg.dtype, "redop": cfg.redop, "root": cfg.root, "blocking": cfg.blocking,
                "average": cfg.average, "graph": cfg.graph, "ops": list(cfg.ops),
                "duration_s": cfg.duration_s,
            },
        }  # fmt: skip


def write_json(path: str, cfg: BenchConfig, outcome: RunOutcome, argv: Sequence[str], devices: list[dict[str, Any]],
               versions: dict[str, Any], started: str) -> None:  # fmt: skip
    """nccl-tests' -J layout (version 3 field names), plus `op` per row and per-op summaries."""
    rows = [report.nccl_tests_json_row(row, cfg.iters) for s in outcome.summaries for row in s.rows]
    errors = sum(s.out_of_bounds for s in outcome.summaries)
    avg = sum(s.avg_busbw for s in outcome.summaries) / max(1, len(outcome.summaries))
    doc = {
        "version": 3,
        "generator": f"nccl-k8s {__version__}",
        "start_time": started,
        "args": list(argv),
        "env": [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")],
        "nccl_version": _nccl_code(versions["nccl"]),
        "config": {
            "nthreads": 1, "ngpus": 1, "minimum_bytes": cfg.minbytes, "maximum_bytes": outcome.maxbytes,
            **({"step_factor": cfg.stepfactor} if cfg.stepfactor > 1 else {"step_bytes": cfg.stepbytes}),
            "warmup_iters": cfg.warmup, "iterations": cfg.iters, "aggregated_iterations": 1,
            "validation": cfg.check, "graph": cfg.graph, "blocking_collectives": "true" if cfg.blocking else "false",
            "datatype": cfg.dtype, "redop": cfg.redop, "backend": versions["backend"],
            "devices": [
                {"rank": d["rank"], "group": 0, "pid": d["pid"], "hostname": d["host"], "device": d["device"],
                 "device_hex": d["pci"], "device_info": d["name"]}
                for d in devices
            ],
        },
        "results": rows,
        "ops": [
            {"op": s.op, "out_of_bounds": {"count": s.out_of_bounds, "okay": "true" if s.ok else "false"},
             "average_bus_bandwidth": {"bandwidth": s.avg_busbw,
                                       "okay": "unchecked" if cfg.min_busbw is None
                                       else ("true" if s.avg_busbw >= cfg.min_busbw else "false")}}
            for s in outcome.summaries
        ],
        "out_of_bounds": {"count": errors, "okay": "true" if errors == 0 else "false"},
        "average_bus_bandwidth": {"bandwidth": avg, "okay": "unchecked" if cfg.min_busbw is None
                                  else ("true" if not outcome.failed_ops else "false")},
        "errors": [],
        "end_time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }  # fmt: skip
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def run_rank(cfg: BenchConfig, argv: Sequence[str], *, stdout: TextIO = sys.stdout) -> int:
    """Everything one rank does; returns the exit code (0 ok, 1 wrong results or below --min-busbw)."""
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    backend = resolve_backend(cfg.backend)
    rank = Rank(backend, cfg.timeout_s, driver=cfg.driver)
    try:
        check_backend(cfg, backend, world_size=rank.world)
        printer = Printer(rank.rank == 0, stdout, cfg.result_lines)
        engine = Engine(cfg, rank, printer)
        outcome = engine.run()
        if rank.rank == 0 and cfg.json_path:
            devices = rank.gather_object(_device_info(rank))
            write_json(cfg.json_path, cfg, outcome, argv, devices, _versions(backend), started)
        elif cfg.json_path:
            rank.gather_object(_device_info(rank))
        rank.barrier()
        return outcome.exit_code
    finally:
        rank.close()


__all__ = [
    "Engine",
    "OpSummary",
    "Printer",
    "Rank",
    "RunOutcome",
    "resolve_backend",
    "run_rank",
    "write_json",
]
