"""`--run ID` is checked locally by every command that takes it (issue 36): a run id of the wrong
form is one line, exit 2, before any kubeconfig is read or request sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from nccl_k8s.cli.main import app


def _commands_with_run() -> list[list[str]]:
    found: list[list[str]] = []

    # Typer carries its own click: its groups and options are known by what they have.
    def walk(cmd: Any, path: list[str]) -> None:
        if hasattr(cmd, "list_commands"):
            for name in cmd.list_commands(None):
                walk(cmd.get_command(None, name), [*path, name])
        elif any("--run" in getattr(p, "opts", ()) for p in cmd.params):
            found.append(path)

    walk(typer.main.get_command(app), [])
    return found


COMMANDS = _commands_with_run()


def test_the_commands_that_take_run_are_found() -> None:
    names = {" ".join(c) for c in COMMANDS}
    assert {"status", "logs", "results", "wait", "cleanup", "bundle", "doctor"} <= names


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
@pytest.mark.parametrize("bad", ["Bad_Run", "-x", "a" * 41, "run.1"])
def test_a_run_id_of_the_wrong_form_is_one_line_exit_2(
    command: list[str], bad: str, tmp_path: Path
) -> None:
    # A kubeconfig that is not there: reading it would be another error than the one expected.
    missing = str(tmp_path / "no-kubeconfig")
    res = CliRunner().invoke(
        app, [*command, f"--run={bad}", "--kubeconfig", missing], env={"KUBECONFIG": missing}
    )
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1, res.output
    assert lines[0].startswith(f'error: --run "{bad}": expected a DNS-1123 label'), res.output
