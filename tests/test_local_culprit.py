"""Culprit attribution from the launcher's evidence (launch._culprit), rule by rule, without processes.

The end-to-end counterparts (real gloo ranks stopped and killed) are in test_local_faults.py.
"""

from __future__ import annotations

import dataclasses
import json
import signal
from pathlib import Path

import pytest

from nccl_k8s.errors import FailureReason, RunFailed
from nccl_k8s.launch._culprit import Fault, RankFacts, attribute, read_faults, said, short

TIMEOUT = (
    "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78]"
    " Timed out waiting 3000ms for recv operation to complete"
)
ECHO = (
    "RuntimeError: Connection closed by peer [127.0.0.1]:37002. This is typically caused by a "
    "remote worker crashing. Check the logs of the remote worker before reporting an error. GLHF!"
)


def ended(rank: int, code: int, at: float, message: str = "") -> RankFacts:
    """A rank that ended on its own `at` seconds into the run."""
    return RankFacts(
        rank=rank, pid=4240 + rank, exitcode=code, ended_at=at, message=message, said=said(message)
    )


def stopped_by_us(
    rank: int, state: str = "S", code: int = -signal.SIGTERM, stop_signal: int | None = None
) -> RankFacts:
    """A rank still running when the launcher decided, then ended by it."""
    return RankFacts(
        rank=rank,
        pid=4240 + rank,
        exitcode=code,
        ended_at=None,
        state=state,
        stop_signal=stop_signal,
    )


def blame(facts: list[RankFacts], faults: list[Fault] | None = None) -> RunFailed:
    with pytest.raises(RunFailed) as info:
        attribute(facts, faults or [])
    return info.value


def test_a_stopped_rank_is_named_not_the_rank_that_timed_out() -> None:
    exc = blame(
        [
            ended(0, 1, 5.1, TIMEOUT),
            stopped_by_us(1, "T", -signal.SIGKILL, stop_signal=signal.SIGSTOP),
            ended(2, 1, 5.2, ECHO),
        ]
    )
    assert str(exc) == (
        "rank 1 (pid 4241) stopped (SIGSTOP): the run timed out waiting for it "
        "(noticed by rank 0: RuntimeError: Timed out waiting 3000ms for recv operation to complete)"
    )
    assert exc.rank == 1 and exc.exit_code == 1
    assert exc.reason is FailureReason.STOPPED


def test_a_rank_killed_by_someone_else_beats_the_echo_that_came_first() -> None:
    # The peer's "closed by peer" was seen in the same poll, even slightly earlier.
    exc = blame([ended(0, 1, 3.0, ECHO), ended(1, -signal.SIGKILL, 3.05)])
    assert str(exc) == (
        "rank 1 (pid 4241) was killed by SIGKILL, not by nccl-k8s (the OOM killer? see dmesg) "
        "(noticed by rank 0: RuntimeError: Connection closed by peer [127.0.0.1]:37002)"
    )
    assert exc.rank == 1 and exc.exit_status == -signal.SIGKILL
    assert exc.reason is FailureReason.KILLED


def test_ranks_the_launcher_ended_are_not_suspects() -> None:
    # rank 2 crashed; the launcher then SIGTERMed rank 0 and SIGKILLed the stuck rank 1.
    exc = blame(
        [
            stopped_by_us(0),
            stopped_by_us(1, code=-signal.SIGKILL),
            ended(2, 1, 2.0, "RuntimeError: injected NIC failure"),
        ]
    )
    assert str(exc).startswith("rank 2 (pid 4242) failed with exit code 1: RuntimeError: injected")
    assert exc.reason is FailureReason.EXITED


def test_a_segfault_is_a_crash_of_that_rank() -> None:
    exc = blame([ended(0, 1, 1.2, ECHO), ended(1, -signal.SIGSEGV, 1.0)])
    assert str(exc).startswith("rank 1 (pid 4241) crashed (SIGSEGV) (noticed by rank 0:")
    assert exc.reason is FailureReason.CRASHED


def test_the_only_rank_still_running_after_its_peers_timed_out_did_not_progress() -> None:
    exc = blame([ended(0, 1, 3.0, TIMEOUT), stopped_by_us(1, "R"), ended(2, 1, 3.1, ECHO)])
    assert str(exc).startswith(
        "rank 1 (pid 4241) did not progress: the run timed out waiting for it (noticed by rank 0:"
    )
    assert exc.reason is FailureReason.NO_PROGRESS
    # The watchdogs named that same rank with a reason: theirs says more, and is what is shown
    # (on a busy machine the launcher can see the only running rank before it reads the files).
    busy = Fault(rank=0, culprit=1, host="h", pid=4241, reason="alive but busy outside the "
                 "collective (running spin.py:9) while the other ranks wait in it", where="x")  # fmt: skip
    exc = blame([ended(0, 1, 3.0, TIMEOUT), stopped_by_us(1, "R"), ended(2, 1, 3.1, ECHO)], [busy])
    assert str(exc).startswith(
        "rank 1 (pid 4241) failed: alive but busy outside the collective (running spin.py:9)"
    )
    other = dataclasses.replace(busy, culprit=2)  # a file naming another rank: processes win
    exc = blame([ended(0, 1, 3.0, TIMEOUT), stopped_by_us(1, "R"), ended(2, 1, 3.1, ECHO)], [other])
    assert str(exc).startswith("rank 1 (pid 4241) did not progress")
    # Two ranks still running: no process evidence singles one out; the first failure is named.
    exc = blame([ended(0, 1, 3.0, TIMEOUT), stopped_by_us(1, "S"), stopped_by_us(2, "S")])
    assert str(exc).startswith("rank 0 (pid 4240) failed with exit code 1: RuntimeError: Timed out")


def test_a_culprit_named_in_a_fault_file_is_used_when_processes_name_none(tmp_path: Path) -> None:
    doc = {
        "v": 1,
        "rank": 0,
        "culprit": 2,
        "host": "node-a",
        "pid": 4242,
        "reason": "sent nothing for 3 s",
        "where": "all_reduce 1024 B",
    }
    (tmp_path / "fault-0.json").write_text(json.dumps(doc))
    (tmp_path / "fault-1.json").write_text('{"v": 1, "rank": 1, "culprit": 2, "host"')  # torn
    (tmp_path / "fault-3.json").write_text(json.dumps({**doc, "v": 2, "culprit": 3}))  # unknown v
    (tmp_path / "notes.json").write_text(json.dumps({**doc, "culprit": 3}))  # not a fault file
    faults = read_faults(tmp_path)
    assert faults == [
        Fault(
            rank=0,
            culprit=2,
            host="node-a",
            pid=4242,
            reason="sent nothing for 3 s",
            where="all_reduce 1024 B",
        )
    ]
    facts = [ended(0, 1, 3.0, TIMEOUT), ended(1, 1, 3.0, ECHO), ended(2, 1, 3.2, ECHO)]
    exc = blame(facts, faults)
    assert str(exc) == (
        "rank 2 (pid 4242) failed: sent nothing for 3 s (named by rank 0 in all_reduce 1024 B)"
    )
    assert exc.rank == 2
    # Without the file, the same facts name the rank that timed out.
    assert blame(facts).rank == 0
    # Process evidence wins over a fault file.
    killed = [ended(0, 1, 3.0, ECHO), ended(1, -signal.SIGKILL, 2.9), ended(2, 1, 3.2, ECHO)]
    assert blame(killed, faults).rank == 1


def test_a_named_culprit_that_crashed_is_named_with_its_own_traceback() -> None:
    # On a busy machine rank 0's heartbeat deadline for rank 1 passes before rank 1's exit is
    # seen; rank 1's own traceback still says why it stopped (issue 21).
    heartbeat = Fault(
        rank=0, culprit=1, host="vm", pid=4241, reason="no heartbeat for 3 s",
        where="all_reduce 1024 B warm-up",
    )  # fmt: skip
    crash = "Traceback (most recent call last):\nRuntimeError: injected NIC failure"
    facts = [ended(0, 1, 3.1, ECHO), ended(1, 1, 3.0, crash)]
    exc = blame(facts, [heartbeat])
    assert exc.rank == 1 and exc.reason is FailureReason.EXITED  # its own error, first-hand
    assert str(exc) == (
        "rank 1 (pid 4241) failed with exit code 1: RuntimeError: injected NIC failure; "
        "no heartbeat for 3 s (named by rank 0 in all_reduce 1024 B warm-up)"
    )


def test_the_culprit_most_fault_files_name_wins() -> None:
    def fault(rank: int, culprit: int | None) -> Fault:
        return Fault(rank=rank, culprit=culprit, host="h", pid=None, reason="lost", where="")

    facts = [ended(r, 1, 3.0, TIMEOUT) for r in range(4)]
    faults = [fault(0, 3), fault(1, 2), fault(2, 3), fault(3, None), fault(1, 9)]
    assert blame(facts, faults).rank == 3
    assert "(named by rank 0)" in str(blame(facts, faults))


def test_the_culprits_own_account_of_itself_is_shown_before_a_peers() -> None:
    # Rank 0 read rank 1 through heartbeats a busy machine delayed; rank 1's own watchdog read
    # its own CPU and stack. Both name rank 1; rank 1's first-hand words are shown.
    peer = Fault(rank=0, culprit=1, host="vm", pid=4241, where="all_reduce 1024 B soak",
                 reason="alive but behind: at step 1 while rank 0 is at step 6")  # fmt: skip
    own = Fault(rank=1, culprit=1, host="vm", pid=4241, where="all_reduce 1024 B soak",
                reason="alive but busy outside the collective (running spin.py:9; 12% of a "
                       "CPU, in its own code) while the other ranks wait in it")  # fmt: skip
    facts = [ended(0, 1, 5.0, TIMEOUT), ended(1, 1, 5.1, TIMEOUT)]
    assert str(blame(facts, [peer, own])) == (
        "rank 1 (pid 4241) failed: alive but busy outside the collective (running spin.py:9; "
        "12% of a CPU, in its own code) while the other ranks wait in it (its own watchdog in "
        "all_reduce 1024 B soak)"
    )
    # Without its own record, the lowest noticing rank's words, as before.
    assert "(named by rank 0 in all_reduce 1024 B soak)" in str(blame(facts, [peer]))


def test_verdicts_are_exit_codes_not_crashes() -> None:
    assert attribute([ended(0, 0, 2.0), ended(1, 0, 2.0)]) == 0
    # A check failed on every rank: the table said so; exit 1, no error line.
    assert attribute([ended(0, 1, 2.0), ended(1, 1, 2.0)]) == 1
    # One rank's verdict, the other ended by the launcher while finishing: still the verdict.
    assert attribute([ended(0, 2, 2.0), stopped_by_us(1)]) == 2
    # A verdict code with a traceback is a crash.
    assert blame([ended(0, 1, 2.0, TIMEOUT), ended(1, 0, 2.0)]).rank == 0


def test_short_messages() -> None:
    assert short(TIMEOUT) == (
        "RuntimeError: Timed out waiting 3000ms for recv operation to complete"
    )
    assert short(ECHO) == "RuntimeError: Connection closed by peer [127.0.0.1]:37002"
    assert short("Traceback ...\n  File x\nValueError: bad") == "ValueError: bad"
    assert len(short("x" * 1000)) == 240


def test_a_fault_records_kind_is_the_reason_and_its_timed_out_field_is_read_not_its_words(
    tmp_path: Path,
) -> None:
    record = {
        "v": 1, "rank": 0, "culprit": 1, "host": "vm", "pid": 4241, "where": "all_reduce 8 B",
        "reason": "no heartbeat for 3 s", "kind": "no_heartbeat", "noticed": "stuck",
        "timed_out": True,
    }  # fmt: skip
    (tmp_path / "fault-0.json").write_text(json.dumps(record))
    (fault,) = read_faults(tmp_path)
    assert fault.kind is FailureReason.NO_HEARTBEAT and fault.timed_out
    exc = blame([ended(0, 1, 3.0), ended(1, 1, 3.1, ECHO)], [fault])
    assert exc.rank == 1 and exc.reason is FailureReason.NO_HEARTBEAT
    # Rank 0 wrote no error file: its record says what it saw. "stuck" has no word of a
    # timeout, but its own watchdog fired (timed_out): the one rank still running did not
    # progress. The same words from a collective that raised are an error of rank 0's own.
    unnamed = dataclasses.replace(fault, culprit=None)
    facts = [ended(0, 1, 3.0), stopped_by_us(1, "R")]
    exc = blame(facts, [unnamed])
    assert exc.rank == 1 and exc.reason is FailureReason.NO_PROGRESS
    exc = blame(facts, [dataclasses.replace(unnamed, timed_out=False)])
    assert exc.rank == 0 and exc.reason is FailureReason.EXITED
    assert str(exc) == "rank 0 (pid 4240) failed with exit code 1: stuck"
