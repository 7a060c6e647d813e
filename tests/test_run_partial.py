"""An interrupted or failed `nccl-k8s run` stores every row it measured, marked partial."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nccl_k8s.results import load, resolve

ROW = re.compile(r"^\s+(\d+)\s+\d+\s+float\s+sum\s+-1\s")
PID = re.compile(r"^#  Rank\s+1 Group\s+0 Pid\s+(\d+) ")


@pytest.mark.slow
def test_sigint_at_90_percent_of_a_sweep_stores_every_measured_row_as_partial(
    tmp_path: Path,
) -> None:
    """Ten sizes; after the ninth row rank 1 is frozen (SIGSTOP), so the tenth can never
    finish, and Ctrl-C's signal goes to `run`: exit 130, the nine rows stored, partial."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NCCL_K8S_RUNS_DIR": str(tmp_path / "runs")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "nccl_k8s.cli.main", "run", "--nproc", "2", "-b", "1K",
         "-e", "512K", "-f", "2", "-n", "2", "--run-id", "partial-1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    printed: list[int] = []
    rank1 = None
    try:
        for line in proc.stdout:
            if m := PID.match(line):
                rank1 = int(m.group(1))
            if m := ROW.match(line):
                printed.append(int(m.group(1)))
                if len(printed) == 9:
                    break
        assert rank1 is not None and len(printed) == 9, printed
        os.kill(rank1, signal.SIGSTOP)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    last = err.strip().splitlines()[-1]
    path = tmp_path / "runs" / "partial-1" / "results.json"
    assert last == (
        f"error: interrupted by SIGINT: stopped 2 ranks; the 9 sizes measured are stored, "
        f"marked partial: {path}"
    )
    run = load(resolve("partial-1", base=tmp_path / "runs"))
    assert run.meta.partial is True
    assert run.meta.failure == "interrupted by SIGINT: stopped 2 ranks"
    assert sorted({r.size_bytes for r in run.rows}) == printed == [1024 << i for i in range(9)]
    assert {r.placement for r in run.rows} == {"out", "in"} and len(run.rows) == 18
    assert all(r.wrong == 0 for r in run.rows)
