"""What a sweep produced (each op's rows and verdict, the run's outcome) and rank 0's printer.

Kept apart from the measuring loop (bench.engine), which reads and fills them; soak mode and
the rank's runner read them too. What rank 0 says about the run (its meta line, the metrics'
run info, the ranks with wrong data) is read off the engine's public state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from nccl_k8s import __version__
from nccl_k8s.bench import report
from nccl_k8s.bench.config import NODE_NAME_ENV, Op
from nccl_k8s.bench.options import meta_config

if TYPE_CHECKING:
    from nccl_k8s.bench.engine import Engine


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

    def __init__(
        self, enabled: bool, stream: TextIO, result_lines: bool, *, journal: TextIO | None = None
    ) -> None:
        self.enabled = enabled
        self.stream = stream
        self.result_lines = result_lines
        self.block: list[str] | None = None
        self.journal = journal if enabled else None
        """Where every result line goes the moment it is known (each row as soon as it is
        measured), whatever --no-result-lines says: what a run stopped half-way leaves
        (`nccl-k8s run` reads it back to store the rows measured, marked partial)."""

    def measured(self, row: report.TableRow) -> None:
        """A row just measured: into the journal now (the result lines follow the table)."""
        for payload in report.row_payloads(row):
            self._journal("row", payload)

    def _journal(self, kind: str, payload: dict[str, Any]) -> None:
        if self.journal is not None:
            self.journal.write(report.result_line(kind, payload) + "\n")
            self.journal.flush()

    def begin_block(self) -> None:
        self.block = []

    def end_block(self) -> None:
        lines, self.block = self.block, None
        if lines:
            self.lines(report.block_lines(report.RESULTS_BLOCK, lines))

    def line(self, text: str = "") -> None:
        if self.enabled:
            try:
                self.stream.write(text + "\n")
                self.stream.flush()
            except BrokenPipeError:
                self._reader_gone()

    def _reader_gone(self) -> None:
        """Stdout's reader went away (`nccl-k8s run | head`): no traceback. The table goes to
        /dev/null from here (its buffer too, else Python's exit would raise again); the run
        goes on, so its results are stored and its checks still decide the exit code."""
        import sys

        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), self.stream.fileno())
        print(
            "# stdout was closed (a pipe's reader ended): the table stops here, the run goes on",
            file=sys.stderr,
            flush=True,
        )
        self.enabled = False

    def lines(self, texts: Sequence[str]) -> None:
        for t in texts:
            self.line(t)

    def result(self, kind: str, payload: dict[str, Any]) -> None:
        if kind != "row":  # rows went to the journal when measured
            self._journal(kind, payload)
        if not self.result_lines:
            return
        if self.block is not None:
            if self.enabled:
                self.block.append(report.result_line(kind, payload))
            return
        self.line(report.result_line(kind, payload))


# -- what rank 0 says about the run (its meta line, metrics info, the ranks with wrong data)


def wrong_ranks(engine: Engine) -> list[dict[str, Any]]:
    """The ranks whose checks found wrong elements this sweep, where they ran: what
    `status` names without reading the meta line."""
    where = {int(d["rank"]): d for d in engine.devices}
    return [
        {
            "rank": rank,
            "host": where.get(rank, {}).get("host"),
            "node": where.get(rank, {}).get("node"),
            "wrong": n,
        }
        for rank, n in sorted(engine.wrong_by_rank.items())
    ]


def run_info(engine: Engine) -> dict[str, str]:
    v, r = engine.versions, engine.r
    return {
        "run_id": os.environ.get("NCCL_K8S_RUN_ID") or "",
        "nccl_k8s_version": str(v.get("nccl_k8s") or __version__),
        "nccl_version": str(v.get("nccl") or ""),
        "torch_version": str(v.get("torch") or ""),
        "backend": r.backend,
        "driver": r.driver or "torch",
    }


def run_meta(engine: Engine) -> dict[str, Any]:
    cfg, r = engine.cfg, engine.r
    hosts = sorted({d["host"] for d in engine.devices})
    node = ("node",) if os.environ.get(NODE_NAME_ENV) else ()
    return {
        "time": iso(time.time()),
        **({"sweep": engine.sweep_index} if engine.sweep_index is not None else {}),
        **engine.versions,
        "driver": r.driver or "torch",
        "world_size": r.world,
        "nodes": len(hosts),
        "local_world_size": r.local_world,
        "gpu_model": engine.devices[0]["name"] if r.cuda else None,
        # Each rank's Kubernetes node where the pods name it (NCCL_K8S_NODE_NAME): a rank's pod
        # is not the pod of its node rank when the deployer ordered the ranks by topology.
        "devices": [{k: d.get(k) for k in ("rank", "host", "pid", "device", "name", *node)} for d in engine.devices],
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_") and not k.startswith("NCCL_K8S_")},
        "run_id": os.environ.get("NCCL_K8S_RUN_ID") or None,
        "timeout_s": engine.wd.timeout_s,
        "buffers": r.allocator,
        "native_loop": engine.native,
        "timer": engine.timer if r.comm is not None else None,
        "config": meta_config(dataclasses.replace(cfg, maxbytes=engine.maxbytes, blocking=engine.blocking)),
    }  # fmt: skip


def iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="seconds")


__all__ = ["OpSummary", "Printer", "RunOutcome", "iso", "run_info", "run_meta", "wrong_ranks"]
