"""The domain-by-domain matrix of a `nodes check` (its `-o json` saved to a file) in `report`:
a heatmap of the best busbw the pair tests measured between every two topology domains and
inside each, and the same numbers as a table (docs/topology.md, "Pairing in nodes check").

A run's busbw is one number for all its ranks, so a matrix by domain can only come from tests
that each sit in one or two domains: the pair tests of `nodes check`. The file is read as
`nodes check -o json` writes it (k8s.nodes._checked, its `topology`: `levels`, `pairing`,
`domains` node -> domain, `matrix` [{a, b, busbw}] with a <= b, `slow_domain_links`); a pair of
domains no test measured is an empty cell. matplotlib only for the heatmap.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from nccl_k8s.errors import UsageError

#: The flag that names the file, as messages name it.
FLAG = "--nodes-check"
#: The heatmap's file name (DIR/<name>.png) and anchor in the page.
PLOT_NAME = "domain-matrix"


@dataclass(frozen=True)
class DomainMatrix:
    """What one `nodes check` measured between its topology domains."""

    source: str
    levels: tuple[str, ...]
    pairing: str
    names: list[str]
    """Every domain of the check's candidates, sorted."""
    best: Mapping[tuple[str, str], float]
    """(a, b) -> the best busbw (GB/s) of the tests between them, both orders; absent: none."""
    slow_links: list[str]
    """The check's verdicts on links between domains, as it worded them."""

    def cell(self, a: str, b: str) -> str:
        """The value as the table shows it (nodes check's own `.3g`), "" where untested."""
        value = self.best.get((a, b))
        return "" if value is None else f"{value:.3g}"


def _bad(path: Path, why: str) -> UsageError:
    return UsageError(
        f"{FLAG} {path}: {why}: expected the JSON that `nccl-k8s nodes check -o json` writes",
        key="nodes_check",
    )


def _topology(path: Path) -> Mapping[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise _bad(path, f"cannot read: {e.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise _bad(path, "not JSON") from None
    if not isinstance(doc, dict) or "topology" not in doc:
        raise _bad(path, "no `topology` key")
    topology = doc["topology"]
    if topology is None:
        raise UsageError(
            f"{FLAG} {path}: the check's nodes were in fewer than two topology domains (its "
            "`topology` is null): no domain matrix to draw",
            key="nodes_check",
        )
    if not isinstance(topology, dict) or not isinstance(topology.get("matrix"), list):
        raise _bad(path, "`topology` has no `matrix` list")
    return topology


def load_domain_matrix(path: Path) -> DomainMatrix:
    """The matrix of a saved `nodes check -o json`; UsageError (one line) for any other file."""
    t = _topology(path)
    best: dict[tuple[str, str], float] = {}
    try:
        for m in t["matrix"]:
            a, b, busbw = str(m["a"]), str(m["b"]), float(m["busbw"])
            best[(a, b)] = best[(b, a)] = busbw
        domains = {str(d) for d in (t.get("domains") or {}).values()}
        links = [str(link["why"]) for link in t.get("slow_domain_links") or []]
    except (KeyError, TypeError, ValueError, AttributeError):
        raise _bad(path, "a `matrix` entry without a, b and a number busbw") from None
    names = sorted(domains | {a for a, _ in best})
    levels = tuple(str(x) for x in t.get("levels") or ())
    return DomainMatrix(str(path), levels, str(t.get("pairing", "")), names, best, links)


def heatmap_png(dm: DomainMatrix) -> bytes:
    """The matrix as a heatmap (PNG): domains on both axes, each measured cell annotated with
    its busbw, untested pairs left blank."""
    import numpy as np
    from matplotlib.figure import Figure

    from nccl_k8s.results.plots import png_of

    n = len(dm.names)
    grid = np.full((n, n), np.nan)
    for i, a in enumerate(dm.names):
        for j, b in enumerate(dm.names):
            if (a, b) in dm.best:
                grid[i, j] = dm.best[(a, b)]
    side = 2.5 + 0.7 * n
    fig = Figure(figsize=(side + 1.2, side))
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", vmin=0)
    fig.colorbar(image, ax=ax, label="best busbw (GB/s)")
    ax.set_xticks(range(n), dm.names, rotation=45, ha="right")
    ax.set_yticks(range(n), dm.names)
    top = float(np.nanmax(grid)) if not np.isnan(grid).all() else 0.0
    for i, a in enumerate(dm.names):
        for j, b in enumerate(dm.names):
            text = dm.cell(a, b)
            if text:
                dark = grid[i, j] < 0.6 * top
                ax.text(j, i, text, ha="center", va="center", color="white" if dark else "black")
    ax.set_title(f"nodes check: best busbw by domain ({', '.join(dm.levels)})", fontsize=9)
    fig.tight_layout()
    return png_of(fig)


def matrix_html(dm: DomainMatrix) -> str:
    """The numbers of the heatmap as an HTML table (rows and columns the domains)."""
    head = "".join(f"<th>{escape(b)}</th>" for b in dm.names)
    rows = [f"<tr><th>best busbw (GB/s)</th>{head}</tr>"]
    for a in dm.names:
        cells = "".join(f'<td class="num">{dm.cell(a, b) or "-"}</td>' for b in dm.names)
        rows.append(f"<tr><th>{escape(a)}</th>{cells}</tr>")
    links = "".join(f"<li>{escape(why)}</li>" for why in dm.slow_links)
    return (
        f"<p>{escape(dm.source)}: pairing {escape(dm.pairing)} by "
        f"{escape(', '.join(dm.levels))}; the best busbw of the pair tests between two domains "
        "and inside each (- : no test measured it).</p>"
        f'<table class="domains">{"".join(rows)}</table>'
        + (f"<p>Slow links between domains:</p><ul>{links}</ul>" if links else "")
    )


__all__ = ["FLAG", "PLOT_NAME", "DomainMatrix", "heatmap_png", "load_domain_matrix", "matrix_html"]
