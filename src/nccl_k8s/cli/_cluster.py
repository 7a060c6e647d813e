"""`nccl-k8s status|list|logs|results|cleanup`: a deployed run, read back or removed.

No logic here: one function of nccl_k8s.k8s does the work; this module prints what it returns.
Every command takes kubectl's -n/--namespace, --context, --kubeconfig and acts on `--run ID` or,
without it, the latest run in the namespace (cleanup excepted: it needs --run or --all, or asks
on a terminal; or --schedule NAME, a fleet-health schedule).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from nccl_k8s.cli._common import Command, columns, err, handle_errors, out
from nccl_k8s.cli._options import (
    Context,
    Kubeconfig,
    Namespace,
    Output,
    RunId,
    client_settings,
    output_format,
    run_arg,
    seconds,
)
from nccl_k8s.errors import FailureReason, RunFailed, UsageError

if TYPE_CHECKING:
    from nccl_k8s.k8s import Collected


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

    from nccl_k8s import k8s

    run = run_arg(run)
    fmt = output_format(output)
    st = k8s.status(run, client=client_settings(kubeconfig, context), namespace=namespace)
    if fmt == "json":
        typer.echo(json.dumps(st.to_dict(), indent=1))
        return
    detail = f" ({st.detail})" if st.detail else ""
    out.print(f"run {st.run_id} in {st.namespace}: {st.phase}{detail}", markup=False)
    if st.kind == "StatefulSet":
        out.print(_sweep_line(st.last_sweep), markup=False)
    rows: list[tuple[str, ...]] = [("RANK", "POD", "NODE", "PHASE", "RESTARTS", "AGE", "REASON")]
    for p in st.pods:
        reason = p.message if p.problem else p.reason
        if st.pod_sweeps.get(p.name) and not reason:
            reason = f"last {st.pod_sweeps[p.name]}"
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
    out.file.write(columns(rows))


def _sweep_line(sweep: dict[str, Any] | None) -> str:
    """A run of sweeps: how the last one went, in one line."""
    if sweep is None:
        return "last sweep: none has ended yet"
    when = f" at {sweep['time']}" if sweep.get("time") else ""
    took = f" after {float(sweep['duration_s']):.0f}s" if sweep.get("duration_s") else ""
    if sweep.get("ok"):
        return f"last sweep: {sweep.get('sweep')} passed{when}{took}"
    why = [f"{', '.join(sweep.get('failed_ops') or []) or 'an op'} failed"]
    for r in sweep.get("wrong_ranks") or []:
        why.append(
            f"{r.get('wrong')} wrong elements on rank {r.get('rank')} (pod {r.get('host')}, "
            f"node {r.get('node')})"
        )
    return f"last sweep: {sweep.get('sweep')} FAILED{when}{took}: {'; '.join(why)}"


@handle_errors
def list_command(
    output: Output = "text",
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """The runs in the namespace, oldest first."""
    import json

    from nccl_k8s import k8s

    fmt = output_format(output)
    runs = k8s.list_runs(client=client_settings(kubeconfig, context), namespace=namespace)
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
    out.file.write(columns(rows))


@handle_errors
def logs_command(
    run: RunId = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Stream the logs as they are written.")
    ] = False,
    rank: Annotated[
        int | None, typer.Option("--rank", metavar="N", help="Only this rank's pod.")
    ] = None,
    tail: Annotated[
        int | None, typer.Option("--tail", metavar="N", help="Only the last N lines of each pod.")
    ] = None,
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Every pod's log, each line prefixed by its rank (`\\[rank 0] ...`). With -f, pods that
    have not started are waited for (why they wait goes to stderr) and followed once they run."""
    from nccl_k8s import k8s

    run = run_arg(run)
    if tail is not None and tail < 0:
        raise UsageError(f"--tail {tail}: expected a whole number >= 0", key="--tail")

    def line(r: int | None, text: str) -> None:
        out.file.write(f"[rank {'?' if r is None else r}] {text}\n")
        out.file.flush()

    def waiting(r: int | None, text: str) -> None:
        err.print(f"[rank {'?' if r is None else r}] ({text})", markup=False, highlight=False)

    k8s.logs(
        run,
        client=client_settings(kubeconfig, context),
        namespace=namespace,
        rank=rank,
        follow=follow,
        tail=tail,
        on_line=line,
        on_wait=waiting,
    )


@handle_errors
def results_command(
    run: RunId = None,
    output: Output = "text",
    concurrency: Annotated[
        int, typer.Option("--concurrency", metavar="N", help="Pods whose logs are fetched at once.")
    ] = 32,
    sweep: Annotated[
        int | None,
        typer.Option(
            "--sweep",
            metavar="N",
            help="A run of several sweeps (statefulset): sweep N instead of the latest "
            "(-> runs/<run-id>/sweep-N.json).",
        ),
    ] = None,
    all_sweeps: Annotated[
        bool,
        typer.Option(
            "--all-sweeps",
            help="A run of several sweeps: every complete sweep still in the log, each to "
            "runs/<run-id>/sweep-N.json, and a table of them over time.",
        ),
    ] = False,
    snapshot: Annotated[
        bool,
        typer.Option(
            "--snapshot",
            help="A job still running: take the rows measured so far (written marked partial) "
            "and exit 0; without it such a run's results exit 1.",
        ),
    ] = False,
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Collect the results from every pod into runs/<run-id>/ and print the nccl-tests table.
    A statefulset run's sweeps are read as each ends: the latest by default. A job still
    running gives the rows so far, marked partial, and exits 1 unless --snapshot."""
    import json

    from nccl_k8s import k8s
    from nccl_k8s.results import heading, nccl_tests_table, to_dict

    run = run_arg(run)
    fmt = output_format(output)
    if concurrency < 1:
        raise UsageError(f"--concurrency {concurrency}: expected >= 1", key="--concurrency")
    if sweep is not None and sweep < 0:
        raise UsageError(f"--sweep {sweep}: expected a sweep number >= 0", key="--sweep")
    if sweep is not None and all_sweeps:
        raise UsageError("--sweep and --all-sweeps: give one of them", key="--sweep")
    _check_runs_dir()
    got = k8s.collect(
        run,
        client=client_settings(kubeconfig, context),
        namespace=namespace,
        concurrency=concurrency,
        sweep=sweep,
        all_sweeps=all_sweeps,
    )
    if all_sweeps:
        _print_sweeps(got, fmt)
    elif fmt == "json":
        typer.echo(json.dumps(to_dict(got.run), indent=1))
    else:
        for text in [*heading(got.run.meta), *nccl_tests_table(got.run)]:
            out.print(text, markup=False, highlight=False)
    which = "" if got.run.meta.sweep is None else f"sweep {got.run.meta.sweep}: "
    err.print(
        f"run {got.run_id}: {which}{len(got.run.rows)} rows from {got.pods} pods in "
        f"{got.elapsed_s:.1f}s -> {got.results_path} (raw logs in {got.log_dir})",
        markup=False,
        highlight=False,
    )
    _results_end(got, snapshot=snapshot)


def _results_end(got: Collected, *, snapshot: bool) -> None:
    """After the tables: the NCCL findings, then exit 1 for wrong results or for a job still
    running (unless --snapshot)."""
    from rich.markup import escape

    from nccl_k8s.results import run_failures

    if got.diagnosis is not None:
        styles = {"error": "red", "warning": "yellow", "info": "cyan"}
        for f in got.diagnosis.findings:
            style = styles.get(f.severity, "")
            err.print(f"[{style}]{f.severity}[/{style}] {f.code}: {escape(f.message)}", markup=True)
            if f.hint:
                err.print(f"  hint: {f.hint}", markup=False)
    # Wrong elements and a --min-busbw miss fail the run as `run` and `deploy` fail it: exit 1,
    # one line each saying why.
    failures = run_failures(got.run)
    for why in failures:
        err.print(f"[red]error:[/red] {escape(why)}", markup=True, highlight=False)
    if failures:
        raise typer.Exit(1)
    still = got.snapshot_failure(snapshot=snapshot)
    if still is not None:
        err.print(f"error: {still}", markup=False, highlight=False)
        raise typer.Exit(1)


def _print_sweeps(got: Collected, fmt: str) -> None:
    """--all-sweeps: one line per sweep (time, verdict, each op's average busbw)."""
    import json

    doc = got.sweeps_to_dict()
    series = doc["sweeps"]
    if fmt == "json":
        typer.echo(json.dumps(doc, indent=1))
        return
    ops = list(dict.fromkeys(op for x in series for op in x["avg_busbw"]))
    rows: list[tuple[str, ...]] = [("SWEEP", "TIME", "RESULT", *(f"{op} GB/s" for op in ops))]
    for x in series:
        rows.append(
            (
                "-" if x["sweep"] is None else str(x["sweep"]),
                x["time"] or "-",
                "ok" if x["ok"] else "FAILED",
                *(_gbps(x["avg_busbw"].get(op)) for op in ops),
            )
        )
    out.file.write(columns([(*r, "") for r in rows]))
    err.print(
        f"run {got.run_id}: {len(series)} sweeps -> {got.results_path.parent}/sweep-N.json",
        markup=False,
        highlight=False,
    )


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _check_runs_dir() -> None:
    """The runs directory can take a run's files, checked before anything is fetched."""
    import tempfile

    from nccl_k8s.results import runs_dir

    where = runs_dir()
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=where):
            pass
    except OSError as e:
        raise UsageError(
            f"runs directory {where}: cannot write there ({e.strerror or e}): set "
            "NCCL_K8S_RUNS_DIR to a writable directory (nothing was fetched)",
            key="NCCL_K8S_RUNS_DIR",
        ) from e


def _interactive() -> bool:
    """Whether a person can answer a question (stdin and stderr are terminals)."""
    import sys

    return sys.stdin.isatty() and err.is_terminal


CleanupRun = Annotated[
    str | None,
    typer.Option(
        "--run", metavar="ID", help="The run to delete (or --all; asked for on a terminal)."
    ),
]

CleanupSchedule = Annotated[
    str | None,
    typer.Option(
        "--schedule",
        metavar="NAME",
        help="The fleet-health schedule to delete (`nodes schedule --name`'s, applied with "
        "kubectl): its CronJob (its Jobs and pods go with it), ServiceAccount, Role, "
        "ClusterRole, their bindings and admission policy; not the node labels, the node "
        "history or the pair-test runs.",
        show_default=False,
    ),
]


def _cleanup_schedule(name: str, wait_s: float, namespace: str | None, settings: Any) -> None:
    from nccl_k8s import k8s

    done = k8s.cleanup_schedule(name, client=settings, namespace=namespace, timeout_s=wait_s)
    for what in done.skipped:
        err.print(f"skipped {what}", markup=False, highlight=False)
    failure = done.failure()
    if failure is not None:
        raise RunFailed(failure, reason=FailureReason.NOTHING_OURS)
    took = (
        "" if done.jobs is None else f"; its CronJob's {done.jobs} Job(s) and their pods are gone"
    )
    err.print(
        f"deleted schedule {done.name} in {done.namespace} ({len(done.deleted)} objects, "
        f"{done.elapsed_s:.1f}s): {', '.join(done.deleted)}{took}",
        markup=False,
        highlight=False,
    )
    err.print(f"kept {done.kept}", markup=False, highlight=False)
    if done.runs:
        shown = ", ".join(done.runs[:4]) + (", ..." if len(done.runs) > 4 else "")
        err.print(
            f"{len(done.runs)} pair-test run(s) of a nodes check are still in {done.namespace} "
            f"({shown}): runs, not the schedule's; `nccl-k8s cleanup -n {done.namespace} --run "
            "ID` (or --all) removes them",
            markup=False,
            highlight=False,
        )


@handle_errors
def cleanup_command(
    run: CleanupRun = None,
    all_runs: Annotated[
        bool, typer.Option("--all", help="Every nccl-k8s run in the namespace.")
    ] = False,
    schedule: CleanupSchedule = None,
    timeout: Annotated[
        str,
        typer.Option(
            "--timeout", metavar="DURATION", help="How long to wait for the pods to be gone."
        ),
    ] = "2m",
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Delete what nccl-k8s created for a run (`--run ID`) or every run (`--all`), and wait until
    its pods are gone; or a fleet-health schedule (`--schedule NAME`). Objects that only carry
    the labels are skipped and listed."""
    from nccl_k8s import k8s

    run = run_arg(run)
    given = [f for f, v in (("--run", run), ("--all", all_runs), ("--schedule", schedule)) if v]
    if len(given) > 1:
        raise UsageError(f"{' and '.join(given)}: give one of them", key=given[-1])
    wait_s = seconds("--timeout", timeout) or 120.0
    settings = client_settings(kubeconfig, context)
    if schedule is not None:
        return _cleanup_schedule(schedule, wait_s, namespace, settings)
    if run is None and not all_runs:
        if not _interactive():
            raise UsageError(
                "cleanup: expected --run ID or --all (`nccl-k8s list` shows the runs)",
                key="--run",
            )
        runs = k8s.list_runs(client=settings, namespace=namespace)
        if not runs:
            err.print("no nccl-k8s runs in this namespace", markup=False)
            return
        run = runs[-1].run_id
        where = f"namespace {namespace}" if namespace else "the context's namespace"
        if not typer.confirm(f"delete run {run} (the latest) in {where}?", err=True):
            err.print("nothing deleted", markup=False)
            return
    done = k8s.cleanup(
        run,
        client=settings,
        namespace=namespace,
        all_runs=all_runs,
        timeout_s=wait_s,
    )
    for what in done.skipped:
        err.print(f"skipped {what}", markup=False, highlight=False)
    failure = done.failure()
    if failure is not None:
        raise RunFailed(failure, reason=FailureReason.NOTHING_OURS)
    if not done.run_ids:
        if done.skipped:
            err.print(f"nothing deleted in {done.namespace}", markup=False)
        else:
            err.print(f"no nccl-k8s runs in namespace {done.namespace}", markup=False)
        return
    err.print(
        f"deleted {', '.join(done.run_ids)} in {done.namespace} ({len(done.deleted)} objects, "
        f"{done.elapsed_s:.1f}s); its pods are gone",
        markup=False,
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    for name, fn in (
        ("status", status_command),
        ("logs", logs_command),
        ("results", results_command),
        ("cleanup", cleanup_command),
        ("list", list_command),
    ):
        app.command(name, cls=Command)(fn)
