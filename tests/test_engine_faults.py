"""A rank that stops is named by the rank that notices (not the noticing rank itself).

Real ranks under plain torchrun on gloo; one rank is SIGSTOPped mid-run (its pid found through
the process tree torchrun started, by the RANK in its environment); the others time out after
-T and print the FAULT line. Only processes this test started are signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from nccl_k8s.bench.report import FAULT_PREFIX, parse_fault_line

pytestmark = pytest.mark.slow
ROW = re.compile(r"^\s+\d+\s+\d+\s+\w+")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in pathlib.Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _rank_pids(root: int) -> dict[int, int]:
    """RANK -> pid among the descendants of `root` (torchrun's workers)."""
    found: dict[int, int] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        kids = _children(pid)
        todo += kids
        for kid in kids:
            with contextlib.suppress(OSError):
                env = pathlib.Path(f"/proc/{kid}/environ").read_bytes().split(b"\0")
                rank = next((e[5:] for e in env if e.startswith(b"RANK=")), None)
                if rank is not None and b"TORCHELASTIC_RUN_ID=" in b"\0".join(env):
                    found[int(rank)] = kid
    return found


class Lines:
    """A pipe read on a thread, so the test can wait for a line without blocking."""

    def __init__(self, stream: Any) -> None:
        self.lines: list[str] = []
        self._stream = stream
        self._t = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._t.start()

    def close(self) -> None:
        self._t.join(timeout=10)
        self._stream.close()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pred: Any, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(pred(line) for line in list(self.lines)):
                return True
            time.sleep(0.05)
        return False


@pytest.mark.parametrize(("nproc", "stopped"), [(2, 1), (3, 1)])
def test_a_stopped_rank_is_named_by_the_ranks_that_wait_for_it(nproc: int, stopped: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NCCL_K8S_HEARTBEAT_S": "0.5"}
    # -T 10, not 5: the watchdog's progress mark moves once a size, and on a busy 2-core machine
    # a size of 100 iterations once took longer than 5 s around the stop; the watchdog then
    # (rightly) named the rank that was behind at that moment, rank 0, not the stopped one.
    proc = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
         "-m", "nccl_k8s.bench", "-b", "8", "-e", "64K", "-f", "2", "-n", "100", "-T", "10"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )  # fmt: skip
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    pids: dict[int, int] = {}
    try:
        # Mid-run: a few rows printed, so every rank has sent heartbeats with its progress.
        assert out.wait_for(lambda s: sum(bool(ROW.match(x)) for x in out.lines) >= 5, 120), (
            "\n".join(err.lines[-20:])
        )
        pids = _rank_pids(proc.pid)
        assert sorted(pids) == list(range(nproc)), pids
        os.kill(pids[stopped], signal.SIGSTOP)
        # The FAULT line goes to stdout with the result lines (as in pods' logs).
        assert out.wait_for(lambda s: s.startswith(FAULT_PREFIX), 120), "\n".join(err.lines[-30:])
        # The rank that printed the FAULT line writes its words for humans to stderr next.
        assert err.wait_for(lambda s: "culprit rank" in s, 120), "\n".join(err.lines[-30:])
        faults = [f for f in (parse_fault_line(s) for s in out.lines) if f is not None]
        assert faults
        for f in faults:
            assert f["rank"] != stopped
            # The whole record on failure (pytest would cut the dict): which rule named whom.
            assert f["culprit"] == stopped, json.dumps(f) + "\n" + "\n".join(err.lines[-30:])
            assert f["pid"] == pids[stopped] and f["host"] == socket.gethostname(), f
            assert re.fullmatch(r"no heartbeat for \d+ s", f["reason"]), f
            assert f["where"].startswith("all_reduce "), f
            assert "timeout -T 10" in f["noticed"], f
            assert f["kind"] == "no_heartbeat" and f["timed_out"] is True, f
        human = [s for s in err.lines if "culprit rank" in s]
        assert human and f"culprit rank {stopped} (pid {pids[stopped]} on " in human[0], human
    finally:
        if stopped in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pids[stopped], signal.SIGKILL)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out.close()
        err.close()
    assert proc.returncode != 0
