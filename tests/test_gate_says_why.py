"""Issue 39, item 3: every exit 1 from a --min-busbw miss has one line on stderr naming the
gate, the op, its sizes and what was measured against what (`run`, saved or not); `results` of a
kept run whose ranks missed the gate exits 1 with the same line, read from the engine's own
result lines (the floor travels in its meta line)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s import k8s
from nccl_k8s.cli.main import app
from nccl_k8s.results import parse_result_lines, run_failures

pytest.importorskip("torch")

GATE = re.compile(
    r"^error: --min-busbw 1000 GB/s missed: all_reduce averaged (\d+\.\d\d) GB/s over 2 sizes, "
    r"1K to 4K \((\d+\.\d\d) GB/s at 4K\); broadcast averaged \d+\.\d\d GB/s over 2 sizes, "
    r"1K to 4K \(\d+\.\d\d GB/s at 4K\)$"
)


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NCCL_K8S_RUNS_DIR": str(cwd / "runs")}
    argv = ["--nproc", "2", "-b", "1K", "-e", "4K", "-f", "4", "-n", "2", "-w", "0"]
    return subprocess.run(
        [sys.executable, "-m", "nccl_k8s.cli.main", "run", *argv, *args],
        capture_output=True, text=True, timeout=240, env=env, cwd=cwd, check=False,
    )  # fmt: skip


@pytest.mark.slow
def test_run_min_busbw_miss_is_one_line_naming_gate_sizes_and_numbers(tmp_path: Path) -> None:
    args = ("--ops", "all_reduce,broadcast", "--min-busbw", "1000")
    for extra in ((), ("--no-save", "--result-lines")):
        proc = _run(tmp_path, *args, *extra)
        assert proc.returncode == 1, proc.stderr[-2000:]
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and GATE.match(errors[0]), proc.stderr
    # The same run's result lines, as `results` reads them from a kept run's pods.
    run = parse_result_lines(proc.stdout, origin="rank 0")
    assert run.meta.config.min_busbw == 1000
    (line,) = run_failures(run)
    assert GATE.match(f"error: {line}")
    _results_of(run, tmp_path)


def _results_of(run: object, tmp_path: Path) -> None:
    """`nccl-k8s results` of a kept run holding `run`: exit 1 and the gate's line."""
    path = tmp_path / "runs" / "kept" / "results.json"

    def collect(run_id: str, **_: object) -> k8s.Collected:
        return k8s.Collected(run_id, "ns", run, path, path.parent, 1, None, 0.1)

    mp = pytest.MonkeyPatch()
    mp.setattr(k8s, "collect", collect)
    mp.setenv("NCCL_K8S_RUNS_DIR", str(tmp_path / "runs"))
    try:
        res = CliRunner().invoke(app, ["results", "--run", "kept", "-n", "ns"])
    finally:
        mp.undo()
    assert res.exit_code == 1, res.output
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and GATE.match(errors[0]), res.stderr
