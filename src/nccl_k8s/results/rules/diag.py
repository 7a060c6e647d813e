"""Rule: NCCL's own diagnostics (2.31+), as findings.

With `NCCL_RUN_DIAGNOSTICS=1` (active checks: GPU peer-to-peer paths, `ib_write_bw` between
nodes) or `NCCL_RUN_RAS_DIAGNOSTICS=1` (RAS: GPU inventory, driver version, ECC, links and the
`NCCL_*` environment compared across ranks), the process of rank 0 prints a report to stdout, each
line `<host>:<pid> NCCL DIAG ...` (the host may be missing): a `=== ... ===` header, one result
per check, `[OK]` or `[INFO]`, and a `... completed in X ms across N ranks` line (NCCL's
troubleshooting/diagnostics and RAS docs; RCCL inherits both). NCCL calls every result
informational and never aborts for one; diagnose reads them: a failed verification, an
uncorrectable ECC error, a link down or a timed-out measurement is an error, any other `[INFO]`
(a value that differs across ranks, a bandwidth outlier, an incomplete check) a warning, and
the `[OK]` results one info line.
"""

from __future__ import annotations

import re

from nccl_k8s.results.findings import Code, Facts, Finding, Rule, Severity
from nccl_k8s.results.nccllog import LineInterest

_DIAG = re.compile(
    r"(?:(?P<host>[^\s:\[\]]+):(?P<pid>\d+) )?NCCL DIAG (?:\[(?P<tag>OK|INFO)\]\s+)?(?P<msg>.*?)\s*$"
)
# The check a result belongs to: its words before the first colon (`p2p`, `net bw`, `NCCL
# environment`, `GPU inventory`, `ECC`, `XGMI`).
_CHECK = re.compile(r"^(?P<check>[\w][\w ./-]{0,40}?):\s")
# A result that says the system failed a check (NCCL's and RCCL's report lines: `p2p: only
# 52/56 GPU-to-GPU peer accesses passed verification`, `p2p: write mismatch`, `p2p: setup failed`,
# `tool run timed out`, ECC errors, a link down), not a difference to review.
# NCCL 2.31.2+ and RCCL word a partial P2P result `p2p: 4/6 directed GPU P2P edges verified`, and
# name a failed edge by its fields and `reason=` (`destination buffer unavailable srcRank=0 ...
# reason=noDescriptor`; reasons `indirect` and `none` are not failures).
_FAILED = re.compile(
    r"\bonly \d+/\d+\b|\b(?:write|read) mismatch|\bfailed\b|timed out|uncorrect|deferred errors"
    r"|\bdown\b|^p2p: \d+/\d+ directed\b|\breason=(?!none\b|indirect\b)\w+",
    re.IGNORECASE,
)
# A notice NCCL's and RCCL's docs call expected on a healthy system, not a result: a process
# driving several GPUs enables peer access for the check (`p2p: temporarily enabled
# context-wide HIP peer access rank=3 cudaDev=3; ...`).
_NOTICE = re.compile(r"temporarily enabled context-wide \w+ peer access")
_DONE = re.compile(r"diagnostics completed in (?P<ms>[\d.]+) ms across (?P<n>\d+) (?P<who>.*)$")


def _diag(facts: Facts) -> list[Finding]:
    checks: dict[tuple[Severity, str, str], list[str]] = {}
    ok: list[str] = []
    done: list[str] = []
    for line in facts.lines:
        if "NCCL DIAG" not in line.text or (m := _DIAG.search(line.text)) is None:
            continue
        msg, host = m.group("msg"), m.group("host") or ""
        if m.group("tag") == "OK" or _NOTICE.search(msg):
            ok.append(msg)
        elif m.group("tag") == "INFO":
            c = _CHECK.match(msg)
            sev: Severity = "error" if _FAILED.search(msg) else "warning"
            checks.setdefault((sev, host, c.group("check") if c else msg), []).append(msg)
        elif d := _DONE.search(msg):
            done.append(f"{d.group(0)}{f' (reported by {host})' if host else ''}")
    out = [
        Finding(
            sev,
            "nccl-diag-failed" if sev == "error" else "nccl-diag-issue",
            f"NCCL's diagnostics{f' on {host}' if host else ''}: {'; '.join(msgs[:4])}"
            + (f" ({len(msgs) - 4} more lines)" if len(msgs) > 4 else ""),
            "a check NCCL ran on this system (NCCL_RUN_DIAGNOSTICS, NCCL_RUN_RAS_DIAGNOSTICS) "
            "found it: fix the GPU, link or configuration it names before reading the numbers."
            if sev == "error"
            else "review it: a value that differs across ranks or an outlier often explains a "
            "hang or a slow rank; a check that could not complete says nothing either way.",
            evidence=msgs,
        )
        for (sev, host, _), msgs in checks.items()
    ]
    if ok or done:
        checks_ok = sorted({c.group("check") for m in ok if (c := _CHECK.match(m))})
        out.append(
            Finding(
                "info",
                "nccl-diag-ok",
                f"NCCL's diagnostics passed: {', '.join(checks_ok) or 'no check'}"
                + (f"; {done[-1]}" if done else ""),
                evidence=ok + done,
            )
        )
    return out


DIAG = Rule(
    "nccl-diag",
    (
        Code(
            "nccl-diag-failed",
            ("error",),
            "NCCL's own diagnostics (2.31+, `NCCL DIAG` lines) report a failure: a P2P "
            "verification that failed (`only N/M ... passed`, `N/M directed ... edges verified`, a "
            "failed edge with its `reason=`, a write or read mismatch), a failed or timed-out "
            "check, uncorrectable ECC errors, a link down",
        ),
        Code(
            "nccl-diag-issue",
            ("warning",),
            "any other `NCCL DIAG [INFO]` result, per check: a value that differs across ranks "
            "(NCCL_* environment, driver, GPU inventory), a bandwidth outlier, an incomplete check",
        ),
        Code(
            "nccl-diag-ok",
            ("info",),
            "the checks NCCL's diagnostics passed (`[OK]`) and its `completed in ... across N` "
            "line; the notices NCCL calls expected (peer access enabled for the check) go with it",
        ),
    ),
    _diag,
    LineInterest(unplaced=True),  # the report's lines carry no `host:pid:tid [dev]` prefix
)

__all__ = ["DIAG"]
