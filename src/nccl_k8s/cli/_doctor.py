"""`nccl-k8s doctor`, `nccl-k8s nodes check`, `nccl-k8s bundle`: why a run will not (or did
not) run, which node is bad, and everything about a run in one file.

No logic here: one function of nccl_k8s.k8s does the work; this module prints what it returns.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from nccl_k8s.cli._common import (
    Command,
    Group,
    columns,
    err,
    handle_errors,
    out,
    with_default,
)
from nccl_k8s.cli._deploy import ScheduleTimeout, wait_settings
from nccl_k8s.cli._options import (
    CLUSTER,
    Context,
    Kubeconfig,
    Namespace,
    Output,
    RunId,
    client_settings,
    output_format,
    run_arg,
    seconds,
    with_spec_options,
)
from nccl_k8s.errors import UsageError
from nccl_k8s.spec import label_selector

DoctorRun = Annotated[
    str | None,
    typer.Option(
        "--run",
        metavar="ID",
        help="Explain an existing run instead: why each pod is where it is (the deploy flags "
        "are then not needed).",
        show_default=False,
    ),
]


def doctor_command(
    spec: Any,
    run: DoctorRun = None,
    output: Output = "text",
    create_namespace: Annotated[
        bool,
        typer.Option(
            "--create-namespace",
            help="The deploy will create the namespace: its absence is no failure.",
            rich_help_panel=CLUSTER,
        ),
    ] = False,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Check the cluster for a run before deploying it, each check pass, warn, fail (or skip,
    saying why) with a hint: API server, namespace and its Pod Security level, the platform
    (--platform auto: what the nodes say) and its prerequisites, GPU nodes and device plugin, RDMA
    resources, scheduler, gang and queue add-ons, quotas and limit ranges, taints and node
    selection, the nodes' last `nodes check` (bad or never checked: a warning; too few good
    with --healthy-only: a fail), enough nodes for the world asked, and one topology domain
    with the free GPUs for it (--placement required, eks-efa's zone). Exit 1 on any fail.
    With --run ID: why each
    pod of that run is where it is."""
    from nccl_k8s import k8s

    fmt = output_format(output)
    run = run_arg(run)
    settings = client_settings(kubeconfig, context)
    if run is not None:
        _explain(k8s.explain(run, client=settings, namespace=spec.given("namespace")), fmt)
        return
    report = k8s.doctor(spec(), client=settings, create_namespace=create_namespace)
    if fmt == "json":
        typer.echo(json.dumps(report.to_dict(), indent=1))
    else:
        rows: list[tuple[str, ...]] = [("CHECK", "STATUS", "FOUND")]
        for c in report.checks:
            rows.append((c.name, c.status, c.message))
            if c.hint:
                rows.append(("", "", f"hint: {c.hint}"))
        out.file.write(columns(rows))
        err.print(report.summary(), markup=False, highlight=False)
    if not report.ok:
        raise typer.Exit(1)


def _explain(e: Any, fmt: str) -> None:
    from nccl_k8s import k8s

    if fmt == "json":
        typer.echo(json.dumps(e.to_dict(), indent=1))
    else:
        out.file.write(k8s.table_text(e))
    if not e.ok:
        raise typer.Exit(1)


def nodes_check_command(
    spec: Any,
    selector: Selector = None,
    parallel: Parallel = None,
    threshold: Threshold = 0.9,
    floor: Floor = None,
    links: Links = None,
    pairing: PairingOpt = "auto",
    write_label: WriteLabel = False,
    write_taint: WriteTaint = False,
    dry_run: DryRun = False,
    idle_only: IdleOnly = False,
    skip_checked_within: SkipCheckedWithin = None,
    max_nodes: MaxNodes = None,
    push_to: PushTo = None,
    output: Output = "text",
    test_timeout: TestTimeout = None,
    schedule_timeout: ScheduleTimeout = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Find bad nodes: 2-node tests (the deploy flags, two pods pinned to two nodes) in rounds
    of disjoint pairs: the nodes where a pod fits paired off, then each suspect with a cleared
    node. By the topology labels (--topology, else the platform's: docs/topology.md), nodes are
    paired inside their domain first, then across domains (--pairing), which tells a slow link
    between two domains from a slow node. Exit 1 when a node is bad, or unknown (inconclusive),
    or a link between two domains is slow, or the whole cluster is below its expected floor
    (--floor, else the platform's: docs/floors.md). Default engine flags: `-- --ops
    all_reduce -b 64M -e 1G -f 4 -n 20`."""
    from nccl_k8s import k8s

    fmt = output_format(output)
    links_arg = _links_arg(links)
    _check_numbers(parallel, threshold, floor, max_nodes)
    if pairing not in k8s.PAIRINGS:
        raise UsageError(f"--pairing {pairing!r}: expected intra, inter or auto", key="--pairing")
    if dry_run and not (write_label or write_taint):
        raise UsageError("--dry-run: applies to --label or --taint", key="--dry-run")
    within_s = seconds("--skip-checked-within", skip_checked_within)
    push_to = k8s.push_url("--push-to", push_to) if push_to is not None else None
    if selector is not None:
        selector = label_selector("--selector", selector)
    settings = wait_settings(test_timeout, schedule_timeout, None)
    client = client_settings(kubeconfig, context)
    # Its test runs go into the namespace: one that does not exist fails before pass 1, over the
    # check's one client (k8s.nodes_check).
    checked = k8s.nodes_check(
        spec,
        client=client,
        selector=selector,
        parallel=parallel,
        threshold=threshold,
        floor=floor,
        links=links_arg,
        pairing=pairing,  # checked by the check, before anything
        label=write_label,
        taint=write_taint,
        dry_run=dry_run,
        idle_only=idle_only,
        within_s=within_s,
        max_nodes=max_nodes,
        wait_settings=settings,
        progress=lambda text: err.print(text, markup=False, highlight=False),
    )
    if fmt == "json":
        typer.echo(json.dumps(checked.to_dict(), indent=1))
    else:
        _print_checked(checked)
    for action in checked.actions:
        err.print(action, markup=False, highlight=False)
    unpushed = _push(push_to, checked)
    slow_domains = checked.topology is not None and checked.topology.links
    below = checked.floor is not None and checked.floor.below
    if checked.flagged or slow_domains or below or unpushed:
        raise typer.Exit(1)


def _push(url: str | None, checked: Any) -> bool:
    """--push-to: the verdicts to the Pushgateway, what was pushed said on stderr; True when a
    push failed (the check then fails: its metrics are not where the user asked)."""
    if url is None:
        return False
    from nccl_k8s import k8s

    pushed = k8s.push_verdicts(url, checked)
    for line in (pushed.said, *pushed.failed):
        err.print(line, markup=False, highlight=False)
    return bool(pushed.failed)


def _check_numbers(
    parallel: int | None, threshold: float, floor: float | None, max_nodes: int | None
) -> None:
    """nodes check's numbers, each in its range (one line and exit 2 otherwise)."""
    if parallel is not None and parallel < 1:
        raise UsageError(f"--parallel {parallel}: expected >= 1", key="--parallel")
    if not 0 < threshold <= 1:
        raise UsageError(
            f"--threshold {threshold:g}: expected a fraction in (0, 1]", key="--threshold"
        )
    if floor is not None and not floor > 0:
        raise UsageError(f"--floor {floor:g}: expected a bus bandwidth in GB/s > 0", key="--floor")
    if max_nodes is not None and max_nodes < 2:
        raise UsageError(
            f"--max-nodes {max_nodes}: expected >= 2 (a test is a pair of nodes)",
            key="--max-nodes",
        )


def _links_arg(links: str | None) -> Any:
    """--links all | N (random rounds), checked at the edge."""
    if links is None or links == "all":
        return links
    if links.isdigit() and int(links) >= 1:
        return int(links)
    raise UsageError(
        f'--links "{links}": expected all, or a number of random rounds such as 3', key="--links"
    )


def _print_checked(checked: Any) -> None:
    """nodes check's table: a verdict per node, the reference, slow links, nodes left out."""
    f = checked.findings
    if not checked.candidates:
        out.print("no node is due for a test", markup=False)
        for name, why in checked.left_out.items():
            out.print(f"left out {name}: {why}", markup=False)
        return
    rows: list[tuple[str, ...]] = [("NODE", "VERDICT", "BUSBW", "WHY")]
    for v in f.nodes:
        score = "-" if v.score is None else f"{v.score:.3g}"
        rows.append((v.node, v.verdict, score, v.why))
    out.file.write(columns(rows))
    ref = "-" if f.reference is None else f"{f.reference:.3g} GB/s"
    cut = "" if f.cut is None or f.cut >= f.threshold else f", slow below {f.cut:.2g} x it"
    noise = "" if f.noise is None else f", measured noise {f.noise:.0%}"
    if f.z is not None and f.flag is not None:
        noise += f" (bad below {f.flag:.2g} x it: {f.z:.1f} sigmas)"
    out.print(
        f"cluster reference busbw {ref}, threshold {f.threshold:g}{cut}{noise}, {f.passes} passes",
        markup=False,
    )
    if f.ran:
        out.print(f"ran {f.ran}", markup=False)
    if checked.fixed:
        said = " ".join(f"{k}={v}" for k, v in checked.fixed.items())
        out.print(f"pair tests fixed {said} (the link between the two nodes)", markup=False)
    if checked.floor is not None:
        out.print(checked.floor.finding, markup=False)
    elif checked.floor_note:
        out.print(checked.floor_note, markup=False)
    for link in f.links:
        out.print(f"slow link {link.a} <-> {link.b}: {link.why}", markup=False)
    if checked.topology is not None:
        _print_topology(checked)
    for name, why in checked.left_out.items():
        out.print(f"left out {name}: {why}", markup=False)


def _print_topology(checked: Any) -> None:
    """The links between domains, and the domain-by-domain matrix of the best busbw."""
    t = checked.topology
    for dl in t.links:
        out.print(f"slow link: {dl.why}", markup=False)
    for link in t.slow:
        out.print(f"slow link {link.a} <-> {link.b}: {link.why}", markup=False)
    names, best = checked.matrix()
    rows: list[tuple[str, ...]] = [("BEST BUSBW (GB/s)", *names)]
    for a in names:
        rows.append((a, *("-" if (a, b) not in best else f"{best[(a, b)]:.3g}" for b in names)))
    out.print(f"pairing {t.pairing} by {', '.join(t.levels)}:", markup=False)
    out.file.write(columns(rows))


@handle_errors
def bundle_command(
    run: RunId = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE.tar.gz",
            help=with_default("Where to write it.", "./<run-id>.bundle.tar.gz"),
            show_default=False,
        ),
    ] = None,
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
    show_env: Annotated[
        bool,
        typer.Option(
            "--show-env",
            help="Keep the values of the run's --env in the objects (redacted by default: "
            "they may be secrets).",
        ),
    ] = False,
) -> None:
    """Write a run's debug bundle: every object as YAML (the values of --env redacted unless
    --show-env), its events, every pod's log (and previous log), the nodes it ran on, the
    `doctor --run` table."""
    from nccl_k8s import k8s
    from nccl_k8s.launch import check_writable

    run = run_arg(run)
    # Before the run is read: a path that cannot be written is one line, and nothing is made.
    if output is not None:
        check_writable(output, what="-o", is_dir=False)
    else:
        check_writable(Path.cwd(), what="bundle into", is_dir=True, hint="cd or pass -o FILE")
    got = k8s.bundle(
        run,
        client=client_settings(kubeconfig, context),
        namespace=namespace,
        path=output,
        show_env=show_env,
    )
    err.print(
        f"run {got.run_id}: {got.objects} objects ({got.pods} pods), {got.events} events, "
        f"{got.logs} logs, {got.nodes} nodes -> {got.path}",
        markup=False,
        highlight=False,
    )
    for what in got.missing:
        err.print(f"not available: {what}", markup=False, highlight=False)
    out.print(str(got.path), markup=False)


def register(app: typer.Typer) -> None:
    from nccl_k8s.cli._nodes import NODES_CHECK_FIXED, nodes_history_command, nodes_schedule_command
    from nccl_k8s.k8s import NODES_CHECK_ENGINE_ARGS

    app.command("doctor", cls=Command)(handle_errors(with_spec_options(doctor_command, lazy=True)))
    app.command("bundle", cls=Command)(bundle_command)
    nodes = typer.Typer(name="nodes", cls=Group, no_args_is_help=True,
                        help="The cluster's nodes: find the bad ones, check them on a schedule, read their history.")  # fmt: skip
    check = with_spec_options(
        nodes_check_command,
        fixed=NODES_CHECK_FIXED,
        exclude=("label", "world_size", "interval", "healthy_only", "healthy_within"),
        engine_default=NODES_CHECK_ENGINE_ARGS,
    )
    nodes.command("check", cls=Command)(handle_errors(check))
    nodes.command("schedule", cls=Command)(nodes_schedule_command)
    nodes.command("history", cls=Command)(nodes_history_command)
    app.add_typer(nodes)


# nodes check's own options
Selector = Annotated[
    str | None,
    typer.Option(
        "--selector",
        "-l",
        metavar="SELECTOR",
        help="Only nodes with these labels, in kubectl's syntax (gpu=h200,zone in (a,b)).",
        show_default=False,
    ),
]

Parallel = Annotated[
    int | None,
    typer.Option(
        "--parallel",
        metavar="K",
        help=with_default(
            "2-node tests run at once, at most.", "every pair of a round (they share no node)"
        ),
        show_default=False,
    ),
]

Links = Annotated[
    str | None,
    typer.Option(
        "--links",
        metavar="all|N",
        help="Then test the links among the good nodes: every one (all), or N random rounds; "
        "the cost is printed first.",
        show_default=False,
    ),
]

PairingOpt = Annotated[
    str,
    typer.Option(
        "--pairing",
        metavar="intra|inter|auto",
        help="By the topology labels: intra tests nodes inside their domain only; auto also "
        "tests across domains, to tell a slow link between two domains from a slow node; "
        "inter pairs nodes across domains, every test judging its nodes.",
    ),
]

Threshold = Annotated[
    float,
    typer.Option(
        "--threshold",
        metavar="FRACTION",
        help="A node is bad below this fraction of the good nodes' median bus bandwidth.",
    ),
]

Floor = Annotated[
    float | None,
    typer.Option(
        "--floor",
        metavar="GBPS",
        help=with_default(
            "Fail when the cluster's bus bandwidth (its level) is below this: the whole cluster, "
            "not one node.",
            "the expected floor of the detected platform, where docs/floors.md knows one",
        ),
        show_default=False,
    ),
]

WriteLabel = Annotated[
    bool,
    typer.Option(
        "--label",
        help="Label the nodes nccl-k8s/node-check=good|bad and nccl-k8s/checked-at=<unix seconds>.",
    ),
]

WriteTaint = Annotated[
    bool,
    typer.Option(
        "--taint",
        help="Taint bad nodes nccl-k8s/bad-node=true:NoSchedule (and untaint good ones).",
    ),
]

IdleOnly = Annotated[
    bool,
    typer.Option(
        "--idle-only",
        help="Only nodes where no other pod requests GPUs (one list of the live pods of every "
        "namespace: `rbac`/`nodes schedule` grant it for this flag only).",
    ),
]

SkipCheckedWithin = Annotated[
    str | None,
    typer.Option(
        "--skip-checked-within",
        metavar="DURATION",
        help="Leave out nodes whose last verdict (their nccl-k8s/checked-at label) is younger "
        "than this (6h, 30m); a node labelled bad is always retested.",
        show_default=False,
    ),
]

MaxNodes = Annotated[
    int | None,
    typer.Option(
        "--max-nodes",
        metavar="K",
        help="Test at most K nodes in this run (bad first, then never checked, then oldest).",
        show_default=False,
    ),
]

PushTo = Annotated[
    str | None,
    typer.Option(
        "--push-to",
        metavar="URL",
        help="Push each node's verdict, busbw and time to this Prometheus Pushgateway when the "
        "check ends (job nccl-k8s-node-check, one group per node: docs/metrics.md).",
        show_default=False,
    ),
]

DryRun = Annotated[
    bool,
    typer.Option(
        "--dry-run", help="With --label/--taint: say what would be written, write nothing."
    ),
]

TestTimeout = Annotated[
    str | None,
    typer.Option(
        "--test-timeout",
        metavar="DURATION",
        help=with_default(
            "Fail a 2-node test that has not ended after this long (it is then removed).",
            "the Job's --active-deadline",
        ),
        show_default=False,
        rich_help_panel=CLUSTER,
    ),
]
