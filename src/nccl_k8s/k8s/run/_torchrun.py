"""torchrun's own account of a failed pod: the root cause it prints when a worker fails.

Under torchrun the container's exit code is the agent's (1), whatever ended the worker: a
worker killed by SIGKILL or one whose CUDA call raised leaves the pod saying only "exit code 1".
torchrun's summary at the end of the pod's log (torch.distributed.elastic's ChildFailedError,
`Root Cause (first observed failure):`) names the worker's global rank, its exit code (negative:
the signal that killed it) and its error (the last line of the traceback our engine wrote to
torchrun's error file, or torchrun's `Signal 9 (SIGKILL) received by PID ...`). It is read here,
once, into a RootCause; the culprit logic decides on its fields. Pure: text in, fields out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import signal

from nccl_k8s.errors import CRASH_SIGNALS, FailureReason

_ROOT = "Root Cause (first observed failure):"
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)")
_TRACE = re.compile(r"^\s*traceback\s*:\s?(.*)$")
#: The line that closes torchrun's summary (a border of "=").
_BORDER = re.compile(r"^=+\s*$")
#: torchrun's text where the worker wrote no error file and no signal ended it.
_NO_TRACEBACK = "To enable traceback see"


@dataclasses.dataclass(frozen=True)
class RootCause:
    """The worker torchrun saw fail first: its global and local rank, how it ended, its error."""

    rank: int
    local_rank: int | None
    exitcode: int
    """The worker's exit code; negative: the number of the signal that killed it."""
    pid: int | None
    error: str
    """The last line of its traceback (`RuntimeError: ...`), or "" when it wrote none."""

    @property
    def signal(self) -> signal.Signals | None:
        if self.exitcode >= 0:
            return None
        with contextlib.suppress(ValueError):
            return signal.Signals(-self.exitcode)
        return None

    @property
    def says_more(self) -> bool:
        """It says more than the container's exit code: a signal, or the worker's error."""
        return self.signal is not None or bool(self.error)

    @property
    def failure(self) -> FailureReason:
        """Killed from outside (SIGKILL: the OOM killer, a user), crashed (a crash signal), or
        exited with an error of its own."""
        sig = self.signal
        if sig is not None and sig in CRASH_SIGNALS:
            return FailureReason.CRASHED
        if sig is not None:
            return FailureReason.KILLED
        return FailureReason.EXITED

    def text(self) -> str:
        """`its worker (global rank 3, local rank 1, pid 77) was killed by SIGKILL`, or the
        worker's own error."""
        who = f"global rank {self.rank}" + (
            f", local rank {self.local_rank}" if self.local_rank is not None else ""
        )
        who += f", pid {self.pid}" if self.pid is not None else ""
        sig = self.signal
        if sig is not None:
            by = "the OOM killer or a user" if sig == signal.SIGKILL else "a signal"
            return f"its worker ({who}) was killed by {sig.name} ({by}; torchrun's root cause)"
        if self.error:
            return f"its worker ({who}) failed: {self.error}"
        return f"its worker ({who}) exited with code {self.exitcode} and wrote no error"


def parse_root_cause(text: str) -> RootCause | None:
    """torchrun's root cause in a pod's log, or None when the log holds none (whole)."""
    at = text.rfind(_ROOT)
    if at < 0:
        return None
    rank = local = code = pid = None
    trace: list[str] = []
    in_trace = False
    for line in text[at + len(_ROOT) :].splitlines():
        if _BORDER.match(line):
            break
        if in_trace:
            trace.append(line.strip())
            continue
        if m := _RANK.match(line):
            rank, local = int(m.group(1)), int(m.group(2))
        elif m := _EXIT.match(line):
            code, pid = int(m.group(1)), int(m.group(2))
        elif m := _TRACE.match(line):
            trace.append(m.group(1).strip())
            in_trace = True
    if rank is None or code is None:
        return None
    said = [t for t in trace if t]
    error = said[-1] if said else ""
    if error.startswith(_NO_TRACEBACK) or (code < 0 and error.startswith("Signal ")):
        error = ""
    return RootCause(rank, local, code, pid, error)


__all__ = ["RootCause", "parse_root_cause"]
