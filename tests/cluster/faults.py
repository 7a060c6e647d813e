"""Fault injection for the test cluster: the one documented API tests use to make things fail.

Request faults (owned here) make the API server answer the next N matching requests with a
`Status` of a chosen code before it touches the store, so a test can show how a client copes with
500s, 403s or 409s. Pod, node and scheduling faults are B's (kubelet, scheduler); `Faults` only
forwards to them so tests find every knob in one place: `cluster.faults`.
"""

from __future__ import annotations

import re
import signal
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from tests.cluster.errors import REASONS, ApiError


@dataclass
class _Rule:
    pattern: re.Pattern[str]
    status: int
    remaining: int
    method: str | None
    message: str


class _Kubelet(Protocol):
    def kill_pod(self, namespace: str, pod: str, *, sig: int = ...) -> Any: ...
    def set_node_ready(self, node: str, ready: bool) -> Any: ...


class _Scheduler(Protocol):
    def set_delay(self, s: float) -> Any: ...


class Faults:
    """`cluster.faults`: request failures here; pod, node and scheduler faults forwarded."""

    def __init__(self, *, kubelet: _Kubelet | None = None, scheduler: _Scheduler | None = None):
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []
        self.kubelet = kubelet
        self.scheduler = scheduler
        self.injected = 0  # how many requests were failed, for tests that count

    def fail_requests(
        self,
        path_regex: str,
        status: int,
        count: int = 1,
        method: str | None = None,
        *,
        message: str | None = None,
    ) -> None:
        """Answer the next `count` requests whose URL path matches `path_regex` (re.search,
        query string excluded) and, if given, whose HTTP `method` matches, with a Status of
        code `status` (500, 403, 409, ...). Rules are consumed in the order they were added."""
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        with self._lock:
            self._rules.append(
                _Rule(
                    re.compile(path_regex),
                    status,
                    count,
                    method.upper() if method else None,
                    message or f"injected fault: {status} {REASONS.get(status, 'Error')}",
                )
            )

    def clear(self) -> None:
        """Drop all pending request faults."""
        with self._lock:
            self._rules.clear()

    def pending(self) -> int:
        """How many injected failures are still waiting for a request."""
        with self._lock:
            return sum(r.remaining for r in self._rules)

    def take(self, method: str, path: str) -> ApiError | None:
        """The API server calls this first for every request: the error to answer, if any."""
        with self._lock:
            for rule in self._rules:
                if rule.method and rule.method != method.upper():
                    continue
                if not rule.pattern.search(path):
                    continue
                rule.remaining -= 1
                if rule.remaining <= 0:
                    self._rules.remove(rule)
                self.injected += 1
                return ApiError(rule.status, REASONS.get(rule.status, "Unknown"), rule.message)
        return None

    # ---- forwarded to B's parts ------------------------------------------------------------

    def kill_pod(self, namespace: str, pod: str, *, sig: int = signal.SIGKILL) -> None:
        """Kill the pod's processes; the pod then fails or restarts as its restartPolicy says."""
        if self.kubelet is None:
            raise RuntimeError("this cluster runs no kubelet")
        self.kubelet.kill_pod(namespace, pod, sig=sig)

    def set_node_ready(self, node: str, ready: bool) -> None:
        """Mark a node NotReady (False) or Ready again (True)."""
        if self.kubelet is None:
            raise RuntimeError("this cluster runs no kubelet")
        self.kubelet.set_node_ready(node, ready)

    def delay_scheduling(self, seconds: float) -> None:
        """Make the scheduler wait `seconds` before binding each pod."""
        if self.scheduler is None:
            raise RuntimeError("this cluster runs no scheduler")
        self.scheduler.set_delay(seconds)
