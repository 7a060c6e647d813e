"""The registry of diagnosis rules.

Each rule is one entry (`Rule`): the finding codes it may emit, each with its severities and a
one-line meaning, and a function from the facts (`Facts`: the parsed log and what it implies) to
findings. `diagnose.analyse` runs them in the order of `RULES`; a rule may read the findings of
the rules before it (`Facts.found`). Adding a rule is a module here with its `Rule` and one line
in `RULES`; docs/diagnosis.md's table of codes is generated from `RULES` (`python -m
nccl_k8s.results.rules docs/diagnosis.md`) and a test fails when the two disagree.
"""

from __future__ import annotations

import functools

from nccl_k8s.fabrics import fabrics_table
from nccl_k8s.results.findings import Code, Rule
from nccl_k8s.results.nccllog import LineInterest
from nccl_k8s.results.rules.diag import DIAG
from nccl_k8s.results.rules.errors import RUN_FAILED, TORCH, WARNS
from nccl_k8s.results.rules.fabric import GDR, LIBIBVERBS, LOOPBACK, SOCKET
from nccl_k8s.results.rules.failsafe import FAILSAFE
from nccl_k8s.results.rules.gates import EXPECT
from nccl_k8s.results.rules.paths import PATHS
from nccl_k8s.results.rules.versions import VERSIONS

#: Every rule, in the order they run (a rule sees the findings of those before it).
RULES: tuple[Rule, ...] = (
    VERSIONS,
    LIBIBVERBS,
    SOCKET,
    LOOPBACK,
    GDR,
    PATHS,
    EXPECT,
    WARNS,
    TORCH,
    RUN_FAILED,
    DIAG,
    FAILSAFE,
)

#: The lines any rule reads: what a reader feeding the rules must keep of a log.
LINES_READ: LineInterest = functools.reduce(
    lambda a, b: a | b, (r.reads for r in RULES), LineInterest()
)

#: The generated block of docs/diagnosis.md lies between these lines.
BEGIN = "<!-- codes: generated from nccl_k8s.results.rules.RULES; do not edit by hand -->"
END = "<!-- end of codes -->"
#: And the fabric table's (nccl_k8s.fabrics) between these.
FABRICS_BEGIN = "<!-- fabrics: generated from nccl_k8s.fabrics.Fabric; do not edit by hand -->"
FABRICS_END = "<!-- end of fabrics -->"


def _severity(c: Code) -> str:
    if c.severity_note:
        return c.severity_note
    return ", ".join(f"**{s}**" if s == "error" else s for s in c.severities)


def codes_table() -> str:
    """The table of every code the rules may emit, as docs/diagnosis.md shows it."""
    rows = ["| code | severity | when |", "|---|---|---|"]
    rows += [f"| `{c.code}` | {_severity(c)} | {c.meaning} |" for rule in RULES for c in rule.codes]
    return "\n".join(rows)


def _with_block(doc: str, begin: str, end: str, table: str) -> str:
    start, stop = doc.find(begin), doc.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"no block between {begin!r} and {end!r} to put the table in")
    return doc[: start + len(begin)] + "\n" + table + "\n" + doc[stop:]


def with_codes_table(doc: str) -> str:
    """`doc` (docs/diagnosis.md) with the generated blocks replaced: the table of codes
    (between BEGIN and END) and the fabric table (FABRICS_BEGIN, FABRICS_END)."""
    doc = _with_block(doc, BEGIN, END, codes_table())
    return _with_block(doc, FABRICS_BEGIN, FABRICS_END, fabrics_table())


__all__ = [
    "BEGIN",
    "END",
    "FABRICS_BEGIN",
    "FABRICS_END",
    "RULES",
    "codes_table",
    "with_codes_table",
]
