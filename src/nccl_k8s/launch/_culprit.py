"""Which rank made a local run fail: the culprit, from evidence, not the rank that noticed.

The rank that reports a failure is usually not its cause: a rank stopped by SIGSTOP makes its peer
time out, a rank killed by SIGKILL makes its peer see "Connection closed by peer", and the peer is
the one that raises. The launcher holds facts no rank has (every rank's pid, how and when it
ended, its process state) and decides in this order:

1. a rank killed by a signal the launcher did not send (SIGKILL from the OOM killer or a user);
2. a rank that was stopped (state T or t in /proc/<pid>/stat) or did not progress (the only rank
   still running after its peers timed out waiting);
3. the culprit a rank named in its fault file ($NCCL_K8S_FAULT_DIR/fault-<rank>.json, written by
   the engine when it notices a peer's failure), in the culprit's own words where it named
   itself (first-hand: its own CPU and stack), else the lowest noticing rank's;
4. the first rank that failed with a message that is not an echo of another rank's death.

Pure: `attribute` takes the facts and returns an exit code or raises RunFailed (its `reason` the
kind of failure: killed, crashed, stopped, no progress ...), so every rule is tested without
starting a process. The rules decide on typed facts: how a rank ended, its /proc state, the fault
records' fields, and `Said`, what a rank's own error says of it, read once (`said`) where the
error's text comes in: torch's and gloo's errors carry no type of their own.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import signal
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TypeGuard

from nccl_k8s.errors import CRASH_SIGNALS, FailureReason, RunFailed

#: Exit codes the engine uses for verdicts the table already printed: 1 a check or a --min-busbw
#: floor failed, 2 flags a rank refused.
VERDICTS = frozenset({1, 2})

#: Words of errors that are consequences of another rank's death: its sockets closing under a
#: peer (gloo's and torch's words).
_ECHOES = (
    "closed by peer",
    "reset by peer",
    "broken pipe",
    "connection refused",
    "remote process",
    "peer",
)
#: Words of errors of a rank that gave up waiting for another.
_TIMEOUTS = ("timed out", "timeout", "deadline exceeded")
#: C++ source locations torch puts in front of gloo and c10d errors: noise in a one-line message.
_SOURCE_LOCATION = re.compile(r"\[[^\]\s]*\.(?:cc|cpp|c|h|hpp):\d+\]\s*")
#: torch's advice after a gloo connection error ("This is typically caused by ... GLHF!").
_BOILERPLATE = re.compile(r"\.?\s+This is typically caused by .*$")
#: A message longer than this is cut (the rank's own output above has all of it).
SHORT_MAX = 240


class Said(enum.Enum):
    """What a failed rank's own error says of it."""

    NOTHING = "nothing"
    """It wrote no error (a verdict it printed, or it was killed)."""
    OWN = "own"
    """An error of its own: the rank's own failure."""
    ECHO = "echo"
    """A consequence of another rank's death: its connection to a peer closed or reset."""
    TIMED_OUT = "timed out"
    """It gave up waiting for another rank (its watchdog, gloo's or the store's timeout)."""


def said(error: str) -> Said:
    """What a rank's error text says of it: torch's, gloo's and the store's errors are plain
    text (RuntimeError), so their words are read here, once, where the text comes in. A
    text that both timed out and names a peer timed out."""
    low = error.strip().lower()
    if not low:
        return Said.NOTHING
    if any(t in low for t in _TIMEOUTS):
        return Said.TIMED_OUT
    if any(e in low for e in _ECHOES):
        return Said.ECHO
    return Said.OWN


@dataclasses.dataclass(frozen=True)
class RankFacts:
    """What the launcher knows of one rank once the run has been decided and every rank ended."""

    rank: int
    pid: int
    #: How it ended (negative: killed by that signal); None when it could not be reaped.
    exitcode: int | None
    #: Seconds after the start at which it ended on its own; None when the launcher ended it.
    ended_at: float | None
    #: Its /proc state when the launcher decided, for a rank still running then (e.g. "S", "T").
    state: str | None = None
    #: The signal that stopped it, for state T (SIGSTOP, SIGTSTP, ...), when the kernel said.
    stop_signal: int | None = None
    #: The last line of the error it raised (torch's error file); "" when it wrote none.
    message: str = ""
    #: What that error says of it (`said(message)` where the text came in).
    said: Said = Said.NOTHING

    @property
    def failed_alone(self) -> bool:
        """It ended on its own, and not well."""
        return self.ended_at is not None and self.exitcode not in (0, None)

    @property
    def stopped(self) -> bool:
        return self.ended_at is None and self.state in ("T", "t")


@dataclasses.dataclass(frozen=True)
class Fault:
    """One rank's account of a failure it noticed (the engine's fault file, format v1)."""

    rank: int
    culprit: int | None
    host: str
    pid: int | None
    reason: str
    where: str
    #: What the noticing rank itself saw ("no progress for 31 s (timeout -T 30 s)", an error).
    noticed: str = ""
    #: The noticing rank's own watchdog fired (it saw no progress for -T); False: an error
    #: (`noticed`) was raised in a collective.
    timed_out: bool = False
    #: The kind of culprit the engine named (the record's "kind"); None when it named none.
    kind: FailureReason | None = None

    @property
    def said(self) -> Said:
        """What the noticing rank's record says of it."""
        return Said.TIMED_OUT if self.timed_out else said(self.noticed)


FAULT_FILE_VERSION = 1


def read_faults(directory: Path) -> list[Fault]:
    """The fault files in `directory`, in rank order; a file that is not format v1 is skipped
    (a half-written file from a rank killed mid-write is not evidence)."""
    faults: list[Fault] = []
    for path in sorted(directory.glob("fault-*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        fault = _fault(doc)
        if fault is not None:
            faults.append(fault)
    return sorted(faults, key=lambda f: f.rank)


def _fault(doc: object) -> Fault | None:
    if not isinstance(doc, dict) or doc.get("v") != FAULT_FILE_VERSION:
        return None
    rank, culprit, pid = doc.get("rank"), doc.get("culprit"), doc.get("pid")
    host, reason, where = doc.get("host"), doc.get("reason"), doc.get("where")
    if not _is_int(rank) or not (culprit is None or _is_int(culprit)):
        return None
    if not (pid is None or _is_int(pid)):
        return None
    # host and where are null when the culprit never sent a heartbeat.
    if not isinstance(reason, str) or not all(
        x is None or isinstance(x, str) for x in (host, where)
    ):
        return None
    noticed, kind = doc.get("noticed"), doc.get("kind")
    return Fault(
        rank=rank,
        culprit=culprit,
        host=host or "",
        pid=pid,
        reason=reason,
        where=where or "",
        noticed=noticed if isinstance(noticed, str) else "",
        timed_out=doc.get("timed_out") is True,
        kind=_kind(kind),
    )


def _kind(value: object) -> FailureReason | None:
    """A fault record's "kind" (an engine's word this launcher may not know: None)."""
    try:
        return FailureReason(value)
    except ValueError:
        return None


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def attribute(facts: Sequence[RankFacts], faults: Iterable[Fault] = ()) -> int:
    """The run's exit code when it ended well or with a verdict the table printed (0, 1, 2);
    otherwise raises RunFailed naming the culprit first and the rank that noticed second."""
    faults = list(faults)
    # A rank that noticed and wrote its fault record ended with exit 1 and no error file of its
    # own: what it saw is in the record.
    seen = {f.rank: f for f in faults if f.noticed}
    facts = [
        dataclasses.replace(f, message=seen[f.rank].noticed, said=seen[f.rank].said)
        if f.said is Said.NOTHING and f.rank in seen
        else f
        for f in facts
    ]
    failed = sorted((f for f in facts if f.failed_alone), key=_order)
    if not failed and all(f.exitcode == 0 for f in facts):
        return 0
    verdict = _verdict(facts, failed)
    if verdict is not None:
        return verdict
    found = _from_processes(facts, failed)
    if found is not None:
        culprit, what, reason = found
        named = _from_faults({f.rank: f for f in facts}, faults)
        if reason is FailureReason.NO_PROGRESS and named and named[0].rank == culprit.rank:
            # The rank still running is the one the watchdogs named: their reason (busy outside
            # the collective, behind, no heartbeat) says more than "did not progress".
            raise _failed(*named)
        noticed = _noticed([f for f in failed if f.rank != culprit.rank])
        raise _failed(culprit, what + noticed, reason)
    found = _from_faults({f.rank: f for f in facts}, faults)
    if found is not None:
        culprit, what, reason = found
        if culprit.exitcode not in (0, None) and culprit.said is Said.OWN:
            # Its own crash outranks what a peer saw of it: on a busy machine the peer's
            # heartbeat deadline can pass before the crashed rank's exit is seen, but the
            # traceback says why it stopped.
            what = f"{_how(culprit)}; {what.removeprefix('failed: ')}"
            reason = _ended(culprit)
        raise _failed(culprit, what, reason)
    culprit = _first_failure(facts, failed)
    others = sorted(f.rank for f in failed if f.rank != culprit.rank)
    s = "s" if len(others) > 1 else ""
    also = f" (then rank{s} {', '.join(map(str, others))} failed too)" if others else ""
    raise _failed(culprit, _how(culprit) + also, _ended(culprit))


def _failed(culprit: RankFacts, what: str, reason: FailureReason) -> RunFailed:
    return RunFailed(
        f"rank {culprit.rank} (pid {culprit.pid}) {what}",
        reason=reason,
        rank=culprit.rank,
        exit_status=culprit.exitcode,
    )


def _ended(f: RankFacts) -> FailureReason:
    """How a rank that failed by itself ended: a crash signal, or an error of its own."""
    code = f.exitcode
    if code is not None and code < 0 and -code in CRASH_SIGNALS:
        return FailureReason.CRASHED
    return FailureReason.EXITED


def _order(f: RankFacts) -> tuple[float, int]:
    return (f.ended_at if f.ended_at is not None else float("inf"), f.rank)


def _verdict(facts: Sequence[RankFacts], failed: Sequence[RankFacts]) -> int | None:
    """Ranks that ended with exit code 1 or 2 and raised nothing gave a verdict: the table or a
    one-line error already said why. Ranks the launcher ended after that are not crashes."""
    if not failed or any(f.stopped for f in facts):
        return None
    if all(f.exitcode in VERDICTS and f.said is Said.NOTHING for f in failed):
        return max(int(f.exitcode or 0) for f in failed)
    return None


#: What another rank's failure may make a rank say.
_WAITING = frozenset({Said.TIMED_OUT, Said.ECHO, Said.NOTHING})


def _from_processes(
    facts: Sequence[RankFacts], failed: Sequence[RankFacts]
) -> tuple[RankFacts, str, FailureReason] | None:
    killed = [f for f in failed if f.exitcode is not None and f.exitcode < 0]
    if killed:
        first = killed[0]
        signum = -int(first.exitcode or 0)
        if signum in CRASH_SIGNALS:
            return first, f"crashed ({_signame(signum)})", FailureReason.CRASHED
        hint = " (the OOM killer? see dmesg)" if signum == signal.SIGKILL else ""
        what = f"was killed by {_signame(signum)}, not by nccl-k8s{hint}"
        return first, what, FailureReason.KILLED
    stopped = [f for f in facts if f.stopped]
    if stopped:
        first = stopped[0]
        how = _signame(first.stop_signal) if first.stop_signal else "state T"
        if first.state == "t":
            how = "by a debugger or tracer"
        return first, f"stopped ({how}): {_waited(failed)}", FailureReason.STOPPED
    # Every rank but one gave up waiting, and that one is still running: it did not progress.
    running = [f for f in facts if f.ended_at is None]
    if (
        len(facts) > 1
        and len(running) == 1
        and failed
        and all(f.said in _WAITING for f in failed)
        and failed[0].said is Said.TIMED_OUT
    ):
        return running[0], f"did not progress: {_waited(failed)}", FailureReason.NO_PROGRESS
    return None


def _from_faults(
    by_rank: dict[int, RankFacts], faults: Iterable[Fault]
) -> tuple[RankFacts, str, FailureReason] | None:
    """The culprit most fault files name (ties: the one the lowest noticing rank names)."""
    named = [f for f in faults if f.culprit is not None and f.culprit in by_rank]
    if not named:
        return None
    votes: dict[int, list[Fault]] = {}
    for f in named:
        votes.setdefault(int(f.culprit or 0), []).append(f)
    culprit = max(votes, key=lambda c: (len(votes[c]), -min(f.rank for f in votes[c])))
    # The culprit's own record, where it wrote one, is first-hand (its own step, CPU and stack,
    # read when its watchdog fired); a peer's comes through heartbeats, which a busy machine
    # delays.
    first = min(votes[culprit], key=lambda f: (f.rank != culprit, f.rank))
    where = f" in {first.where}" if first.where else ""
    who = "its own watchdog" if first.rank == culprit else f"named by rank {first.rank}"
    # A record without a kind (an engine that predates it) still names a rank its peers waited
    # for.
    kind = first.kind or FailureReason.NO_PROGRESS
    return by_rank[culprit], f"failed: {first.reason} ({who}{where})", kind


def _first_failure(facts: Sequence[RankFacts], failed: Sequence[RankFacts]) -> RankFacts:
    """The first rank to fail with a message of its own; echoes only when there is nothing else."""
    pool = list(failed) or [f for f in facts if f.exitcode not in (0, None)] or list(facts)
    return min(pool, key=lambda f: (f.said in (Said.ECHO, Said.NOTHING), *_order(f)))


def _how(f: RankFacts) -> str:
    code = f.exitcode
    if code is None:
        how = "did not end"
    elif code < 0:
        how = f"signal {_signame(-code)}"
    else:
        how = f"exit code {code}"
    return f"failed with {how}: {short(f.message) or 'see its output above'}"


def _waited(failed: Sequence[RankFacts]) -> str:
    if failed and failed[0].said is Said.TIMED_OUT:
        return "the run timed out waiting for it"
    return "the run failed waiting for it"


def _noticed(noticed: Sequence[RankFacts]) -> str:
    if not noticed:
        return "; no other rank had failed yet, nccl-k8s stopped them"
    first = noticed[0]
    said = short(first.message)
    if not said:
        said = (
            f"signal {_signame(-first.exitcode)}"
            if first.exitcode is not None and first.exitcode < 0
            else f"exit code {first.exitcode}"
        )
    return f" (noticed by rank {first.rank}: {said})"


def short(message: str) -> str:
    """A rank's error as one readable line: its last line, without C++ source locations."""
    lines = message.strip().splitlines()
    if not lines:
        return ""
    line = _BOILERPLATE.sub("", _SOURCE_LOCATION.sub("", lines[-1])).strip()
    return line if len(line) <= SHORT_MAX else line[: SHORT_MAX - 1].rstrip() + "…"


def _signame(signum: int | None) -> str:
    try:
        return signal.Signals(int(signum or 0)).name
    except ValueError:
        return f"signal {signum}"


__all__ = [
    "FAULT_FILE_VERSION",
    "Fault",
    "RankFacts",
    "Said",
    "attribute",
    "read_faults",
    "said",
    "short",
]
