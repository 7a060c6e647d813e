"""`nccl-k8s render|deploy|wait`: turn the deploy options into a run and follow it.

No logic here: the options become a RunSpec (nccl_k8s.spec, through `with_spec_options`), one
function of nccl_k8s.k8s does the work, and this module prints what it returns. `render` sends
nothing anywhere; the others follow kubectl's conventions (-n, --context, --kubeconfig).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, cast

import typer

from nccl_k8s.cli._common import (
    Command,
    err,
    handle_errors,
    interrupt_signal,
    out,
    with_default,
)
from nccl_k8s.cli._options import (
    CLUSTER,
    Context,
    Kubeconfig,
    Namespace,
    RunId,
    client_settings,
    duration_text,
    run_arg,
    seconds,
    with_spec_options,
)
from nccl_k8s.errors import Interrupted, UsageError
from nccl_k8s.spec import RunSpec


def _wait_defaults() -> Any:
    # WaitSettings' defaults are the CLI's: read them, do not restate them.
    from nccl_k8s.k8s import WaitSettings

    return WaitSettings()


def render_command(
    spec: RunSpec,
    output: Annotated[
        str, typer.Option("--output", "-o", metavar="yaml|json", help="Output format.")
    ] = "yaml",
    adopt: Annotated[
        bool,
        typer.Option(
            "--adopt/--no-adopt",
            help="Also a ServiceAccount, Role and RoleBinding, and an init container of the pod "
            "of index 0 that makes the other objects dependents of the workload (so deleting "
            "the Job or StatefulSet deletes them all); only that init container gets an API "
            "token. Off by default: no pod of the run holds a token, and `nccl-k8s cleanup --run "
            "ID` or `kubectl delete -f` of the same output removes the run.",
        ),
    ] = False,
) -> None:
    """Print the objects of a run, to apply with kubectl or GitOps (nothing is sent to a
    cluster): those a deploy creates (with --adopt, what lets the run own them)."""
    from nccl_k8s.k8s import dump, render

    if output not in ("yaml", "json"):
        raise UsageError(f'--output "{output}": expected yaml or json', key="--output")
    out.file.write(dump(render(spec, adopt=adopt), cast(Literal["yaml", "json"], output)))


class _LiveSummary:
    """deploy --wait's live summary on stderr: on a terminal a rich Live line (where the pods
    are, what rank 0 measures); piped or in CI, one plain line each time that changes, with
    why Pending pods wait."""

    def __init__(self) -> None:
        self._live: Any = None
        self._plain: Any = None

    def __call__(self, p: Any) -> None:
        if not err.is_terminal:
            if self._plain is None:
                from nccl_k8s.k8s import PlainProgress

                self._plain = PlainProgress()
            line = self._plain(p)
            if line is not None:
                err.print(line, markup=False, highlight=False, soft_wrap=True)
            return
        from rich.live import Live
        from rich.text import Text

        from nccl_k8s.k8s import progress_line

        if self._live is None:
            self._live = Live(console=err, auto_refresh=False, transient=False)
            self._live.start()
        self._live.update(Text(progress_line(p)), refresh=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


Timeout = Annotated[
    str | None,
    typer.Option(
        "--timeout",
        metavar="DURATION",
        help=with_default(
            "Give up waiting after this long (e.g. 30m); the run keeps going.",
            "the Job's --active-deadline",
        ),
        show_default=False,
        rich_help_panel=CLUSTER,
    ),
]
ScheduleTimeout = Annotated[
    str | None,
    typer.Option(
        "--schedule-timeout",
        metavar="DURATION",
        help=with_default(
            "How long pods may stay unscheduled (Unschedulable is normal while an autoscaler "
            "adds nodes); then the run fails with the scheduler's message.",
            duration_text(_wait_defaults().schedule_timeout_s),
        ),
        show_default=False,
        rich_help_panel=CLUSTER,
    ),
]
PullTimeout = Annotated[
    str | None,
    typer.Option(
        "--pull-timeout",
        metavar="DURATION",
        help=with_default(
            "How long a pod may retry pulling its image (ErrImagePull, ImagePullBackOff); "
            "then the run fails with the kubelet's message.",
            duration_text(_wait_defaults().pull_timeout_s),
        ),
        show_default=False,
        rich_help_panel=CLUSTER,
    ),
]


def wait_settings(
    timeout: str | None, schedule_timeout: str | None, pull_timeout: str | None
) -> Any:
    import dataclasses

    settings = _wait_defaults()
    changes: dict[str, float] = {}
    for flag, field, value in (
        ("--timeout", "timeout_s", timeout),
        ("--schedule-timeout", "schedule_timeout_s", schedule_timeout),
        ("--pull-timeout", "pull_timeout_s", pull_timeout),
    ):
        if value is not None:
            changes[field] = seconds(flag, value) or 0.0
    return dataclasses.replace(settings, **changes)


def _ended(outcome: Any) -> None:
    verb = "succeeded" if outcome.phase == "Succeeded" else "is running"
    err.print(
        f"run {outcome.run_id} {verb} after {outcome.elapsed_s:.0f}s; next: nccl-k8s results "
        f"--run {outcome.run_id} -n {outcome.namespace}",
        markup=False,
        highlight=False,
    )


# deploy's own options
Wait = Annotated[
    bool,
    typer.Option(
        "--wait/--no-wait",
        help="Follow the run until it ends (a live summary on stderr when it is a terminal).",
        rich_help_panel=CLUSTER,
    ),
]
KeepOnFailure = Annotated[
    bool,
    typer.Option(
        "--keep-on-failure",
        help="When the followed run fails, stop its ranks but keep its objects (for "
        "status and logs) instead of deleting them.",
        rich_help_panel=CLUSTER,
    ),
]
CreateNamespace = Annotated[
    bool,
    typer.Option(
        "--create-namespace",
        help="Create the namespace when it does not exist.",
        rich_help_panel=CLUSTER,
    ),
]
PinImages = Annotated[
    bool,
    typer.Option(
        "--pin-images/--no-pin-images",
        envvar="NCCL_K8S_PIN_IMAGES",
        help="Pin each tag-only image of the pods to the digest its registry gives now "
        "(NAME:TAG@sha256:..., asked anonymously; one line per image; one the registry does "
        "not give keeps its tag). --no-pin-images or NCCL_K8S_PIN_IMAGES=0 where no registry "
        "is reachable from here.",
        rich_help_panel=CLUSTER,
    ),
]
BundleOnFailure = Annotated[
    bool,
    typer.Option(
        "--bundle-on-failure",
        help="When the followed run fails, write its debug bundle (`nccl-k8s bundle`) to "
        "./<run-id>.bundle.tar.gz before anything of it is deleted or stopped.",
        rich_help_panel=CLUSTER,
    ),
]


def deploy_command(
    spec: RunSpec,
    wait: Wait = True,
    timeout: Timeout = None,
    schedule_timeout: ScheduleTimeout = None,
    pull_timeout: PullTimeout = None,
    keep_on_failure: KeepOnFailure = False,
    create_namespace: CreateNamespace = False,
    bundle_on_failure: BundleOnFailure = False,
    pin_images: PinImages = True,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Deploy a run: create the objects `render` prints, then follow it until it ends. A run
    that fails while followed is ended: what the deploy created is deleted (--keep-on-failure:
    its ranks stopped, its objects kept)."""
    from nccl_k8s import k8s

    settings = wait_settings(timeout, schedule_timeout, pull_timeout)
    bundle_to = k8s.bundle_path(spec.run_id) if bundle_on_failure else None
    if bundle_to is not None:  # where a failure's bundle goes: writable before anything is made
        from nccl_k8s.launch import check_writable

        check_writable(
            Path.cwd(),
            what="--bundle-on-failure into",
            is_dir=True,
            hint="cd to a writable directory",
        )

    made: list[Any] = []

    def deployed(d: Any) -> None:
        made.append(d)
        if d.platform_note:
            err.print(d.platform_note, markup=False, highlight=False)
        new_ns = " (namespace created)" if d.created_namespace else ""
        err.print(
            f"deployed run {d.run_id} in namespace {d.namespace}{new_ns}: {', '.join(d.objects)}",
            markup=False,
            highlight=False,
        )

    live = _LiveSummary()
    try:
        _, outcome = k8s.deploy(
            spec,
            client=client_settings(kubeconfig, context),
            create_namespace=create_namespace,
            wait=wait,
            wait_settings=settings,
            keep_on_failure=keep_on_failure,
            bundle_on_failure=bundle_to,
            progress=live,
            on_deployed=deployed,
            pin=pin_images,
        )
    except (KeyboardInterrupt, Interrupted) as exc:
        if not made:
            if isinstance(exc, Interrupted):  # the create phase rolled back: by the real signal
                raise Interrupted(interrupt_signal(), detail=exc.detail) from None
            raise
        raise _goes_on(exc, made[0].run_id, made[0].namespace) from None
    finally:
        live.close()
    if outcome is not None:
        _ended(outcome)
    out.print(spec.run_id, markup=False)


@handle_errors
def wait_command(
    run: RunId = None,
    timeout: Timeout = None,
    schedule_timeout: ScheduleTimeout = None,
    pull_timeout: PullTimeout = None,
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Follow a run already deployed (after --no-wait or Ctrl-C) until it ends, as deploy does;
    a run that fails is named the same way and its ranks stopped (its objects are kept)."""
    from nccl_k8s import k8s

    run = run_arg(run)
    settings = wait_settings(timeout, schedule_timeout, pull_timeout)
    live = _LiveSummary()
    try:
        outcome = k8s.wait(
            run,
            client=client_settings(kubeconfig, context),
            namespace=namespace,
            settings=settings,
            progress=live,
        )
    except (KeyboardInterrupt, Interrupted) as exc:
        if run is None:
            raise
        raise _goes_on(exc, run, namespace) from None
    finally:
        live.close()
    _ended(outcome)


def _goes_on(exc: BaseException, run_id: str, namespace: str | None) -> Interrupted:
    """Following a run was interrupted; the run itself was not: say so, and how to go on."""
    signum = exc.signum if isinstance(exc, Interrupted) else interrupt_signal()
    ns = f" -n {namespace}" if namespace else ""
    return Interrupted(
        signum,
        detail=f"run {run_id} keeps running: `nccl-k8s wait --run {run_id}{ns}` follows it "
        f"again, `nccl-k8s cleanup --run {run_id}{ns}` removes it",
    )


def register(app: typer.Typer) -> None:
    app.command("render", cls=Command)(handle_errors(with_spec_options(render_command)))
    app.command("deploy", cls=Command)(handle_errors(with_spec_options(deploy_command)))
    app.command("wait", cls=Command)(wait_command)
