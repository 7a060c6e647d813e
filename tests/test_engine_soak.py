"""Soak mode under CPU contention: many short report intervals, each one checked.

CPU hog processes run beside the ranks from the first interval on, so the ranks' timings differ
a lot from batch to batch; the batch size and the stop are rank 0's decisions, so the ranks never end up in different
collectives, and every interval ends with a checked op.
"""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

pytestmark = pytest.mark.slow


class CpuHogs:
    """Two processes that spin on the CPU from start() until the test ends."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        self.procs = [
            subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range(2)
        ]


@pytest.fixture
def cpu_hogs() -> Iterator[CpuHogs]:
    hogs = CpuHogs()
    try:
        yield hogs
    finally:
        for h in hogs.procs:
            os.killpg(h.pid, signal.SIGKILL)
            h.wait()


def _run(
    tmp_path: pathlib.Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "NCCL_K8S_RUNS_DIR": str(tmp_path / "runs"),
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "nccl_k8s.cli.main", "run", "--no-save", *args],
        capture_output=True, text=True, timeout=240, env=full, check=False,
    )  # fmt: skip


def _popen(tmp_path: pathlib.Path, *args: str) -> subprocess.Popen[str]:
    """`nccl-k8s run ARGS` started, its stdout a pipe, its stderr in tmp_path/stderr."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NCCL_K8S_RUNS_DIR": str(tmp_path / "runs")}
    with (tmp_path / "stderr").open("w") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "nccl_k8s.cli.main", "run", "--no-save", *args],
            stdout=subprocess.PIPE, stderr=err, text=True, env=env,
        )  # fmt: skip


INTERVAL = re.compile(r"# soak (\w+) (\d+) B\s+t=\s*([\d.]+)s\s+iters\s+(\d+).*#wrong (\d+)")


def test_soak_many_checked_intervals_under_cpu_contention(
    tmp_path: pathlib.Path, cpu_hogs: CpuHogs
) -> None:
    # The hogs start with the soak's first interval, not before: the contention is for the
    # batches; starting three ranks beside them only made the test slower.
    args = ["--nproc", "3", "-b", "4K", "-e", "4K", "--duration", "4", "--report-interval", "0.1",
            "-T", "60"]  # fmt: skip
    with _popen(tmp_path, *args) as run:
        assert run.stdout is not None
        head, hogs_from = [], None
        for line in run.stdout:
            head.append(line)
            if INTERVAL.search(line):
                cpu_hogs.start()
                hogs_from = time.monotonic()
                break
        rest, _ = run.communicate(timeout=240)
    # The hogs ran beside most of the soak (its first interval's line came live, not at the end).
    assert hogs_from is not None and time.monotonic() - hogs_from >= 2, "".join(head)[-2000:]
    proc = subprocess.CompletedProcess(
        run.args, run.returncode, "".join(head) + rest, (tmp_path / "stderr").read_text()
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    intervals = INTERVAL.findall(proc.stdout)
    assert len(intervals) >= 20, proc.stdout[-2000:]
    assert all(int(iters) > 0 and wrong == "0" for *_, iters, wrong in intervals)
    assert float(intervals[-1][2]) >= 4.0
    summary = re.search(
        r"op time \(us\) min ([\d.]+)\s+median ([\d.]+)\s+p99 ([\d.]+).*checks (\d+)\s+#wrong 0",
        proc.stdout,
    )
    assert summary and float(summary[1]) <= float(summary[2]) <= float(summary[3])
    assert int(summary[4]) == len(intervals)


CORRUPT = textwrap.dedent(
    """
    import os
    import torch.distributed as dist

    _orig = dist.all_reduce

    def all_reduce(tensor, *args, **kwargs):
        out = _orig(tensor, *args, **kwargs)
        group = kwargs.get("group")
        if int(os.environ.get("RANK", "0")) == 1 and tensor.numel() > 2 and group == dist.group.WORLD:
            tensor.view(-1)[2] += 1
        return out

    dist.all_reduce = all_reduce
    """
)


def test_soak_fails_on_a_wrong_element(tmp_path: pathlib.Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(CORRUPT)
    path = os.pathsep.join(p for p in [str(tmp_path), os.environ.get("PYTHONPATH", "")] if p)
    proc = _run(tmp_path, "--nproc", "2", "-b", "4K", "-e", "4K", "--duration", "30",
                "--report-interval", "0.5", env={"PYTHONPATH": path})  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    intervals = INTERVAL.findall(proc.stdout)
    assert intervals and int(intervals[-1][-1]) > 0  # the first interval's check saw it
    assert float(intervals[-1][2]) < 5  # and the soak stopped there, not after 30 s
    assert re.search(r"# soak all_reduce: \d+ wrong elements at 4096 B: FAILED", proc.stdout)
