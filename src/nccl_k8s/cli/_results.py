"""`nccl-k8s import`, `diagnose`, `compare`, `report`: results in, decisions out.

No logic here: each command calls one function of nccl_k8s.results and prints what it returns.
Exit codes: 2 for bad input or unreadable files (handle_errors), 1 when a gate fails (a regression,
a min-busbw floor, an --expect-fabric mismatch), 0 otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.text import Text

from nccl_k8s.cli._common import Command, err, handle_errors, out, print_table, with_default
from nccl_k8s.cli._options import Output, output_format
from nccl_k8s.errors import UsageError
from nccl_k8s.fabrics import FABRICS
from nccl_k8s.results import (
    Comparison,
    Diagnosis,
    data_check,
    diagnose_files,
    dump,
    human_size,
    import_with_gaps,
    judge,
    parse_fabric,
    parse_metric,
    parse_tolerance,
    platform_named,
    store_run,
    write_report,
)

_SEVERITY_STYLE = {"error": "red", "warning": "yellow", "info": "cyan"}


@handle_errors
def import_command(
    files: Annotated[
        list[Path],
        typer.Argument(metavar="FILE", help="nccl-tests outputs: text tables or -J JSON files."),
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            help=with_default("Results file to write.", "runs/<new-id>/results.json"),
        ),
    ] = None,
) -> None:
    """Import NVIDIA nccl-tests output into a results file, to compare with our runs.

    Reads any nccl-tests version, behind any launcher (Open MPI tags, srun -l, kubectl
    timestamps). When no header, command or file name names a table's collective, it is
    identified from the table and a note on stderr says how; the run's own failure line, if
    any, is reported too. A file without nccl-tests' preamble (a tail: rows and footer only) is
    imported with a warning naming what was taken from the footer or the rows and which fields
    (world size, GPU model, NCCL version, ...) it could not know. An output cut off (no footer
    after a table that stops before the sizes its header announced, or a last row cut in the
    middle) is imported marked partial, with a warning saying where it stops."""
    if output is not None:
        from nccl_k8s.launch import check_writable

        check_writable(Path(output), what="-o", is_dir=False)
    run, gaps = import_with_gaps(files)
    path = store_run(run) if output is None else dump(run, output)
    for gap in gaps:
        err.print(f"warning: {gap}", markup=False)
    for ident in run.meta.op_identified:
        if ident.by in ("table", "file-name", "text"):
            err.print(f"note: {ident.op} {ident.detail}", markup=False)
        elif ident.by == "unknown":
            err.print(
                f"warning: could not tell which collective a table measured ({ident.detail}); "
                "its rows are stored as op 'unknown'",
                markup=False,
            )
    if run.meta.failure:
        err.print(
            f"warning: the run failed after {len(run.rows)} rows: {run.meta.failure}", markup=False
        )
    check = data_check(run)
    if check.wrong_rows or check.out_of_bounds:
        err.print(f"warning: wrong results: {check.text(with_failure=False)}", markup=False)
    ops = ", ".join(run.ops())
    out.print(
        f"imported {len(run.rows)} rows ({ops}) from {len(files)} file"
        f"{'s' if len(files) != 1 else ''}{', partial' if run.meta.partial else ''} -> {path}"
    )


def _print_diagnosis(d: Diagnosis) -> None:
    rows: list[tuple[str, ...]] = []
    for r in d.ranks:
        channels = "/".join(
            "-" if x is None else str(x) for x in (r.coll_channels, r.nvls_channels, r.p2p_channels)
        )
        net = "none needed (one node)" if d.network_needed is False else r.net_summary()
        rows.append(
            (
                "?" if r.rank is None else str(r.rank),
                r.key,
                r.nccl_version or "-",
                ", ".join(r.transports) or "-",
                net,
                channels,
            )
        )
    header = ("rank", "host:pid [dev]", "NCCL", "transports", "inter-node", "channels")
    print_table(header, rows)
    out.print("channels: coll/nvls/p2p")
    nodes = "unknown" if d.nodes is None else str(d.nodes)
    if d.network_needed is False:
        net_line = "no network needed (all ranks on one node)"
    else:
        gdr = {True: "on", False: "off", None: "unknown"}[d.gdr]
        net_line = f"inter-node: {d.inter_node or 'unknown'}, GPUDirect RDMA {gdr}"
    out.print(f"nodes: {nodes}; {net_line}")
    for f in d.findings:
        style = _SEVERITY_STYLE[f.severity]
        who = (
            f" [{', '.join(f.ranks)}]"
            if f.ranks and len(f.ranks) <= 4
            else (f" [{len(f.ranks)} ranks]" if f.ranks else "")
        )
        err.print(
            f"[{style}]{f.severity}[/{style}] {f.code}: {escape(f.message)}{escape(who)}",
            markup=True,
        )
        if f.hint:
            err.print(f"  hint: {f.hint}", markup=False)


@handle_errors
def diagnose_command(
    logs: Annotated[
        list[Path],
        typer.Argument(metavar="LOG", help="NCCL_DEBUG=INFO logs (one per pod is fine)."),
    ],
    expect_fabric: Annotated[
        str | None,
        typer.Option(
            "--expect-fabric",
            metavar="FABRIC",
            help=f"{', '.join(FABRICS)}: fail (exit 1) when any rank used something else, or "
            "when the log cannot confirm it (nvlink: one node and no SHM; mnnvl: every rank "
            "MNNVL 1, no network connection).",
        ),
    ] = None,
    platform: Annotated[
        str | None,
        typer.Option(
            "--platform",
            metavar="PLATFORM",
            help="judge the log as a deploy for this platform judges its pods' logs (its "
            "fabric gate): the fabric it must show, failing (exit 1) with the ranks and hosts "
            "that used another.",
        ),
    ] = None,
    output: Output = "text",
) -> None:
    """Say which transport each rank used and what is wrong, from NCCL_DEBUG=INFO logs."""
    fmt = output_format(output)
    if platform is not None and expect_fabric is not None:
        raise UsageError(
            f"--platform {platform!r} with --expect-fabric {expect_fabric!r}: the platform names "
            "its fabric, expected one of the two"
        )
    d = diagnose_files(
        logs,
        expect_fabric=parse_fabric(expect_fabric),
        platform=None if platform is None else platform_named(platform),
    )
    if fmt == "json":
        typer.echo(json.dumps(d.to_dict(), indent=1))
    else:
        _print_diagnosis(d)
        if d.platform is not None and not d.platform.ok:
            err.print(f"[red]error:[/red] {escape(d.platform.message())}", markup=True)
    if d.failed:
        raise typer.Exit(1)


_UNITS = {"busbw": "GB/s", "time": "us"}


def _print_comparison(c: Comparison) -> None:
    variants = c.has_variants
    header = ["op"] + (["dtype/redop"] if variants else [])
    header += ["size", "place", "on", "baseline", "current", "ratio", "verdict"]
    first = len(header) - 7  # the size column
    right = {first, first + 3, first + 4, first + 5}
    rows: list[list[str | Text]] = []
    for r in c.rows:
        style = {"regressed": "red", "improved": "green", "missing": "yellow"}.get(r.verdict, "")
        verdict = r.verdict if r.verdict != "missing" else f"missing in {r.missing_in}"
        cells: list[str | Text] = [r.op, *([r.variant] if variants else [])]
        cells += [
            human_size(r.size_bytes),
            r.placement,
            f"{r.metric} ({_UNITS[r.metric]})",
            "-" if r.baseline is None else f"{r.baseline:.2f}",
            "-" if r.current is None else f"{r.current:.2f}",
            "-" if r.ratio is None else f"{r.ratio:.3f}",
            Text(verdict, style=style),
        ]
        rows.append(cells)
    print_table(header, rows, right=right)


AllowDifferent = Annotated[
    bool,
    typer.Option(
        "--allow-different",
        help="Compare runs of a different backend, device, world size or fabric (refused "
        "otherwise, exit 2): each difference is then a warning.",
    ),
]


@handle_errors
def compare_command(
    current: Annotated[
        str,
        typer.Argument(metavar="CURRENT", help="Results file or run id (runs/<id>/results.json)."),
    ],
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline", metavar="RUN", help="Results file or run id to compare against."
        ),
    ] = None,
    tolerance: Annotated[
        str,
        typer.Option(
            "--tolerance", metavar="PERCENT", help="Allowed change before a row counts, e.g. 5%."
        ),
    ] = "5%",
    metric: Annotated[
        str,
        typer.Option(
            "--metric",
            metavar="busbw|time",
            help="busbw or time. Rows where busbw is 0 in either run (one rank, tiny sizes) are "
            "decided on time, and say so.",
        ),
    ] = "busbw",
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype",
            metavar="DTYPE",
            help="Compare only this data type (of a -d all run), e.g. float.",
        ),
    ] = None,
    redop: Annotated[
        str | None,
        typer.Option(
            "--redop",
            metavar="REDOP",
            help="Compare only this reduction (of a -o all run), e.g. sum.",
        ),
    ] = None,
    min_busbw: Annotated[
        float | None,
        typer.Option(
            "--min-busbw", metavar="GBPS", help="Fail when an op's average busbw (GB/s) is lower."
        ),
    ] = None,
    allow_different: AllowDifferent = False,
    output: Output = "text",
) -> None:
    """Compare a run with a baseline per op x dtype x redop x size x placement; exit 1 on a
    regression, and on wrong results in the current run (#wrong > 0, out-of-bounds FAILED, a
    failure line) whatever its speed. Runs of a different backend, device (GPU model, or CPU),
    world size or fabric are refused (exit 2) unless --allow-different. 0-byte rows are skipped;
    different NCCL versions or node counts, and a baseline with wrong results, are warned."""
    fmt = output_format(output)
    outcome = judge(
        current, baseline, tolerance=parse_tolerance(tolerance), metric=parse_metric(metric),
        dtype=dtype, redop=redop, min_busbw=min_busbw, allow_different=allow_different,
    )  # fmt: skip
    for warning in outcome.warnings:
        err.print(f"[yellow]warning:[/yellow] {escape(warning)}", markup=True)
    if fmt == "json":
        typer.echo(json.dumps(outcome.to_dict(), indent=1))
    else:
        if outcome.comparison is not None:
            _print_comparison(outcome.comparison)
            out.print(outcome.comparison.summary())
        if outcome.gate is not None:
            out.print(outcome.gate.summary())
    for what, detail in outcome.failures():
        err.print(f"[red]{what}[/red] {escape(detail)}", markup=True)
    if not outcome.ok:
        raise typer.Exit(outcome.exit_code)


NodesCheckFile = Annotated[
    Path | None,
    typer.Option(
        "--nodes-check",
        metavar="FILE",
        help="A saved `nodes check -o json`: its domain-by-domain matrix of the best busbw as "
        "a heatmap and a table (with or without runs).",
    ),
]


@handle_errors
def report_command(
    runs: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="RUN",
            help="Results files or run ids (runs/<id>/results.json), overlaid in order.",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            help="HTML page to write, images embedded (default: report.html, "
            "or none when --png is given alone).",
        ),
    ] = None,
    png: Annotated[
        Path | None,
        typer.Option(
            "--png",
            metavar="DIR",
            help="Write each plot as DIR/<plot>.png too (alone, without -o).",
        ),
    ] = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype",
            metavar="DTYPE",
            help="Report only this data type (of a -d all run), e.g. float.",
        ),
    ] = None,
    redop: Annotated[
        str | None,
        typer.Option(
            "--redop",
            metavar="REDOP",
            help="Report only this reduction (of a -o all run), e.g. sum.",
        ),
    ] = None,
    nodes_check: NodesCheckFile = None,
) -> None:
    """Write an HTML report of runs: busbw and small-message time per op (runs overlaid; one
    plot per dtype/redop of -d all / -o all runs), per-rank spread, busbw by rank layout where
    the runs' ranks sat in topology domains differently, each run's metadata, and the diagnosis
    of NCCL logs kept with a run; with --nodes-check, the check's domain-by-domain heatmap."""
    from nccl_k8s.launch import check_writable

    if output is None and png is None:
        output = Path("report.html")
    # As every output path: its directory must exist (a typo creates nothing); --png DIR may be
    # new, as a file may.
    if output is not None:
        check_writable(output, what="-o", is_dir=False)
    new_dir = png is not None and not png.exists()
    if png is not None:
        check_writable(png, what="--png", is_dir=not new_dir)
    result = write_report(
        runs or [], output=output, png_dir=png, dtype=dtype, redop=redop, nodes_check=nodes_check
    )
    n, m = len(result.runs), len(result.plots)
    what = f"{m} plot{'s' if m != 1 else ''} of {n} run{'s' if n != 1 else ''}"
    if result.domain_matrix is not None:
        what += f", the domain matrix of {len(result.domain_matrix.names)} domains"
    if result.html_path is not None:
        diagnosed = sum(1 for r in result.runs if r.diagnosis is not None)
        out.print(f"report: {what}, {diagnosed} diagnosed -> {result.html_path}")
    if png is not None:
        made = " (created)" if new_dir else ""
        out.print(f"plots: {len(result.png_paths)} PNG files -> {png}/{made}")


def register(app: typer.Typer) -> None:
    for name, fn in (
        ("import", import_command),
        ("diagnose", diagnose_command),
        ("compare", compare_command),
        ("report", report_command),
    ):
        app.command(name, cls=Command)(fn)


__all__ = ["register"]
