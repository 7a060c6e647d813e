"""Issue 24, point 7: what the CLI writes is whole when piped, and files are shared as the
umask says."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli._common import columns
from nccl_k8s.cli.main import app

DATA = Path(__file__).parent / "data"
IB_LOG = DATA / "nccl-logs" / "ib_gdr_a100.log"  # 4 ranks of pid 120890 on host 10-90-43-152
OLD = DATA / "nccl-tests" / "handmade-old" / "v100x8_2nodes_error_column.txt"  # 52 rows
HOST = "gpu-node-a3mega-highgpu-8g-us-central1-b-pool-7f9c2d-0123456789abcdef"


@pytest.mark.parametrize(
    "env",
    [
        {"COLUMNS": "40"},
        # CI logs: rich believes these are terminals, 80 columns wide.
        {"FORCE_COLOR": "1", "COLUMNS": "40"},
        {"TTY_COMPATIBLE": "1"},
    ],
    ids=["narrow", "force-color", "tty-compatible"],
)
def test_diagnose_piped_prints_every_host_whole_one_rank_a_line(
    tmp_path: Path, env: dict[str, str]
) -> None:
    log = tmp_path / "pod.log"
    log.write_text(IB_LOG.read_text().replace("10-90-43-152", HOST))
    res = CliRunner().invoke(app, ["diagnose", str(log)], env=env)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert re.split(r"\s{2,}", lines[0]) == [
        "rank", "host:pid [dev]", "NCCL", "transports", "inter-node", "channels",
    ]  # fmt: skip
    assert not any(c in res.stdout for c in "│┃━…")
    # ranks 0..3 are devices 0..3 of the one process; rank 0 uses NET/IB devices 4 and 5.
    for rank in range(4):
        assert re.match(rf"{rank}\s+{HOST}:120890 \[{rank}\]\s+", lines[1 + rank]), lines
    assert "NET/IB dev 4,5 GDR on" in lines[1]
    assert lines[5] == "channels: coll/nvls/p2p"


def test_compare_piped_is_one_line_per_row_whatever_the_width(tmp_path: Path) -> None:
    out = tmp_path / "old.json"
    assert CliRunner().invoke(app, ["import", str(OLD), "-o", str(out)]).exit_code == 0
    res = CliRunner().invoke(
        app, ["compare", str(out), "--baseline", str(out)], env={"COLUMNS": "30"}
    )
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].split() == [
        "op", "size", "place", "on", "baseline", "current", "ratio", "verdict",
    ]  # fmt: skip
    rows = lines[1:53]
    assert all(
        re.match(r"(all_reduce|broadcast)\s+\S+\s+(in|out)\s+(busbw|time) ", r) for r in rows
    )
    assert all(r.endswith(" 1.000  ok") for r in rows), rows
    assert lines[53].startswith("52 rows compared on busbw")


def test_plain_columns_right_align_numbers_and_keep_every_cell() -> None:
    text = columns([("op", "busbw", "why"), ("all_reduce", "3.5", "x" * 300)], right={1})
    assert text.splitlines() == ["op          busbw  why", "all_reduce    3.5  " + "x" * 300]


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_results_files_follow_the_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask_022: None
) -> None:
    """Teammates sharing a runs directory read each other's results (0644 under umask 022)."""
    monkeypatch.setenv("NCCL_K8S_RUNS_DIR", str(tmp_path / "runs"))
    assert CliRunner().invoke(app, ["import", str(OLD)]).exit_code == 0
    (stored,) = (tmp_path / "runs").glob("*/results.json")
    assert _mode(stored) == 0o644
    res = CliRunner().invoke(app, ["import", str(OLD), "-o", str(tmp_path / "x.json")])
    assert res.exit_code == 0, res.output
    assert _mode(tmp_path / "x.json") == 0o644
    os.umask(0o077)
    assert (
        CliRunner().invoke(app, ["import", str(OLD), "-o", str(tmp_path / "y.json")]).exit_code == 0
    )
    assert _mode(tmp_path / "y.json") == 0o600


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["import", str(OLD), "-o", "{target}/x.json"], "-o"),
        (["report", str(OLD), "-o", "{target}/r.html"], "-o"),
        (["report", str(OLD), "--png", "{target}/plots"], "--png"),
        (["bundle", "--run", "r-1", "-o", "{target}/b.tar.gz"], "-o"),
        (["run", "-b", "8", "-e", "8", "--json", "{target}/x.json"], "--json"),
    ],
    ids=["import", "report", "report-png", "bundle", "run"],
)
def test_one_rule_for_output_paths_a_missing_directory_is_refused_and_nothing_made(
    tmp_path: Path, args: list[str], flag: str
) -> None:
    """Every output path the user names: its directory must exist (a typo makes no tree)."""
    target = tmp_path / "missing"
    argv = [a.replace("{target}", str(target)) for a in args]
    named = Path(argv[argv.index(flag) + 1])
    res = CliRunner().invoke(
        app, argv, env={"KUBECONFIG": str(tmp_path / "k"), "NCCL_K8S_RUNS_DIR": str(tmp_path)}
    )
    assert res.exit_code == 2, res.output
    assert res.stderr.splitlines() == [
        f"error: {flag} {named}: directory {named.parent} does not exist: create it or choose "
        "a writable path"
    ]
    assert list(tmp_path.iterdir()) == []


def test_report_png_makes_the_directory_it_names_and_says_so(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "old.json"
    assert CliRunner().invoke(app, ["import", str(OLD), "-o", str(out)]).exit_code == 0
    res = CliRunner().invoke(app, ["report", str(out), "--png", str(tmp_path / "plots")])
    assert res.exit_code == 0, res.output
    n = len(list((tmp_path / "plots").glob("*.png")))
    assert res.stdout.strip() == f"plots: {n} PNG files -> {tmp_path / 'plots'}/ (created)"
