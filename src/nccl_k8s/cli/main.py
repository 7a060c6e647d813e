"""The `nccl-k8s` command. Each group of commands lives in its own module and registers here."""

from __future__ import annotations

import os

import typer

from nccl_k8s import __version__
from nccl_k8s.cli._common import EXIT_CODES, Group, install_interrupt_handlers

app = typer.Typer(
    name="nccl-k8s",
    help="Measure NCCL collective performance on this machine or across a Kubernetes cluster, "
    "and tell whether the numbers are right.",
    epilog=EXIT_CODES,
    cls=Group,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # -h everywhere: click's sub-contexts inherit the names (run parses its own, as argparse does).
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"nccl-k8s {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
) -> None:
    if debug:
        os.environ["NCCL_K8S_DEBUG"] = "1"


def _register() -> None:
    # One import per command module; each defines `register(app)`.
    from nccl_k8s.cli import _run

    _run.register(app)
    from nccl_k8s.cli import _deploy

    _deploy.register(app)
    from nccl_k8s.cli import _cluster

    _cluster.register(app)
    from nccl_k8s.cli import _results

    _results.register(app)
    from nccl_k8s.cli import _doctor

    _doctor.register(app)
    from nccl_k8s.cli import _rbac

    _rbac.register(app)


_register()


def main() -> None:
    # `run` has handlers of its own while its ranks live (launch._procs).
    install_interrupt_handlers()
    app()


if __name__ == "__main__":
    main()
