"""Options shared by commands: the deploy options (one typer option per entry of
nccl_k8s.spec.OPTIONS, the registry declared on RunSpec's fields) and kubectl's cluster options
(-n, --context, --kubeconfig, --run).

`with_spec_options(fn)` gives a command every deploy option and hands `fn` the validated
RunSpec; engine flags are the arguments after `--`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

import typer

from nccl_k8s.cli._common import with_default
from nccl_k8s.errors import UsageError
from nccl_k8s.spec import OPTIONS, Option, build_run_spec, timeout

R = TypeVar("R")

ENGINE_HELP = (
    "Engine flags after `--`, passed to `python -m nccl_k8s.bench` in every pod: nccl-tests' "
    "-b -e -f -i -n -w -c -d -o -r -z -a -G -T and ours (--ops, --backend, --duration ...), "
    "e.g. `-- -b 8 -e 1G -f 2`."
)


def _parameter(opt: Option) -> inspect.Parameter:
    """The typer parameter of one table entry. Values stay strings here so that a bad one gets
    build_run_spec's one-line message, not a typer type error."""
    shown = opt.shown_default
    help_text = with_default(opt.help, shown) if shown is not None else opt.help
    kwargs: dict[str, Any] = {"help": help_text, "rich_help_panel": opt.panel}
    kwargs["show_default"] = False
    if opt.kind == "switch":
        annotation: Any = bool
        default: Any = False
    else:
        annotation = list[str] | None if opt.kind == "list" else str | None
        default = None
        kwargs["metavar"] = opt.metavar
    return inspect.Parameter(
        opt.name,
        inspect.Parameter.KEYWORD_ONLY,
        default=default,
        annotation=Annotated[annotation, typer.Option(*opt.flags, **kwargs)],
    )


_ENGINE_PARAM = inspect.Parameter(
    "engine_args",
    inspect.Parameter.KEYWORD_ONLY,
    default=None,
    annotation=Annotated[
        list[str] | None,
        typer.Argument(help=ENGINE_HELP, metavar="-- ENGINE_FLAGS", show_default=False),
    ],
)
_SPEC_PARAMS = tuple(_parameter(o) for o in OPTIONS)


class LazySpec:
    """The deploy options as given; calling it validates them into a RunSpec."""

    def __init__(self, values: dict[str, Any], engine_args: tuple[str, ...]) -> None:
        self.values, self.engine_args = values, engine_args

    def __call__(self) -> Any:
        return build_run_spec(engine_args=self.engine_args, **self.values)

    def given(self, name: str) -> Any:
        """An option's value as typed (None when absent)."""
        return self.values.get(name)


def spec_of_params(
    params: dict[str, Any], engine_args: Sequence[str], *, fixed: dict[str, str] | None = None
) -> Any:
    """The RunSpec a command of with_spec_options builds, from its parsed parameters (a click
    context's `params`, as `nodes schedule` parses the check it schedules)."""
    values = {p.name: params.get(p.name) for p in _SPEC_PARAMS if p.name in params}
    return LazySpec({**values, **(fixed or {})}, tuple(engine_args))()


def with_spec_options(
    fn: Callable[..., R],
    *,
    lazy: bool = False,
    fixed: dict[str, str] | None = None,
    exclude: tuple[str, ...] = (),
    engine_default: tuple[str, ...] = (),
) -> Callable[..., R]:
    """Give a typer command every deploy option; `fn(spec=..., **its own options)` gets the spec.

    `fn` takes `spec: RunSpec`; its other parameters stay its own options. With `lazy`, `spec`
    is a function that builds it (a command that needs no run, such as `doctor --run`, never
    calls it). `fixed` sets options the command decides itself, `exclude` leaves options out
    (neither is offered); `engine_default` are the engine flags used when none follow `--`.
    """
    own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.name != "spec"]
    fixed = dict(fixed or {})
    offered = [p for p in _SPEC_PARAMS if p.name not in fixed and p.name not in exclude]
    names = [p.name for p in offered]

    @functools.wraps(fn)
    def command(**kwargs: Any) -> R:
        values: dict[str, Any] = {name: kwargs.pop(name) for name in names}
        values.update(fixed)
        engine_args = kwargs.pop("engine_args") or engine_default

        build = LazySpec(values, tuple(engine_args))
        return fn(spec=build if lazy else build(), **kwargs)

    params = [*own, *offered, _ENGINE_PARAM]
    command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]  # read by typer
        [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]
    )
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


# ---- kubectl's options ---------------------------------------------------------------------

CLUSTER = "Cluster"
Namespace = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        "-n",
        metavar="NAME",
        help=with_default("Namespace.", "the kubeconfig context's"),
        show_default=False,
        rich_help_panel=CLUSTER,
    ),
]
Context = Annotated[
    str | None,
    typer.Option(
        "--context",
        metavar="NAME",
        help=with_default("Kubeconfig context to use.", "the current context"),
        show_default=False,
        rich_help_panel=CLUSTER,
    ),
]
Kubeconfig = Annotated[
    str | None,
    typer.Option(
        "--kubeconfig",
        metavar="FILE",
        help=with_default("Kubeconfig file.", "$KUBECONFIG, ~/.kube/config, in-cluster"),
        show_default=False,
        rich_help_panel=CLUSTER,
    ),
]
RunId = Annotated[
    str | None,
    typer.Option(
        "--run",
        metavar="ID",
        help=with_default("Run id.", "the latest run in the namespace"),
        show_default=False,
    ),
]
Output = Annotated[str, typer.Option("--output", "-o", metavar="text|json", help="Output format.")]


def client_settings(kubeconfig: str | None, context: str | None) -> Any:
    from nccl_k8s.k8s import ClientSettings

    return ClientSettings(kubeconfig=kubeconfig, context=context)


def run_arg(value: str | None) -> str | None:
    """`--run ID` of any command, checked locally before any API call (None: the latest run)."""
    from nccl_k8s.spec import run_id_arg

    return None if value is None else run_id_arg("--run", value)


def output_format(value: str) -> str:
    if value not in ("text", "json"):
        raise UsageError(f'--output "{value}": expected text or json', key="--output")
    return value


def seconds(flag: str, value: str | None) -> float | None:
    """A duration option in seconds; None when not given (the settings' default applies)."""
    return None if value is None else float(timeout(flag, value))


def duration_text(seconds: float) -> str:
    """A settings default as --help shows it: 60 -> 60s, 120 -> 2m, 3600 -> 1h."""
    s = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size and s % size == 0:
            return f"{s // size}{unit}"
    return f"{s}s"
