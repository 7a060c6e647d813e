"""The column layout of an nccl-tests table: read from its `#  size  count  type ...` header, or,
when a paste has no header (`tail -n 20` of an output: rows and the footer), from a row itself.

The columns changed over nccl-tests' history (see `nccltests`), but a row still says which it
has: size and count are integers, the type is a type name, a redop is a word, a root an integer,
then per placement `time algbw busbw` and a check column: `#wrong` (an integer or `N/A`) or the
older `error` (`%5.0le`: `0e+00`, `1e-07*`). What a row cannot say: whether a redop column was
printed empty (nccl-tests 2.8-2.10 left it blank for the collectives that reduce nothing); such
a row reads as one without a redop column, and its rows are the same (no redop).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nccl_k8s.results.collectives import DTYPE_BYTES

#: The per-placement column groups nccl-tests prints, in order.
GROUP = ("time", "algbw", "busbw")
CHECK_COLUMNS = {"#wrong", "error", "res"}
# NCCL 1's column names, as the later ones.
_LEAD_ALIASES = {"bytes": "size", "N": "count", "op": "redop"}
_FLOAT = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?")
_ERROR = re.compile(r"\d(?:\.\d+)?e[-+]\d+\*?")
_WRONG = re.compile(r"\d+|N/A")


@dataclass
class Layout:
    """The column layout of a table."""

    lead: list[str]  # e.g. ["size", "count", "type", "redop", "root"]
    check: str  # "#wrong", "error" or "res"
    groups: int
    #: Read from a row, not from a header: the columns are what the row's values imply.
    from_row: bool = False
    #: Bytes per unit of the size column: 1, or 2**30 where a pasted table labels it `(GB)`.
    size_unit: int = 1

    @property
    def width(self) -> int:
        return len(self.lead) + 4 * self.groups

    def describe(self) -> str:
        per = " ".join([*GROUP, self.check])
        return f"{' '.join(self.lead)}, then {per} x{self.groups}"


def layout_from_header(line: str) -> Layout | None:
    toks = line.lstrip("#").split()
    if len(toks) < 6 or toks[0] not in ("size", "bytes") or "time" not in toks:
        return None
    first = toks.index("time")
    lead, rest = [_LEAD_ALIASES.get(t, t) for t in toks[:first]], toks[first:]
    if len(rest) % 4 or not rest:
        return None
    kinds = set()
    for g in range(len(rest) // 4):
        grp = rest[4 * g : 4 * g + 4]
        if tuple(grp[:3]) != GROUP:
            return None
        kinds.add(grp[3])
    if len(kinds) != 1 or not kinds <= CHECK_COLUMNS:
        return None
    return Layout(lead, kinds.pop(), len(rest) // 4)


# A markdown pipe table whose header labels nccl-tests' columns in words, as users re-type an
# output for a report: `| Message Size (GB) | Count (elements) | Type | RedOp | Out-of-place time
# (us) | Out-of-place algbw (GB/s) | ... | In-place #wrong |`. The label (emphasis, the placement
# before it and the unit in parentheses aside) names the column; the units must be nccl-tests'
# (time in us, bandwidths in GB/s), but for the size, which may be counted in KB, MB or GB: a
# power of two, as nccl-tests' sizes are (its `-b 1G` is 2**30 bytes; 268435456 floats read
# "1" in such a table).
_LABEL = re.compile(r"^(?P<name>[^(]*?)\s*(?:\((?P<unit>[^)]*)\))?$")
_PLACEMENT = re.compile(r"^(?:out[- ]of[- ]place|in[- ]place)\s+")
_LABELS = {
    "size": "size",
    "message size": "size",
    "bytes": "size",
    "count": "count",
    "type": "type",
    "dtype": "type",
    "redop": "redop",
    "root": "root",
    "time": "time",
    "algbw": "algbw",
    "busbw": "busbw",
    "#wrong": "#wrong",
    "wrong": "#wrong",
    "error": "error",
}
_UNITS = {
    "size": {
        "": 1,
        "b": 1,
        "kb": 1 << 10,
        "kib": 1 << 10,
        "mb": 1 << 20,
        "mib": 1 << 20,
        "gb": 1 << 30,
        "gib": 1 << 30,
    },
    "time": {"": 1, "us": 1},
    "algbw": {"": 1, "gb/s": 1},
    "busbw": {"": 1, "gb/s": 1},
    "count": {"": 1, "elements": 1},
}


def layout_from_labels(line: str) -> Layout | None:
    """The layout a pasted pipe table's labelled header names (see _LABELS), or None when the
    line is not one: every cell must name an nccl-tests column, in nccl-tests' order."""
    s = line.strip()
    if not (s.startswith("|") and s.endswith("|")):
        return None
    names, placements, unit = [], [], 1
    for cell in s.strip("|").split("|"):
        m = _LABEL.match(undecorated(cell.strip()).lower())
        if m is None:
            return None
        if p := _PLACEMENT.match(m.group("name")):
            placements.append(p.group().strip()[:2])  # "ou" or "in"
        name = _LABELS.get(_PLACEMENT.sub("", m.group("name")).strip())
        units = _UNITS.get(name or "", {"": 1})
        factor = units.get((m.group("unit") or "").strip())
        if name is None or factor is None:
            return None
        if name == "size":
            unit = factor
        names.append(name)
    layout = layout_from_header("# " + " ".join(names))
    # Placements, where named, in nccl-tests' order: out-of-place, then in-place.
    if layout is None or placements not in ([], ["ou"] * 4 + ["in"] * 4, ["ou"] * 4):
        return None
    layout.size_unit = unit
    return layout


def layout_from_row(toks: list[str]) -> Layout | None:
    """The layout a complete nccl-tests row implies, or None when the tokens are not one."""
    if len(toks) < 7 or not (toks[0].isdigit() and toks[1].isdigit()):
        return None
    if toks[2] not in DTYPE_BYTES:
        return None
    lead, rest = ["size", "count", "type"], toks[3:]
    if rest[0].isalpha():
        lead.append("redop")
        rest = rest[1:]
    if len(rest) % 4 == 1 and rest[0].lstrip("-").isdigit():
        lead.append("root")
        rest = rest[1:]
    groups = len(rest) // 4
    if len(rest) % 4 or groups not in (1, 2):
        return None
    cells = [rest[4 * g : 4 * g + 4] for g in range(groups)]
    if not all(_FLOAT.fullmatch(t) for c in cells for t in c[:3]):
        return None
    checks = [c[3] for c in cells]
    if all(_WRONG.fullmatch(t) for t in checks):
        return Layout(lead, "#wrong", groups, from_row=True)
    if all(_ERROR.fullmatch(t) or t == "N/A" for t in checks):
        return Layout(lead, "error", groups, from_row=True)
    return None


_CELL = re.compile(r"[-+0-9.e]+\*?|N/A")


# A cell a user emphasised in a pasted table, in markdown (`**514.40**`, `*514.40*`, `__514.40__`,
# `~~514.40~~`, `` `514.40` ``, nested: `` **`514.40`** ``), HTML (`<b>514.40</b>`) or a
# reStructuredText role (`` :mark:`315.84` ``, pandoc's highlight): the value inside. A single
# trailing `*` alone is nccl-tests' own mark of an error past its threshold.
_DECORATED = re.compile(
    r"^(?:(?P<mark>\*{1,3}|_{1,3}|~~|`)(?P<cell>.+?)(?P=mark)"
    r"|<(?P<tag>b|strong|em|i|u|mark|code)>(?P<html>.+?)</(?P=tag)>"
    r"|:[A-Za-z][\w+.-]*:`(?P<role>[^`]+)`)$"
)


def undecorated(tok: str) -> str:
    """A cell without the emphasis a user gave it in a paste."""
    for _ in range(3):  # `***x***`, `` **`x`** ``, `<b>*x*</b>`
        m = _DECORATED.match(tok)
        if m is None:
            break
        tok = m.group("cell") or m.group("html") or m.group("role")
    return tok


def looks_numeric(toks: list[str]) -> bool:
    """Whether a line's words are a row's cells, bar the few words of its lead."""
    return sum(1 for t in toks if _CELL.fullmatch(t)) >= len(toks) - 3


def redop_left_blank(layout: Layout, toks: list[str]) -> bool:
    """Whether a row one column short of a header that names a redop column is a row whose redop
    was printed empty: nccl-tests before 2.11 passed "" as the redop name of the collectives that
    reduce nothing (alltoall, all_gather, ...), so the row lacks that one word. Only when nothing
    else fits: the type is a word and everything after it a number."""
    if "redop" not in layout.lead:
        return False
    at = layout.lead.index("redop")
    if at < 1 or layout.lead[at - 1] != "type" or not toks[at - 1].isalpha():
        return False
    return all(_CELL.fullmatch(t) for t in toks[at:])


__all__ = [
    "CHECK_COLUMNS",
    "GROUP",
    "Layout",
    "layout_from_header",
    "layout_from_labels",
    "layout_from_row",
    "looks_numeric",
    "redop_left_blank",
    "undecorated",
]
