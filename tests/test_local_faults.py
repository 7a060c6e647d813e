"""Faults in a real local run (`nccl-k8s run` on gloo ranks), as a user meets them.

Each test starts `python -m nccl_k8s.cli.main run` as a subprocess, learns the ranks' pids from the
table's own "#  Rank  1 Group  0 Pid  4242" lines, breaks something from outside (a signal to a
rank or to the launcher, or a sabotaged rank), then asserts what a user checks: the exit code,
the one error line naming the culprit rank and its pid (and the rank that noticed), and what is
left: no rank process (checked by pid and start time), no private directory, no results.

Runs are short soaks (-b 1K --duration 60) so the fault lands mid-run; -T 2 keeps timeouts short.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nccl_k8s.launch._procs import WORKDIR_PREFIX, remove_stale_workdirs, workdir

pytestmark = pytest.mark.slow

RANK_LINE = re.compile(r"^#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+(\d+)")
SOAK = ("-b", "1K", "-e", "1K", "--duration", "60", "-T", "2")

SABOTAGE = textwrap.dedent(
    """
    import os, signal
    mode = os.environ.get("NCCL_K8S_TEST_SABOTAGE")
    if mode and os.environ.get("RANK") == "1":
        if mode == "stop-before-rendezvous":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif mode == "spin":  # busy forever from its 6th all_reduce: alive, not stopped
            import torch.distributed as dist
            _orig, calls = dist.all_reduce, [0]
            def all_reduce(*args, **kwargs):
                calls[0] += 1
                while calls[0] > 5:
                    pass
                return _orig(*args, **kwargs)
            dist.all_reduce = all_reduce
    """
)


#: Loaded by the launcher (not the ranks): an hour before SIGKILL follows SIGTERM. A run that
#: ends within the test then shows that the launcher SIGKILLed the stopped rank at once rather
#: than sending it a SIGTERM it cannot act on and waiting.
PATIENT_LAUNCHER = textwrap.dedent(
    """
    import os
    if "RANK" not in os.environ:
        import nccl_k8s.launch._procs as _procs
        _procs.STOP_TIMEOUT_S = 3600
    """
)


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start time in clock ticks) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1]), int(fields[19])


class Proc:
    """A process seen once, recognised later by pid and start time (pids are reused)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        stat = _stat(pid)
        assert stat is not None, f"pid {pid} is gone already"
        self.ppid, self.start = stat[1], stat[2]

    def alive(self) -> bool:
        stat = _stat(self.pid)
        return stat is not None and stat[2] == self.start and stat[0] != "Z"

    def kill(self) -> None:
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)


class LocalRun:
    """`nccl-k8s run` in a subprocess with its own TMPDIR and runs directory."""

    def __init__(self, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.tmpdir = tmp_path / "tmp"
        self.tmpdir.mkdir()
        self.runs = tmp_path / "runs"
        full_env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
            "NCCL_K8S_RUNS_DIR": str(self.runs),
            "TMPDIR": str(self.tmpdir),
            **(env or {}),
        }
        self.stderr_file = (tmp_path / "stderr.txt").open("w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nccl_k8s.cli.main", "run", *args],
            stdout=subprocess.PIPE,
            stderr=self.stderr_file,
            text=True,
            env=full_env,
            cwd=tmp_path,
        )
        self.launcher = Proc(self.proc.pid)
        self.lines: list[str] = []
        self.ranks: dict[int, Proc] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def rank_pids(self, nproc: int, timeout_s: float = 90) -> dict[int, Proc]:
        """The ranks as the table lists them, once all are listed; each a child of the launcher."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if m := RANK_LINE.match(line):
                    rank, pid = int(m[1]), int(m[2])
                    if rank not in self.ranks:
                        self.ranks[rank] = Proc(pid)
            if len(self.ranks) == nproc:
                assert all(p.ppid == self.launcher.pid for p in self.ranks.values())
                return self.ranks
            assert self.proc.poll() is None, self.stderr()
            time.sleep(0.1)
        raise AssertionError(f"ranks not listed after {timeout_s}s: {self.lines} {self.stderr()}")

    def children(self) -> dict[int, Proc]:
        """The launcher's child processes by pid (ranks that never reach the table)."""
        found = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                stat = _stat(int(entry.name))
                if stat is not None and stat[1] == self.launcher.pid:
                    found[int(entry.name)] = Proc(int(entry.name))
        return found

    def wait(self, timeout_s: float = 60) -> int:
        code = self.proc.wait(timeout=timeout_s)
        self._reader.join(timeout=5)
        return code

    def stderr(self) -> str:
        self.stderr_file.flush()
        return Path(self.stderr_file.name).read_text()

    def error_lines(self) -> list[str]:
        """What the launcher said: lines that are not the ranks' own output."""
        return [
            line
            for line in self.stderr().splitlines()
            if line.startswith(("error:", "# results:", "interrupted"))
        ]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for p in self.ranks.values():
            p.kill()
        self._reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.stderr_file.close()


Start = Callable[..., LocalRun]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    """start(*args, env=None): a LocalRun in this test's directory, ended after the test."""
    runs: list[LocalRun] = []

    def started(*args: str, env: dict[str, str] | None = None) -> LocalRun:
        runs.append(LocalRun(tmp_path, *args, env=env))
        return runs[-1]

    yield started
    for run in runs:
        run.close()


def _gone_within(procs: list[Proc], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(p.alive() for p in procs):
        time.sleep(0.05)
    return [p.pid for p in procs if p.alive()]


def _nothing_left(run: LocalRun) -> None:
    assert _gone_within(list(run.ranks.values()), 0) == []
    assert list(run.tmpdir.iterdir()) == []  # the private directory went with the run
    assert not run.runs.exists()  # a crashed run stores nothing


@pytest.mark.parametrize("nproc", [2, 3])
@pytest.mark.parametrize(
    ("sig", "victim", "what"),
    [
        (signal.SIGSTOP, 1, "stopped (SIGSTOP): the run timed out waiting for it"),
        (signal.SIGKILL, 1, "was killed by SIGKILL, not by nccl-k8s"),
    ],
    ids=["sigstop", "sigkill"],
)
def test_a_rank_stopped_or_killed_mid_run_is_named(
    start: Start, tmp_path: Path, nproc: int, sig: signal.Signals, victim: int, what: str
) -> None:
    (tmp_path / "sitecustomize.py").write_text(PATIENT_LAUNCHER)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    run = start("--nproc", str(nproc), *SOAK, env={"PYTHONPATH": path})
    ranks = run.rank_pids(nproc)
    os.kill(ranks[victim].pid, sig)
    assert run.wait(240) == 1
    errors = run.error_lines()
    assert len(errors) == 1, run.stderr()
    assert errors[0].startswith(f"error: rank {victim} (pid {ranks[victim].pid}) {what}"), errors
    # The rank that noticed says what it saw: its watchdog (no progress within -T) or, when the
    # dead peer's socket closed first, torch's error; or nobody had noticed before the launcher
    # stopped the others (a SIGKILLed rank is evidence enough).
    assert re.search(
        r"\(noticed by rank [02]: (RuntimeError: |no progress for \d+ s)"
        r"|no other rank had failed yet",
        errors[0],
    ), errors
    # Ended at all (run.wait's guard is 4 minutes, the patched SIGTERM wait an hour): the stopped
    # rank got SIGKILL, not a SIGTERM it cannot act on.
    _nothing_left(run)


def test_a_rank_stopped_before_the_rendezvous_is_named(start: Start, tmp_path: Path) -> None:
    """Rendezvous is bounded by -T: rank 0 gives up waiting for rank 1's key, rank 1 is named."""
    (tmp_path / "sitecustomize.py").write_text(SABOTAGE)
    env = {"PYTHONPATH": str(tmp_path), "NCCL_K8S_TEST_SABOTAGE": "stop-before-rendezvous"}
    run = start("--nproc", "2", *SOAK, env=env)
    deadline = time.monotonic() + 60
    while len(run.children()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    children = run.children()
    run.ranks = dict(enumerate(children.values()))
    assert run.wait() == 1
    (error,) = run.error_lines()
    assert re.match(
        r"error: rank 1 \(pid (\d+)\) stopped \(SIGSTOP\): the run timed out waiting for it "
        r"\(noticed by rank 0: (\w+: wait timeout|no progress for \d+ s \(timeout -T 2 s\))",
        error,
    ), error
    assert int(re.findall(r"pid (\d+)", error)[0]) in children
    assert not any(line.startswith("#  Rank") for line in run.lines)  # no rank got that far
    _nothing_left(run)


def test_a_rank_that_spins_without_progress_is_named(start: Start, tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(SABOTAGE)
    env = {"PYTHONPATH": str(tmp_path), "NCCL_K8S_TEST_SABOTAGE": "spin"}
    run = start("--nproc", "2", *SOAK, env=env)
    ranks = run.rank_pids(2)
    assert run.wait() == 1
    (error,) = run.error_lines()
    # Rank 1's own code spins (a CPU-hungry main thread) while rank 0 waits in the collective:
    # the engine's watchdogs name rank 1 and where it spins.
    assert error.startswith(
        f"error: rank 1 (pid {ranks[1].pid}) failed: alive but busy outside the collective "
        f"(running {tmp_path / 'sitecustomize.py'}:"
    ), error
    _nothing_left(run)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupting_run_stops_every_rank_with_one_line(
    start: Start, sig: signal.Signals, code: int
) -> None:
    run = start("--nproc", "2", *SOAK)
    ranks = run.rank_pids(2)
    run.proc.send_signal(sig)
    assert run.wait(timeout_s=120) == code  # a guard: a loaded machine stops ranks slowly
    assert run.stderr().strip().splitlines() == [
        f"error: interrupted by {sig.name}: stopped 2 ranks"
    ]
    assert [p.pid for p in ranks.values() if p.alive()] == []
    _nothing_left(run)


def test_ranks_die_with_a_killed_launcher_and_the_next_run_cleans_up(
    start: Start,
) -> None:
    run = start("--nproc", "2", *SOAK)
    ranks = run.rank_pids(2)
    run.proc.kill()
    assert run.wait(timeout_s=10) == -signal.SIGKILL
    assert _gone_within(list(ranks.values()), 5) == []
    # SIGKILL leaves no chance to remove the private directory: the next run does.
    (left,) = run.tmpdir.iterdir()
    assert left.name.startswith(WORKDIR_PREFIX)
    foreign = run.tmpdir / f"{WORKDIR_PREFIX}not-ours"  # no lock file: not made by a launcher
    foreign.mkdir()
    with workdir(run.tmpdir) as live:  # a running launcher's: its lock is held
        assert remove_stale_workdirs(run.tmpdir) == []
        assert sorted(p.name for p in run.tmpdir.iterdir()) == sorted([foreign.name, live.name])
        assert not left.exists()  # removed on entry, as every run does
    assert list(run.tmpdir.iterdir()) == [foreign]
