"""`nccl-k8s run` refuses what cannot work before any rank starts, and its --help.

In-process through CliRunner (one torch import for the file): every refusal is one line, exit
code 2, names the value and what to do, and leaves nothing behind (no runs directory, no private
directory, no probe file).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.errors import Interrupted
from nccl_k8s.launch import local

pytest.importorskip("torch")


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NCCL_K8S_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    return tmp_path


def refused(*args: str) -> str:
    """Run `nccl-k8s run ARGS`; assert one line, exit 2, no traceback; return the line."""
    result = CliRunner().invoke(app, ["run", *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output and "# nccl-k8s version" not in result.output
    return lines[0]


def nothing_created(root: Path, *keep: Path) -> None:
    left = sorted(p for p in root.rglob("*") if p not in keep)
    assert left == [root / "tmp"], left


def test_nproc_beyond_the_machine(dirs: Path) -> None:
    ceiling = local.MAX_CPU_RANKS_PER_CPU * local.usable_cpus()
    line = refused("--nproc", "100000", "-b", "1K")
    assert line == (
        f"error: --nproc 100000: this machine holds at most {ceiling} gloo ranks "
        f"({local.MAX_CPU_RANKS_PER_CPU} per CPU, {local.usable_cpus()} CPU"
        f"{'s' if local.usable_cpus() != 1 else ''} usable): expected --nproc <= {ceiling}"
    )
    assert f"--nproc {ceiling + 1}:" in refused("--nproc", str(ceiling + 1))
    assert local.prepare(["--nproc", str(ceiling), "--no-save"]).nproc == ceiling
    nothing_created(dirs)


def test_nccl_needs_a_gpu_per_rank() -> None:
    import torch

    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        assert "NCCL needs one GPU per rank" in refused("--nproc", str(n + 1))
    else:
        assert "no CUDA device is visible" in refused("--backend", "nccl")


def test_an_unwritable_runs_dir_is_refused_before_the_run(
    dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = dirs / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("NCCL_K8S_RUNS_DIR", str(blocker / "runs"))
    assert refused("-b", "1K") == (
        f"error: runs directory {blocker / 'runs'}: {blocker} is not a directory: "
        "set NCCL_K8S_RUNS_DIR to a writable directory, or pass --no-save"
    )
    nothing_created(dirs, blocker)


def test_a_read_only_place_is_refused_by_trying_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mode bits do not tell (root ignores them); a probe file does. /sys takes no new files."""
    if os.access("/sys", os.W_OK) and os.geteuid() != 0:
        pytest.skip("/sys is writable here")
    monkeypatch.setenv("NCCL_K8S_RUNS_DIR", "/sys/nccl-k8s-runs")
    line = refused("-b", "1K")
    assert re.fullmatch(
        r"error: runs directory /sys/nccl-k8s-runs: cannot write in /sys \(.+\): "
        r"set NCCL_K8S_RUNS_DIR to a writable directory, or pass --no-save",
        line,
    ), line
    line = refused("-b", "1K", "--no-save", "--json", "/sys/x.json")
    assert re.fullmatch(r"error: --json /sys/x.json: cannot write in /sys \(.+\): .+", line), line


@pytest.mark.parametrize(
    ("where", "says"),
    [
        (
            "missing/x.json",
            "directory {d}/missing does not exist: create it or choose a writable path",
        ),
        ("a-file/x.json", "{d}/a-file is not a directory: choose a writable path"),
        (".", "is a directory: expected a file path"),
    ],
)
def test_an_unwritable_json_path_is_refused_before_the_run(
    dirs: Path, where: str, says: str
) -> None:
    (dirs / "a-file").write_text("x")
    path = dirs / where
    line = refused("-b", "1K", "--json", str(path))
    assert line.startswith(f"error: --json {path}: "), line
    assert line.endswith(says.format(d=dirs)), line
    nothing_created(dirs, dirs / "a-file")


def test_check_writable_leaves_no_probe(tmp_path: Path) -> None:
    local.check_writable(tmp_path / "deep" / "runs", what="runs directory", is_dir=True)
    local.check_writable(tmp_path / "out.json", what="--json", is_dir=False)
    assert list(tmp_path.iterdir()) == []


def test_interrupts_become_one_error_with_the_signals_exit_code() -> None:
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)):
        before = signal.getsignal(sig)
        with pytest.raises(Interrupted) as info, local.interruptible():
            os.kill(os.getpid(), sig)
            time.sleep(5)  # the handler raises at once
        assert info.value.exit_code == code and str(info.value) == f"interrupted by {sig.name}"
        assert signal.getsignal(sig) == before  # handlers restored


def test_run_help_is_rich_grouped_with_metavars_defaults_and_exit_codes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    result = CliRunner().invoke(app, ["run", "--help"])
    assert result.exit_code == 0
    text = result.output
    assert "Usage: nccl-k8s run [OPTIONS]" in text
    assert "╭─ nccl-tests flags (every rank gets them)" in text and "╭─ Options" in text
    listed = set(re.findall(r"^│ (--[\w-]+)", text, re.M))
    # Every flag of the argparse parsers (engine's and run's) is listed, rendered not copied.
    flags = {
        next(f for f in action.option_strings if f.startswith("--"))
        for action in local.run_parser()._actions
        if action.option_strings and action.help != argparse.SUPPRESS
    }
    assert listed == flags
    assert re.search(
        r"--minbytes\s+-b\s+SIZE\s+smallest size \(8, 64K, 1M, 8G\) \[default: 32M\]", text
    )
    assert re.search(r"--iters\s+-n\s+N\s+timed ops per size \[default: 20\]", text)
    assert re.search(r"--duration\s+SECONDS\s+.*\[default: 0.0\]", text)
    assert re.search(r"--nproc\s+N\s+ranks to start", text)
    assert re.search(r"--run-id\s+ID\s+store the results", text)
    assert "<str>" not in text and "--no-result-lines" not in text
    assert "Exit codes:" in text and "130/143  interrupted by SIGINT/SIGTERM" in text
    assert re.search(r"2\s+bad input", text) and re.search(r"1\s+the run failed", text)
    # The engine's own parser is the source: a flag added there shows up here.
    assert "--report-interval" in text and "GBPS" in text
