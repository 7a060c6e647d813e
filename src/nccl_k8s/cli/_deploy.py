"""`nccl-k8s render|deploy|status|logs|results|cleanup|list`: a run on Kubernetes.

No logic here: the options become `build_run_spec` keywords (render, deploy) or client settings,
one function of nccl_k8s.k8s.lifecycle does the work, and this module prints what it returns.
Engine flags are everything the command does not know (or everything after `--`), passed to the
engine's own parser through the spec. `render` sends nothing anywhere; the others follow
kubectl's conventions: -n/--namespace, --context, --kubeconfig, $KUBECONFIG.

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

from nccl_k8s.cli._common import err, handle_errors, out
from nccl_k8s.errors import UsageError
from nccl_k8s.spec import RunSpec, build_run_spec, parse_duration

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


# ---- the cluster commands ----------------------------------------------------------------

_CLUSTER = "Cluster"
Namespace = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        "-n",
        help="Namespace. [default: the kubeconfig context's]",
        rich_help_panel=_CLUSTER,
    ),
]
Context = Annotated[
    str | None,
    typer.Option("--context", help="Kubeconfig context to use.", rich_help_panel=_CLUSTER),
]
Kubeconfig = Annotated[
    str | None,
    typer.Option(
        "--kubeconfig",
        help="Kubeconfig file. [default: $KUBECONFIG, ~/.kube/config, in-cluster]",
        rich_help_panel=_CLUSTER,
    ),
]
RunId = Annotated[
    str | None,
    typer.Option("--run", help="Run id. [default: the latest run in the namespace]"),
]
Output = Annotated[str, typer.Option("--output", "-o", help="text or json.")]


def _settings(kubeconfig: str | None, context: str | None) -> Any:
    from nccl_k8s.k8s.client import ClientSettings

    return ClientSettings(kubeconfig=kubeconfig, context=context)


def _output(value: str) -> str:
    if value not in ("text", "json"):
        raise UsageError(f'--output "{value}": expected text or json', key="--output")
    return value


def _seconds(flag: str, value: str | None) -> float | None:
    if value is None:
        return None
    seconds = parse_duration(flag, value)
    if seconds < 1:
        raise UsageError(f'{flag} "{value}": expected at least 1s', key=flag)
    return float(seconds)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


class _LiveSummary:
    """deploy --wait's summary on stderr: a rich Live line on a terminal, else one line per
    change of the counts (CI logs)."""

    def __init__(self) -> None:
        self._live: Any = None
        self._last: tuple[Any, ...] | None = None

    def _text(self, p: Any) -> str:
        counts = ", ".join(f"{v} {k}" for k, v in p.counts.items())
        note = f"; {p.note}" if p.note else ""
        return f"run {p.run_id}: {counts} of {p.expected} pods ({p.elapsed_s:.0f}s){note}"

    def __call__(self, p: Any) -> None:
        from rich.live import Live
        from rich.text import Text

        if err.is_terminal:
            if self._live is None:
                self._live = Live(console=err, auto_refresh=False, transient=False)
                self._live.start()
            self._live.update(Text(self._text(p)), refresh=True)
            return
        key = (tuple(p.counts.items()), p.note)
        if key != self._last:
            self._last = key
            err.print(self._text(p), markup=False, highlight=False)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def deploy_command(
    ctx: typer.Context,
    spec: RunSpec,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait/--no-wait",
            help="Follow the run until it ends, with a live summary on stderr.",
            rich_help_panel=_CLUSTER,
        ),
    ] = True,
    timeout: Annotated[
        str | None,
        typer.Option(
            "--timeout",
            help="Give up waiting after this long (e.g. 30m); the run keeps going.",
            show_default="the Job's --active-deadline",
            rich_help_panel=_CLUSTER,
        ),
    ] = None,
    schedule_timeout: Annotated[
        str,
        typer.Option(
            "--schedule-timeout",
            help="Fail when no scheduler has touched the pods after this long.",
            rich_help_panel=_CLUSTER,
        ),
    ] = "60s",
    create_namespace: Annotated[
        bool,
        typer.Option(
            "--create-namespace",
            help="Create the namespace when it does not exist.",
            rich_help_panel=_CLUSTER,
        ),
    ] = False,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Deploy a run: apply the objects `render` prints, then follow it until it ends."""
    from nccl_k8s.k8s import lifecycle

    settings = lifecycle.WaitSettings(
        timeout_s=_seconds("--timeout", timeout),
        schedule_timeout_s=_seconds("--schedule-timeout", schedule_timeout) or 60.0,
    )
    client = _settings(kubeconfig, context)

    def deployed(d: Any) -> None:
        made = " (namespace created)" if d.created_namespace else ""
        err.print(
            f"deployed run {d.run_id} in namespace {d.namespace}{made}: {', '.join(d.objects)}",
            markup=False,
            highlight=False,
        )

    live = _LiveSummary()
    try:
        _, outcome = lifecycle.deploy(
            spec,
            client=client,
            create_namespace=create_namespace,
            wait=wait,
            wait_settings=settings,
            progress=live,
            on_deployed=deployed,
        )
    finally:
        live.close()
    if outcome is None:
        out.print(spec.run_id, markup=False)
        return
    verb = "succeeded" if outcome.phase == "Succeeded" else "is running"
    err.print(
        f"run {outcome.run_id} {verb} after {outcome.elapsed_s:.0f}s; next: nccl-k8s results "
        f"--run {outcome.run_id} -n {outcome.namespace}",
        markup=False,
        highlight=False,
    )
    out.print(spec.run_id, markup=False)


@handle_errors
def status_command(
    run: RunId = None,
    output: Output = "text",
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """A run's phase and its pods: rank, pod, node, phase, restarts, age, reason."""
    import json

    from nccl_k8s.k8s import lifecycle

    fmt = _output(output)
    st = lifecycle.status(run, client=_settings(kubeconfig, context), namespace=namespace)
    if fmt == "json":
        typer.echo(json.dumps(st.to_dict(), indent=1))
        return
    detail = f" ({st.detail})" if st.detail else ""
    out.print(f"run {st.run_id} in {st.namespace}: {st.phase}{detail}", markup=False)
    rows: list[tuple[str, ...]] = [("RANK", "POD", "NODE", "PHASE", "RESTARTS", "AGE", "REASON")]
    for p in st.pods:
        reason = p.message if p.problem else p.reason
        rows.append(
            (
                "-" if p.rank is None else str(p.rank),
                p.name,
                p.node or "-",
                p.phase + (" (deleting)" if p.deleting else ""),
                str(p.restarts),
                _age(p.age_s()),
                reason or "",
            )
        )
    # Plain columns, as kubectl prints them: a rich Table takes a third of a second for a
    # thousand pods, and status should answer within one.
    out.file.write(_columns(rows))


def _columns(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = (
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1] for r in rows
    )
    return "\n".join(line.rstrip() for line in lines) + "\n"


@handle_errors
def list_command(
    output: Output = "text",
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """The runs in the namespace, oldest first."""
    import json

    from nccl_k8s.k8s import lifecycle

    fmt = _output(output)
    runs = lifecycle.list_runs(client=_settings(kubeconfig, context), namespace=namespace)
    if fmt == "json":
        typer.echo(json.dumps([r.to_dict() for r in runs], indent=1))
        return
    if not runs:
        err.print("no nccl-k8s runs in this namespace", markup=False)
        return
    rows: list[tuple[str, ...]] = [("RUN", "WORKLOAD", "PHASE", "PODS", "CREATED")]
    for r in runs:
        pods = ", ".join(f"{v} {k}" for k, v in r.pods.items() if v) or "-"
        rows.append((r.run_id, r.kind or "-", r.phase, pods, r.created or "-"))
    out.file.write(_columns(rows))


@handle_errors
def logs_command(
    run: RunId = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Stream the logs as they are written.")
    ] = False,
    rank: Annotated[int | None, typer.Option("--rank", help="Only this rank's pod.")] = None,
    tail: Annotated[
        int | None, typer.Option("--tail", help="Only the last N lines of each pod.")
    ] = None,
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Every pod's log, each line prefixed by its rank (`[rank 0] ...`)."""
    from nccl_k8s.k8s import lifecycle

    if tail is not None and tail < 0:
        raise UsageError(f"--tail {tail}: expected a whole number >= 0", key="--tail")

    def line(r: int | None, text: str) -> None:
        out.file.write(f"[rank {'?' if r is None else r}] {text}\n")
        out.file.flush()

    lifecycle.logs(
        run,
        client=_settings(kubeconfig, context),
        namespace=namespace,
        rank=rank,
        follow=follow,
        tail=tail,
        on_line=line,
    )


@handle_errors
def results_command(
    run: RunId = None,
    output: Output = "text",
    concurrency: Annotated[
        int, typer.Option("--concurrency", help="Pods whose logs are fetched at once.")
    ] = 32,
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Collect the results from every pod into runs/<run-id>/ and print the nccl-tests table."""
    import json

    from rich.markup import escape

    from nccl_k8s.k8s import lifecycle
    from nccl_k8s.results.schema import to_dict

    fmt = _output(output)
    if concurrency < 1:
        raise UsageError(f"--concurrency {concurrency}: expected >= 1", key="--concurrency")
    got = lifecycle.collect(
        run, client=_settings(kubeconfig, context), namespace=namespace, concurrency=concurrency
    )
    if fmt == "json":
        typer.echo(json.dumps(to_dict(got.run), indent=1))
    else:
        for text in lifecycle.nccl_tests_table(got.run):
            out.print(text, markup=False, highlight=False)
    err.print(
        f"run {got.run_id}: {len(got.run.rows)} rows from {got.pods} pods in "
        f"{got.elapsed_s:.1f}s -> {got.results_path} (raw logs in {got.log_dir})",
        markup=False,
        highlight=False,
    )
    if got.diagnosis is not None:
        styles = {"error": "red", "warning": "yellow", "info": "cyan"}
        for f in got.diagnosis.findings:
            style = styles.get(f.severity, "")
            err.print(f"[{style}]{f.severity}[/{style}] {f.code}: {escape(f.message)}", markup=True)
            if f.hint:
                err.print(f"  hint: {f.hint}", markup=False)
    bad = [r for r in got.run.rows if r.wrong]
    if bad:
        err.print(f"[red]wrong results[/red] in {len(bad)} rows", markup=True)
        raise typer.Exit(1)


@handle_errors
def cleanup_command(
    run: RunId = None,
    all_runs: Annotated[
        bool, typer.Option("--all", help="Every nccl-k8s run in the namespace.")
    ] = False,
    timeout: Annotated[
        str, typer.Option("--timeout", help="How long to wait for the pods to be gone.")
    ] = "2m",
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Delete a run's objects (only those labelled by nccl-k8s) and wait until its pods are gone."""
    from nccl_k8s.k8s import lifecycle

    if all_runs and run is not None:
        raise UsageError("--run and --all: give one of them", key="--all")
    done = lifecycle.cleanup(
        run,
        client=_settings(kubeconfig, context),
        namespace=namespace,
        all_runs=all_runs,
        timeout_s=_seconds("--timeout", timeout) or 120.0,
    )
    if not done.run_ids:
        err.print(f"no nccl-k8s runs in namespace {done.namespace}", markup=False)
        return
    err.print(
        f"deleted {', '.join(done.run_ids)} in {done.namespace} ({len(done.deleted)} objects, "
        f"{done.elapsed_s:.1f}s); its pods are gone",
        markup=False,
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    app.command("render", context_settings=SPEC_CONTEXT_SETTINGS)(
        handle_errors(with_spec_options(render_command))
    )
    app.command("deploy", context_settings=SPEC_CONTEXT_SETTINGS)(
        handle_errors(with_spec_options(deploy_command))
    )
    app.command("status")(status_command)
    app.command("logs")(logs_command)
    app.command("results")(results_command)
    app.command("cleanup")(cleanup_command)
    app.command("list")(list_command)
