"""The watchdog's diagnosis from heartbeats as a busy machine delivers them (issue 21).

A heartbeat's content is read when it is built; on a loaded machine its write can land seconds
later (the heartbeat thread waits for the GIL behind a spinning main thread or a library load).
These tests play the store's side: rank 1's heartbeats land when the script says, and rank 0's
own heartbeats (one per tick of its diagnosis) are the clock.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import pytest

from nccl_k8s.bench.watch import Watchdog

TICK = 0.2  # the shortest heartbeat interval: grace 0.6 s, at most 1.8 s in all


def beat(n: int, step: int, where: str, *, idle: float = 0.0, moving: bool = False,
         at: str = "") -> dict[str, Any]:  # fmt: skip
    return {"t": 0.0, "n": n, "step": step, "where": where, "idle": idle, "host": "vm",
            "pid": 4241, "moving": moving, "at": at}  # fmt: skip


class ScriptedStore:
    """Rank 0's heartbeats go in; rank 1's latest is the script's entry for how many of rank
    0's heartbeats have landed so far (the last entry at or below that count)."""

    def __init__(self, script: dict[int, dict[str, Any]]) -> None:
        self.script = script
        self.mine = 0
        self.values: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value
        self.mine += 1

    def check(self, keys: list[str]) -> bool:
        return all(k in self.values or k.endswith("/1") for k in keys)

    def get(self, key: str) -> str:
        if key.endswith("/1"):
            at = max(k for k in self.script if k <= self.mine)
            return json.dumps({**self.script[at], "t": time.time()})
        return self.values[key]


@pytest.fixture
def wd(monkeypatch: pytest.MonkeyPatch) -> Watchdog:
    monkeypatch.delenv("NCCL_K8S_HEARTBEAT_S", raising=False)
    w = Watchdog(0, 2, host="vm", timeout_s=2, interval_s=TICK)
    w.step, w.where = 6, "all_reduce 1024 B soak"
    return w


def diagnose(wd: Watchdog, script: dict[int, dict[str, Any]]) -> dict[str, Any]:
    wd._store = ScriptedStore(script)
    return wd.diagnose()


SPIN_AT = "/tmp/x/sitecustomize.py:12"


def test_a_late_heartbeat_built_before_the_spin_does_not_make_the_spinner_behind(
    wd: Watchdog,
) -> None:
    # Rank 1's beat 2 was built during the rendezvous (step 1) and lands only after rank 0's
    # first read; beat 3, built after it, shows the spin: step 6, its main thread burning CPU in
    # its own code for seconds.
    script = {
        0: beat(1, 1, "rendezvous"),
        1: beat(2, 1, "rendezvous", at="<frozen importlib._bootstrap>:241"),
        5: beat(3, 6, "all_reduce 1024 B soak", idle=4.0, moving=True, at=SPIN_AT),
    }
    found = diagnose(wd, script)
    assert found["culprit"] == 1
    assert found["reason"].startswith(
        f"alive but busy outside the collective (running {SPIN_AT}; no progress for 4 s)"
    ), found


def test_a_stopped_rank_is_named_by_its_silence_after_the_longer_wait(wd: Watchdog) -> None:
    found = diagnose(wd, {0: beat(7, 6, "all_reduce 1024 B soak")})
    assert found["culprit"] == 1
    assert found["reason"].startswith("no heartbeat for "), found
    assert found["where"] == "all_reduce 1024 B soak"


def test_a_slow_rank_that_progresses_is_behind_not_busy(wd: Watchdog) -> None:
    # Fresh beats (built after the first read) at a lower step; its main thread works, but it
    # moved on 0.1 s ago: slow, not stuck.
    script = {
        0: beat(1, 2, "all_reduce 1024 B soak"),
        2: beat(2, 3, "all_reduce 1024 B soak", idle=0.1, moving=True, at=SPIN_AT),
        3: beat(3, 4, "all_reduce 1024 B soak", idle=0.1, moving=True, at=SPIN_AT),
    }
    found = diagnose(wd, script)
    assert found["culprit"] == 1
    assert found["reason"].startswith("alive but behind: at step 4 while rank 0 is at step 6")


def test_a_rank_waiting_in_the_collective_is_not_busy_whatever_cpu_it_burns(
    wd: Watchdog,
) -> None:
    waiting = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:3252"
    script = {
        0: beat(1, 6, "all_reduce 1024 B soak"),
        2: beat(2, 6, "all_reduce 1024 B soak", idle=9.0, moving=True, at=waiting),
        3: beat(3, 6, "all_reduce 1024 B soak", idle=9.0, moving=True, at=waiting),
    }
    found = diagnose(wd, script)
    assert found["culprit"] is None
    assert found["reason"].startswith("every rank is alive at the same step"), found


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux /proc evidence")
def test_a_rank_whose_own_main_thread_spins_names_itself(wd: Watchdog) -> None:
    """The rank's own watchdog fired: its own /proc and stack say its main thread burns CPU in
    its own code. Rank 1's heartbeats say it waits at the same step: the spinner is this rank."""
    script = {0: beat(1, 6, "x"), 2: beat(2, 6, "x"), 3: beat(3, 6, "x")}
    wd._store = ScriptedStore(script)
    found: dict[str, Any] = {}
    done: list[bool] = []

    def run() -> None:
        try:
            found.update(wd.diagnose(timed_out=True))
        finally:
            done.append(True)

    t = threading.Thread(target=run)
    t.start()
    while not done:  # the main thread spins in this file while the watchdog diagnoses
        pass
    t.join()
    assert found["culprit"] == 0, found
    assert found["reason"].startswith(
        f"alive but busy outside the collective (running {__file__}:"
    ), found
    # The same rank waiting quietly (the main thread asleep in join) is not busy.
    found.clear()
    wd._store = ScriptedStore(script)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert found["culprit"] is None, found
