"""`nccl-k8s report`: one self-contained HTML page about one or more runs, or their plots as PNGs.

The page holds, in order: a summary per op and run (average and peak bus bandwidth, wrong elements),
the plots of `plots` (embedded as base64 PNG, so the file can be mailed or attached to a ticket
alone), each run's metadata (versions, world, GPU model, NCCL environment, config), and, where a run's
directory holds NCCL_DEBUG=INFO logs, the diagnosis of `diagnose`.

A run is named as `compare` names it: a results file or a run id (runs/<id>/results.json). Logs are
looked for next to a `results.json` only, in the run's own directory: `*.log` files there and every
file under its `logs/` folder. A run without logs simply has no diagnosis section.
"""

from __future__ import annotations

import base64
import datetime
import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nccl_k8s import __version__
from nccl_k8s.bench.options import OPTIONS
from nccl_k8s.errors import ResultsError, UsageError
from nccl_k8s.results.comparable import domain_layout, domains, spans
from nccl_k8s.results.compare import select
from nccl_k8s.results.diagnose import Diagnosis, diagnose_files
from nccl_k8s.results.domainmap import (
    PLOT_NAME,
    DomainMatrix,
    heatmap_png,
    load_domain_matrix,
    matrix_html,
)
from nccl_k8s.results.plots import (
    Plot,
    Series,
    all_plots,
    require_matplotlib,
    size_label,
    variant_of,
)
from nccl_k8s.results.schema import Run, RunMeta, load
from nccl_k8s.results.store import RESULTS_FILE, resolve

#: Sub-folder of a run directory where collected logs go (one file per pod or rank).
LOGS_DIR = "logs"


@dataclass
class ReportRun:
    """One run as the report shows it."""

    ref: str
    path: Path
    run: Run
    label: str
    logs: list[Path] = field(default_factory=list)
    diagnosis: Diagnosis | None = None
    #: Why there is no diagnosis (no logs, or logs without NCCL lines), shown instead of it.
    diagnosis_note: str = ""


@dataclass
class ReportResult:
    """What `write_report` wrote."""

    runs: list[ReportRun]
    plots: list[Plot]
    html_path: Path | None = None
    png_paths: list[Path] = field(default_factory=list)
    #: `--nodes-check`'s domain matrix and its heatmap (a Plot of its own, not in `plots`).
    domain_matrix: DomainMatrix | None = None
    heatmap: Plot | None = None


def run_logs(results_file: Path) -> list[Path]:
    """NCCL logs kept with a run: `*.log` beside runs/<id>/results.json and files under logs/."""
    if results_file.name != RESULTS_FILE:
        return []
    run_dir = results_file.parent
    found = sorted(p for p in run_dir.glob("*.log") if p.is_file())
    logs = run_dir / LOGS_DIR
    if logs.is_dir():
        found += sorted(p for p in logs.rglob("*") if p.is_file())
    return found


def _describe(run: Run) -> str:
    m = run.meta
    what: list[str] = [m.source]
    if m.world_size:
        gpu = m.gpu_model or ("CPU" if m.backend == "gloo" else "GPU")
        what.append(f"{m.world_size}× {gpu}")
    if m.nodes and m.nodes > 1:
        what.append(f"{m.nodes} nodes")
    return ", ".join(what)


def load_runs(refs: Sequence[str], *, diagnose: bool = True) -> list[ReportRun]:
    """Resolve and load each run (ResultsError, exit 2, on the first that cannot be read), label it
    for legends, and diagnose its logs when it has any."""
    if not refs:
        raise UsageError("report needs at least one run: a run id or a results file", key="runs")
    out: list[ReportRun] = []
    for ref in refs:
        path = resolve(ref)
        run = load(path)
        name = run.meta.run_id or (path.parent.name if path.name == RESULTS_FILE else path.stem)
        out.append(ReportRun(ref=ref, path=path, run=run, label=f"{name} ({_describe(run)})"))
    # Two runs with one label (the same file twice, imports without ids) would share a legend entry.
    seen: dict[str, int] = {}
    for r in out:
        n = seen[r.label] = seen.get(r.label, 0) + 1
        if n > 1:
            r.label = f"{r.label} #{n}"
    if diagnose:
        for r in out:
            _diagnose(r)
    return out


def _diagnose(r: ReportRun) -> None:
    r.logs = run_logs(r.path)
    if not r.logs:
        r.diagnosis_note = "no NCCL logs kept with this run"
        return
    if r.run.meta.backend == "gloo":
        # Its logs hold no NCCL line because NCCL was never used, not because NCCL_DEBUG was off.
        r.diagnosis_note = (
            "a gloo run: NCCL was not used, so its logs have no NCCL lines to diagnose"
        )
        return
    try:
        r.diagnosis = diagnose_files(r.logs)
    except ResultsError as e:
        # Logs without NCCL_DEBUG=INFO lines are common (NCCL_DEBUG unset); say so, do not fail.
        r.diagnosis_note = f"logs not diagnosed: {e}"


# --------------------------------------------------------------------------------------------
# HTML

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d1d1f;
       max-width: 1080px; margin: 24px auto; padding: 0 20px; }
h1 { font-size: 24px; margin-bottom: 4px; }
h2 { font-size: 19px; margin-top: 36px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 16px; margin-top: 24px; }
.sub { color: #666; margin-top: 0; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f5f5f7; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
              font-size: 12px; }
figure { margin: 12px 0 24px; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 13px; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px;
          margin-right: 6px; vertical-align: -1px; }
.error { color: #b00020; font-weight: 600; } .warning { color: #a15c00; font-weight: 600; }
.info { color: #0b6e99; font-weight: 600; } .ok { color: #1b7f3a; } .bad { color: #b00020; }
.hint { color: #555; margin-left: 1.5em; }
details { margin: 4px 0; }
"""


def _e(x: object) -> str:
    return html.escape("" if x is None else str(x))


def _v(x: object) -> str:
    return "–" if x is None or x == "" else _e(x)


#: The options `sizes lo..hi` says together.
_SIZE_FIELDS = ("minbytes", "maxbytes", "stepbytes", "stepfactor")


def _config_text(run: Run) -> str:
    c = run.meta.config
    parts = []
    if c.minbytes is not None or c.maxbytes is not None:
        lo = "?" if c.minbytes is None else size_label(c.minbytes)
        hi = "?" if c.maxbytes is None else size_label(c.maxbytes)
        step = (
            f" ×{c.stepfactor}"
            if c.stepfactor and c.stepfactor > 1
            else (f" +{size_label(c.stepbytes)}" if c.stepbytes else "")
        )
        parts.append(f"sizes {lo}..{hi}{step}")
    for o in OPTIONS:  # the other options results keep, in the table's order, as -z 2 says
        if o.meta and o.read in ("int", "str", "mode") and o.meta not in _SIZE_FIELDS:
            value = getattr(c, o.meta)
            if value is not None:
                parts.append(f"{o.meta} {value}")
    return ", ".join(parts)


def _op_variants(runs: Sequence[ReportRun], ops: dict[str, None]) -> list[tuple[str, str]]:
    """(op, dtype/redop) pairs in first-seen order; the averages of the summary are per pair
    (nccl-tests' "# Avg bus bandwidth" averages every printed cell of one run, all dtypes)."""
    pairs: dict[tuple[str, str], None] = {}
    for op in ops:
        for r in runs:
            for x in r.run.rows:
                if x.op == op:
                    pairs.setdefault((op, variant_of(x)), None)
    return list(pairs)


def _summary_table(runs: Sequence[ReportRun]) -> str:
    ops: dict[str, None] = {}
    for r in runs:
        for op in r.run.ops():
            ops.setdefault(op, None)
    head = (
        "<tr><th>op</th><th>dtype / redop</th><th>run</th><th>avg busbw (GB/s)</th>"
        "<th>peak busbw, out-of-place (GB/s)</th><th>at size</th>"
        "<th>smallest time, out-of-place (µs)</th><th>#wrong</th></tr>"
    )
    body = []
    for op, variant in _op_variants(runs, ops):
        for i, r in enumerate(runs):
            rows = [x for x in r.run.rows if x.op == op and variant_of(x) == variant]
            if not rows:
                continue
            avg = sum(x.busbw for x in rows) / len(rows)
            # In place can be a no-op (one rank): its peak and its fastest time say nothing.
            outs = [x for x in rows if x.placement == "out"] or rows
            peak = max(outs, key=lambda x: x.busbw)
            fastest = min(outs, key=lambda x: x.time_us)
            wrongs = [x.wrong for x in rows if x.wrong is not None]
            if not wrongs:
                wrong = "N/A"
            else:
                total = sum(wrongs)
                cls = "ok" if total == 0 else "bad"
                wrong = f'<span class="{cls}">{total}</span>'
            body.append(
                f"<tr><td>{_e(op)}</td><td>{_e(variant) or '–'}</td>"
                f"<td>{_swatch(i)}{_e(r.label)}</td>"
                f'<td class="num">{_num(avg)}</td>'
                f'<td class="num">{_num(peak.busbw)}</td>'
                f'<td class="num">{_e(size_label(peak.size_bytes))}</td>'
                f'<td class="num">{fastest.time_us:.2f} at {_e(size_label(fastest.size_bytes))}</td>'
                f'<td class="num">{wrong}</td></tr>'
            )
    if not body:
        return "<p>No rows in any run: nothing to summarise or plot.</p>"
    return f"<table>{head}{''.join(body)}</table>"


def _layout_section(runs: Sequence[ReportRun]) -> list[str]:
    """busbw by rank layout, where the runs' ranks sat in topology domains in two ways or more:
    each op's busbw at the largest size of each run, the runs grouped by their layout. A run's
    busbw is one number for all its ranks (every rank waits for the slowest link of the ring),
    so what can be grouped by domain is the layout, not a rank (docs/topology.md)."""
    layouts = [domain_layout(r.run.meta) for r in runs]
    if len({x for x in layouts if x is not None}) < 2:
        return []
    ops: dict[str, None] = {}
    for r in runs:
        ops.update(dict.fromkeys(r.run.ops()))
    body = []
    for op, variant in _op_variants(runs, ops):
        entries = []
        for i, (r, layout) in enumerate(zip(runs, layouts, strict=True)):
            rows = [x for x in r.run.rows if x.op == op and variant_of(x) == variant]
            outs = [x for x in rows if x.placement == "out"] or rows
            if outs:
                entries.append((layout or "not recorded", i, max(outs, key=lambda x: x.size_bytes)))
        for layout, i, last in sorted(entries, key=lambda e: (e[0], e[1])):
            body.append(
                f"<tr><td>{_e(op)}</td><td>{_e(variant) or '–'}</td><td>{_e(layout)}</td>"
                f"<td>{_swatch(i)}{_e(runs[i].label)}</td>"
                f'<td class="num">{_num(last.busbw)}</td>'
                f'<td class="num">{_e(size_label(last.size_bytes))}</td></tr>'
            )
    head = (
        "<tr><th>op</th><th>dtype / redop</th><th>ranks by topology domain</th><th>run</th>"
        "<th>busbw at the largest size, out-of-place (GB/s)</th><th>size</th></tr>"
    )
    return [
        '<h3 id="busbw-by-layout">busbw by rank layout</h3>',
        "<p>The runs' ranks sat in topology domains differently: a ring crosses the domains "
        "once per change of domain between consecutive ranks, so the layout can set the busbw. "
        "A run's busbw is one number for all its ranks; per-domain links are measured by "
        "<code>nodes check</code> (its matrix: <code>report --nodes-check</code>).</p>",
        f"<table>{head}{''.join(body)}</table>",
    ]


def _num(x: float) -> str:
    """Two decimals as nccl-tests prints, but three significant digits below 1 (CPU runs' GB/s)."""
    return f"{x:.2f}" if x >= 1 or x == 0 else f"{x:.3g}"


def _swatch(i: int) -> str:
    from nccl_k8s.results.plots import COLORS

    return f'<span class="swatch" style="background:{COLORS[i % len(COLORS)]}"></span>'


def _meta_table(runs: Sequence[ReportRun]) -> str:
    def row(name: str, cells: Sequence[str]) -> str:
        return f"<tr><th>{_e(name)}</th>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"

    metas = [r.run.meta for r in runs]
    lines = [
        "<tr><th></th>"
        + "".join(f"<th>{_swatch(i)}{_e(r.label)}</th>" for i, r in enumerate(runs))
        + "</tr>",
        row("run id", [_v(m.run_id) for m in metas]),
        row("rows", [_rows_cell(r.run) for r in runs]),
        row("file", [f"<code>{_e(r.path)}</code>" for r in runs]),
        row("measured by", [_v(m.source) for m in metas]),
        row("start time", [_v(m.time) for m in metas]),
        row("nccl-k8s", [_v(m.nccl_k8s) for m in metas]),
        row("nccl-tests", [_v(m.nccl_tests) for m in metas]),
        row("PyTorch", [_v(m.torch) for m in metas]),
        row("NCCL", [_v(m.nccl) for m in metas]),
        row("CUDA", [_v(m.cuda) for m in metas]),
        row("backend", [_v(m.backend) for m in metas]),
        row("world size", [_v(m.world_size) for m in metas]),
        row("nodes", [_v(m.nodes) for m in metas]),
        row("GPUs per node", [_v(m.gpus_per_node) for m in metas]),
        row("GPU model", [_v(m.gpu_model) for m in metas]),
        row("ops", [_v(", ".join(r.run.ops())) for r in runs]),
        row("config", [_v(_config_text(r.run)) for r in runs]),
        row("NCCL environment", [_env_cell(m.env) for m in metas]),
        row("ranks", [_devices_cell(r.run) for r in runs]),
    ]
    if any(len(domains(m)) > 1 for m in metas):  # which ranks ran in which domain
        lines.append(row("topology domains", [_domains_cell(m) for m in metas]))
    if any(m.inputs for m in metas):
        lines.append(
            row(
                "imported from",
                ["<br>".join(f"<code>{_e(p)}</code>" for p in m.inputs) or "–" for m in metas],
            )
        )
    return "<table>" + "".join(lines) + "</table>"


def _partial_notes(runs: Sequence[ReportRun]) -> list[str]:
    """Above the summary, one warning per partial run (`meta.partial`: rows of a run that
    stopped, a cut-off table, a snapshot of a run still going): its numbers are not a
    whole sweep, whatever the plots look like."""
    return [
        f'<p class="partial"><span class="warning">PARTIAL</span> {_swatch(i)}{_e(r.label)}: '
        f"only the {len(r.run.rows)} rows measured before it stopped"
        + (f": {_e(r.run.meta.failure)}" if r.run.meta.failure else "")
        + "</p>"
        for i, r in enumerate(runs)
        if r.run.meta.partial
    ]


def _rows_cell(run: Run) -> str:
    """How many rows, and whether they are all the run measured (partial) or failed."""
    meta = run.meta
    if meta.partial:
        return f'{len(run.rows)} <span class="warning">PARTIAL</span>'
    if meta.failure:
        return f'{len(run.rows)} <span class="error">failed</span>: {_e(meta.failure)}'
    return str(len(run.rows))


def _env_cell(env: dict[str, str]) -> str:
    if not env:
        return "– (no NCCL_* variable set)"
    return "<br>".join(f"<code>{_e(k)}={_e(v)}</code>" for k, v in sorted(env.items()))


def _domains_cell(meta: RunMeta) -> str:
    by = domains(meta)
    return (
        "<br>".join(
            f"<code>{_e(k)}</code>: ranks {_e(spans(r))} ({_e(', '.join(n))})"
            for k, (r, n) in by.items()
        )
        or "–"
    )


def _devices_cell(run: Run) -> str:
    devs = run.meta.devices
    if not devs:
        return "–"
    items = "<br>".join(
        f"<code>{d.rank}: {_e(d.host or '?')}{f' (node {_e(d.node)})' if d.node else ''} "
        f"{_e('/'.join(d.domain.values())) + ' ' if d.domain else ''}"
        f"pid {_v(d.pid)} dev {_v(d.device)} {_e(d.name or '')}</code>"
        for d in devs
    )
    return f"<details><summary>{len(devs)} rank{'s' if len(devs) != 1 else ''}</summary>{items}</details>"


def _diagnosis_html(r: ReportRun, i: int) -> str:
    title = f"<h3>{_swatch(i)}{_e(r.label)}</h3>"
    d = r.diagnosis
    if d is None:
        return f"{title}<p>{_e(r.diagnosis_note)}</p>"
    if d.network_needed is False:
        net = "no network needed (all ranks on one node)"
    else:
        gdr = {True: "on", False: "off", None: "unknown"}[d.gdr]
        net = f"inter-node: {_e(d.inter_node or 'unknown')}, GPUDirect RDMA {gdr}"
    nodes = "unknown" if d.nodes is None else str(d.nodes)
    parts = [
        title,
        f"<p>From {len(r.logs)} log file{'s' if len(r.logs) != 1 else ''}. "
        f"Nodes: {nodes}; {net}.</p>",
        "<table><tr><th>rank</th><th>host:pid [dev]</th><th>NCCL</th><th>transports</th>"
        "<th>inter-node</th><th>channels coll/nvls/p2p</th></tr>",
    ]
    for rank in d.ranks:
        channels = "/".join(
            "-" if x is None else str(x)
            for x in (rank.coll_channels, rank.nvls_channels, rank.p2p_channels)
        )
        inter = "none needed" if d.network_needed is False else rank.net_summary()
        parts.append(
            f"<tr><td>{_v(rank.rank)}</td><td><code>{_e(rank.key)}</code></td>"
            f"<td>{_v(rank.nccl_version)}</td><td>{_v(', '.join(rank.transports))}</td>"
            f"<td>{_e(inter)}</td><td>{_e(channels)}</td></tr>"
        )
    parts.append("</table>")
    if d.findings:
        parts.append("<ul>")
        for f in d.findings:
            who = f" [{_e(', '.join(f.ranks))}]" if f.ranks and len(f.ranks) <= 4 else ""
            hint = f'<div class="hint">hint: {_e(f.hint)}</div>' if f.hint else ""
            parts.append(
                f'<li><span class="{f.severity}">{f.severity}</span> <code>{_e(f.code)}</code>: '
                f"{_e(f.message)}{who}{hint}</li>"
            )
        parts.append("</ul>")
    else:
        parts.append('<p class="ok">No findings.</p>')
    return "".join(parts)


def _figure(p: Plot) -> str:
    data = base64.b64encode(p.png).decode("ascii")
    return (
        f'<figure id="{_e(p.name)}"><img alt="{_e(p.title)}" '
        f'src="data:image/png;base64,{data}"><figcaption>{_e(p.title)}</figcaption></figure>'
    )


def _domains_section(dm: DomainMatrix | None, heatmap: Plot | None) -> list[str]:
    """`--nodes-check`'s domain-by-domain matrix: the heatmap, then its numbers."""
    if dm is None:
        return []
    return [
        '<h2 id="topology-domains">Topology domains (nodes check)</h2>',
        *([_figure(heatmap)] if heatmap is not None else []),
        matrix_html(dm),
    ]


def render_html(
    runs: Sequence[ReportRun],
    plots: Sequence[Plot],
    *,
    domain_matrix: DomainMatrix | None = None,
    heatmap: Plot | None = None,
) -> str:
    """The whole page as one string; every image inline, no external reference."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    names = ", ".join(r.label for r in runs)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>nccl-k8s report: {_e(names)}</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>NCCL benchmark report</h1>",
        f'<p class="sub">{len(runs)} run{"s" if len(runs) != 1 else ""}; generated {now} by '
        f"nccl-k8s {_e(__version__)}. Bandwidths in GB/s (10<sup>9</sup> B/s), times in µs, "
        "sizes in binary units (1K = 1024 B).</p>",
        *_partial_notes(runs),
    ]
    if runs:
        parts += ["<h2>Summary</h2>", _summary_table(runs), *_layout_section(runs)]
        parts.append("<h2>Plots</h2>")
    if runs and not plots:
        parts.append("<p>No plots: the runs hold no rows.</p>")
    op = None
    for p in plots:
        if p.op != op:
            parts.append(f'<h3 id="{_e(p.op)}">{_e(p.op)}</h3>')
            op = p.op
        parts.append(_figure(p))
    parts += _domains_section(domain_matrix, heatmap)
    if runs:
        parts += ["<h2>Runs</h2>", _meta_table(runs), "<h2>Diagnosis of NCCL logs</h2>"]
        parts += [_diagnosis_html(r, i) for i, r in enumerate(runs)]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_report(
    refs: Sequence[str],
    *,
    output: Path | None = None,
    png_dir: Path | None = None,
    dtype: str | None = None,
    redop: str | None = None,
    nodes_check: Path | None = None,
) -> ReportResult:
    """Build the report of `refs` (and of a saved `nodes check -o json`: its domain matrix as
    a heatmap): the HTML page to `output`, the plots as PNGs into `png_dir` (either or both),
    limited to one dtype/redop when asked. Raises ResultsError for an unreadable run,
    UsageError without matplotlib, for a dtype/redop a run does not hold, or for a
    --nodes-check file that is not a check's JSON with a domain matrix."""
    if output is None and png_dir is None:
        raise UsageError("report: nothing to write: give -o FILE, --png DIR or both", key="output")
    if not refs and nodes_check is None:
        raise UsageError(
            "report needs at least one run (a run id or a results file) or --nodes-check FILE",
            key="runs",
        )
    dm = load_domain_matrix(nodes_check) if nodes_check is not None else None
    require_matplotlib()
    runs = load_runs(refs, diagnose=output is not None) if refs else []
    if dtype is not None or redop is not None:
        for r in runs:
            r.run = select(r.run, dtype=dtype, redop=redop, name=f"run {r.label}")
    plots = all_plots([Series(r.label, r.run) for r in runs])
    if refs and not plots:
        # A run without a row (a sweep still running when it was collected, a run that failed at
        # once) plots nothing: an empty page must not pass for a report.
        empty = ", ".join(r.label for r in runs if not r.run.rows) or ", ".join(refs)
        raise ResultsError(f"{empty}: no rows to plot; nothing written", path=str(refs[0]))
    heat = None
    if dm is not None:
        title = f"nodes check {dm.source}: best busbw between and inside topology domains"
        heat = Plot(PLOT_NAME, "topology domains", title, heatmap_png(dm))
    result = ReportResult(runs=runs, plots=plots, domain_matrix=dm, heatmap=heat)
    if png_dir is not None:
        try:
            png_dir.mkdir(exist_ok=True)  # its parent must exist, as for any output path
            for p in [*plots, *([heat] if heat is not None else [])]:
                path = png_dir / f"{p.name}.png"
                path.write_bytes(p.png)
                result.png_paths.append(path)
        except OSError as e:
            raise UsageError(f"--png {png_dir}: cannot write: {e.strerror}", key="png") from None
    if output is not None:
        page = render_html(runs, plots, domain_matrix=dm, heatmap=heat)
        try:
            output.write_text(page, encoding="utf-8")
        except OSError as e:
            raise UsageError(f"-o {output}: cannot write: {e.strerror}", key="output") from None
        result.html_path = output
    return result


__all__ = [
    "LOGS_DIR",
    "ReportResult",
    "ReportRun",
    "load_runs",
    "render_html",
    "run_logs",
    "write_report",
]
