"""Results as nccl-tests prints them: one table per op (and dtype/redop/root), out and in
placements side by side, then the op's summary. Used by `results`, which shows a deployed run
in the form the user knows."""

from __future__ import annotations

from typing import Any

from nccl_k8s.bench.report import Cell, TableRow, footer_lines, row_line, table_header
from nccl_k8s.results.comparable import device_names, domains, spans
from nccl_k8s.results.schema import Row, Run, RunMeta


def what_ran(meta: RunMeta) -> str:
    """One line above the tables: the backend, how many devices of which name, and the fabric,
    so that CPU numbers are never read as a GPU fabric's (gloo's devices are CPU processes)."""
    gloo = meta.backend == "gloo"
    count = len(meta.devices) or meta.world_size
    unit = "CPU process" if gloo else "GPU"
    if count != 1:
        unit += "es" if gloo else "s"
    name = " / ".join(device_names(meta))
    fabric = meta.fabric or ("TCP (gloo, no NCCL)" if gloo else "unknown (no NCCL network lines)")
    return (
        f"# backend {meta.backend or 'unknown'}, {'?' if count is None else count} {unit}"
        + (f" ({name})" if name else "")
        + f", fabric {fabric}"
    )


def heading(meta: RunMeta) -> list[str]:
    """The lines above the tables: what ran, for a partial run why it is partial, and for a run
    over several topology domains which ranks ran in each."""
    lines = [what_ran(meta)]
    if meta.partial:
        lines.append(f"# PARTIAL: {meta.failure or 'the run stopped before its sweep ended'}")
    return lines + domain_lines(meta)


def domain_lines(meta: RunMeta) -> list[str]:
    """Which ranks (and nodes) ran in each topology domain (results.comparable.domains), in
    rank order; nothing when the ranks span one domain or none is known."""
    by = domains(meta)
    if len(by) < 2:
        return []
    levels = next(list(d.domain) for d in meta.devices if d.domain)
    lines = [f"# ranks by topology domain ({'/'.join(levels)}):"]
    lines += [f"#   {k}: ranks {spans(r)} on {', '.join(n)}" for k, (r, n) in by.items()]
    return lines


def nccl_tests_table(run: Run) -> list[str]:
    """The run's rows as nccl-tests prints them: one table per op (and dtype/redop/root), out
    and in placements side by side, then the op's summary."""

    def cell(row: Row) -> Cell:
        nan = float("nan")
        return Cell(
            time_us=row.time_us,
            algbw=row.algbw,
            busbw=row.busbw,
            wrong=row.wrong,
            time_us_min=row.time_us_min or nan,
            time_us_max=row.time_us_max or nan,
        )

    out: list[str] = []
    for op in run.ops():
        rows = [r for r in run.rows if r.op == op]
        keys: dict[tuple[Any, ...], dict[str, Any]] = {}
        for r in rows:
            keys.setdefault((r.size_bytes, r.dtype, r.redop, r.root), {})[r.placement] = r
        out.append(f"# {op}")
        out += table_header()
        for (size, dtype, redop, root), places in keys.items():
            o = places.get("out") or places["in"]
            i = places.get("in") or o
            out.append(
                " "
                + row_line(
                    TableRow(
                        op=op,
                        size=size,
                        count=int(o.count or 0),
                        dtype=str(dtype or "-"),
                        redop=str(redop or "-"),
                        root=int(root if root is not None else -1),
                        out=cell(o),
                        inp=cell(i),
                    )
                )
            )
        summary = next((s for s in run.summaries if s.op == op), None)
        if summary is not None and summary.avg_busbw is not None:
            out += footer_lines(
                out_of_bounds=int(summary.out_of_bounds or 0),
                avg_busbw=summary.avg_busbw,
                min_busbw=None,
                program=op,
            )[:2]
        out.append("#")
    return out
