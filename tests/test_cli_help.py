"""The CLI as a user meets it: one help style for every command, and one line for bad paths."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from nccl_k8s import launch as local
from nccl_k8s.cli.main import app

DATA = Path(__file__).parent / "data" / "nccl-tests" / "public"
COMMANDS = [
    "run", "render", "deploy", "wait", "status", "logs", "results", "cleanup", "list",
    "import", "diagnose", "compare", "report", "doctor", "bundle", "nodes", "rbac",
]  # fmt: skip
SUBCOMMANDS = ["nodes check", "nodes schedule", "nodes history"]


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


def _click_commands() -> dict[str, Any]:
    """Every command as typed after `nccl-k8s` ("nodes check"), with its click object."""
    root = typer.main.get_command(app)
    found: dict[str, Any] = {"nccl-k8s": root}

    def walk(group: Any, prefix: str) -> None:
        # Through click's own calls: the root loads its commands' modules when asked (main).
        for name in group.list_commands(None):
            cmd = group.get_command(None, name)
            found[f"{prefix}{name}"] = cmd
            if hasattr(cmd, "commands"):
                walk(cmd, f"{prefix}{name} ")

    walk(root, "")
    return found


@pytest.mark.parametrize("command", COMMANDS + SUBCOMMANDS)
def test_dash_h_is_help_on_every_command(command: str) -> None:
    args = command.split()
    short = CliRunner().invoke(app, [*args, "-h"], env={"COLUMNS": "200"})
    assert short.exit_code == 0, short.output
    assert short.stdout == help_of(*args)
    assert "Usage:" in short.stdout


def test_every_command_is_tested_for_its_help() -> None:
    # A command added later gets -h, examples and unwrapped help checked here, or this fails.
    assert set(_click_commands()) == {"nccl-k8s", *COMMANDS, *SUBCOMMANDS}


@pytest.mark.parametrize("command", ["nccl-k8s", *COMMANDS, *SUBCOMMANDS])
def test_every_help_ends_with_examples_of_that_command_that_parse(command: str) -> None:
    text = help_of(*([] if command == "nccl-k8s" else command.split()))
    tail = text[text.rindex(" Examples:") :]
    lines = [line.strip() for line in tail.splitlines()[1:] if line.strip()]
    commands = [line for line in lines if not line.startswith("#")]
    assert commands and len(lines) == 2 * len(commands), tail  # a comment above each
    root = _click_commands()["nccl-k8s"]
    for line in commands:
        argv = shlex.split(line.split(" | ")[0])
        assert argv[0] == "nccl-k8s"
        if command != "nccl-k8s":
            assert " ".join(argv[1:]).startswith(command), line
        # Each example parses: its command exists and every option is one of its own.
        cmd, rest = root, argv[1:]
        while hasattr(cmd, "commands"):
            cmd, rest = cmd.commands[rest[0]], rest[1:]
        if rest != ["-h"]:
            cmd.make_context(" ".join(argv[: -len(rest)]), rest)


def test_help_prose_is_wrapped_by_the_terminal_not_by_hand() -> None:
    """No help text carries line breaks inside a paragraph: they would break lines mid-sentence
    at any width but the one they were written for (typer keeps them)."""
    for name, cmd in _click_commands().items():
        for paragraph in (cmd.help or "").split("\n\n"):
            assert "\n" not in paragraph, (name, paragraph)
        for param in cmd.params:
            assert "\n" not in (getattr(param, "help", None) or ""), (name, param.name)
    for action in local.run_parser()._actions:
        assert "\n" not in str(action.help or ""), action.dest
    # Wide enough, every command's summary is one line of the commands list.
    text = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "1000"}).stdout
    for name in COMMANDS:
        row = next(line for line in text.splitlines() if re.match(rf"│ {name}\s", line))
        summary = _click_commands()[name].help.split("\n\n")[0].replace("\\[", "[")
        assert summary in row, name


def test_run_help_exit_codes_are_one_line_each_at_any_width() -> None:
    res = CliRunner().invoke(app, ["run", "-h"], env={"COLUMNS": "250"})
    assert res.exit_code == 0
    assert re.search(
        r"1\s+the run failed: wrong results, a --min-busbw floor, or a rank that crashed, was "
        r"killed or hung \(named, not the rank that noticed\)",
        res.stdout,
    ), res.stdout


def test_the_lazy_command_table_names_what_each_module_registers() -> None:
    """main.COMMANDS says which module adds each command: every module's commands, no other."""
    import importlib

    from nccl_k8s.cli import main

    registered: dict[str, str] = {}
    for module in dict.fromkeys(main.COMMANDS.values()):
        sub = typer.Typer()
        importlib.import_module(f"nccl_k8s.cli.{module}").register(sub)
        names = [c.name for c in sub.registered_commands]
        names += [g.typer_instance.info.name for g in sub.registered_groups if g.typer_instance]
        registered.update(dict.fromkeys(names, module))  # type: ignore[arg-type]
    assert registered == main.COMMANDS
    assert sorted(main.COMMANDS) == sorted(COMMANDS)


def test_a_command_imports_only_its_own_module() -> None:
    """`status` answers within a second at 4,096 pods (issue 22): it does not import the
    results parsers, the deploy options or the other commands' modules."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from nccl_k8s.cli.main import app\n"
        "try:\n"
        "    app(['status', '--help'], standalone_mode=False)\n"
        "finally:\n"
        "    print(' '.join(sorted(m for m in sys.modules if m.startswith('nccl_k8s.'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = out.split()
    assert "nccl_k8s.cli._cluster" in loaded
    for module in ("nccl_k8s.cli._results", "nccl_k8s.cli._deploy", "nccl_k8s.cli._doctor",
                   "nccl_k8s.cli._run", "nccl_k8s.results"):  # fmt: skip
        assert module not in loaded, module
