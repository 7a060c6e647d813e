"""`nccl-k8s run`: the benchmark on this machine."""

from __future__ import annotations

import typer

from nccl_k8s.cli._common import err, handle_errors


def register(app: typer.Typer) -> None:
    app.command(
        "run",
        help="Run the benchmark on this machine (all local GPUs via NCCL, or CPU ranks via gloo). "
        "Takes nccl-tests' flags; `nccl-k8s run --help` lists them.",
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
        local.run_parser().print_help()
        raise typer.Exit(0)
    prepared = local.prepare(args)
    outcome = local.run_and_save(prepared)
    if outcome.results is not None:
        err.print(f"# results: {outcome.results}", markup=False)
    elif prepared.run_id is not None:
        err.print("# results: not saved (the ranks wrote none)", markup=False)
    raise typer.Exit(outcome.exit_code)
