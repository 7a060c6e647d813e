"""The `nccl-k8s` command. Each group of commands lives in its own module and registers here."""

from __future__ import annotations

import importlib
import os
from typing import Any, ClassVar

import typer
import typer.main

from nccl_k8s import __version__
from nccl_k8s.cli._common import EXIT_CODES, Group, install_interrupt_handlers

#: Each command and the module of nccl_k8s.cli whose `register(app)` adds it, in --help's order.
#: A command imports only its own module (`status` need not load the results parsers or the
#: deploy options); tests/test_cli_help.py checks this table against what the modules register.
COMMANDS = {
    "run": "_run",
    "render": "_deploy",
    "deploy": "_deploy",
    "wait": "_deploy",
    "status": "_cluster",
    "logs": "_cluster",
    "results": "_cluster",
    "cleanup": "_cluster",
    "list": "_cluster",
    "import": "_results",
    "diagnose": "_results",
    "compare": "_results",
    "report": "_results",
    "doctor": "_doctor",
    "bundle": "_doctor",
    "rbac": "_rbac",
    "nodes": "_doctor",  # a group: typer lists groups after commands
}


def _short_help(command: Any) -> None:
    """-h on the command (and its subcommands) whatever context it is parsed in: click makes a
    command's help option once, with the names of the first context that asks, so a command
    parsed once on its own (`make_context` without our root) would otherwise lose -h for good.
    `run` names its own (none: it parses -h itself)."""
    command.context_settings.setdefault("help_option_names", ["-h", "--help"])
    for sub in getattr(command, "commands", {}).values():
        _short_help(sub)


class RootGroup(Group):
    """The `nccl-k8s` group, whose commands are loaded from their modules when first asked for."""

    #: The click commands each module registers, once it is loaded (module -> name -> command).
    loaded: ClassVar[dict[str, dict[str, Any]]] = {}

    @classmethod
    def load(cls, module: str) -> dict[str, Any]:
        if module not in cls.loaded:
            sub = typer.Typer(cls=Group)
            importlib.import_module(f"nccl_k8s.cli.{module}").register(sub)
            cls.loaded[module] = dict(typer.main.get_group(sub).commands)
            for command in cls.loaded[module].values():
                _short_help(command)
        return cls.loaded[module]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            command = self.load(COMMANDS[cmd_name]).get(cmd_name)
            if command is not None:
                self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: Any) -> list[str]:
        for name in COMMANDS:
            self.get_command(ctx, name)
        # In the table's order, whichever command was loaded first.
        return [n for n in COMMANDS if n in self.commands] + [
            n for n in super().list_commands(ctx) if n not in COMMANDS
        ]


app = typer.Typer(
    name="nccl-k8s",
    help="Measure NCCL collective performance on this machine or across a Kubernetes cluster, "
    "and tell whether the numbers are right.",
    epilog=EXIT_CODES,
    cls=RootGroup,
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


def main() -> None:
    # `run` has handlers of its own while its ranks live (launch._procs).
    install_interrupt_handlers()
    app()


if __name__ == "__main__":
    main()
