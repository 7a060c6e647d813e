"""What users paste around nccl-tests' own lines, and how to get those lines back.

Launchers and collectors prefix every line (Open MPI's `[1,0]<stdout>:`, `srun -l`'s ` 0: `,
`[155] `, `kubectl logs --timestamps`/`--prefix`, Ray's `(head, rank=0, pid=3808) `), rendered
markdown drops the leading `#` of header and footer lines or escapes it (`\\#`), a markdown pipe
table puts `|` between cells; and the run's own failure line (`Test NCCL failure ...`, TESTCHECK's
` .. host pid N: Test failure ...`) is worth keeping. Used by the nccl-tests reader and the NCCL
log reader alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nccl_k8s.results.layouts import undecorated

# nccl-tests' own failure report: "host: Test NCCL failure common.cu:392 'unhandled ...'",
# "Test CUDA failure ...", NCCL 1's "NCCL failure all_reduce.cu:95 '...'". It may follow a row
# that was being printed when the run died.
_FAILURE = re.compile(
    r"(?:(?P<host>[\w.\-]+): )?(?P<msg>(?:Test )?(?:NCCL|CUDA) failure \S+:\d+ .*?)\s*$"
)
# TESTCHECK's relay of a failed step (src/common.h): " .. %s pid %d: Test failure %s:%d" (2.13+;
# before, without "pid %d"). The only line a data-check failure (#wrong > 0) leaves.
_RELAY = re.compile(r"^\.\. (?P<host>[\w.\-]+(?: pid \d+)?): (?P<msg>Test failure \S+:\d+)")

#: An ISO-8601 timestamp (`kubectl logs --timestamps`, CloudWatch), anywhere in a line.
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?")
#: Open MPI's --tag-output prefix, `[jobid,rank]<stdout>:` (every MPIJob launcher's log).
OMPI_TAG = re.compile(r"^\[\d+,(?P<rank>\d+)\]<std(?:out|err)>:")

# Per-line prefixes added by launchers and collectors, stripped (repeatedly) before anything else.
_PREFIXES = (
    OMPI_TAG,
    re.compile(rf"^{TIMESTAMP.pattern} "),  # --timestamps
    re.compile(r"^\[pod/[^\]\s]+\] "),  # kubectl logs --prefix
    re.compile(r"^\s*\d{1,6}:(?: |$)"),  # srun -l
    re.compile(r"^\[\d{1,6}\] "),  # mpirun -prepend-rank (MPICH, Intel MPI), horovodrun
    # Ray's worker log prefix, also SkyPilot's: "(pid=3808) ", "(MyActor pid=3808, ip=10.0.0.1) ",
    # "(head, rank=0, pid=3808) ", "(worker1, rank=1, pid=2769, ip=10.100.10.12) ".
    re.compile(r"^\((?:[\w.\-]+,? )?(?:rank=\d+, )?pid=\d+(?:, ip=[\w.:\-]+)?\) "),
)
# Header and footer lines as rendered markdown shows them, without their leading '#' (GitHub
# pages, READMEs): read as if the '#' were there. Each is a form no other line takes.
_BARE = re.compile(
    r"^(?:nccl-tests version |Collective test (?:starting|concluded):|Out of bounds values\s*:"
    r"|Avg bus bandwidth\s*:|Rank\s+\d+\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+\S+\s+device\s"
    r"|(?:size|bytes)\s+(?:count|N)\s+type\s)"
)


# nccl-tests' device list: `#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s` (older ones
# without Group, or without Pid).
_LISTED = re.compile(
    r"^#\s+Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+(?P<pid>\d+)\s+)?on\s+"
    r"(?P<host>\S+)\s+device\s+(?P<dev>\d+)"
)


@dataclass(frozen=True)
class ListedRank:
    """A rank of nccl-tests' device list (`#  Rank 1 Group 0 Pid 4766 on GENOA-06 device 1`)."""

    rank: int
    host: str
    #: None in lists older than the `Pid` column.
    pid: int | None
    device: int


def listed_rank(line: str) -> ListedRank | None:
    """The rank a line of nccl-tests' device list names (behind any launcher prefix)."""
    m = _LISTED.match(strip_prefixes(line).strip())
    if m is None:
        return None
    pid = m.group("pid")
    return ListedRank(
        int(m.group("rank")), m.group("host"), None if pid is None else int(pid), int(m["dev"])
    )


def strip_prefixes(line: str) -> str:
    """The line as the program printed it, without launcher and collector prefixes."""
    for _ in range(4):
        for rx in _PREFIXES:
            m = rx.match(line)
            if m:
                line = line[m.end() :]
                break
        else:
            return line
    return line


def failure_in(line: str) -> str | None:
    """nccl-tests' own report of the failure that ended the run, when `line` holds one:
    "GENOA-06: Test NCCL failure common.cu:392 'unhandled cuda error ...'"."""
    if "NCCL INFO" in line or "NCCL WARN" in line:
        return None
    if m := _RELAY.match(line.strip()):
        return f"{m.group('host')}: {m.group('msg')}"
    m = _FAILURE.search(line)
    if m is None:
        return None
    host = m.group("host")
    return (f"{host}: " if host else "") + m.group("msg")


def with_hash(s: str) -> str:
    """A stripped header or footer line with its leading '#', as nccl-tests printed it (markdown
    escapes it as `\\#` or drops it); any other line unchanged."""
    if s.startswith("\\#"):
        return s[1:]
    if _BARE.match(s):
        return "# " + s
    return s


# nccl-tests' footer re-typed as a list item or a sentence of a report, its value emphasised:
# `- Out-of-bounds values: `0` (OK)`, `- Average bus bandwidth: **`836.792 GB/s`**`.
_FOOTER_LABELS = {
    "out of bounds values": "Out of bounds values",
    "out-of-bounds values": "Out of bounds values",
    "avg bus bandwidth": "Avg bus bandwidth",
    "average bus bandwidth": "Avg bus bandwidth",
}
_FOOTER_LINE = re.compile(r"^(?:[-*+]\s+)?(?P<label>[^:]+):(?P<value>.+)$")
_OOB_VALUE = re.compile(r"^(?P<n>\d+)(?:\s+\(?(?P<ok>OK|FAILED)\)?)?$")
_AVG_VALUE = re.compile(r"^(?P<bw>\d+(?:\.\d*)?)(?:\s*GB/s)?$")


def labelled_footer(s: str) -> str | None:
    """nccl-tests' footer line (`# Out of bounds values : 0 OK`, `# Avg bus bandwidth : 836.792`)
    that a stripped line re-types with its label in words and its value emphasised, or None when
    the line is not one: the value must be the footer's alone (a number, its unit, OK/FAILED)."""
    m = _FOOTER_LINE.match(s)
    if m is None:
        return None
    label = _FOOTER_LABELS.get(re.sub(r"[*_`]", "", m.group("label")).strip().lower())
    if label is None:
        return None
    words = undecorated(m.group("value").strip().strip("*_").strip()).split()
    value = " ".join(undecorated(w) for w in words)
    if label == "Out of bounds values" and (v := _OOB_VALUE.match(value)):
        return f"# {label} : {v.group('n')} {v.group('ok') or ''}".rstrip()
    if label == "Avg bus bandwidth" and (v := _AVG_VALUE.match(value)):
        return f"# {label} : {v.group('bw')}"
    return None


# A reStructuredText interpreted-text role, `:mark:`...`` (what pandoc makes of text highlighted in a
# Word document, where a vendor's guide pastes an output line by line), its text running on over
# the lines a converter wrapped it at.
_ROLE = re.compile(r":[A-Za-z][\w+.-]*:`(?P<text>(?:[^`\\]|\\.)+)`")
_ROLE_START = re.compile(r"^\s*:[A-Za-z][\w+.-]*:`")
_ROLES_ONLY = re.compile(rf"\s*(?:{_ROLE.pattern}\s*)+")


def role_paragraphs(lines: list[str]) -> list[str]:
    """The lines, with each reStructuredText paragraph made of role spans alone read as the one
    line it re-types: a row in a span (`:mark:` then the row in backquotes), wrapped onto a second
    line, or with a cell in a span of its own, becomes the spans' texts, wrapping and escapes
    undone. That line stands on the paragraph's first line and its other lines are left empty, so
    that a line number still names the line of the file. Any other paragraph unchanged."""
    out = list(lines)
    i = 0
    while i < len(out):
        if not out[i].strip():
            i += 1
            continue
        end = i
        while end + 1 < len(out) and out[end + 1].strip():
            end += 1
        if _ROLE_START.match(out[i]):
            para = "\n".join(out[i : end + 1])
            if _ROLES_ONLY.fullmatch(para):
                texts = (re.sub(r"\\(.)", r"\1", m.group("text")) for m in _ROLE.finditer(para))
                out[i : end + 1] = [" ".join(" ".join(texts).split()), *[""] * (end - i)]
        i = end + 1
    return out


def pipe_row(s: str) -> str:
    """A row of a markdown pipe table (`1024 | 512 | half | sum | ...`) as nccl-tests printed it;
    any other line unchanged."""
    cells = [c.strip() for c in s.strip("|").split("|")]
    if len(cells) > 2 and all(c and " " not in c for c in cells):
        return " ".join(cells)
    return s


__all__ = [
    "OMPI_TAG",
    "TIMESTAMP",
    "ListedRank",
    "failure_in",
    "labelled_footer",
    "listed_rank",
    "pipe_row",
    "role_paragraphs",
    "strip_prefixes",
    "with_hash",
]
