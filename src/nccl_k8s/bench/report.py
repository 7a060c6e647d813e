"""Output in nccl-tests' form: header, table rows, footer; and our machine-readable lines.

The widths and number formats follow nccl-tests' printers so our table lines up with theirs
(../shared/data/nccl-tests/ holds real outputs): a value gets two decimals while it fits its
column, then one, then none, then an exponent. The result lines (prefix RESULT_PREFIX) carry the
same numbers unrounded, for collectors that read pod logs.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

#: Every machine-readable line starts with this, then one space, then one JSON object.
RESULT_PREFIX = "NCCL_K8S_RESULT"
#: Version of the result-line objects (field "v").
RESULT_VERSION = 1
#: A rank that gave up waiting prints one line with this prefix, one space and one JSON object:
#: {"v": 1, "rank": noticing rank, "culprit": rank or null, "host": culprit's hostname (a pod's
#: name), "pid": its pid or null, "reason": "..." (words for people), "kind": one of FAULT_KINDS
#: or null (what the culprit logic reads), "where": "op size placement phase", "noticed": what
#: the noticing rank saw, "timed_out": true when that was its own watchdog (no progress for -T),
#: false when a collective raised (then "noticed" is the error)}.
FAULT_PREFIX = "NCCL_K8S_FAULT"
#: The kinds of culprit a fault line names (its "kind"): its heartbeats stopped; it was alive
#: but busy outside the collective, behind, or the only rank, and made no progress; the
#: rendezvous store it hosts does not answer. nccl_k8s.errors.FailureReason has a member of
#: each value (a test holds them together: the engine cannot import it).
NO_HEARTBEAT = "no_heartbeat"
NO_PROGRESS = "no_progress"
STORE_LOST = "store_lost"
#: A rank whose pod asked for GPUs sees none (--gpus-requested): it names itself, at start.
NO_GPU = "no_gpu"
FAULT_KINDS = (NO_HEARTBEAT, NO_PROGRESS, STORE_LOST, NO_GPU)
#: Version of the fault-line object (field "v").
FAULT_VERSION = 1
#: Markers of a block of lines that is read only when complete: `NCCL_K8S_BEGIN <name> <n>`, the
#: n lines, `NCCL_K8S_END <name> <n>`. With several sweeps (--sweeps) rank 0 prints each sweep's
#: result lines as one RESULTS_BLOCK when the sweep ends, its own meta line first, so a sweep
#: reads on its own whatever log rotation took before it; the pod wrapper (k8s.rendering._wrapper) frames
#: a single sweep's lines the same way when the engine ends.
BLOCK_BEGIN = "NCCL_K8S_BEGIN"
BLOCK_END = "NCCL_K8S_END"
RESULTS_BLOCK = "results"


@dataclasses.dataclass(frozen=True)
class Cell:
    """One placement (out-of-place or in-place) of one row."""

    time_us: float
    algbw: float
    busbw: float
    wrong: int | None
    """Wrong elements summed over ranks; None where nccl-tests prints N/A (not checked)."""
    time_us_min: float
    time_us_max: float


@dataclasses.dataclass(frozen=True)
class TableRow:
    """One line of the nccl-tests table: a size with its out-of-place and in-place cells."""

    op: str
    size: int
    count: int
    dtype: str
    redop: str
    root: int
    out: Cell
    inp: Cell

    def cells(self) -> tuple[tuple[str, Cell], tuple[str, Cell]]:
        return (("out", self.out), ("in", self.inp))


def float_str(value: float, width: int) -> str:
    """nccl-tests' number format for a column of `width` characters: two decimals while the
    printed text fits, then one, then none, then an exponent, cut to the width (as its
    snprintf into a width + 1 buffer does), so a column never overflows, rounding included."""
    for spec in (".2f", ".1f", ".0f"):
        text = f"{value:{width}{spec}}"
        if len(text) <= width:
            return text
    return f"{value:{width}{'.1e' if width >= 7 else '.0e'}}"[:width]


def header_lines(
    *,
    version_line: str,
    program: str,
    config_line: str,
    device_lines: list[str],
    notes: list[str],
) -> list[str]:
    lines = [version_line, f"# Collective test starting: {program}", config_line, *notes, "#"]
    lines.append("# Using devices")
    lines.extend(device_lines)
    return lines


def table_header() -> list[str]:
    blank = ("", "", "", "", "")
    cols = "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}"
    first = cols.format(*blank) + "           out-of-place                       in-place          "
    names = cols.format("size", "count", "type", "redop", "root") + (
        "  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} ".format(
            "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"
        )
    )
    units = cols.format("(B)", "(elements)", "", "", "") + (
        "  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} ".format(
            "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""
        )
    )
    return ["#", first, names, units]


def row_line(row: TableRow) -> str:
    parts = [f"{row.size:12d}  {row.count:12d}  {row.dtype:>8}  {row.redop:>6}  {row.root:6d}"]
    for _, cell in row.cells():
        body = f"  {float_str(cell.time_us, 7)}  {float_str(cell.algbw, 6)}  {float_str(cell.busbw, 6)}"
        # nccl-tests prints the count with %6g: 1e+06 and up in exponent form.
        body += f"  {float(cell.wrong):6g}" if cell.wrong is not None else "    N/A"
        parts.append(body)
    return "".join(parts)


def footer_lines(
    *, out_of_bounds: int, avg_busbw: float, min_busbw: float | None, program: str
) -> list[str]:
    verdict = "" if min_busbw is None else ("FAILED" if avg_busbw < min_busbw else "OK")
    return [
        f"# {'Out of bounds values':<20} : {out_of_bounds} {'FAILED' if out_of_bounds else 'OK'}",
        f"# {'Avg bus bandwidth':<20} : {avg_busbw:g} {verdict}",
        "#",
        f"# Collective test concluded: {program}",
        "#",
    ]


def result_line(kind: str, payload: dict[str, Any]) -> str:
    body = {"v": RESULT_VERSION, "kind": kind, **payload}
    return f"{RESULT_PREFIX} {json.dumps(body, separators=(',', ':'), sort_keys=False)}"


def block_lines(name: str, lines: list[str]) -> list[str]:
    """`lines` framed as one block (BLOCK_BEGIN/BLOCK_END with the line count)."""
    return [f"{BLOCK_BEGIN} {name} {len(lines)}", *lines, f"{BLOCK_END} {name} {len(lines)}"]


def row_payloads(row: TableRow) -> list[dict[str, Any]]:
    """One result-line object per placement of a row."""
    out = []
    for placement, cell in row.cells():
        out.append(
            {
                "op": row.op,
                "dtype": row.dtype,
                "redop": row.redop,
                "root": row.root,
                "size": row.size,
                "count": row.count,
                "placement": placement,
                "time_us": cell.time_us,
                "algbw": cell.algbw,
                "busbw": cell.busbw,
                "wrong": cell.wrong,
                "time_us_min": cell.time_us_min,
                "time_us_max": cell.time_us_max,
            }
        )
    return out


def nccl_tests_json_row(row: TableRow, iters: int) -> dict[str, Any]:
    """A row in nccl-tests' -J layout (its field names and its odd '%6i' root string)."""

    def cell(c: Cell) -> dict[str, Any]:
        return {
            "time": c.time_us,
            "alg_bw": c.algbw,
            "bus_bw": c.busbw,
            "nwrong": float(c.wrong) if c.wrong is not None else None,
            "time_min": c.time_us_min,
            "time_max": c.time_us_max,
        }

    return {
        "op": row.op,
        "size": row.size,
        "count": row.count,
        "type": row.dtype,
        "redop": row.redop,
        "root": f"{row.root:6d}",
        "out_of_place": cell(row.out),
        "in_place": cell(row.inp),
        "actual_iterations": iters,
        "experiment_name": "",
    }


def fault_line(payload: dict[str, Any]) -> str:
    """FAULT_PREFIX, one space, the payload as one JSON object (field "v" first)."""
    body = {"v": FAULT_VERSION, **payload}
    return f"{FAULT_PREFIX} {json.dumps(body, separators=(',', ':'))}"


def parse_fault_line(line: str) -> dict[str, Any] | None:
    """The object of a fault line (anywhere in `line`, e.g. after a log prefix), or None when
    the line is not one, is cut off, or has another version."""
    at = line.find(FAULT_PREFIX + " ")
    if at < 0:
        return None
    try:
        obj = json.loads(line[at + len(FAULT_PREFIX) + 1 :].strip())
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or obj.get("v") != FAULT_VERSION:
        return None
    return obj


__all__ = [
    "BLOCK_BEGIN",
    "BLOCK_END",
    "FAULT_KINDS",
    "FAULT_PREFIX",
    "FAULT_VERSION",
    "NO_GPU",
    "NO_HEARTBEAT",
    "NO_PROGRESS",
    "RESULTS_BLOCK",
    "RESULT_PREFIX",
    "RESULT_VERSION",
    "STORE_LOST",
    "Cell",
    "TableRow",
    "block_lines",
    "fault_line",
    "float_str",
    "footer_lines",
    "header_lines",
    "nccl_tests_json_row",
    "parse_fault_line",
    "result_line",
    "row_line",
    "row_payloads",
    "table_header",
]
