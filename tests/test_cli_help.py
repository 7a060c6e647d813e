"""The CLI as a user meets it: one help style for every command, and one line for bad paths."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app

DATA = Path(__file__).parent / "data" / "nccl-tests" / "public"
COMMANDS = [
    "run", "render", "deploy", "wait", "status", "logs", "results", "cleanup", "list",
    "import", "diagnose", "compare", "report", "doctor", "bundle", "nodes",
]  # fmt: skip
SUBCOMMANDS = ["nodes check"]


def help_of(*args: str) -> str:
    res = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    return res.stdout


def test_the_top_level_help_lists_every_command_and_the_exit_codes() -> None:
    text = help_of()
    for command in COMMANDS:
        assert re.search(rf"│ {command}\s", text), command
    flat = " ".join(text.split())
    assert "Exit codes: 0 ok; 1 the run failed" in flat
    assert "2 bad input or configuration" in flat and "130/143 interrupted" in flat


@pytest.mark.parametrize("command", COMMANDS + SUBCOMMANDS)
def test_every_command_shows_metavars_not_python_types(command: str) -> None:
    text = help_of(*command.split())
    # typer 0.29 prints <str>, <bool>, <list[Path]> and {name} unless told otherwise.
    assert not re.search(r"<(str|bool|int|float|path|list\[[^]]*\])>", text, re.I), text
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert "{" not in usage, usage


def test_defaults_are_shown_once_from_where_they_live() -> None:
    text = " ".join(help_of("deploy").split())
    assert "--gpus-per-node N GPUs (ranks) per pod, one pod per node. [default: 8]" in text
    assert "[default: 1h]" in text and "[default: 1d]" in text and "[default: 15m]" in text
    assert "[default: (" not in text  # typer's way of showing a described default


def test_import_to_a_path_that_cannot_be_written_is_one_line_and_creates_nothing(
    tmp_path: Path,
) -> None:
    source = DATA / "oci_gb300x4_alltoall.txt"
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    for target, expected in (
        (
            tmp_path / "missing" / "x.json",
            "directory " + str(tmp_path / "missing") + " does not exist",
        ),
        (blocked / "x.json", f"{blocked} is not a directory"),
        (tmp_path, "is a directory: expected a file path"),
    ):
        res = CliRunner().invoke(app, ["import", str(source), "-o", str(target)])
        assert res.exit_code == 2, res.output
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: -o {target}"), lines
        assert expected in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_a_bundle_to_a_path_that_cannot_be_written_is_refused_before_the_run_is_read(
    tmp_path: Path,
) -> None:
    # No cluster is configured either: the path is checked first, and nothing is created.
    target = tmp_path / "missing" / "b.tar.gz"
    res = CliRunner().invoke(
        app, ["bundle", "--run", "r-1", "-o", str(target)], env={"KUBECONFIG": str(tmp_path / "k")}
    )
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines() == [
        f"error: -o {target}: directory {tmp_path / 'missing'} does not exist: create it or "
        "choose a writable path"
    ]
    assert list(tmp_path.iterdir()) == []
