"""`nccl-k8s run`: the benchmark on this machine, and its results stored under runs/.

The launcher (launch.local) validates the flags, starts the ranks and returns plain facts: the
exit code, and the versions the ranks ran with. This module owns what surrounds it: the run id
and the runs directory (both checked before any rank starts), and storing the results.

Every run that produced results (passed, or failed a check or a --min-busbw floor) is stored as
runs/<run-id>/results.json, the schema `compare` and `report` read (`--no-save` skips it). Rank 0
writes them in nccl-tests' -J layout, to the user's --json file or to one in the run's private
directory; `save_results` reads that file back through results.nccltests and completes the
metadata the file cannot carry (torch and CUDA versions, dtype, redop, root, -a). Result lines
would carry it all, but rank 0's stdout is the user's terminal, not ours to capture.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from nccl_k8s.cli._common import err, handle_errors
from nccl_k8s.errors import ResultsError

if TYPE_CHECKING:
    from nccl_k8s.launch.local import LocalRun
    from nccl_k8s.results import Run

HELP = (
    "Run the benchmark on this machine: all local GPUs through NCCL, or CPU ranks through gloo "
    "when there is no GPU. Takes nccl-tests' flags (same letters, same meaning); "
    "`nccl-k8s run --help` lists them."
)
EXIT_CODES = (
    "\b\nExit codes:\n"
    "  0        ok\n"
    "  1        the run failed: wrong results, a --min-busbw floor, or a rank that crashed, was\n"
    "           killed or hung (named, not the rank that noticed)\n"
    "  2        bad input: a flag, --nproc beyond the machine, an output path that cannot be\n"
    "           written; checked before any rank starts\n"
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
    from nccl_k8s.launch import local

    args = list(ctx.args)
    if "-h" in args or "--help" in args:
        print_help()
        raise typer.Exit(0)
    with local.interruptible():
        run_plan = plan(args)
        with local.workdir() as work:
            code, results = run_and_save(run_plan, work)
    if results is not None:
        err.print(f"# results: {results}", markup=False)
    elif run_plan.run_id is not None:
        err.print("# results: not saved (the ranks wrote none)", markup=False)
    raise typer.Exit(code)


# -- the run and its results --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Plan:
    """A local run ready to start: the launcher's part, and where its results go."""

    run: LocalRun
    #: The id the results are stored under (runs/<id>/results.json); None with --no-save.
    run_id: str | None


def plan(argv: Sequence[str]) -> Plan:
    """Validate everything before any rank starts: flags, rank count, the run id, and that the
    runs directory and --json can be written. Raises UsageError (one line, exit 2)."""
    from nccl_k8s.launch import local
    from nccl_k8s.results.store import check_new_run_id, new_run_id, runs_dir

    prepared = local.prepare(argv)
    if prepared.no_save:
        return Plan(prepared, None)
    run_id = check_new_run_id(prepared.run_id or new_run_id())
    local.check_writable(
        runs_dir(),
        what="runs directory",
        is_dir=True,
        hint="set NCCL_K8S_RUNS_DIR to a writable directory, or pass --no-save",
    )
    return Plan(prepared, run_id)


def run_and_save(run_plan: Plan, work: Path) -> tuple[int, Path | None]:
    """Launch the run and store its results under runs/<run-id>/ (unless --no-save); returns the
    exit code and the results path (None: nothing stored).

    A run whose ranks crashed raises RunFailed and stores nothing: there is no table to store.
    """
    from nccl_k8s.launch import local

    run = run_plan.run
    if run_plan.run_id is None:
        return local.launch(run, work=work), None
    started = time.time()
    user_json = run.config.json_path
    json_path = Path(user_json) if user_json else work / "engine.json"
    code = local.launch(run, work=work, extra_argv=() if user_json else ("--json", str(json_path)))
    # An old --json file from an earlier run is not this run's result.
    if not json_path.is_file() or json_path.stat().st_mtime < started - 1:
        return code, None
    return code, save_results(run_plan, json_path, keep_input=bool(user_json))


def save_results(run_plan: Plan, json_path: Path, *, keep_input: bool = False) -> Path:
    """Store rank 0's -J style JSON as runs/<run-id>/results.json; returns the path."""
    from nccl_k8s.results import store_run
    from nccl_k8s.results.store import results_path

    run = run_plan.run
    stored = results_from_json(json_path, run)
    stored.meta.torch = run.torch_version
    stored.meta.cuda = run.cuda_version
    if not keep_input:
        stored.meta.inputs = []  # a file in the run's private directory, gone after the run
    try:
        return store_run(stored, run_id=run_plan.run_id)
    except OSError as exc:
        target = results_path(str(run_plan.run_id))
        raise ResultsError(
            f"{target}: cannot store the results ({exc.strerror}); the table above is this "
            "run's record: check the runs directory (NCCL_K8S_RUNS_DIR)",
            path=str(target),
        ) from None


def results_from_json(json_path: Path, run: LocalRun) -> Run:
    """The engine's --json file as a results Run, with what the run asked for that the file's
    nccl-tests layout has no field for (-d, -o, -r, -a as given, the ops in order)."""
    from nccl_k8s.results import import_file

    config = run.config
    stored = import_file(json_path)
    meta = stored.meta
    meta.source = "nccl-k8s"
    # The engine lists every NCCL_* variable; NCCL_K8S_* are ours (runs dir, run id), not NCCL's.
    meta.env = {k: v for k, v in meta.env.items() if not k.startswith("NCCL_K8S_")}
    if meta.backend == "gloo":
        meta.gpu_model = None  # gloo ranks' "device" is the CPU, as the result lines say
    cfg = meta.config
    cfg.dtype, cfg.redop, cfg.root = config.dtype, config.redop, config.root
    cfg.average, cfg.blocking = config.average, bool(config.blocking)
    cfg.ops = list(config.ops)
    return stored


# -- help ---------------------------------------------------------------------------------------


def print_help() -> None:
    """`nccl-k8s run --help` in the look of every other command (rich panels, metavars, defaults),
    rendered from the launcher's argparse parser, which stays the one definition of the flags."""
    from nccl_k8s.launch import local

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
        help=HELP.replace("; `nccl-k8s run --help` lists them", ", listed below"),
        epilog=f"{escape(TIMEOUTS)}\n\n{escape(EXIT_CODES)}",
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
