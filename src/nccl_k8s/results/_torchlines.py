"""PyTorch's lines about NCCL, read by the NCCL log reader (`nccllog`): ProcessGroupNCCL's
watchdog timeouts, DistBackendError, the ncclResult_t line under it and NCCL's own message after
`Last error:`. A user often pastes only these lines: they are the error, with no NCCL line around.
Facts only, as in `nccllog`: the rules (`rules.errors`) judge them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from nccl_k8s.results.pastes import strip_prefixes

# PyTorch: `[rank4]:[E226 ...] [Rank 4] Watchdog caught collective operation timeout:
# WorkNCCL(SeqNum=5653, OpType=ALLREDUCE, ...) ran for 600011 milliseconds before timing out.`
_WATCHDOG = re.compile(
    r"(?:^\[rank(?P<prefix_rank>\d+)\]:.*?)?(?:\[Rank (?P<rank>\d+)\] )?(?P<what>Watchdog caught "
    r"collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)).*?\) ran "
    r"for (?P<ms>\d+) milliseconds"
)
_WATCHDOG_START = "Watchdog caught collective operation timeout"
# ProcessGroupNCCL's watchdog dies of what it caught (`[PG ID 0 PG GUID 0(default_pg) Rank 1]
# Process group watchdog thread terminated with exception: CUDA error: unspecified launch
# failure`; older: `[Rank 0] NCCL watchdog thread terminated with exception: ...`).
_TORCH_ERROR = re.compile(
    r"(?:torch\.distributed\.)?DistBackendError.*$|NCCL error:? .*remote process exited or there "
    r"was a network error.*$|(?:Process group|NCCL) watchdog thread terminated with exception: .*$"
)
# The rank ProcessGroupNCCL names in its own bracket before the watchdog's words.
_PG_RANK = re.compile(r"\[(?:PG ID \d+ PG GUID \S+ )?Rank (\d+)\]\s*$")
_TORCH_RANK = re.compile(r"^\[rank(\d+)\]:")
# PyTorch's `[rank1]:` behind a launcher's own prefix (NeMo-Run's `B-nemo-ft3/0 [default1]:`,
# `[80746] `): the rank of the line, before the error.
_RANK_LEAD = re.compile(r"(?:^|[\s:\]])\[rank(\d+)\]:\s*$")
# PyTorch names the rank itself in its bootstrap error: `[4] is setting up NCCL communicator and
# retrieving ncclUniqueId from [0] via c10d key-value store ...`.
_SETUP_RANK = re.compile(r"\[(\d+)\] is setting up NCCL communicator")
# A host name before the line, as pdsh, clush and `mpirun --tag-output`-like wrappers put it
# (`rdma-test-gpu-worker-1: torch.distributed.DistBackendError: ...`).
# (Not an exception's name: `RuntimeError: NCCL error: remote process exited ...`.)
_HOST_LEAD = re.compile(r"(?![\w.]*(?:Error|Exception|Warning):)(?P<host>[A-Za-z][\w.-]*):\s*")
# PyTorch's NCCL error ends with NCCL's own last WARN message (ncclGetLastError), on the line after
# `Last error:` (or on the same line, when a paste lost its line breaks).
_LAST_ERROR = re.compile(r"^(?P<lead>(?:.*?[\]:]\s+)?)Last error:\s*(?P<msg>.*)$")
# The ncclResult_t PyTorch names on the line after its error: `ncclRemoteError: A call failed ...`.
_RESULT = re.compile(r"(?:^|[\]:]\s+)(?P<line>nccl[A-Za-z]+Error: .*)$")


@dataclass(frozen=True)
class WatchdogTimeout:
    """PyTorch's watchdog gave up on a collective: which, its SeqNum, how long it ran."""

    op: str
    seq: int
    ms: int


@dataclass(frozen=True)
class TorchEvent:
    """A line of PyTorch's ProcessGroupNCCL about NCCL: a watchdog timeout or an error."""

    #: The rank PyTorch names (`[rank3]:`, `[Rank 3]`), None when the line names none.
    rank: int | None
    #: The error in PyTorch's words (DistBackendError, remote process exited, ...); "" for a timeout.
    error: str = ""
    timeout: WatchdogTimeout | None = None
    #: What PyTorch's line says, as printed (without its rank and time): what a finding about
    #: the event stands for, in each line that repeats it.
    text: str = field(default="", compare=False)
    #: NCCL's last WARN message, which PyTorch prints after `Last error:` ("" when absent): the
    #: error itself, where a paste holds no NCCL line.
    last_error: str = field(default="", compare=False)
    #: The ncclResult_t line PyTorch prints under its error (`ncclRemoteError: A call ...`).
    result: str = field(default="", compare=False)
    #: The host a launcher's prefix names on PyTorch's line (`worker-1: ...`), None without one.
    host: str | None = field(default=None, compare=False)


class TorchLines:
    """Reads PyTorch's lines of one or more logs, in order: `events`, first of a kind per rank
    and text. `start` begins a log (a `Last error:` never continues into the next one)."""

    def __init__(self) -> None:
        self.events: list[TorchEvent] = []
        #: After a `Last error:` line: what preceded it on the line (`[rank3]: `), until the
        #: message.
        self._lead: str | None = None
        #: A watchdog line cut short (a paste hard-wrapped at a terminal's width: `... OpTy` /
        #: `pe=BROADCAST, ...`), until the line after it completes it.
        self._cut: str | None = None

    def start(self) -> None:
        self._lead = None
        self._cut = None

    def read(self, line: str) -> bool:
        """Whether the line is one of PyTorch's about NCCL (or NCCL's message it quotes)."""
        cut, self._cut = self._cut, None
        # A wrap at a terminal's width cuts anywhere (nothing lost); an editor's, at a space.
        if cut is not None and any(self._event(cut + sep + line) for sep in ("", " ")):
            return True
        if self._event(line) or self._last_error(line):
            return True
        if _WATCHDOG_START in line:
            self._cut = line.rstrip("\r\n")
            return True
        return False

    def _event(self, line: str) -> bool:
        if w := _WATCHDOG.search(line):
            rank = w.group("rank") or w.group("prefix_rank")
            timeout = WatchdogTimeout(w.group("op"), int(w.group("seq")), int(w.group("ms")))
            event = TorchEvent(
                None if rank is None else int(rank), timeout=timeout, text=w.group("what")
            )
        elif e := _TORCH_ERROR.search(line):
            lead = line[: e.start()]
            r = (
                _TORCH_RANK.search(line)
                or _RANK_LEAD.search(lead)
                or _PG_RANK.search(lead)
                or _SETUP_RANK.search(line)
            )
            h = _HOST_LEAD.fullmatch(lead)
            # A paste that lost its line breaks keeps NCCL's message on the same line.
            error, _, last = e.group(0).partition("Last error:")
            error = error.strip()
            last = strip_prefixes(last.strip()).strip()
            event = TorchEvent(
                int(r.group(1)) if r else None,
                error=error,
                text=error,
                last_error=last,
                host=h.group("host") if h else None,
            )
        else:
            return False
        self._lead = None
        if event not in self.events:
            self.events.append(event)
        return True

    def _last_error(self, line: str) -> bool:
        """`Last error:` and the line after it: NCCL's message, given to PyTorch's error before
        it (of the same rank; without one, `Last error:` says nothing about NCCL). What
        precedes `Last error:` (`[rank3]: `, a logger's `ERROR 04-07 ... ray_utils.py:45] `) is
        cut from the message's line too."""
        text = strip_prefixes(line).strip()
        if self._lead is None:
            if (r := _RESULT.search(text)) and self.events:
                e = self.events[-1]
                if e.timeout is None and not e.result:
                    self.events[-1] = replace(e, result=r.group("line"))
                    return True
            m = _LAST_ERROR.match(text)
            if m is None:
                return False
            self._lead = m.group("lead")
            text = m.group("msg")
            if not text:
                return True
        elif text.startswith(self._lead):
            text = text[len(self._lead) :].strip()
        if not text:
            return True
        r = _TORCH_RANK.match(self._lead)
        rank = int(r.group(1)) if r else None
        self._lead = None
        for i in range(len(self.events) - 1, -1, -1):
            e = self.events[i]
            if e.timeout is None and not e.last_error and (rank is None or e.rank in (rank, None)):
                self.events[i] = replace(e, last_error=text)
                return True
        return True


__all__ = ["TorchEvent", "TorchLines", "WatchdogTimeout"]
