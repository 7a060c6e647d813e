"""Fault injection for the test cluster: the one documented API tests use to make things fail.

Request faults (owned here) make the API server answer the next N matching requests with a
`Status` of a chosen code before it touches the store, so a test can show how a client copes with
500s, 403s, 409s or a 429 with Retry-After; or hold them for a while before serving them (a slow
link), or until the test releases them (`hold_requests`), so a test can make two clients'
requests interleave in a chosen order whatever the machine's load. Pod, node and scheduling faults are B's (kubelet, scheduler); `Faults` only
forwards to them so tests find every knob in one place: `cluster.faults`.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tests.cluster.errors import REASONS, ApiError


@dataclass
class _Rule:
    pattern: re.Pattern[str]
    status: int | None
    """None: serve the request (after `delay_s`)."""
    remaining: int
    method: str | None
    message: str
    delay_s: float | Callable[[str, str], float] = 0.0
    """Seconds to hold the request, or a function of (method, path) drawing them per request."""
    retry_after_s: int | None = None
    hold: Hold | None = None


class Hold:
    """A request held by `Faults.hold_requests`: `arrived` is set once the request is held,
    `release()` lets it be served."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self._go = threading.Event()

    def release(self) -> None:
        self._go.set()

    def _wait(self) -> None:
        self.arrived.set()
        self._go.wait()


class _Kubelet(Protocol):
    def kill_pod(self, namespace: str, pod: str, *, sig: int = ...) -> Any: ...
    def set_node_ready(self, node: str, ready: bool) -> Any: ...
    def set_node_slow(self, node: str, factor: float | None) -> Any: ...
    def set_node_crash(self, node: str, crash: bool = ...) -> Any: ...
    def set_node_link(self, node: str, bytes_per_s: float | None) -> Any: ...
    def set_link_slow(
        self, label: str, a: str, b: str, factor: float | None, bytes_per_s: float | None = ...
    ) -> Any: ...


class _Scheduler(Protocol):
    def set_delay(self, s: float) -> Any: ...


class Faults:
    """`cluster.faults`: request failures here; pod, node and scheduler faults forwarded."""

    def __init__(self, *, kubelet: _Kubelet | None = None, scheduler: _Scheduler | None = None):
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []
        self._holds: list[Hold] = []
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
        retry_after_s: int | None = None,
    ) -> None:
        """Answer the next `count` requests whose URL path matches `path_regex` (re.search,
        query string excluded) and, if given, whose HTTP `method` matches, with a Status of
        code `status` (500, 403, 409, ...). Rules are consumed in the order they were added.
        `retry_after_s` adds what kube-apiserver sends with a 429: a `Retry-After` header and
        the Status' `details.retryAfterSeconds`."""
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
                    retry_after_s=retry_after_s,
                )
            )

    def delay_requests(
        self,
        path_regex: str,
        seconds: float | Callable[[str, str], float],
        count: int = 1,
        method: str | None = None,
    ) -> None:
        """Hold the next `count` matching requests (as `fail_requests` matches them) for
        `seconds` before serving them normally: a slow link or a loaded server, and the way a
        test makes another client's request overtake this one. `seconds` may be a function of
        (method, path), called once per request as it arrives (under the faults' lock, so keep
        it quick), for a latency drawn per request or to see when each one arrived."""
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        with self._lock:
            self._rules.append(
                _Rule(
                    re.compile(path_regex),
                    None,
                    count,
                    method.upper() if method else None,
                    "",
                    delay_s=seconds,
                )
            )

    def hold_requests(self, path_regex: str, method: str | None = None) -> Hold:
        """Hold the next matching request (as `fail_requests` matches them) until the returned
        Hold is released, then serve it normally: the way a test makes another client's request
        overtake this one for certain (a delay only makes it likely on a busy machine)."""
        hold = Hold()
        with self._lock:
            self._holds.append(hold)
            self._rules.append(
                _Rule(
                    re.compile(path_regex),
                    None,
                    1,
                    method.upper() if method else None,
                    "",
                    hold=hold,
                )
            )
        return hold

    def clear(self) -> None:
        """Drop all pending request faults (and release any request still held)."""
        with self._lock:
            for hold in self._holds:
                hold.release()
            self._holds.clear()
            self._rules.clear()

    def pending(self) -> int:
        """How many injected failures are still waiting for a request."""
        with self._lock:
            return sum(r.remaining for r in self._rules)

    def take(self, method: str, path: str) -> ApiError | None:
        """The API server calls this first for every request (on the request's own thread):
        the error to answer, if any, after holding the request when a delay rule says so."""
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
                break
            else:
                return None
            delay_s = rule.delay_s(method, path) if callable(rule.delay_s) else rule.delay_s
        if rule.hold is not None:
            rule.hold._wait()
        if delay_s:
            time.sleep(delay_s)
        if rule.status is None:
            return None
        details = {"retryAfterSeconds": rule.retry_after_s} if rule.retry_after_s else None
        return ApiError(
            rule.status, REASONS.get(rule.status, "Unknown"), rule.message, details=details
        )

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

    def node_slow(self, node: str, factor: float | None) -> None:
        """Give the node's pod processes about 1/factor of the CPU the other nodes' pod processes
        get (SIGSTOP/SIGCONT of every process in its pods' sandboxes, pods started later
        included: tests/cluster/throttle.py); None or a factor <= 1 ends it."""
        if self.kubelet is None:
            raise RuntimeError("this cluster runs no kubelet")
        self.kubelet.set_node_slow(node, factor)

    def node_crash(self, node: str, crash: bool = True) -> None:
        """Make every container that starts on the node exit 1 at once (crash=False heals it)."""
        if self.kubelet is None:
            raise RuntimeError("this cluster runs no kubelet")
        self.kubelet.set_node_crash(node, crash)

    def node_link(self, node: str, bytes_per_s: float | None) -> None:
        """Hold what the node's containers started from now on send on the network to
        `bytes_per_s` (a degraded link: tests/cluster/slowlink.py); None heals it."""
        if self.kubelet is None:
            raise RuntimeError("this cluster runs no kubelet")
        self.kubelet.set_node_link(node, bytes_per_s)

    def link_slow(
        self, label: str, a: str, b: str, factor: float | None, bytes_per_s: float | None = None
    ) -> None:
        """A slow link between the domains `label`=`a` and `label`=`b`: what containers started
        from now on on one side send to the other is held to 1/`factor` of their node's
        node-link rate (or `bytes_per_s` where the node has none); None heals it."""
        if self.kubelet is None:
            raise RuntimeError("this cluster runs no kubelet")
        self.kubelet.set_link_slow(label, a, b, factor, bytes_per_s)

    def delay_scheduling(self, seconds: float) -> None:
        """Make the scheduler wait `seconds` before binding each pod."""
        if self.scheduler is None:
            raise RuntimeError("this cluster runs no scheduler")
        self.scheduler.set_delay(seconds)
