"""The node-slow fault: a node's pod processes get about 1/F of the CPU the other nodes' pod
processes get, by SIGSTOP/SIGCONT.

Which processes: every process living in the mount namespace of a sandbox the kubelet made for a
pod of that node, the sandbox's own `sleep` excepted. Only the kubelet's processes and their
children live there (each sandbox is a private namespace the kubelet created), so nothing else on
the machine is touched; the namespace, not the process group, is what finds torchrun's workers,
which run in sessions of their own. Each process is held by a pidfd from the moment it is found
(its namespace checked again after opening), so a pid reused by an unrelated process is never
signalled. The pod processes of the other nodes, found the same way, are the reference.

The cycle, for each slowed node: its processes are continued, stopped again PERIOD_S / F (5 ms
at F=4) later, and kept stopped until the period (20 ms) ends, or longer if in its run window
the node used more CPU than its share: until a task getting the share of a CPU the reference
processes get would have needed F times as long for that much CPU (the most CPU any one of its
processes used, read from its CPU-time clock; the share, measured every 0.1-0.2 s from the
time on a CPU and waiting for one, /proc/PID/task/TID/schedstat, of the reference processes'
CPU-bound threads (slices of MIN_SLICE_NS or more: a thread that sleeps and wakes briefly
measures wakeup latency, not a share), while those were runnable for 20 ms or more; it stays as
last measured while they are not, and is 1 until then). On an idle machine that is the plain duty cycle: a CPU-bound process runs 1/F of
the time. On a busy one the duty cycle alone is no slowdown: a process continued after a stop has
kept its claim on the CPU (the scheduler's lag), so it is run at once and gets nearly all of its
run window, while a process that is never stopped gets only its share. Measured beside two CPU
hogs at a load of 8-18 on 2 cores (tests/test_cluster_node_faults.py), a 4x slowed pod got
0.45-0.84 of a healthy pod's share with the plain cycle, 0.16-0.31 with the charge. The period is short so that anything timed over more than a few tens
of milliseconds sees the slowdown: with a long one, a short measurement can fit in one running
slice and see none.

Why not the kernel's CPU controls: a cgroup's CPU bandwidth (cpu.max, cpu.cfs_quota_us) caps the
CPU absolutely, so on a machine whose load already gives every task less than 1/F of a core it
slows nothing; a cgroup's weight (cpu.weight, cpu.shares) slows nothing on an idle machine; and
either needs a writable cgroup hierarchy with the cpu controller (this machine has it on cgroup
v1 only, outside the unified hierarchy; containers often have none). Signals and /proc work
wherever the cluster's kubelet can run its pods, and the share is relative to what the other
nodes' pods get, whatever else runs on the machine, its scheduler's grouping (autogroups of
sessions) included.

The cycle runs in a process of its own (this file run as a script), not in a thread of the
cluster's process: there it would wait for the GIL behind the API server and the kubelet, and a
stop sent late lets the slowed processes run on. For the same reason it asks for real-time
(SCHED_FIFO) priority where it may. The cluster's side (`Throttle`) sends it, every
`refresh_s`, which namespaces belong to which slowed node, and every pod's; the helper finds
their processes in /proc. When the fault is cleared, the cluster stops, or the cluster's process
dies (its stdin closes), the helper continues every process it stopped and exits.

Nodes of fixed CPUs (`node_cpus`) are held otherwise: by a quota of CPU time per period, as a
cgroup's cpu.max (`_Helper.step_capped`).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

#: node (None: every node) -> (mount-namespace inodes of its pods' sandboxes, the sandboxes'
#: own pids)
Members = Callable[[str | None], tuple[set[int], set[int]]]

PERIOD_S = 0.02
#: The longest a node is stopped for at once, however loaded the machine is.
MAX_PERIOD_S = 0.5
#: The shortest wait between two looks at a capped node's CPU time in its period.
MIN_CHECK_S = 0.001
#: The shortest average slice on a CPU of a reference thread whose share is measured: CPU-bound
#: threads run about a millisecond a slice, threads that only wake up tens of microseconds.
MIN_SLICE_NS = 250_000


class Throttle:
    """Slows the pods of chosen nodes; `set(node, factor)`, `set(node, None)` to clear, `stop()`.

    With `node_cpus`, every node's pods together get at most that many of this machine's CPUs,
    as a real node's pods get its own cores and no more, and a slowed node's 1/factor of that:
    what one node's pods run then neither speeds up nor slows down another's (as long as the
    nodes' CPUs add up to no more than the machine has), where without it the nodes share the
    machine's CPUs as they come. `nodes()` names them."""

    def __init__(
        self,
        members: Members,
        *,
        refresh_s: float = 0.2,
        node_cpus: float | None = None,
        nodes: Callable[[], list[str]] = list,
    ) -> None:
        self._members = members
        self._refresh_s = refresh_s
        self._node_cpus = node_cpus
        self._nodes = nodes
        self._lock = threading.Lock()
        self._factors: dict[str, float] = {}
        self._wake = threading.Event()
        self._stopping = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None

    def set(self, node: str, factor: float | None) -> None:
        """Give the node's pods 1/factor of the CPU the other nodes' pods get; None (or a factor
        <= 1) runs them freely."""
        with self._lock:
            if factor is None or factor <= 1:
                self._factors.pop(node, None)
            else:
                self._factors[node] = float(factor)
            self._start()
        self._wake.set()

    def start(self) -> None:
        """With `node_cpus`: hold every node to it from now on (without: nothing to do until a
        node is slowed)."""
        with self._lock:
            self._start()

    def _start(self) -> None:
        if self._thread is None and (self._factors or self._node_cpus) and not self._stopping:
            self._thread = threading.Thread(target=self._feed, name="node-slow", daemon=True)
            self._thread.start()

    def factor(self, node: str) -> float | None:
        with self._lock:
            return self._factors.get(node)

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._factors.clear()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _feed(self) -> None:
        """Tell the helper, every refresh_s and on every change, which namespaces to slow."""
        proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert proc.stdin is not None
        try:
            while True:
                with self._lock:
                    if self._stopping:
                        return
                    factors = dict(self._factors)
                if self._node_cpus:
                    factors = {node: factors.get(node, 1.0) for node in self._nodes()} | factors
                state = {}
                for node, factor in factors.items():
                    inodes, sandboxes = self._members(node)
                    state[node] = {
                        "factor": factor,
                        "cpus": self._node_cpus,
                        "inodes": sorted(inodes),
                        "exclude": sorted(sandboxes),
                    }
                if state:  # every pod: those of the nodes not slowed are the reference
                    inodes, sandboxes = self._members(None)
                    state[""] = {"inodes": sorted(inodes), "exclude": sorted(sandboxes)}
                try:
                    proc.stdin.write((json.dumps(state) + "\n").encode())
                    proc.stdin.flush()
                except OSError:
                    return
                self._wake.wait(self._refresh_s)
                self._wake.clear()
        finally:
            with contextlib.suppress(OSError):
                proc.stdin.close()  # the helper continues everything it stopped, then exits
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)


# ---- the helper process ------------------------------------------------------------------------


def _mount_ns(pid: int) -> int:
    try:
        return os.stat(f"/proc/{pid}/ns/mnt").st_ino
    except OSError:
        return -1


def _cpu_s(pid: int) -> float:
    """The CPU seconds the process (all its threads) has used: its CPU-time clock, which
    clock_getcpuclockid(3) would name (clock id ~pid << 3 | CPUCLOCK_SCHED), to the nanosecond
    where /proc/PID/stat counts in ticks of 10 ms. 0 once it is gone."""
    try:
        return time.clock_gettime_ns(((~pid) << 3) | 2) / 1e9
    except OSError:
        return 0.0


def _used(since: dict[int, float]) -> list[float]:
    """The CPU seconds each process of `since` (pid -> its `_cpu_s` then) has used since."""
    return [_cpu_s(pid) - c for pid, c in since.items()]


def _runnable_ns(pid: int) -> dict[int, tuple[int, int, int]]:
    """Each thread's nanoseconds on a CPU and waiting for one, and how many times it ran (its
    slices), /proc/PID/task/TID/schedstat."""
    out: dict[int, tuple[int, int, int]] = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with (
                contextlib.suppress(OSError, ValueError),
                open(f"/proc/{pid}/task/{tid}/schedstat") as f,
            ):
                ran, waited, slices = f.read().split()[:3]
                out[int(tid)] = (int(ran), int(waited), int(slices))
    return out


class _Helper:
    def __init__(self) -> None:
        self.factors: dict[str, float] = {}
        self.cpus: dict[str, float] = {}  # node -> the CPUs its pods get at most (capped nodes)
        self.held: dict[str, dict[int, int]] = {}  # node -> pid -> pidfd
        # The share of a CPU the other nodes' pod processes got while runnable, lately; 1 until
        # they have been runnable long enough to tell (then the cycle alone slows the node).
        self.share = 1.0
        self.reference: set[int] = set()  # their pids
        self.ref_ns: dict[int, tuple[int, int, int]] = {}  # their threads' _runnable_ns
        self.measured_at = 0.0
        # node -> (continued at, each held pid's CPU seconds then); a node not here is stopped
        self.running: dict[str, tuple[float, dict[int, float]]] = {}
        self.due: dict[str, float] = {}  # node -> when it is next continued or stopped
        # capped nodes: the CPU seconds its processes may use in this period; what they used
        # beyond it, to be paid from the next periods'
        self.quota: dict[str, float] = {}
        self.debt: dict[str, float] = {}

    def update(self, state: dict[str, dict[str, object]]) -> None:
        everyone = state.pop("", {"inodes": [], "exclude": []})
        for node in set(self.held) - set(state):
            self.release(node)
        self.factors = {node: float(str(s["factor"])) for node, s in state.items()}
        self.cpus = {node: float(str(s["cpus"])) for node, s in state.items() if s.get("cpus")}
        wanted: dict[int, str] = {}
        exclude: set[int] = set()
        for node, s in [("", everyone), *state.items()]:  # a slowed node claims its own pods
            inodes, sandboxes = s["inodes"], s["exclude"]
            assert isinstance(inodes, list) and isinstance(sandboxes, list)
            wanted.update(dict.fromkeys(inodes, node))
            exclude.update(sandboxes)
            if node:
                self.due.setdefault(node, time.monotonic())
        found: dict[str, set[int]] = {node: set() for node in ["", *state]}
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in exclude:
                continue
            owner = wanted.get(_mount_ns(int(entry)))
            if owner is not None:
                found[owner].add(int(entry))
        self.reference = found.pop("")
        if set(self.factors) - set(self.cpus):  # only the slowed nodes' cycle reads the share
            self.measure()
        for node, pids in found.items():
            held = self.held.setdefault(node, {})
            for pid in set(held) - pids:
                os.close(held.pop(pid))
            for pid in pids - set(held):
                try:
                    fd = os.pidfd_open(pid)
                except OSError:
                    continue
                if wanted.get(_mount_ns(pid)) != node:  # the pid was reused meanwhile
                    os.close(fd)
                    continue
                held[pid] = fd
                if node in self.running:  # found while its node runs: stopped with it
                    self.running[node][1][pid] = _cpu_s(pid)

    def measure(self) -> None:
        """Take the share of a CPU the reference processes' CPU-bound threads got since the last
        measure (at most every 0.1 s), if they were runnable for 20 ms or more meanwhile.

        CPU-bound: threads whose slices averaged MIN_SLICE_NS or more. A thread that sleeps and
        wakes briefly (an agent's monitor, a socket reader, a rank waiting for its peer) runs
        for microseconds a slice and, on a loaded machine, waits for a CPU at each wakeup about
        as long whatever it then runs: its ran / (ran + waited) is wakeup latency, not the share
        a task that wants the CPU gets. Beside two CPU hogs a thread waking every 2 ms measured
        0.006 where a CPU-bound one got 0.13 (slices of 0.02 ms against 1 ms). Counted, such
        threads can pull the share toward its floor and the charge to MAX_PERIOD_S: in a
        `nodes check` beside two hogs, a pair with the 4x slowed node measured 1/30 of a healthy
        pair's bandwidth and took 305 s, mostly its pods starting."""
        now = time.monotonic()
        if now - self.measured_at < 0.1:
            return
        self.measured_at = now
        ran = waited = 0
        latest: dict[int, tuple[int, int, int]] = {}
        for pid in self.reference:
            latest.update(_runnable_ns(pid))
        for tid, (r, w, n) in latest.items():
            r0, w0, n0 = self.ref_ns.get(tid, (r, w, n))
            if n > n0 and (r - r0) / (n - n0) >= MIN_SLICE_NS:
                ran, waited = ran + r - r0, waited + w - w0
        self.ref_ns = latest
        if ran + waited >= 20_000_000:
            self.share = (self.share + max(0.01, ran / (ran + waited))) / 2

    def step(self, now: float) -> None:
        """Continue, check or stop each node that is due."""
        for node, due in list(self.due.items()):
            if due <= now:
                if node in self.cpus:
                    self.step_capped(node, now)
                else:
                    self.step_slowed(node, now)

    def step_slowed(self, node: str, now: float) -> None:
        """Continued for PERIOD_S / factor, then stopped until the period ends or, if it ran
        more than its share, until a task given the fair share would have needed factor times as
        long for that much CPU."""
        factor = self.factors[node]
        if node not in self.running:
            self.running[node] = (now, self.cpu_times(node))
            self.signal(node, signal.SIGCONT)
            self.due[node] = now + PERIOD_S / factor
            return
        self.signal(node, signal.SIGSTOP)
        start, cpu = self.running.pop(node)
        used = max(_used(cpu), default=0.0)
        charge = factor * used / self.share
        self.due[node] = start + min(MAX_PERIOD_S, max(PERIOD_S, charge))

    def step_capped(self, node: str, now: float) -> None:
        """A CPU bandwidth quota, as a cgroup's cpu.max: in each period of PERIOD_S the node's
        processes together may use cpus / factor CPUs; they run freely until they have, and are
        stopped until the period ends. What they used beyond it before they were looked at is a
        debt the next periods' quota pays first (as the kernel's runtime that goes negative). A
        node waiting for its peer uses none of its quota and has it when the data comes:
        stopping it after a fixed run window instead, as the slowed nodes' cycle does, made a
        pair's bandwidth follow how its two nodes' windows overlapped.

        Every node's periods start on one grid (multiples of PERIOD_S on the monotonic clock), so
        the two nodes of a pair are continued together. With each node's own phase, moved by
        how far it overran, a pair's nodes drifted apart: one stopped while the other waited for
        it with quota it then lost at its period's end. Two healthy pairs on this 2-core machine
        measured 0.95-1.08 of each other then, 1.00-1.03 on the grid
        (benchmarks/data/2026-12-04-throttle-pairs).

        It is looked at, while running, as soon as it could have used its quota (on every CPU
        this helper may use, at once), then again as soon as it could have used what is left,
        but not more often than every MIN_CHECK_S; a node without pods only once a period: this
        helper runs at real-time priority, and what it takes is taken from the nodes."""
        rate = self.cpus[node] / self.factors[node]
        quota = rate * PERIOD_S
        period = (now + 1e-6) // PERIOD_S * PERIOD_S  # this period's start on the grid
        if node in self.running:
            start, cpu = self.running[node]
            left = self.quota[node] - sum(_used(cpu))
            if left <= MIN_CHECK_S * rate:  # its quota is used: stopped until the period ends
                self.signal(node, signal.SIGSTOP)
                del self.running[node]
                self.debt[node] = min(max(0.0, -left), quota * MAX_PERIOD_S / PERIOD_S)
                self.due[node] = start + PERIOD_S
                return
            if period > start:  # the period ended with quota left: the next one runs on
                self.running[node] = (period, self.cpu_times(node))
                self.quota[node] = left = quota
        else:  # a new period: the quota, less what it still owes
            left = quota - self.debt.pop(node, 0.0)
            if left <= 0:
                self.debt[node] = -left
                self.due[node] = period + PERIOD_S
                return
            self.running[node] = (period, self.cpu_times(node))
            self.quota[node] = left
            self.signal(node, signal.SIGCONT)
        start, cpu = self.running[node]
        width = float(len(os.sched_getaffinity(0)))
        soonest = now + max(MIN_CHECK_S, left / width) if cpu else start + PERIOD_S
        self.due[node] = min(start + PERIOD_S, soonest)

    def cpu_times(self, node: str) -> dict[int, float]:
        return {pid: _cpu_s(pid) for pid in self.held.get(node, {})}

    def signal(self, node: str, sig: int) -> None:
        held = self.held.get(node, {})
        for pid, fd in list(held.items()):
            try:
                signal.pidfd_send_signal(fd, sig)
            except ProcessLookupError:
                os.close(fd)
                del held[pid]
            except OSError:
                pass

    def release(self, node: str) -> None:
        self.running.pop(node, None)
        self.due.pop(node, None)
        self.quota.pop(node, None)
        self.debt.pop(node, None)
        for fd in self.held.pop(node, {}).values():
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGCONT)
            os.close(fd)


def _helper_main() -> None:
    # Woken on time even when every core is busy (a stop sent a few ms late lets the slowed
    # processes run on): real-time priority where allowed (root, CAP_SYS_NICE), else as is. It
    # sleeps between signals, and the kernel's RT throttling bounds it anyway.
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    helper = _Helper()
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ)
    pending = b""

    def until(deadline: float) -> bool:
        """Take the state lines that arrive until `deadline`; False at EOF (the cluster is
        gone or stopping)."""
        nonlocal pending
        while (left := deadline - time.monotonic()) > 0:
            if not sel.select(left):
                return True
            chunk = os.read(0, 1 << 16)
            if not chunk:
                return False
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if lines:
                helper.update(json.loads(lines[-1]))
                if helper.due and min(helper.due.values()) < deadline:
                    return True  # a node newly slowed: its cycle starts now
        return True

    try:
        while True:
            deadline = min(helper.due.values(), default=time.monotonic() + 3600)
            if not until(deadline):
                return
            helper.step(time.monotonic())
    finally:
        for node in list(helper.held):
            helper.release(node)


if __name__ == "__main__":
    _helper_main()


__all__ = ["MAX_PERIOD_S", "MIN_CHECK_S", "PERIOD_S", "Members", "Throttle"]
