"""The node-slow fault: a node's pod processes get about 1/F of the CPU, by duty-cycled
SIGSTOP/SIGCONT.

Which processes: every process living in the mount namespace of a sandbox the kubelet made for a
pod of that node, the sandbox's own `sleep` excepted. Only the kubelet's processes and their
children live there (each sandbox is a private namespace the kubelet created), so nothing else on
the machine is touched; the namespace, not the process group, is what finds torchrun's workers,
which run in sessions of their own. Each process is held by a pidfd from the moment it is found
(its namespace checked again through the pidfd's pid after opening), so a pid reused by an
unrelated process is never signalled.

The cycle: every `period_s`, every slowed process is continued, then each node's processes are
stopped again after period_s / F, until the period ends. The members are looked up again every
`refresh_s` (a new pod, a new worker process), and when the fault is cleared or the cluster stops
every process is continued.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable

#: node -> (mount-namespace inodes of its pods' sandboxes, the sandboxes' own pids)
Members = Callable[[str], tuple[set[int], set[int]]]


class Throttle:
    """Slows the pods of chosen nodes; `set(node, factor)`, `set(node, None)` to clear, `stop()`."""

    def __init__(self, members: Members, *, period_s: float = 0.1, refresh_s: float = 0.2) -> None:
        self._members = members
        self._period_s = period_s
        self._refresh_s = refresh_s
        self._lock = threading.Lock()
        self._factors: dict[str, float] = {}
        self._held: dict[str, dict[int, int]] = {}  # node -> pid -> pidfd
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def set(self, node: str, factor: float | None) -> None:
        """Give the node's pods 1/factor of the CPU; None (or a factor <= 1) runs them freely."""
        with self._lock:
            if factor is None or factor <= 1:
                self._factors.pop(node, None)
                self._release(node)
                return
            self._factors[node] = float(factor)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="node-slow", daemon=True)
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
        with self._lock:
            for node in list(self._held):
                self._release(node)

    # ---- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        next_refresh = 0.0
        while True:
            with self._lock:
                if self._stopping:
                    return
                factors = dict(self._factors)
            if not factors:
                self._wake.wait()
                self._wake.clear()
                continue
            start = time.monotonic()
            if start >= next_refresh:
                self._refresh(factors)
                next_refresh = start + self._refresh_s
            self._signal(list(factors), signal.SIGCONT)
            for node, factor in sorted(factors.items(), key=lambda kv: -kv[1]):
                if self._sleep_until(start + self._period_s / factor):
                    break
                self._signal([node], signal.SIGSTOP)
            self._sleep_until(start + self._period_s)

    def _sleep_until(self, when: float) -> bool:
        """Sleep until `when`; True when woken early (the faults changed)."""
        left = when - time.monotonic()
        if left > 0 and self._wake.wait(left):
            self._wake.clear()
            return True
        return False

    def _signal(self, nodes: list[str], sig: int) -> None:
        with self._lock:
            for node in nodes:
                held = self._held.get(node, {})
                for pid, fd in list(held.items()):
                    try:
                        signal.pidfd_send_signal(fd, sig)
                    except ProcessLookupError:
                        os.close(fd)
                        del held[pid]
                    except OSError:
                        pass

    def _refresh(self, factors: dict[str, float]) -> None:
        """Find the processes of the slowed nodes' pods; hold new ones, drop gone ones."""
        wanted: dict[int, str] = {}
        sandboxes: set[int] = set()
        for node in factors:
            inodes, pids = self._members(node)
            wanted.update(dict.fromkeys(inodes, node))
            sandboxes |= pids
        found: dict[str, set[int]] = {node: set() for node in factors}
        me = os.getpid()
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == me or int(entry) in sandboxes:
                continue
            owner = wanted.get(_mount_ns(int(entry)))
            if owner is not None:
                found[owner].add(int(entry))
        with self._lock:
            for node, pids in found.items():
                if node not in self._factors:
                    continue
                held = self._held.setdefault(node, {})
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

    def _release(self, node: str) -> None:
        """Continue and let go of the node's processes (lock held)."""
        for fd in self._held.pop(node, {}).values():
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGCONT)
            os.close(fd)


def _mount_ns(pid: int) -> int:
    try:
        return os.stat(f"/proc/{pid}/ns/mnt").st_ino
    except OSError:
        return -1


__all__ = ["Members", "Throttle"]
