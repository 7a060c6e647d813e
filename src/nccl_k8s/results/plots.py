"""The report's pictures: matplotlib figures of one or more runs, rendered to PNG bytes.

Per op, three plots a user reads to judge a run against another:
- bus bandwidth (GB/s) against message size on a log2 axis, one line per run (solid out-of-place,
  dashed in-place), with the slowest..fastest rank band where the run recorded per-rank times;
- time (µs) against size for small messages (up to `SMALL_BYTES`), where latency, not bandwidth,
  decides, with the same per-rank band;
- the per-rank spread itself: (slowest - fastest) / time, in %, where the run has it.

matplotlib is the `report` extra and is imported inside `require_matplotlib` only, so the rest of
`results` works without it. Figures are built with `matplotlib.figure.Figure` and rendered by the Agg
canvas directly: no pyplot, no global backend switch, nothing that needs a display.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from nccl_k8s.errors import UsageError, install_hint
from nccl_k8s.results.schema import Row, Run

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: "Small messages": the latency-bound end of the sweep, plotted as time rather than bandwidth.
SMALL_BYTES = 64 << 10
#: Figure size in inches at `DPI`: 1000 x 520 px, readable embedded in a page and on its own.
FIGSIZE = (10.0, 5.2)
DPI = 100
#: Colour-blind-safe palette (Okabe-Ito), one colour per run, in the order the runs were given.
COLORS = (
    "#0072B2",
    "#D55E00",
    "#009E73",
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#000000",
    "#F0E442",
)
#: One marker per run as well as a colour, so runs whose lines coincide stay distinguishable.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h")
_STYLE = {"out": "-", "in": "--"}
_PLACE_NAME = {"out": "out-of-place", "in": "in-place"}


def require_matplotlib() -> ModuleType:
    """Import matplotlib, or say which extra to install (one line, exit 2)."""
    try:
        import matplotlib
        from matplotlib.backends import backend_agg  # noqa: F401  (Agg must be present)
    except ImportError:
        raise UsageError(
            f"report needs matplotlib: {install_hint('report')}", key="matplotlib"
        ) from None
    return matplotlib


@dataclass
class Plot:
    """One rendered picture: a file name (also the anchor in the page), a caption, PNG bytes."""

    name: str
    op: str
    title: str
    png: bytes
    #: The dtype/redop this plot is limited to ("float sum"), "" when the op has only one.
    variant: str = ""


@dataclass
class Series:
    """One run as the plots see it: its rows and the label its legend entry carries."""

    label: str
    run: Run


def size_label(n: float) -> str:
    """Bytes as a tick label: 8B, 512B, 1K, 64K, 1M, 1G (binary, as the engine's flags)."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            q = n / scale
            return f"{q:g}{unit}" if q == int(q) else f"{q:.1f}{unit}"
    return f"{n:g}B"


def _rows(run: Run, op: str, placement: str, *, max_size: int | None = None) -> list[Row]:
    rows = [
        r
        for r in run.rows
        if r.op == op
        and r.placement == placement
        and r.size_bytes > 0
        and math.isfinite(r.time_us)
        and (max_size is None or r.size_bytes <= max_size)
    ]
    # One point per size: a sweep over roots or dtypes repeats sizes; the first one stands.
    seen: dict[int, Row] = {}
    for r in rows:
        seen.setdefault(r.size_bytes, r)
    return sorted(seen.values(), key=lambda r: r.size_bytes)


def _has_spread(rows: Sequence[Row]) -> bool:
    return any(r.time_us_min is not None and r.time_us_max is not None for r in rows)


def _size_axis(ax: Axes, sizes: Sequence[int]) -> None:
    """log2 x axis with one labelled tick per power of two, thinned to at most ~12 labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log", base=2)
    lo = math.floor(math.log2(min(sizes)))
    hi = math.ceil(math.log2(max(sizes)))
    span = max(1, hi - lo)
    step = 1
    while span / step > 12:
        step += 1
    # Keep the labelled powers aligned on multiples of `step` from 8 B (2^3), as sweeps usually are.
    first = lo + ((3 - lo) % step)
    ticks = [2.0**e for e in range(first, hi + 1, step)] or [2.0**lo]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: size_label(x)))
    pad = 2**0.35
    ax.set_xlim(min(sizes) / pad, max(sizes) * pad)
    ax.set_xlabel("message size (bytes, log2 scale)")


def _style_axes(ax: Axes) -> None:
    ax.grid(True, which="major", color="#d0d0d0", linewidth=0.7)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _line_style(i: int, n: int, placement: str) -> dict[str, Any]:
    """How run i of n draws. Runs often coincide (same hardware, small sizes): the first run is
    drawn on top, thin with small filled markers, later ones underneath, wider with larger hollow
    markers, so a line hidden under another still shows as a coloured edge and ring."""
    out = placement == "out"
    k = min(i, 3)
    return {
        "linestyle": _STYLE[placement],
        "color": COLORS[i % len(COLORS)],
        "marker": MARKERS[i % len(MARKERS)] if out else None,
        "markersize": 4 + 2 * k,
        "markerfacecolor": COLORS[i % len(COLORS)] if i == 0 else "none",
        "markeredgewidth": 1.2,
        "linewidth": (1.6 + 0.7 * k) if out else 1.1 + 0.4 * k,
        "zorder": 3 + 2 * (n - i) + (1 if out else 0),
    }


def _new_figure(legend_rows: int) -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    # The legend sits under the axes; grow the figure with it so the plot keeps its height.
    width, height = FIGSIZE
    fig = Figure(figsize=(width, height + 0.22 * legend_rows), dpi=DPI, layout="constrained")
    return fig, fig.add_subplot()


def _legend(fig: Figure, drawn: Sequence[tuple[int, str]], placements: Sequence[str]) -> None:
    """One entry per run (its colour and marker), then, when both placements are drawn, what the
    solid and dashed lines mean: half as many entries as one per line, and none cut off."""
    from matplotlib.lines import Line2D

    handles: list[Any] = []
    labels: list[str] = []
    for i, label in drawn:
        style = _line_style(i, len(drawn), "out")
        style.pop("zorder")
        handles.append(Line2D([], [], **style))
        labels.append(label)
    if len(placements) > 1:
        for placement in placements:
            grey: dict[str, Any] = {"color": "#555555", "linestyle": _STYLE[placement]}
            handles.append(Line2D([], [], **grey))
            labels.append(_PLACE_NAME[placement])
    fig.legend(handles, labels, loc="outside lower center", ncol=1, frameon=False, fontsize=9)


def _legend_rows(series: Sequence[Series], placements: Sequence[str]) -> int:
    return len(series) + (len(placements) if len(placements) > 1 else 0)


def _y_from_zero(ax: Axes, top: float) -> None:
    """y from 0 (bandwidth and time are compared from zero) with headroom above the highest value."""
    ax.set_ylim(0, top * 1.1 if top > 0 else 1.0)


def png_of(fig: Figure) -> bytes:
    """The figure as PNG bytes (Agg, the report's DPI, no software stamp: the same bytes each time)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _placements(series: Sequence[Series], op: str, *, max_size: int | None = None) -> list[str]:
    return [p for p in ("out", "in") if any(_rows(s.run, op, p, max_size=max_size) for s in series)]


def _scaled(value: float, time_us: float, other_us: float | None) -> float:
    if other_us is None or other_us <= 0 or time_us <= 0:
        return value
    return value * time_us / other_us


def _size_plot(
    series: Sequence[Series], op: str, *, metric: str, max_size: int | None = None
) -> tuple[Figure, Axes, str] | None:
    """busbw or time against size, every run and placement; the figure, its axes and how the
    per-rank range was drawn ("shaded", "bars" for single sizes, "" for none). None when no run
    has a row to draw."""
    placements = _placements(series, op, max_size=max_size)
    if not placements:
        return None
    fig, ax = _new_figure(_legend_rows(series, placements))
    sizes: list[int] = []
    drawn: list[tuple[int, str]] = []
    band = ""
    tops = {"out": 0.0, "in": 0.0}
    for i, s in enumerate(series):
        plotted = False
        for placement in placements:
            rows = _rows(s.run, op, placement, max_size=max_size)
            if not rows:
                continue
            x = [r.size_bytes for r in rows]
            sizes += x
            y = [r.busbw if metric == "busbw" else r.time_us for r in rows]
            style = _line_style(i, len(series), placement)
            if len(x) == 1 and style["marker"] is None:
                # One size: a line has nothing to join, so the in-place point needs a marker.
                style.update(marker=MARKERS[i % len(MARKERS)], markerfacecolor="none")
            ax.plot(x, y, **style)
            tops[placement] = max(tops[placement], *y)
            plotted = True
            if placement == "out" and _has_spread(rows):
                hi = _draw_spread(ax, rows, y, metric, COLORS[i % len(COLORS)])
                band = "bars" if len(x) == 1 and band in ("", "bars") else "shaded"
                tops["out"] = max(tops["out"], *hi)
        if plotted:
            drawn.append((i, s.label))
    _size_axis(ax, sizes)
    _style_axes(ax)
    _y_scale(ax, metric, tops)
    _legend(fig, drawn, placements)
    return fig, ax, band


def _draw_spread(
    ax: Axes, rows: Sequence[Row], y: Sequence[float], metric: str, color: str
) -> list[float]:
    """The range over ranks of out-of-place rows: a shaded band, an error bar for one size;
    returns its high edge."""
    x = [r.size_bytes for r in rows]
    if metric == "busbw":
        # busbw scales as 1/time: the slowest rank gives the low edge, the fastest the high.
        lo = [_scaled(r.busbw, r.time_us, r.time_us_max) for r in rows]
        hi = [_scaled(r.busbw, r.time_us, r.time_us_min) for r in rows]
    else:
        lo = [r.time_us if r.time_us_min is None else r.time_us_min for r in rows]
        hi = [r.time_us if r.time_us_max is None else r.time_us_max for r in rows]
    ax.fill_between(x, lo, hi, color=color, alpha=0.18, linewidth=0)
    if len(x) == 1:  # a band of one point has no width: an error bar instead
        ax.errorbar(
            x,
            y,
            yerr=[[y[0] - lo[0]], [hi[0] - y[0]]],
            fmt="none",
            ecolor=color,
            elinewidth=1.2,
            capsize=6,
        )
    return hi


def _y_scale(ax: Axes, metric: str, tops: dict[str, float]) -> None:
    """y from zero to the highest value drawn, or to out-of-place's when in-place is out of
    scale; a note where the plot would mislead."""
    if metric == "busbw" and 0 < tops["out"] * 3 < tops["in"]:
        # In-place can be a no-op (sendrecv or all_reduce on one rank): its busbw, orders of
        # magnitude above any link, would flatten every real line. Scale to out-of-place, say so.
        _y_from_zero(ax, tops["out"])
        ax.text(
            0.01,
            0.98,
            f"in-place reaches {tops['in']:,.0f} GB/s, above this scale",
            transform=ax.transAxes,
            ha="left",  # small sizes, where busbw is low: clear of the lines
            va="top",
            fontsize=9,
            color="#555555",
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.9},
        )
    else:
        _y_from_zero(ax, float(ax.dataLim.y1))
    if metric == "busbw" and tops["out"] == 0 and tops["in"] == 0:
        # nccl-tests' busbw factor is 0 on one rank for most collectives: say why the plot is flat.
        ax.text(
            0.5,
            0.5,
            "bus bandwidth is 0 at every size (on one rank no byte crosses a link):\n"
            "the time plot and algbw in the results file still compare runs",
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=10,
            color="#555555",
        )


def _named(op: str, variant: str) -> str:
    """ "all_reduce" or "all_reduce (float sum)": how titles name what a plot shows."""
    return f"{op} ({variant})" if variant else op


def _slug(kind: str, op: str, variant: str) -> str:
    return "-".join([kind, op, *variant.split()])


def busbw_plot(series: Sequence[Series], op: str, *, variant: str = "") -> Plot | None:
    """Bus bandwidth vs size for one op, every run overlaid; None when no run has the op."""
    require_matplotlib()
    made = _size_plot(series, op, metric="busbw")
    if made is None:
        return None
    fig, ax, band = made
    what = _named(op, variant)
    ax.set_ylabel("bus bandwidth (GB/s)")
    note = f"; {band}: fastest..slowest rank" if band else ""
    ax.set_title(f"{what}: bus bandwidth vs message size{note}", loc="left", fontsize=12)
    title = f"{what}: bus bandwidth (GB/s) vs message size"
    return Plot(_slug("busbw", op, variant), op, title, png_of(fig), variant)


def latency_plot(
    series: Sequence[Series], op: str, *, max_bytes: int = SMALL_BYTES, variant: str = ""
) -> Plot | None:
    """Time per op vs size for messages up to `max_bytes`; None when no run has such rows."""
    require_matplotlib()
    made = _size_plot(series, op, metric="time", max_size=max_bytes)
    if made is None:
        return None
    fig, ax, band = made
    what = _named(op, variant)
    ax.set_ylabel("time per op (µs)")
    note = f"; {band}: fastest..slowest rank" if band else ""
    ax.set_title(
        f"{what}: time for small messages (≤ {size_label(max_bytes)}){note}",
        loc="left",
        fontsize=12,
    )
    return Plot(
        _slug("latency", op, variant),
        op,
        f"{what}: time per op (µs) for messages up to {size_label(max_bytes)}",
        png_of(fig),
        variant,
    )


def spread_plot(series: Sequence[Series], op: str, *, variant: str = "") -> Plot | None:
    """Per-rank spread, (slowest - fastest) / time in %, out-of-place; None without min/max."""
    require_matplotlib()
    per_run = []
    for i, s in enumerate(series):
        rows = [
            r
            for r in _rows(s.run, op, "out")
            if r.time_us_min is not None and r.time_us_max is not None and r.time_us > 0
        ]
        if rows:
            per_run.append((i, s.label, rows))
    if not per_run:
        return None
    fig, ax = _new_figure(len(per_run))
    sizes: list[int] = []
    for i, _label, rows in per_run:
        x = [r.size_bytes for r in rows]
        sizes += x
        y = [100.0 * (_f(r.time_us_max) - _f(r.time_us_min)) / r.time_us for r in rows]
        ax.plot(x, y, **_line_style(i, len(series), "out"))
    _size_axis(ax, sizes)
    _style_axes(ax)
    _y_from_zero(ax, float(ax.dataLim.y1))
    ax.set_ylabel("slowest − fastest rank (% of time)")
    missing = len(series) - len(per_run)
    note = f" ({missing} run{'s' if missing > 1 else ''} without per-rank times)" if missing else ""
    what = _named(op, variant)
    ax.set_title(f"{what}: per-rank spread, out-of-place{note}", loc="left", fontsize=12)
    _legend(fig, [(i, label) for i, label, _ in per_run], ["out"])
    return Plot(
        _slug("spread", op, variant),
        op,
        f"{what}: per-rank spread, (slowest − fastest rank time) / time, %",
        png_of(fig),
        variant,
    )


def _f(x: float | None) -> float:
    return 0.0 if x is None else x


def variant_of(row: Row) -> str:
    """A row's dtype and reduction as a label ("float sum", "bfloat16", ""), for runs that hold
    several (nccl-tests -d all / -o all)."""
    return " ".join(x for x in (row.dtype, row.redop) if x and x != "none")


def variants(series: Sequence[Series], op: str) -> list[str]:
    """The dtype/redop variants the runs hold for `op`, in first-seen order."""
    seen: dict[str, None] = {}
    for s in series:
        for r in s.run.rows:
            if r.op == op:
                seen.setdefault(variant_of(r), None)
    return list(seen)


def all_plots(series: Sequence[Series]) -> list[Plot]:
    """Every plot for these runs: per op (in first-seen order) busbw, small-message time, spread;
    per op and dtype/redop when the runs hold several (one plot per dtype of a -d all run)."""
    require_matplotlib()
    ops: dict[str, None] = {}
    for s in series:
        for op in s.run.ops():
            ops.setdefault(op, None)
    plots: list[Plot] = []
    for op in ops:
        kinds = variants(series, op)
        for variant in kinds if len(kinds) > 1 else [""]:
            part = (
                [
                    Series(
                        s.label,
                        Run(
                            meta=s.run.meta,
                            rows=[r for r in s.run.rows if variant_of(r) == variant],
                        ),
                    )
                    for s in series
                ]
                if variant
                else list(series)
            )
            for make in (busbw_plot, latency_plot, spread_plot):
                p = make(part, op, variant=variant)
                if p is not None:
                    plots.append(p)
    return plots


__all__ = [
    "COLORS",
    "SMALL_BYTES",
    "Plot",
    "Series",
    "all_plots",
    "busbw_plot",
    "latency_plot",
    "png_of",
    "require_matplotlib",
    "size_label",
    "spread_plot",
    "variant_of",
    "variants",
]
