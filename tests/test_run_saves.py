"""`nccl-k8s run` stores its results: runs/<id>/results.json holds the rows the table printed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nccl_k8s import local as run_cli
from nccl_k8s.errors import UsageError
from nccl_k8s.launch import local
from nccl_k8s.results import load, resolve

ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+float\s+sum\s+-1\s+" + r"\s+".join([r"(\S+)"] * 8) + r"\s*$")


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NCCL_K8S_RUNS_DIR": str(cwd / "runs")}
    return subprocess.run(
        [sys.executable, "-m", "nccl_k8s.cli.main", "run", *args],
        capture_output=True, text=True, timeout=240, env=env, cwd=cwd, check=False,
    )  # fmt: skip


@pytest.mark.slow
def test_run_leaves_a_results_file_with_the_tables_rows(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--nproc", "2", "-b", "1K", "-e", "4K", "-f", "4", "-n", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = re.findall(r"^# results: (\S+)$", proc.stderr, re.M)
    assert len(said) == 1, proc.stderr
    path = Path(said[0])
    run_id = path.parent.name
    assert path == tmp_path / "runs" / run_id / "results.json"
    assert re.fullmatch(r"nccl-\d{8}-\d{6}-[0-9a-f]{4}", run_id)

    run = load(resolve(run_id, base=tmp_path / "runs"))
    assert run.meta.run_id == run_id and run.meta.source == "nccl-k8s"
    assert (run.meta.world_size, run.meta.nodes, run.meta.backend) == (2, 1, "gloo")
    assert run.meta.torch and run.meta.nccl_k8s
    assert (run.meta.config.minbytes, run.meta.config.maxbytes, run.meta.config.iters) == (
        1024,
        4096,
        2,
    )
    assert run.meta.config.ops == ["all_reduce"] and run.meta.config.dtype == "float"
    assert not any(k.startswith("NCCL_K8S_") for k in run.meta.env)

    printed = [m.groups() for line in proc.stdout.splitlines() if (m := ROW.match(line))]
    assert len(printed) == 2  # 1K and 4K
    stored = {(r.size_bytes, r.placement): r for r in run.rows}
    assert len(stored) == len(run.rows) == 4
    for size, count, *cells in printed:
        for placement, (time_us, algbw, busbw, wrong) in (("out", cells[:4]), ("in", cells[4:])):
            row = stored[(int(size), placement)]  # type: ignore[index]  # placement is "out"/"in"
            assert row.count == int(count) and row.wrong == int(wrong)
            # The table rounds; the file holds the unrounded numbers.
            assert abs(row.time_us - float(time_us)) <= 0.006 * max(1.0, row.time_us / 1000)
            assert abs(row.algbw - float(algbw)) <= 0.006
            assert abs(row.busbw - float(busbw)) <= 0.006
            assert row.time_us_min is not None and row.time_us_max is not None
            assert row.time_us_min <= row.time_us <= row.time_us_max

    # The stored run is what `report` reads: its three plots (busbw, small sizes, spread).
    pytest.importorskip("matplotlib")
    from nccl_k8s.results.report import write_report

    report = write_report([str(path)], output=tmp_path / "r.html")
    assert [p.name for p in report.plots] == [
        "busbw-all_reduce",
        "latency-all_reduce",
        "spread-all_reduce",
    ]
    assert f"{run_id} (nccl-k8s, 2× CPU)" in (tmp_path / "r.html").read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_failed_run_is_stored_too_under_its_id_with_the_users_json(tmp_path: Path) -> None:
    """A --min-busbw miss fails the run (exit 1, no crash report) and its results are kept."""
    user_json = tmp_path / "mine.json"
    args = ["--nproc", "2", "-b", "1K", "-e", "1K", "-n", "2", "--min-busbw", "1000"]
    proc = _run(tmp_path, *args, "--json", str(user_json), "--run-id", "floor-miss")
    assert proc.returncode == 1, proc.stderr[-2000:]
    # A verdict the table printed, not a crashed rank: one line says which gate, and why.
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("error: --min-busbw 1000 GB/s missed: all_reduce averaged ")
    assert errors[0].endswith(" GB/s at 1K")
    assert "crash" not in proc.stderr.lower()
    assert f"# results: {tmp_path / 'runs' / 'floor-miss' / 'results.json'}" in proc.stderr
    run = load(tmp_path / "runs" / "floor-miss" / "results.json")
    assert run.meta.run_id == "floor-miss" and run.meta.inputs == [str(user_json)]
    assert user_json.is_file() and len(run.rows) == 2
    assert run.summaries and run.summaries[0].avg_busbw is not None
    # The -J file's args are the flags as typed: not the --backend gloo and --no-result-lines
    # that run gives its ranks (issue 24, point 9).
    typed = json.loads(user_json.read_text())["args"]
    assert typed == [*args, "--json", str(user_json), "--run-id", "floor-miss"]


def test_run_id_and_no_save_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run id is the cli's (it owns the runs directory); the launcher passes the flags on."""
    pytest.importorskip("torch")
    monkeypatch.setenv("NCCL_K8S_RUNS_DIR", str(tmp_path / "runs"))
    named = run_cli.plan(["--nproc", "2", "--run-id", "my-run.1", "-b", "1K"])
    assert named.run_id == "my-run.1"
    assert "--run-id" not in named.run.rank_argv and "my-run.1" not in named.run.rank_argv
    unsaved = run_cli.plan(["--no-save", "-b", "1K"])
    assert unsaved.run_id is None and "--no-save" not in unsaved.run.rank_argv
    fresh = run_cli.plan(["-b", "1K"])
    assert fresh.run_id is not None and fresh.run_id.startswith("nccl-")

    with pytest.raises(UsageError, match="--run-id 'My Run'"):
        run_cli.plan(["--run-id", "My Run"])
    with pytest.raises(UsageError, match="cannot go with --no-save"):
        run_cli.plan(["--run-id", "x", "--no-save"])
    assert not (tmp_path / "runs").exists()  # checking creates nothing


def test_an_existing_run_id_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("NCCL_K8S_RUNS_DIR", str(tmp_path))
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "results.json").write_text("{}")
    with pytest.raises(UsageError, match="already exists"):
        run_cli.plan(["--run-id", "taken"])


def test_help_names_the_new_flags() -> None:
    text = local.run_parser().format_help()
    assert "--run-id ID" in text and "--no-save" in text and "NCCL_K8S_RUNS_DIR" in text


@pytest.mark.slow
def test_z3_keeps_nccl_tests_bool_in_json_and_the_mode_in_ours_and_in_the_results(
    tmp_path: Path,
) -> None:
    # nccl-tests' -J says only whether ops block; our field and the stored results say which mode.
    user_json = tmp_path / "z3.json"
    proc = _run(tmp_path, "--nproc", "2", "-b", "1K", "-e", "1K", "-n", "1", "-z", "3", "--json", str(user_json))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = json.loads(user_json.read_text(encoding="utf-8"))["config"]
    assert config["blocking_collectives"] == "true"
    assert config["blocking"] == 3
    (path,) = re.findall(r"^# results: (\S+)$", proc.stderr, re.M)
    assert load(path).meta.config.blocking == 3
    assert json.loads(Path(path).read_text(encoding="utf-8"))["meta"]["config"]["blocking"] == 3
