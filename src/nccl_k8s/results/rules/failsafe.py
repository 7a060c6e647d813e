"""Rule: the fail-safe for lines nobody understood.

Every other rule reads what the reader understood; a new NCCL prints lines in new forms (2.29 puts
the function after `file:line`: `gin_host_gdaki.cc:431 (gdakiConnectQp) NCCL WARN DOCA failure 21`,
`transport.cc:NN (fn) -> 2`), a launcher adds a prefix nobody knows, a framework words its error its
own way. So this rule runs last and reads the raw lines the reader kept: any line that says NCCL
warned (`NCCL WARN`), or that an NCCL error happened (`NCCL error`, an ncclResult_t by name,
`unhandled cuda error`, a framework's exception about NCCL, an error trace `file:line ... -> code`
with codes 1-6), and that no finding of the rules before it stands for, is a finding: an
unexplained WARN a warning, an unexplained error an error (a WARN followed in its process by an
unexplained error trace is that error's cause, unless the reader saw NCCL handle that failure:
`Failed to initialize any GIN plugin` after the trace). It names the line, and the host and rank where the
line says them. NCCL lines the reader could not place on a process are counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nccl_k8s.results.findings import Code, Facts, Finding, Rule, Severity, seen_by
from nccl_k8s.results.nccllog import LineInterest, NcclLine, RankReport
from nccl_k8s.results.rules.errors import fatal_reason

_WARN = re.compile(r"\bNCCL (?:WARN|ABORT)\b")
#: ncclResult_t by name (nccl.h): what NCCL's calls return when they fail.
_RESULTS = {
    1: "ncclUnhandledCudaError",
    2: "ncclSystemError",
    3: "ncclInternalError",
    4: "ncclInvalidArgument",
    5: "ncclInvalidUsage",
    6: "ncclRemoteError",
}
_ERROR = re.compile(
    rf"nccl ?error|\b(?:{'|'.join(_RESULTS.values())})\b|unhandled cuda error"
    r"|\b[\w.]*(?:Error|Exception):.*nccl",
    re.IGNORECASE,
)
#: A traceback's echo of the Python source that raised (`    raise RuntimeError(f"NCCL error:
#: {error_str}")`): code, not a message; the exception's own line follows it.
_RAISE = re.compile(r"^\s*raise [\w.]+(?:Error|Exception)\(")
#: NCCLCHECK's error trace, an INFO message from the source location on, whatever comes between it
#: and the arrow (2.29 adds the function: `transport.cc:88 (ncclTransportP2pSetup) -> 2`); codes
#: 1-6 (7 is "in progress").
_TRACE = re.compile(r"\bINFO\s+(?P<where>[\w./+-]+:\d+)\b.*?-> (?P<code>[1-6])(?![\w\[])")
_ARROW = re.compile(r"-> [1-6](?![\w\[])")


def _may_say_failure(text: str) -> bool:
    """Whether a line of `text` may match `_WARN`, `_TRACE` or `_ERROR`: the words each needs
    (case folded as `_ERROR` is), and `_TRACE`'s arrow; a whole log in a few C-speed scans."""
    low = text.lower()
    return (
        "nccl warn" in low
        or "nccl abort" in low
        or "rror" in low
        or "xception" in low
        or _ARROW.search(text) is not None
    )


#: NCCL's own tag: a line of NCCL's debug output, wherever it sits in the line. (API call tracing,
#: `host:pid:tid NCCL CALL ...`, has no device by design and says nothing diagnose reads.)
_TAG = re.compile(r"\bNCCL (?:INFO|WARN|ABORT|TRACE)\b")
#: Who printed it, where the line says: NCCL's `host:pid:tid [dev]`, PyTorch's and Open MPI's rank.
_WHO = re.compile(r"(?P<host>[^\s:\[\]|]+):(?P<pid>\d+):\d+ \[(?P<dev>\d+)\]")
#: A logger's own process field (`[s12gn3064:pid=3942408]`): the host, without a GPU.
_HOST_PID = re.compile(r"\[(?P<host>[^\s:\[\]|]+):pid=(?P<pid>\d+)\]")
_RANK = re.compile(r"\[[Rr]ank ?(?P<rank>\d+)\]|^\[\d+,(?P<mpi>\d+)\]<std")
#: What a removed timestamp leaves of NCCL's own `[%F %T] ` (NCCL_DEBUG_TIMESTAMP_FORMAT).
_STAMP_LEFT = re.compile(r"^\[\s*\]\s*")
_SHOWN = 200  # characters of a line shown in a message


@dataclass
class _Unexplained:
    severity: Severity
    what: str
    who: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def _who(line: NcclLine, reports: dict[str, RankReport]) -> tuple[str, str]:
    """The process a line is from (to pair a WARN with the trace after it), and its name."""
    rep = reports.get(line.key) if line.key is not None else None
    if rep is not None:
        return f"{rep.host}:{rep.pid}", seen_by(rep)
    parts = []
    if r := _RANK.search(line.text):
        parts.append(f"rank {r.group('rank')}" if r.group("rank") else f"MPI rank {r.group('mpi')}")
    if w := _WHO.search(line.text):
        parts += [f"host {w.group('host')}", f"GPU {w.group('dev')}"]
        return f"{w.group('host')}:{w.group('pid')}", " ".join(parts)
    if w := _HOST_PID.search(line.text):
        parts.append(f"host {w.group('host')}")
        return f"{w.group('host')}:{w.group('pid')}", " ".join(parts)
    return "", " ".join(parts)


def _short(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _message(line: NcclLine) -> str:
    """The part of a line worth showing: from NCCL's tag on, else the whole line."""
    t = _TAG.search(line.text)
    return _short(line.text[t.start() :] if t else line.text)


@dataclass
class _Warn:
    """A process's last WARN, until an error trace after it makes it the cause of an error."""

    message: str
    #: Whether a finding of severity error stands for it already (its failure is reported).
    reported: bool
    #: Whether NCCL handled its failure (gave up on an optional plugin and carried on).
    handled: bool = False


def _scan(facts: Facts) -> list[_Unexplained]:
    evidence = {e for f in facts.found for e in f.evidence if e.strip()}
    errors = {e for f in facts.found if f.severity == "error" for e in f.evidence if e.strip()}
    reports = {r.key: r for r in facts.reports}
    last_warn: dict[str, _Warn] = {}  # per process
    causes: set[str] = set()
    found: dict[tuple[Severity, str], _Unexplained] = {}
    for line in facts.lines:
        warn = _WARN.search(line.text) is not None
        trace = None if warn else _TRACE.search(line.text)
        error = (
            trace is None and _ERROR.search(line.text) is not None and not _RAISE.match(line.text)
        )
        if not (warn or trace or error):
            continue
        proc, who = _who(line, reports)
        if warn:
            reported = any(e in line.text for e in errors)
            rep = reports.get(line.key) if line.key is not None else None
            handled = rep is not None and any(h in line.text for h in rep.handled_warnings)
            last_warn[proc] = _Warn(_message(line), reported, handled)
        if any(e in line.text for e in evidence):
            continue
        if trace is not None:
            # A trace alone is a failure NCCL handled (a plugin it probed, a disabled network);
            # after a WARN it is the WARN's failure travelling up: the run's end.
            cause = last_warn.pop(proc, None)
            if cause is None or cause.reported or cause.handled:
                continue
            causes.add(cause.message)
            name = _RESULTS[int(trace.group("code"))]
            where = line.text[trace.start("where") : trace.end()]
            what = f"{cause.message}, then an error travelled up NCCL's calls ({where}: {name})"
        else:
            what = _message(line)
            if warn and (why := fatal_reason(what)) is not None:
                # A WARN that ends the communicator, in a line the reader could not place.
                what, error = f"{why}: {what}", True
        key: tuple[Severity, str] = ("error" if error or trace else "warning", _short(what))
        u = found.setdefault(key, _Unexplained(*key))
        if who and who not in u.who:
            u.who.append(who)
        u.lines.append(line.text)
    # A WARN whose process then failed is named by that error, not as a warning of its own.
    return [u for u in found.values() if u.severity == "error" or u.what not in causes]


def _failsafe(facts: Facts) -> list[Finding]:
    out = []
    for u in _scan(facts):
        on = f" on {', '.join(u.who[:4])}" if u.who else ""
        more = f" ({len(u.lines) - 1} more like it)" if len(u.lines) > 1 else ""
        error = u.severity == "error"
        out.append(
            Finding(
                u.severity,
                "unexplained-nccl-error" if error else "unexplained-nccl-warn",
                f"{'an NCCL error' if error else 'an NCCL warning'} no rule explains{on}: "
                f"{u.what}{more}",
                "read the lines around it in that process's log; diagnose does not know this "
                "form yet (a newer NCCL, a plugin or a framework): please report it.",
                u.who,
                u.lines,
            )
        )
    unplaced = [ln for ln in facts.lines if ln.key is None and _TAG.search(ln.text)]
    if unplaced:
        n = len(unplaced)
        out.append(
            Finding(
                "warning",
                "nccl-lines-not-understood",
                f"{n} NCCL line{'s' if n > 1 else ''} not understood, first: "
                f"{_short(_STAMP_LEFT.sub('', unplaced[0].text))}",
                "the reader found NCCL's tag but no process prefix it knows (`host:pid:tid "
                "[dev]`): what these lines say is missing from the diagnosis above.",
            )
        )
    return out


FAILSAFE = Rule(
    "fail-safe",
    (
        Code(
            "unexplained-nccl-error",
            ("error",),
            "a line no other rule explains says an NCCL error happened: `NCCL error`, an "
            "ncclResult_t by name (`ncclSystemError`, ...), `unhandled cuda error`, a "
            "framework's exception about NCCL, or an error trace `file:line ... -> 1..6` after "
            "a WARN of its process (named as the cause), or a WARN in a line the reader could "
            "not place whose message is a fatal one (`nccl-error`'s forms, with its reason); "
            "names the line, host and rank",
        ),
        Code(
            "unexplained-nccl-warn",
            ("warning",),
            "an `NCCL WARN` line no other rule explains (e.g. a form the reader does not know); "
            "names the line, host and rank",
        ),
        Code(
            "nccl-lines-not-understood",
            ("warning",),
            "N NCCL lines (NCCL's tag) the reader could not place on a process, and the first",
        ),
    ),
    _failsafe,
    # What `_scan` looks at: any line saying NCCL warned or erred; every unplaced one (counted).
    LineInterest(unplaced=True, patterns=(_WARN, _TRACE, _ERROR), clue=_may_say_failure),
)

__all__ = ["FAILSAFE"]
