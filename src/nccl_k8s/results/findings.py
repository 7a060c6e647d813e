"""What a diagnosis says (`Finding`), what every diagnosis rule reads (`Facts`), and how a rule
declares itself (`Rule`, one entry of the registry in `nccl_k8s.results.rules`, naming each
`Code` it may emit).

The reader (`nccllog`) extracts facts and judges nothing; `diagnose` adds what they imply (nodes,
whether a network was needed, each rank's fabric, GPUDirect RDMA) and runs every rule of the
registry in turn; each rule turns facts into findings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from nccl_k8s.results.fabrics import Fabric
from nccl_k8s.results.nccllog import LineInterest, NcclLine, ParsedLog, RankReport, TorchEvent

Severity = Literal["info", "warning", "error"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")


@dataclass
class Finding:
    severity: Severity
    #: Stable identifier for tests and scripts, e.g. "socket-fallback".
    code: str
    message: str
    hint: str = ""
    #: The ranks (or host:pid [dev] keys when the rank is unknown) it applies to.
    ranks: list[str] = field(default_factory=list)
    #: What in the log it stands for: NCCL messages (a WARN's text, an error trace) or lines. A
    #: line holding one of them is explained by this finding; not part of the diagnosis's JSON.
    evidence: list[str] = field(default_factory=list, repr=False)


@dataclass(frozen=True)
class Code:
    """A finding code a rule may emit, as docs/diagnosis.md lists it."""

    #: The code, or a family's pattern such as "expect-<fabric>".
    code: str
    severities: tuple[Severity, ...]
    #: One line: when the rule emits it.
    meaning: str
    #: The docs' severity column, where the severities alone say too little ("error with ...").
    severity_note: str = ""
    #: The codes a family stands for; () for a single code.
    family: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The codes a finding may carry under this entry."""
        return self.family or (self.code,)


@dataclass
class Facts:
    """What every rule reads: the parsed log, what it implies, and the findings of the rules
    before this one in the registry."""

    log: ParsedLog
    #: Nodes the communicator spans, when the log says (nNodes, several hosts, or one host).
    nodes: int | None
    #: How `nodes` was known: "nNodes", "N hosts", "one host, one process, ...", or "".
    nodes_evidence: str
    #: Whether any byte had to cross a network: False for one node, None when the log cannot tell.
    network_needed: bool | None
    #: Per rank (RankReport.key): what carried its inter-node traffic ("ib", "socket", ...).
    fabrics: dict[str, str | None]
    #: The ranks with NET connections.
    net_ranks: list[RankReport]
    #: GPUDirect RDMA on RDMA connections: True, False, or None when no such connection was seen.
    gdr: bool | None
    #: Whether any rank is in a multi-node NVLink domain.
    mnnvl: bool
    expect_fabric: Fabric | None = None
    found: list[Finding] = field(default_factory=list)

    @property
    def reports(self) -> list[RankReport]:
        return self.log.reports

    @property
    def lines(self) -> list[NcclLine]:
        return self.log.lines

    @property
    def torch_events(self) -> list[TorchEvent]:
        return self.log.torch_events


@dataclass(frozen=True)
class Rule:
    """One diagnosis rule: the codes it may emit and the function that reads the facts."""

    name: str
    codes: tuple[Code, ...]
    check: Callable[[Facts], list[Finding]]
    #: The lines of the log it reads (`Facts.lines`); a rule that reads none leaves it empty,
    #: and the reader then need not keep a line for it.
    reads: LineInterest = field(default_factory=LineInterest)

    def declares(self, finding: Finding) -> bool:
        """Whether this rule declared the finding's code with its severity."""
        return any(finding.code in c.names and finding.severity in c.severities for c in self.codes)


def ranks_of(reports: Iterable[RankReport]) -> list[str]:
    return [r.label for r in reports]


def where_of(reports: Iterable[RankReport]) -> str:
    """ "rank 3 on host node-b, rank 5 on host node-c": who, and where to look."""
    return ", ".join(
        f"{r.label} on host {r.host}" if r.host and r.rank is not None else r.label for r in reports
    )


def traces_of(reports: Iterable[RankReport], who: Iterable[RankReport]) -> list[str]:
    """The error traces (`file:line -> code`) the processes of `who` printed, on any GPU: what a
    finding about their WARNs stands for too."""
    procs = {(r.host, r.pid) for r in who}
    return [t for r in reports if (r.host, r.pid) in procs for t in r.error_traces]


def seen_by(r: RankReport) -> str:
    """Who printed it: rank, host and GPU, as far as the log says."""
    parts = [r.label] if r.rank is not None else []
    if r.host:
        parts.append(f"host {r.host}")
    if r.cuda_dev is not None:
        parts.append(f"GPU {r.cuda_dev}")
    if r.rank is None and r.launcher_rank is not None:
        parts.append(f"MPI rank {r.launcher_rank}")
    return " ".join(parts) if parts else r.key


__all__ = [
    "SEVERITIES",
    "Code",
    "Facts",
    "Finding",
    "Rule",
    "Severity",
    "ranks_of",
    "seen_by",
    "traces_of",
    "where_of",
]
