"""`nccl-k8s render`: the objects a deploy would create, printed, nothing sent anywhere.

No logic here: the options become `build_run_spec` keywords, `render` makes the objects, `dump`
formats them. Engine flags are everything the command does not know (or everything after `--`),
passed to the engine's own parser through the spec.

`with_spec_options` gives any command (render here, deploy next) the same deploy options and
hands it the validated RunSpec, so the commands cannot drift apart and `--help` lists exactly
what each one accepts.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar, cast

import typer

from nccl_k8s.cli._common import handle_errors, out
from nccl_k8s.errors import UsageError
from nccl_k8s.spec import RunSpec, build_run_spec

R = TypeVar("R")

_ENGINE_HELP = (
    "Engine flags, passed to `python -m nccl_k8s.bench` in every pod (-b -e -f -i -w -c -d -r -z "
    "-a -G -T --ops --backend --duration ...). Unknown options are forwarded; -n and -o mean "
    "--namespace and --output here, so put the engine's -n/-o after `--` "
    "(e.g. `-- -b 8 -e 1G -n 50 -o max`)."
)

_SPEC = "Run shape"
_POD = "Pods"
_NET = "Network and privilege"
_JOB = "Lifetime"
_META = "Metadata"


def _spec_options(
    world_size: Annotated[
        str | None,
        typer.Option(
            "--world-size",
            help="Total ranks (GPUs); a multiple of --gpus-per-node.",
            rich_help_panel=_SPEC,
        ),
    ] = None,
    gpus_per_node: Annotated[
        str | None,
        typer.Option(
            "--gpus-per-node",
            help="GPUs (ranks) per pod, one pod per node.",
            show_default="8",
            rich_help_panel=_SPEC,
        ),
    ] = None,
    nodes: Annotated[
        str | None,
        typer.Option(
            "--nodes", help="Pods (nodes), instead of --world-size.", rich_help_panel=_SPEC
        ),
    ] = None,
    workload: Annotated[
        str,
        typer.Option(
            "--workload", help="job (one sweep) or statefulset (continuous).", rich_help_panel=_SPEC
        ),
    ] = "job",
    interval: Annotated[
        str | None,
        typer.Option(
            "--interval",
            help="statefulset: pause between sweeps, e.g. 300, 5m.",
            show_default="5m",
            rich_help_panel=_SPEC,
        ),
    ] = None,
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id",
            help="Run name (DNS-1123); generated as nccl-<time>-<hex> when absent.",
            rich_help_panel=_META,
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", "-n", help="Target namespace.", rich_help_panel=_META),
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label", help="KEY=VALUE label on every object (repeatable).", rich_help_panel=_META
        ),
    ] = None,
    annotation: Annotated[
        list[str] | None,
        typer.Option(
            "--annotation",
            help="KEY=VALUE annotation on every object (repeatable).",
            rich_help_panel=_META,
        ),
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(
            "--image",
            help="Container image.",
            show_default="a pinned pytorch/pytorch image",
            rich_help_panel=_POD,
        ),
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            help="zipapp: ship the engine in a ConfigMap; image: the image has nccl-k8s installed.",
            rich_help_panel=_POD,
        ),
    ] = "zipapp",
    scheduler: Annotated[
        str | None,
        typer.Option(
            "--scheduler", help="Pod schedulerName, e.g. hami-scheduler.", rich_help_panel=_POD
        ),
    ] = None,
    node_selector: Annotated[
        list[str] | None,
        typer.Option(
            "--node-selector",
            help="KEY=VALUE node label the pods require (repeatable).",
            rich_help_panel=_POD,
        ),
    ] = None,
    toleration: Annotated[
        list[str] | None,
        typer.Option(
            "--toleration",
            help="key=value:Effect, key:Effect, key=value or key (repeatable).",
            rich_help_panel=_POD,
        ),
    ] = None,
    spread: Annotated[
        str,
        typer.Option(
            "--spread", help="One pod per node: required, preferred or none.", rich_help_panel=_POD
        ),
    ] = "required",
    gpu_resource: Annotated[
        str,
        typer.Option(
            "--gpu-resource", help="Extended resource name of a GPU.", rich_help_panel=_POD
        ),
    ] = "nvidia.com/gpu",
    cpu: Annotated[
        str | None,
        typer.Option("--cpu", help="CPU request per pod, e.g. 16, 500m.", rich_help_panel=_POD),
    ] = None,
    memory: Annotated[
        str | None,
        typer.Option(
            "--memory", help="Memory request = limit per pod, e.g. 64Gi.", rich_help_panel=_POD
        ),
    ] = None,
    shm_size: Annotated[
        str | None,
        typer.Option(
            "--shm-size", help="Size of /dev/shm.", show_default="8Gi", rich_help_panel=_POD
        ),
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option(
            "--env",
            help="KEY=VALUE in every pod; beats the presets (repeatable).",
            rich_help_panel=_POD,
        ),
    ] = None,
    pvc: Annotated[
        str | None,
        typer.Option(
            "--pvc",
            help="PersistentVolumeClaim mounted at /workspace/results.",
            rich_help_panel=_POD,
        ),
    ] = None,
    network: Annotated[
        str,
        typer.Option(
            "--network",
            help="auto, ib, roce or socket: the NCCL fabric preset.",
            rich_help_panel=_NET,
        ),
    ] = "auto",
    rdma_resource: Annotated[
        list[str] | None,
        typer.Option(
            "--rdma-resource",
            help="NAME=COUNT RDMA device resource, e.g. rdma/ib=1.",
            rich_help_panel=_NET,
        ),
    ] = None,
    host_network: Annotated[
        bool,
        typer.Option(
            "--host-network", help="Run pods in the node's network namespace.", rich_help_panel=_NET
        ),
    ] = False,
    security: Annotated[
        str | None,
        typer.Option(
            "--security",
            help="socket, rdma, host or privileged.",
            show_default="rdma for ib/roce, else socket",
            rich_help_panel=_NET,
        ),
    ] = None,
    queue: Annotated[
        str | None, typer.Option("--queue", help="Kueue LocalQueue name.", rich_help_panel=_JOB)
    ] = None,
    priority_class: Annotated[
        str | None,
        typer.Option("--priority-class", help="Pod priorityClassName.", rich_help_panel=_JOB),
    ] = None,
    active_deadline: Annotated[
        str | None,
        typer.Option(
            "--active-deadline",
            help="job: fail after this long, e.g. 1h; 0 = never.",
            show_default="1h",
            rich_help_panel=_JOB,
        ),
    ] = None,
    ttl: Annotated[
        str | None,
        typer.Option(
            "--ttl",
            help="job: delete this long after it finished.",
            show_default="1d",
            rich_help_panel=_JOB,
        ),
    ] = None,
    backoff_limit: Annotated[
        str | None,
        typer.Option(
            "--backoff-limit", help="job: pod retries.", show_default="0", rich_help_panel=_JOB
        ),
    ] = None,
    rendezvous_timeout: Annotated[
        str | None,
        typer.Option(
            "--rendezvous-timeout",
            help="How long pods wait for each other.",
            show_default="15m",
            rich_help_panel=_JOB,
        ),
    ] = None,
    engine_args: Annotated[
        list[str] | None,
        typer.Argument(help=_ENGINE_HELP, metavar="ENGINE_FLAGS", show_default=False),
    ] = None,
) -> None:
    """Template: its parameters are the deploy options (see with_spec_options)."""


#: The options above, as parameters typer reads (annotations evaluated).
_SPEC_PARAMS: tuple[inspect.Parameter, ...] = tuple(
    inspect.signature(_spec_options, eval_str=True).parameters.values()
)
#: build_run_spec keywords that are lists on the command line and sequences in the spec.
_LISTS = ("node_selector", "toleration", "rdma_resource", "env", "label", "annotation")


def spec_from_options(ctx: typer.Context, options: dict[str, Any]) -> RunSpec:
    """The RunSpec for the deploy options' values (and engine flags typer left in ctx.args)."""
    kwargs = dict(options)
    for name in _LISTS:
        kwargs[name] = kwargs[name] or ()
    kwargs["engine_args"] = [*(kwargs["engine_args"] or ()), *ctx.args]
    return build_run_spec(**kwargs)


def with_spec_options(fn: Callable[..., R]) -> Callable[..., R]:
    """Give a typer command every deploy option; `fn(ctx, spec, **its own options)` gets the spec.

    `fn` must take `ctx: typer.Context` and `spec: RunSpec`; its other parameters stay its own
    options. Register the command with `ignore_unknown_options` and `allow_extra_args` so engine
    flags reach the spec.
    """
    own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.name != "spec"]
    names = {p.name for p in _SPEC_PARAMS}

    @functools.wraps(fn)
    def command(**kwargs: Any) -> R:
        ctx = kwargs.pop("ctx")
        options = {name: kwargs.pop(name) for name in names}
        return fn(ctx=ctx, spec=spec_from_options(ctx, options), **kwargs)

    # The positional engine flags come last so that --help's usage line reads naturally.
    params = [*own, *_SPEC_PARAMS]
    params.sort(
        key=lambda p: p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD and p.name == "engine_args"
    )
    command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]  # read by typer
        [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]
    )
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


def render_command(
    ctx: typer.Context,
    spec: RunSpec,
    output: Annotated[str, typer.Option("--output", "-o", help="yaml or json.")] = "yaml",
) -> None:
    """Print the objects a deploy would create (nothing is sent to a cluster)."""
    from nccl_k8s.k8s.manifests import dump, render

    if output not in ("yaml", "json"):
        raise UsageError(f'--output "{output}": expected yaml or json', key="--output")
    out.file.write(dump(render(spec), cast(Literal["yaml", "json"], output)))


#: Unknown options (the engine's -b, -e, ...) land in ENGINE_FLAGS instead of failing.
SPEC_CONTEXT_SETTINGS: dict[str, Any] = {"ignore_unknown_options": True, "allow_extra_args": True}


def register(app: typer.Typer) -> None:
    app.command("render", context_settings=SPEC_CONTEXT_SETTINGS)(
        handle_errors(with_spec_options(render_command))
    )
