"""Heartbeats, the collective timeout, and naming the rank that stopped.

A rank that waits forever on a collective only knows that somebody else is late; the message a
user needs names that somebody. So every rank runs one daemon thread that, about once a second,
writes a heartbeat to the rendezvous store through a store client of its own: wall time, a beat
counter, hostname (a pod's name in Kubernetes), pid, and the rank's progress (op, size,
placement, phase), which the main thread updates at size boundaries only, never per timed op.
Under torchrun the store server lives in the agent, so it outlives a stopped or dead rank.

The same thread is the collective timeout: when the main thread has made no progress for the
timeout (-T, or POD_TIMEOUT_S in a pod), or when a collective fails because a peer went away,
the rank that noticed reads every heartbeat twice a few seconds apart and names the culprit: a
rank whose heartbeat stopped (SIGSTOP, a dead process or node), else a rank whose main thread
burns CPU outside the collective without progressing (a hang in its own code), else the rank
furthest behind. A rank whose own watchdog fired while its own main thread is that busy names
itself, from its own /proc and stack: first-hand, whatever the store shows of it.

A heartbeat's content (step, CPU, stack) is read when the heartbeat is built, and on a busy machine
the write can land seconds later: a thread waits for the GIL behind a main thread that spins, or
that loads a shared library. So the noticing rank judges each rank by a heartbeat built after its
first read (the second to land after it: the beats of one thread land in order), waiting a while
longer for it when the machine is slow, never by one that only landed late.
It prints one FAULT_PREFIX line on stdout and one human line on stderr, aborts the NCCL
communicator (bounded), and exits 1. The heartbeat write waits while a timed loop runs (up to
3 s, so a long loop still beats), so it does not land inside the short ones whose times it could
disturb (BENCHMARKS.md has the on/off figures).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from nccl_k8s.bench import report
from nccl_k8s.bench.report import NO_HEARTBEAT, NO_PROGRESS, STORE_LOST

#: Seconds between heartbeats; NCCL_K8S_HEARTBEAT_S overrides (0 turns heartbeats off).
#: Where a launcher wants each noticing rank's fault record (`fault-<rank>.json`, the fault
#: line's JSON); launch._procs sets it for `nccl-k8s run`.
FAULT_DIR_ENV = "NCCL_K8S_FAULT_DIR"
INTERVAL_S = 1.0
#: How long the noticing rank watches the heartbeats before it decides which one stopped.
_GRACE_BEATS = 3
#: How much longer than the grace it waits for heartbeats built after its first read.
_SLOW_GRACES = 2
#: Longest a heartbeat waits for a timed loop to end before it is written anyway.
_MAX_DEFER_S = 3.0
#: Where a main thread waits for its peers or its device, whatever CPU the wait burns: torch's
#: collectives and CUDA waits, and the direct NCCL path's own (libnccl, the driver, the store).
_WAITING_IN = (
    "/torch/distributed/", "/torch/cuda/", "/nccl_k8s/bench/nccl.py", "/nccl_k8s/bench/cuda.py",
    "/nccl_k8s/bench/store.py", "/nccl_k8s/bench/direct.py",
)  # fmt: skip
#: Share of one CPU above which a main thread that is not waiting counts as burning CPU: one
#: that waits in a collective sleeps (~0); a spinning one gets a CPU's share even on a machine
#: loaded 10 times over.
_BUSY_SHARE = 0.05
_KEY = "nccl_k8s/heartbeat"


class Watchdog:
    """One rank's heartbeat thread and fault reporter."""

    def __init__(
        self,
        rank: int,
        world: int,
        *,
        host: str,
        timeout_s: float,
        interval_s: float | None = None,
        on_abort: Callable[[], None] | None = None,
        stdout: Any = None,
    ) -> None:
        self.rank, self.world, self.host = rank, world, host
        self.pid = os.getpid()
        self.timeout_s = timeout_s
        env = os.environ.get("NCCL_K8S_HEARTBEAT_S")
        self.interval_s = float(env) if env else (interval_s or INTERVAL_S)
        self.on_abort = on_abort
        self.stdout = stdout
        """Where the FAULT line goes (pods' logs); None: only the human line on stderr and the
        fault file (nccl-k8s run, whose user reads the terminal)."""
        self.where = "starting"
        self.step = 0
        self.busy = False
        """True while a timed loop runs: the heartbeat waits for it to end."""
        self._mark = time.monotonic()
        self._beats = 0
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._faulted = threading.Lock()
        self._thread: threading.Thread | None = None
        self._store: Any = None
        self._store_lost = False
        self._prefix = f"{_KEY}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        self._main = threading.main_thread().ident
        self._main_tid = threading.main_thread().native_id
        self._cpu: tuple[float, float] | None = None

    # -- main thread -------------------------------------------------------------------------
    def start(self) -> Watchdog:
        if self.interval_s <= 0 and not self.timeout_s:
            return self
        self._store = self._connect()
        self._beat()
        self._thread = threading.Thread(target=self._run, name="nccl-k8s-watchdog", daemon=True)
        self._thread.start()
        return self

    def progress(self, where: str) -> None:
        """The main thread moved on (a size, a placement, a phase): one attribute write or two."""
        self.where = where
        self.step += 1
        self._mark = time.monotonic()

    def alive(self) -> None:
        """The main thread waits on purpose (between sweeps): no timeout, no step counted."""
        self._mark = time.monotonic()

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        """Around a timed loop: no heartbeat write lands inside it."""
        self.busy = True
        self._idle.clear()
        try:
            yield
        finally:
            self.busy = False
            self._idle.set()

    def stop(self) -> None:
        """End the thread and close the store client now, not at interpreter exit (a client
        torn down by the garbage collector while the thread is inside it aborts the process)."""
        self._stop.set()
        self._idle.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            if self._thread.is_alive():
                return  # still inside a store call: leave the client to it
        self._store_lost = True
        self._store = None

    # -- the thread --------------------------------------------------------------------------
    def _connect(self) -> Any:
        """A store client of the thread's own: ours where the launcher (or rank 0) hosts
        bench.store's server, else torch's TCPStore (torchrun's agent, gloo's rank 0)."""
        from nccl_k8s.bench.store import STORE_ENV, STORE_OURS, StoreClient

        host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        if os.environ.get(STORE_ENV) == STORE_OURS:
            return StoreClient(host, port, timeout_s=10.0, connect_s=10.0)
        from torch.distributed import TCPStore  # type: ignore[attr-defined]

        return TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=10))

    def _main_cpu(self) -> float | None:
        """The main thread's CPU seconds, user and system (Linux /proc; None elsewhere)."""
        try:
            with open(f"/proc/self/task/{self._main_tid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    def _main_busy(self) -> bool:
        """Whether the main thread burned CPU since the last beat (Linux: utime and stime in
        /proc). A rank blocked in a collective waiting for its peers sleeps and uses almost no
        CPU; one spinning in its own code uses a whole CPU, or on a machine busy with other
        work whatever share it gets: more than _BUSY_SHARE even loaded 10 times over. Its state
        letter is no evidence: while this thread holds the GIL a spinning main thread waits for
        it, asleep (S)."""
        sample = self._main_cpu()
        if sample is None:
            return False
        now = time.monotonic()
        last, self._cpu = self._cpu, (now, sample)
        if last is None or now <= last[0]:
            return False
        return (sample - last[1]) / (now - last[0]) >= _BUSY_SHARE

    def _main_at(self) -> str:
        """The main thread's innermost Python frame (file:line), via sys._current_frames."""
        frame = sys._current_frames().get(self._main or -1)
        return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else ""

    def _beat(self) -> None:
        self._beats += 1
        moving, at = self._main_busy(), self._main_at()  # /proc first: its read may wait
        value = {
            "t": time.time(), "n": self._beats, "step": self.step, "where": self.where,
            "idle": round(time.monotonic() - self._mark, 3), "host": self.host, "pid": self.pid,
            "moving": moving, "at": at,
        }  # fmt: skip
        if self._store_lost:
            return
        try:
            self._store.set(f"{self._prefix}/{self.rank}", json.dumps(value))
        except Exception:  # the launcher is gone; a lost store must not kill the rank by itself
            self._store_lost = True

    def _run(self) -> None:
        interval = self.interval_s if self.interval_s > 0 else 1.0
        while not self._stop.wait(interval):
            if self.interval_s > 0:
                if self.busy:  # sleep until the timed loop ends (no polling beside it)
                    self._idle.wait(_MAX_DEFER_S)
                self._beat()
            now = time.monotonic()
            idle = now - self._mark
            if self.timeout_s and idle > self.timeout_s:
                self.fault(
                    f"no progress for {idle:.0f} s (timeout -T {self.timeout_s:g} s)",
                    timed_out=True,
                )

    # -- naming the culprit --------------------------------------------------------------------
    def _read(self) -> dict[int, dict[str, Any]] | None:
        """Every rank's last heartbeat (None: the store does not answer)."""
        out: dict[int, dict[str, Any]] = {}
        try:
            for r in range(self.world):
                key = f"{self._prefix}/{r}"
                if self._store.check([key]):
                    out[r] = json.loads(self._store.get(key))
        except Exception:
            return None
        return out

    def diagnose(self, *, timed_out: bool = False) -> dict[str, Any]:
        """The culprit: this rank when its own main thread is the busy one (`timed_out`: its
        own watchdog fired), else a rank whose heartbeat stopped, else one busy outside the
        collective, else the one furthest behind, else None."""
        if self.world == 1:
            return {"culprit": 0, "host": self.host, "pid": self.pid, "reason": "the only rank",
                    "kind": NO_PROGRESS, "where": self.where}  # fmt: skip
        if self._store is None:
            return {"culprit": None, "host": None, "pid": None, "where": None, "kind": None,
                    "reason": "heartbeats are off (NCCL_K8S_HEARTBEAT_S=0)"}  # fmt: skip
        mine = (time.monotonic(), self._main_cpu())
        first = self._read()
        second = self._settle(first)
        if timed_out:
            here = self._busy_here(*mine)
            if here is not None:
                return self._named(self.rank, {"host": self.host, "pid": self.pid,
                                               "where": self.where}, here)  # fmt: skip
        if first is None or second is None:
            hosted = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
            return {
                "culprit": 0 if hosted and self.rank != 0 else None, "host": None, "pid": None,
                "where": None, "kind": STORE_LOST,
                "reason": "the rendezvous store does not answer"
                + (" (rank 0 hosts it)" if hosted else ""),
            }  # fmt: skip
        stale = [r for r in range(self.world) if r != self.rank and _beats(first, second, r) == 0]
        if stale:
            culprit = min(stale, key=lambda r: second[r]["t"] if r in second else -1.0)
            hb = second.get(culprit)
            if hb is None:
                reason = "never sent a heartbeat"
            else:
                grace = _GRACE_BEATS * max(self.interval_s, 0.2)
                reason = f"no heartbeat for {max(time.time() - float(hb['t']), grace):.0f} s"
            return self._named(culprit, hb, reason, kind=NO_HEARTBEAT)
        return self._from_progress(second)

    def _settle(self, first: dict[int, dict[str, Any]] | None) -> dict[int, dict[str, Any]] | None:
        """The heartbeats again, after the grace, once every other rank's latest was built
        after `first` was read (two have landed since), or _SLOW_GRACES graces later: a rank
        whose beat has not landed by then is not beating. Keeps beating: the others may be
        diagnosing this rank."""
        tick = max(self.interval_s, 0.2)
        grace = _GRACE_BEATS * tick
        start = time.monotonic()
        second = None
        while True:
            time.sleep(tick)
            self._beat()
            waited = time.monotonic() - start
            if waited < grace:
                continue
            second = self._read()
            if first is None or second is None or waited >= grace * (1 + _SLOW_GRACES):
                return second
            if all(_beats(first, second, r) >= 2 for r in range(self.world) if r != self.rank):
                return second

    def _busy_here(self, since: float, before: float | None) -> str | None:
        """Why this rank is the culprit itself, when its own main thread (which made no
        progress for the timeout) is outside any collective and burned CPU since `since`."""
        after, at = self._main_cpu(), self._main_at()
        if before is None or after is None or _waiting(at):
            return None
        share = (after - before) / max(time.monotonic() - since, 1e-3)
        if share < _BUSY_SHARE:
            return None
        return _busy_reason(at, f"{share:.0%} of a CPU, in its own code")

    def _from_progress(self, second: dict[int, dict[str, Any]]) -> dict[str, Any]:
        """Every rank beats: a rank busy outside the collective without progressing, else the
        one furthest behind, else None (the collective itself does not complete)."""
        tick = max(self.interval_s, 0.2)
        busy = sorted(
            (int(hb["step"]), r)
            for r, hb in second.items()
            if r != self.rank and hb.get("moving") and not _waiting(str(hb.get("at") or ""))
            and float(hb.get("idle") or 0.0) >= 2 * tick
        )  # fmt: skip
        if busy:
            culprit = busy[0][1]
            hb = second[culprit]
            return self._named(culprit, hb, _busy_reason(hb.get("at"), "no progress for "
                                                         f"{float(hb['idle']):.0f} s"))  # fmt: skip
        steps = {r: int(hb["step"]) for r, hb in second.items()}
        steps[self.rank] = self.step
        low = min(steps.values())
        ahead = max(steps, key=lambda r: steps[r])
        if low < steps[ahead]:
            culprit = min((r for r in steps if steps[r] == low), key=lambda r: r)
            hb = second.get(culprit, {"where": self.where, "host": self.host, "pid": self.pid})
            reason = (
                f"alive but behind: at step {low} while rank {ahead} is at step {steps[ahead]} "
                f"({second.get(ahead, {}).get('where', self.where)})"
            )
            return self._named(culprit, hb, reason)
        return {"culprit": None, "host": None, "pid": None, "where": self.where, "kind": None,
                "reason": "every rank is alive at the same step: the collective itself does not "
                          "complete (network or library)"}  # fmt: skip

    @staticmethod
    def _named(
        culprit: int, hb: dict[str, Any] | None, reason: str, *, kind: str = NO_PROGRESS
    ) -> dict[str, Any]:
        hb = hb or {}
        return {"culprit": culprit, "host": hb.get("host"), "pid": hb.get("pid"),
                "reason": reason, "kind": kind, "where": hb.get("where")}  # fmt: skip

    def fault(self, noticed: str, *, raised_here: bool = False, timed_out: bool = False) -> None:
        """Name the culprit, print the FAULT line, abort the communicator and exit 1.

        Called by the watchdog thread (timeout) or by the main thread when a collective raised
        (`raised_here`); then, if the culprit is this rank itself or nobody can be named, it
        returns after the line (culprit null) or without one (itself), so that the caller
        re-raises and the rank's own error names it. The first caller reports; a second waits.
        """
        if not self._faulted.acquire(blocking=False):
            while True:
                time.sleep(3600)
        try:
            found = self.diagnose(timed_out=timed_out)
        except Exception as exc:  # naming must never hide the fault itself
            found = {"culprit": None, "host": None, "pid": None, "where": self.where, "kind": None,
                     "reason": f"could not read the heartbeats: {exc}"}  # fmt: skip
        culprit = found["culprit"]
        if raised_here and culprit == self.rank and self.world > 1:
            self._faulted.release()
            return
        self._report(noticed, found, timed_out=timed_out)
        if raised_here and culprit is None:
            self._faulted.release()
            return
        if self.on_abort is not None:  # bounded: an abort that hangs must not keep the GPUs
            t = threading.Thread(target=self.on_abort, daemon=True)
            t.start()
            t.join(timeout=10)
        os._exit(1)

    def _report(self, noticed: str, found: dict[str, Any], *, timed_out: bool) -> None:
        payload = {"rank": self.rank, **found, "noticed": noticed, "timed_out": timed_out}
        line = report.fault_line(payload)
        if self.stdout is not None:
            with contextlib.suppress(Exception):
                self.stdout.write(line + "\n")
                self.stdout.flush()
        # A launcher that watches the ranks (nccl-k8s run) reads the same record from a file
        # in the directory it names: rank 0's stdout is the user's terminal, not its own.
        fault_dir = os.environ.get(FAULT_DIR_ENV)
        if fault_dir:
            with contextlib.suppress(OSError):
                path = os.path.join(fault_dir, f"fault-{self.rank}.json")
                with open(path + ".tmp", "w") as f:
                    f.write(line[len(report.FAULT_PREFIX) + 1 :] + "\n")
                os.replace(path + ".tmp", path)
        culprit = found["culprit"]
        who = "unknown" if culprit is None else f"rank {culprit}"
        if culprit is not None and found.get("pid") is not None:
            who += f" (pid {found['pid']} on {found.get('host')})"
        at = f", last at {found['where']}" if found.get("where") else ""
        sys.stderr.write(
            f"rank {self.rank}: {noticed}; culprit {who}: {found['reason']}{at}; aborting\n"
        )
        sys.stderr.flush()


def _beats(first: dict[int, dict[str, Any]], second: dict[int, dict[str, Any]], r: int) -> int:
    """How many of rank r's heartbeats landed between two reads (one from a rank first seen in
    the second)."""
    if r not in second:
        return 0
    if r not in first:
        return 1
    return int(second[r]["n"]) - int(first[r]["n"])


def _waiting(at: str) -> bool:
    """Whether a main thread at `at` (file:line) waits for its peers or its device."""
    return any(part in at for part in _WAITING_IN)


def _busy_reason(at: object, evidence: str) -> str:
    return (
        f"alive but busy outside the collective (running {at or 'Python'}; {evidence}) "
        "while the other ranks wait in it"
    )


__all__ = ["FAULT_DIR_ENV", "INTERVAL_S", "Watchdog"]
