"""The node-slow fault: a node's pod processes get about 1/F of the CPU, by duty-cycled
SIGSTOP/SIGCONT.

Which processes: every process living in the mount namespace of a sandbox the kubelet made for a
pod of that node, the sandbox's own `sleep` excepted. Only the kubelet's processes and their
children live there (each sandbox is a private namespace the kubelet created), so nothing else on
the machine is touched; the namespace, not the process group, is what finds torchrun's workers,
which run in sessions of their own. Each process is held by a pidfd from the moment it is found
(its namespace checked again after opening), so a pid reused by an unrelated process is never
signalled.

The cycle: every `PERIOD_S` (20 ms), every slowed process is continued, then each node's
processes are stopped again after PERIOD_S / F, until the period ends. The period is short so
that anything timed over more than a few tens of milliseconds sees the slowdown: with a long one
(CFS bandwidth control's 100 ms), a short measurement can fit in one running slice and see none.

The cycle runs in a process of its own (this file run as a script), not in a thread of the
cluster's process: there it would wait for the GIL behind the API server and the kubelet, and a
stop sent late lets the slowed processes run on. For the same reason it asks for real-time
(SCHED_FIFO) priority where it may. The cluster's side (`Throttle`) sends it, every
`refresh_s`, which namespaces belong to which slowed node; the helper finds their processes in
/proc. When the fault is cleared, the cluster stops, or the cluster's process dies (its stdin
closes), the helper continues every process it stopped and exits.
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

#: node -> (mount-namespace inodes of its pods' sandboxes, the sandboxes' own pids)
Members = Callable[[str], tuple[set[int], set[int]]]

PERIOD_S = 0.02


class Throttle:
    """Slows the pods of chosen nodes; `set(node, factor)`, `set(node, None)` to clear, `stop()`."""

    def __init__(self, members: Members, *, refresh_s: float = 0.2) -> None:
        self._members = members
        self._refresh_s = refresh_s
        self._lock = threading.Lock()
        self._factors: dict[str, float] = {}
        self._wake = threading.Event()
        self._stopping = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None

    def set(self, node: str, factor: float | None) -> None:
        """Give the node's pods 1/factor of the CPU; None (or a factor <= 1) runs them freely."""
        with self._lock:
            if factor is None or factor <= 1:
                self._factors.pop(node, None)
            else:
                self._factors[node] = float(factor)
            if self._thread is None and self._factors:
                self._thread = threading.Thread(target=self._feed, name="node-slow", daemon=True)
                self._thread.start()
        self._wake.set()

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
                state = {}
                for node, factor in factors.items():
                    inodes, sandboxes = self._members(node)
                    state[node] = {
                        "factor": factor,
                        "inodes": sorted(inodes),
                        "exclude": sorted(sandboxes),
                    }
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


class _Helper:
    def __init__(self) -> None:
        self.factors: dict[str, float] = {}
        self.held: dict[str, dict[int, int]] = {}  # node -> pid -> pidfd

    def update(self, state: dict[str, dict[str, object]]) -> None:
        for node in set(self.held) - set(state):
            self.release(node)
        self.factors = {node: float(str(s["factor"])) for node, s in state.items()}
        wanted: dict[int, str] = {}
        exclude: set[int] = set()
        for node, s in state.items():
            inodes, sandboxes = s["inodes"], s["exclude"]
            assert isinstance(inodes, list) and isinstance(sandboxes, list)
            wanted.update(dict.fromkeys(inodes, node))
            exclude.update(sandboxes)
        found: dict[str, set[int]] = {node: set() for node in state}
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in exclude:
                continue
            owner = wanted.get(_mount_ns(int(entry)))
            if owner is not None:
                found[owner].add(int(entry))
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

    def signal(self, nodes: list[str], sig: int) -> None:
        for node in nodes:
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

    def until(deadline: float, *, first: bool = False) -> bool:
        """Take the state lines that arrive until `deadline` (with `first`, until one has);
        False at EOF (the cluster is gone or stopping)."""
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
                if first:
                    return True
        return True

    try:
        while True:
            start = time.monotonic()
            if not helper.factors:
                if not until(start + 3600, first=True):
                    return
                continue
            helper.signal(list(helper.factors), signal.SIGCONT)
            for node, factor in sorted(helper.factors.items(), key=lambda kv: -kv[1]):
                if not until(start + PERIOD_S / factor):
                    return
                helper.signal([node], signal.SIGSTOP)
            if not until(start + PERIOD_S):
                return
    finally:
        for node in list(helper.held):
            helper.release(node)


if __name__ == "__main__":
    _helper_main()


__all__ = ["PERIOD_S", "Members", "Throttle"]
