"""What every command shares: the consoles, the help style, and the one place errors become exit
codes (one red line; a traceback only with --debug)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import signal
import sys
from collections.abc import Callable, Collection, Sequence
from types import FrameType
from typing import Any, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from nccl_k8s.errors import Interrupted, NcclK8sError, UsageError, install_hint

P = ParamSpec("P")
R = TypeVar("R")

#: Tables and results go to stdout; progress, findings and errors to stderr.
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

#: Every command ends with one of these; the top-level --help lists them.
EXIT_CODES = (
    "Exit codes: 0 ok; 1 the run failed (wrong results, a failed rank, a regression, the "
    "cluster refused); 2 bad input or configuration (nothing was started); 130/143 "
    "interrupted (Ctrl-C / SIGTERM)."
)


def debug_enabled() -> bool:
    return os.environ.get("NCCL_K8S_DEBUG", "") not in ("", "0")


def fail(exc: NcclK8sError) -> typer.Exit:
    """Print one red line for an error and return the Exit to raise."""
    err.print(f"[red]error:[/red] {escape(str(exc))}", markup=True, highlight=False)
    return typer.Exit(exc.exit_code)


#: The signal that really ended the command, when it was not SIGINT (see terminate_as_interrupt).
_TERMINATED_BY: list[int] = []


def terminate_as_interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (kill, timeout, a cancelled CI job) and SIGHUP (a closed terminal) end a command
    as Ctrl-C does, through its clean-up: `nodes check` removes its test runs, deploy and wait
    say that the run goes on. They are turned into SIGINT, the one signal asyncio's runner
    turns into a clean cancellation (an exception raised inside a running event loop breaks
    its cancel scopes), and remembered for the message and the exit code.
    Installed by `install_interrupt_handlers`, which also makes sure SIGINT is not ignored."""
    _TERMINATED_BY.append(signum)
    signal.raise_signal(signal.SIGINT)


def install_interrupt_handlers() -> None:
    """SIGTERM and SIGHUP as Ctrl-C (terminate_as_interrupt), and SIGINT as Python's default.

    A shell starts what a script runs with `&` with SIGINT ignored (so do some CI runners), and
    Python then leaves it ignored: SIGTERM turned into SIGINT would be lost, and `timeout` or a
    cancelled job could never stop the command through its clean-up (a nodes check would leave
    its test runs behind). Our interrupt is that clean-up, never a loss, so SIGINT is handled
    even where it was ignored; asyncio's runner then cancels a running loop cleanly."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, terminate_as_interrupt)


def interrupt_signal() -> int:
    """The signal behind a KeyboardInterrupt: SIGINT, or the one terminate_as_interrupt saw."""
    return _TERMINATED_BY[-1] if _TERMINATED_BY else int(signal.SIGINT)


#: The extra (pyproject's optional-dependencies) that installs each optional module a command
#: may import: a command run without it says which extra to install, not a traceback.
EXTRAS = {
    "lightkube": "k8s",
    "httpx2": "k8s",
    "msgspec": "k8s",
    "torch": "engine",
    "numpy": "engine",
    "matplotlib": "report",
    "prometheus_client": "metrics",
    "opentelemetry": "tracing",
}


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn our errors into one line and an exit code; a traceback only with --debug."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except NcclK8sError as exc:
            if debug_enabled():
                raise
            raise fail(exc) from None
        except ModuleNotFoundError as exc:
            extra = EXTRAS.get((exc.name or "").split(".")[0])
            if extra is None or debug_enabled():
                raise
            raise fail(UsageError(f"{exc.name} is not installed: {install_hint(extra)}")) from None
        except KeyboardInterrupt:
            signum = interrupt_signal()
            if signum == signal.SIGINT:
                err.print("interrupted", markup=False)
                sys.exit(130)
            raise fail(Interrupted(signum)) from None
        except BrokenPipeError:
            # The reader went away (`nccl-k8s logs | head`): stop quietly, as `cat` would.
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(141)
        except OSError as exc:
            # A file or directory the user named that cannot be read or written: one line.
            if debug_enabled():
                raise
            where = f"{exc.filename}: " if exc.filename else ""
            err.print(
                f"[red]error:[/red] {escape(where + (exc.strerror or str(exc)))}",
                markup=True,
                highlight=False,
            )
            sys.exit(2)

    return wrapper


class Command(TyperCommand):
    """Every command's help in one style: an option shows its metavar (SIZE, DURATION, N), a
    flag shows none, arguments read `FILE...` in the usage line (not typer's `{files}`), the
    prose is wrapped by the terminal (not where the docstring's lines end), and an Examples
    section (cli._examples) ends it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _tidy(self.params)
        self.help = unwrap(self.help)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        super().format_help(ctx, formatter)
        # A root command (run's help, rendered by a helper app) gives its examples itself.
        if ctx.parent is not None:
            print_examples(ctx)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        _tidy([option] if option is not None else [])
        return option

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """A word before `--` that no option takes is no engine flag: said as what it is."""
        if "--" in args and any(p.name == "engine_args" for p in self.params):
            before = args[: args.index("--")]
            opts, rest, _ = self.make_parser(ctx).parse_args(args=list(before))
            stray = [*(opts.get("engine_args") or ()), *rest]
            if stray:
                raise typer.BadParameter(
                    f"{stray[0]!r} comes before `--` and no option takes it: "
                    f"`{command_key(ctx)}` has no positional argument; engine flags go after "
                    f"`--`, e.g. `{engine_example(ctx)}`",
                    ctx=ctx,
                    param_hint="'-- ENGINE_FLAGS'",
                )
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]  # typer's Context is click's
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = f"{param.metavar}{'...' if param.nargs != 1 else ''}"
                pieces.append(name if param.required else f"[{name}]")
        return pieces


def unwrap(text: str | None) -> str | None:
    """Help prose as one line per paragraph, so that the terminal wraps it: typer keeps the
    line breaks of a docstring (in the commands list, and in every paragraph after the first).
    A paragraph that starts with click's \\b marker keeps its lines."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(
        p if p.startswith("\b") else " ".join(line.strip() for line in p.splitlines())
        for p in paragraphs
    )


def command_key(ctx: Any) -> str:
    """A command as typed after `nccl-k8s` ("nodes check"); "nccl-k8s" for the group itself."""
    names: list[str] = []
    while ctx.parent is not None:
        names.append(str(ctx.info_name))
        ctx = ctx.parent
    return " ".join(reversed(names)) or "nccl-k8s"


def print_examples(ctx: Any) -> None:
    """The command's Examples (cli._examples) after its help, in typer's help console. Printed
    apart from the epilog: typer dedents an epilog, which would flush the examples left."""
    from rich.padding import Padding
    from typer import rich_utils

    from nccl_k8s.cli._examples import examples_text

    text = examples_text(command_key(ctx))
    if text:
        top = 0 if ctx.command.epilog else 1  # an epilog ends with a blank line
        rich_utils._get_rich_console().print(Padding(Text(text), (top, 1, 1, 1)))


def _tidy(params: Sequence[Any]) -> None:
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag:
            param.metavar = ""
        elif isinstance(param, TyperArgument):
            if param.metavar is None:
                param.metavar = (param.name or "ARG").upper()
            # The name column already shows the metavar; no `<list[str]>` type column.
            param.display_type_rich = lambda ctx: None  # type: ignore[method-assign]


def columns(rows: Sequence[Sequence[str]], *, right: Collection[int] = ()) -> str:
    """Plain columns, as kubectl prints them (a rich Table takes a third of a second for a
    thousand rows): every cell whole, one row per line; columns in `right` are right-aligned,
    the last column is not padded unless it is one of them."""
    last = len(rows[0]) - 1
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]

    def cell(i: int, c: str) -> str:
        if i in right:
            return c.rjust(widths[i])
        return c if i == last else c.ljust(widths[i])

    lines = ("  ".join(cell(i, c) for i, c in enumerate(r)) for r in rows)
    return "\n".join(line.rstrip() for line in lines) + "\n"


def is_tty(console: Console) -> bool:
    """Whether `console` writes to a terminal, asked of its file: rich's is_terminal also says
    yes under FORCE_COLOR or TTY_COMPATIBLE (CI logs), where its width is then 80 columns."""
    isatty = getattr(console.file, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # a closed file
        return False


def print_table(
    header: Sequence[str], rows: Sequence[Sequence[str | Text]], *, right: Collection[int] = ()
) -> None:
    """A table on stdout that never hides a cell: on a terminal a rich Table whose cells wrap
    (fold) to the terminal's width; piped or redirected, plain columns at their full width
    (rich would cut them to 80 columns), one row per line for grep and awk."""
    if not is_tty(out):
        plain = [tuple(header)] + [tuple(_plain(c) for c in r) for r in rows]
        out.file.write(columns(plain, right=right))
        return
    table = Table(show_edge=False, pad_edge=False)
    for i, name in enumerate(header):
        table.add_column(name, justify="right" if i in right else "left", overflow="fold")
    for r in rows:
        table.add_row(*(c if isinstance(c, Text) else Text(c) for c in r))
    out.print(table)


def _plain(cell: str | Text) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def with_default(help_text: str, default: object) -> str:
    """Help text ending in `[default: X]` exactly as typer shows a plain default (typer shows a
    described default as `(X)`); the bracket is escaped for rich markup."""
    return f"{help_text} \\[default: {default}]"


class Group(TyperGroup):
    """The `nccl-k8s` group: a usage error (unknown option, missing value) is one red line
    naming the command's --help, exit 2, like every other bad input; its help is styled as
    Command's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _tidy(self.params)
        self.help = unwrap(self.help)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        super().format_help(ctx, formatter)
        print_examples(ctx)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        _tidy([option] if option is not None else [])
        return option

    def main(  # type: ignore[override]  # same call, standalone handling is ours
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            rv = super().main(
                args=args,
                prog_name=prog_name,
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
        except typer.TyperException as e:  # click's UsageError and friends (typer vendors click)
            rv = int(getattr(e, "exit_code", 2))
            ctx = getattr(e, "ctx", None)
            where = f" (see `{ctx.command_path} --help`)" if rv == 2 and ctx is not None else ""
            said = _not_a_number(e, sys.argv[1:] if args is None else list(args))
            err.print(
                f"[red]error:[/red] {escape((said or e.format_message()) + _engine_hint(e) + where)}",
                markup=True,
                highlight=False,
            )
        except typer.Abort:
            err.print("interrupted", markup=False)
            rv = 130
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)


def _not_a_number(e: typer.TyperException, argv: list[str]) -> str | None:
    """A number option given a word, said as every other bad value is (`--tail 'abc': expected
    a whole number`), not in the words of typer's coercion; None for any other error."""
    param = getattr(e, "param", None)
    # typer's option keeps the parameter's annotation (int for `int | None`) with its type.
    kind: object = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    expected = "a whole number" if kind is int else "a number" if kind is float else None
    opts = list(getattr(param, "opts", ()) or ())
    if expected is None or not opts:
        return None
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag in opts and (eq or i + 1 < len(argv)):
            return f"{flag} {value if eq else argv[i + 1]!r}: expected {expected}"
    return f"{opts[0]}: expected {expected}"


def _engine_hint(e: typer.TyperException) -> str:
    """Engine flags given to render/deploy without `--` in front of them (NoSuchOption)."""
    ctx = getattr(e, "ctx", None)
    if getattr(e, "option_name", None) and ctx is not None and command_key(ctx) in _TAKES_ENGINE:
        return f"; engine flags go after `--`, e.g. `{engine_example(ctx)}`"
    return ""


def engine_example(ctx: Any) -> str:
    """A command line of this command with engine flags after `--`, using only options it has."""
    key = command_key(ctx)
    has_world = any("--world-size" in getattr(p, "opts", ()) for p in ctx.command.params)
    return f"nccl-k8s {key}{' --world-size 16' if has_world else ''} -- -b 8 -e 1G"


#: Commands whose arguments after `--` are engine flags.
_TAKES_ENGINE = ("render", "deploy", "doctor", "nodes check")
