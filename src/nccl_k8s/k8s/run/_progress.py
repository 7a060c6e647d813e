"""What a run is doing, for the live summary and the trace's phases: where its pods are (not
scheduled, pulling their image or creating their container, running, ended) and what rank 0's
log says it measures.

Reading rank 0's log is cheap: one stream, started once its container runs, from its last lines;
every line is matched against a handful of prefixes the engine prints (its header after the
rendezvous, `# Collective test starting`, table rows, soak and sweep lines). Pure, but for the
stream, which follow_run owns.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from nccl_k8s.k8s.run._outcomes import Progress
from nccl_k8s.k8s.run._pods import PodInfo

#: The live summary's pod stages, in the order a pod goes through them.
STAGES = ("unscheduled", "pulling/creating", "running", "succeeded", "failed")

_HEADER = "# nccl-k8s version "
_OP = re.compile(r"# Collective test starting: (\w+?)_perf")
_ROW = re.compile(r"^\s+(\d+)\s+\d+\s+\S+\s+\S+\s+-?\d+\s+[\d.]")
_SOAK = re.compile(r"# soak (\w+) (\d+) B")
_SWEEP = re.compile(r"# nccl-k8s sweep (\d+) starting")


def stages(pods: Iterable[PodInfo]) -> dict[str, int]:
    """Pods per stage: Pending splits into not yet bound to a node, and bound but not running
    (the kubelet pulls the image, mounts volumes, creates the container)."""
    out = dict.fromkeys(STAGES, 0)
    for p in pods:
        if p.phase == "Running":
            out["running"] += 1
        elif p.phase == "Succeeded":
            out["succeeded"] += 1
        elif p.phase == "Failed":
            out["failed"] += 1
        elif p.node:
            out["pulling/creating"] += 1
        else:
            out["unscheduled"] += 1
    return out


def phase_of(pods: Sequence[PodInfo], expected: int, *, joined: bool) -> str:
    """The deploy phase a run is in (the trace's spans): `schedule` until every rank's pod is
    bound to a node, then `rendezvous` (pulling, starting, the ranks meeting) until rank 0's log
    says they met or a rank has finished, then `run`."""
    if joined or any(p.phase == "Succeeded" for p in pods):
        return "run"
    if len(pods) >= expected and all(p.node for p in pods):
        return "rendezvous"
    return "schedule"


class RankZeroLog:
    """What rank 0's log has said: whether the ranks met (the engine's header, or anything it
    prints after), the op and the last size measured, the sweep."""

    def __init__(self) -> None:
        self.joined = False
        self.op: str | None = None
        self.size: int | None = None
        self.sweep: int | None = None

    def feed(self, line: str) -> bool:
        """Take one line; whether what `text` says changed."""
        before = self.text()
        if line.startswith(_HEADER):
            self.joined = True
        elif m := _OP.search(line):
            self.joined, self.op, self.size = True, m.group(1), None
        elif m := _SOAK.search(line):
            self.joined, self.op, self.size = True, m.group(1), int(m.group(2))
        elif m := _ROW.match(line):
            if self.op is not None:
                self.size = int(m.group(1))
        elif m := _SWEEP.search(line):
            self.joined, self.sweep, self.op, self.size = True, int(m.group(1)), None, None
        return self.text() != before

    def text(self) -> str | None:
        """`rendezvous done`, `all_reduce`, `all_reduce up to 64 KiB`, with the sweep; None
        before the ranks met."""
        if not self.joined:
            return None
        what = self.op or "starting"
        if self.op is not None and self.size is not None:
            what += f" up to {_size(self.size)}"
        return what if self.sweep is None else f"sweep {self.sweep}: {what}"


def progress_line(p: Progress) -> str:
    """The live line: `run r1: 1 unscheduled, 2 pulling/creating, 1 running of 4 pods (12s);
    rank 0: all_reduce up to 64 KiB`. Stages with no pod are left out."""
    stages = {k: v for k, v in (p.stages or p.counts).items() if v}
    pods = ", ".join(f"{v} {k}" for k, v in stages.items()) or "0"
    line = f"run {p.run_id}: {pods} of {p.expected} pods ({p.elapsed_s:.0f}s)"
    if p.rank0:
        line += f"; rank 0: {p.rank0}"
    if p.note:
        line += f"; {p.note}"
    return line


def pending_reasons(pods: Iterable[PodInfo]) -> tuple[str, ...]:
    """Why Pending pods wait, one entry per reason and message, in the order first seen:
    `2 Unschedulable: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu`."""
    counts: dict[tuple[str, str], int] = {}
    for p in pods:
        if p.phase == "Pending" and p.reason:
            key = (p.reason, p.message or "")
            counts[key] = counts.get(key, 0) + 1
    return tuple(
        f"{n} {reason}" + (f": {message}" if message else "")
        for (reason, message), n in counts.items()
    )


class PlainProgress:
    """The live summary where there is no terminal (a CI log, `2>file`): one plain line each
    time what it says changes (pods by stage, why Pending ones wait, what rank 0 measures),
    never a line only because time passed."""

    def __init__(self) -> None:
        self._last: tuple[object, ...] | None = None

    def __call__(self, p: Progress) -> str | None:
        """The line to print for `p`, or None when nothing changed since the last one."""
        stage_counts = {k: v for k, v in (p.stages or p.counts).items() if v}
        state = (tuple(stage_counts.items()), p.expected, p.rank0, p.note, p.pending)
        if state == self._last:
            return None
        self._last = state
        line = progress_line(p)
        if p.pending:
            line += "; pending: " + "; ".join(p.pending)
        return line


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


__all__ = [
    "STAGES",
    "PlainProgress",
    "RankZeroLog",
    "pending_reasons",
    "phase_of",
    "progress_line",
    "stages",
]
