"""What every command shares: the consoles and the one place errors become exit codes."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from nccl_k8s.errors import NcclK8sError

P = ParamSpec("P")
R = TypeVar("R")

#: Tables and results go to stdout; progress, findings and errors to stderr.
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def debug_enabled() -> bool:
    return os.environ.get("NCCL_K8S_DEBUG", "") not in ("", "0")


def fail(exc: NcclK8sError) -> typer.Exit:
    """Print one red line for an error and return the Exit to raise."""
    err.print(f"[red]error:[/red] {escape(str(exc))}", markup=True, highlight=False)
    return typer.Exit(exc.exit_code)


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
        except KeyboardInterrupt:
            err.print("interrupted")
            sys.exit(130)

    return wrapper
