"""`nccl-k8s run`: the benchmark on this machine, and its results stored under runs/.

The launcher (launch.local) validates the flags, starts the ranks and returns plain facts;
nccl_k8s.local checks the run id and the runs directory before any rank starts and stores the
results. This module parses, calls them, prints, and renders `run --help` from the engine's own
argparse parser.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import re
from typing import Any

import typer
from rich.markup import escape

from nccl_k8s.cli._common import Command, err, handle_errors
from nccl_k8s.cli._examples import examples_text

HELP = (
    "Run the benchmark on this machine: all local GPUs through NCCL, or CPU ranks through gloo "
    "when there is no GPU. Takes nccl-tests' flags (same letters, same meaning); "
    "`nccl-k8s run --help` lists them."
)
# One line per code: the terminal wraps them (a hand-wrapped line breaks mid-sentence at any
# other width).
EXIT_CODES = (
    "Exit codes:\n"
    "  0        ok\n"
    "  1        the run failed: wrong results, a --min-busbw floor, or a rank that crashed, was "
    "killed or hung (named, not the rank that noticed)\n"
    "  2        bad input: a flag, --nproc beyond the machine, an output path that cannot be "
    "written; checked before any rank starts\n"
    "  130/143  interrupted by SIGINT/SIGTERM; every rank was stopped"
)
TIMEOUTS = (
    "Ranks meet at a store this process hosts on 127.0.0.1. -T SECONDS bounds that rendezvous "
    "and every collective (0: torch's defaults, 30 min on gloo, 10 min on NCCL); a rank that dies "
    "or stops ends the run as soon as a peer gives up, and all ranks end with this process."
)
ENGINE_PANEL = "nccl-tests flags (every rank gets them)"


def register(app: typer.Typer) -> None:
    app.command(
        "run",
        help=HELP,
        context_settings={
            "allow_extra_args": True,
            "ignore_unknown_options": True,
            "help_option_names": [],
        },
        add_help_option=False,
    )(run)


@handle_errors
def run(ctx: typer.Context) -> None:
    from nccl_k8s import local

    args = list(ctx.args)
    if "-h" in args or "--help" in args:
        print_help()
        raise typer.Exit(0)
    outcome = local.run(args)
    if outcome.results is not None:
        err.print(f"# results: {outcome.results}", markup=False)
    elif outcome.save_asked:
        err.print("# results: not saved (the ranks wrote none)", markup=False)
    for why in outcome.failures:
        err.print(f"[red]error:[/red] {escape(why)}", markup=True, highlight=False)
    raise typer.Exit(outcome.exit_code)


# -- help ---------------------------------------------------------------------------------------


def print_help() -> None:
    """`nccl-k8s run --help` in the look of every other command (rich panels, metavars, defaults),
    rendered from the launcher's argparse parser, which stays the one definition of the flags."""
    from nccl_k8s import launch as local

    parser = local.run_parser()
    params = [
        _param(action, panel=None if action.dest in local.RUN_FLAGS else ENGINE_PANEL)
        for action in parser._actions
        if action.help != argparse.SUPPRESS and action.option_strings
        if not isinstance(action, argparse._HelpAction)
    ]

    def command(**_: Any) -> None:  # never called: only its signature is rendered
        raise AssertionError

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]  # how typer reads parameters
    helper = typer.Typer(add_completion=False, rich_markup_mode="rich")
    helper.command(
        cls=Command,
        help=HELP.replace("; `nccl-k8s run --help` lists them", ", listed below"),
        epilog=f"{escape(TIMEOUTS)}\n\n{escape(EXIT_CODES)}\n\n{escape(examples_text('run'))}",
        context_settings={"help_option_names": ["-h", "--help"]},
    )(command)
    with contextlib.suppress(SystemExit):  # click ends help with an exit
        helper(["--help"], prog_name="nccl-k8s run")


def _param(action: argparse.Action, *, panel: str | None) -> inspect.Parameter:
    flag = action.nargs == 0
    text = escape(re.sub(r",(?=\S)", ", ", str(action.help or "")))
    option = typer.Option(
        bool(action.default) if flag else action.default,
        *action.option_strings,
        help=text,
        metavar="" if flag else _metavar(action),
        show_default=not flag and action.default is not None,
        rich_help_panel=panel,
    )
    return inspect.Parameter(
        action.dest,
        inspect.Parameter.KEYWORD_ONLY,
        default=option,
        annotation=bool if flag else str,
    )


def _metavar(action: argparse.Action) -> str:
    """argparse's metavar where the engine gave one (SIZE, TYPE, SECONDS...); else N for counts
    and the flag's name for words."""
    if isinstance(action.metavar, str):
        return action.metavar
    if isinstance(action.default, int) and not isinstance(action.default, bool):
        return "N"
    return action.dest.upper()
