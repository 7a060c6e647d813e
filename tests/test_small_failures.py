"""Issue 39, item 9 (the smaller ones): each says what happened, in one line, exit 2 where the
input is at fault; `run | head` ends without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.bench.config import ConfigError, parse_args
from nccl_k8s.cli.main import app


def _err(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    return res.exit_code, res.stderr


def test_engine_hint_names_the_command_and_only_flags_it_has() -> None:
    code, err = _err("nodes", "check", "--world-size", "2", "-b", "8")
    assert code == 2
    assert "e.g. `nccl-k8s nodes check -- -b 8 -e 1G`" in err
    assert "nccl-k8s check" not in err
    code, err = _err("render", "-b", "8")
    assert code == 2 and "e.g. `nccl-k8s render --world-size 16 -- -b 8 -e 1G`" in err


@pytest.mark.parametrize("command", ["render", "deploy"])
def test_a_stray_word_before_the_dashes_is_said_to_be_one(command: str) -> None:
    code, err = _err(command, "stray", "--world-size", "8", "--", "-b", "8")
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "'stray' comes before `--` and no option takes it" in line
    assert f"`{command}` has no positional argument" in line
    assert "engine arguments" not in line and "unrecognized" not in line


def test_json_output_given_twice_is_refused_once_is_fine() -> None:
    with pytest.raises(ConfigError, match=r"^-J 'a.json' and --json 'b.json': one output file"):
        parse_args(["-J", "a.json", "--json", "b.json"])
    assert parse_args(["-J", "a.json", "--output_file", "a.json"]).json_path == "a.json"
    code, err = _err("run", "-J", "a.json", "--json", "b.json", "--no-save")
    assert code == 2 and err.startswith("error: -J 'a.json' and --json 'b.json'")


def test_report_interval_without_duration_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^--report-interval 5 without --duration: "):
        parse_args(["--report-interval", "5"])
    assert parse_args(["--report-interval", "5", "--duration", "20"]).report_interval_s == 5
    code, err = _err("render", "--world-size", "8", "--", "--report-interval", "5")
    assert code == 2 and "--report-interval 5 without --duration" in err


@pytest.mark.slow
def test_run_into_a_closed_pipe_ends_without_a_traceback(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NCCL_K8S_RUNS_DIR": str(tmp_path / "runs")}
    argv = ["run", "--nproc", "2", "-b", "8", "-e", "64K", "-f", "2", "-n", "1", "-w", "0"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "nccl_k8s.cli.main", *argv, "--run-id", "piped"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().startswith("# nccl-k8s version")
    proc.stdout.close()  # `| head -1`
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err
    assert "# stdout was closed (a pipe's reader ended)" in err
    assert (tmp_path / "runs" / "piped" / "results.json").is_file()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["logs", "--tail", "abc"], "--tail 'abc': expected a whole number"),
        (["logs", "--rank=one"], "--rank 'one': expected a whole number"),
        (["compare", "x", "--min-busbw", "fast"], "--min-busbw 'fast': expected a number"),
    ],
)
def test_a_word_for_a_number_is_said_in_our_words(args: list[str], said: str) -> None:
    code, err = _err(*args)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith(f"error: {said} (see `")
    assert "Input should be" not in line and "unable to parse" not in line
