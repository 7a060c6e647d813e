"""What a diagnosis says (`Finding`), and the findings a log's own errors make: fatal NCCL WARNs
named by culprit and witness, IB completion errors, PyTorch watchdog timeouts; other WARNs as
warnings. `diagnose` judges the rest (fabric, nodes, GPUDirect RDMA, paths) and gathers them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from nccl_k8s.results.nccllog import RankReport

Severity = Literal["info", "warning", "error"]


@dataclass
class Finding:
    severity: Severity
    #: Stable identifier for tests and scripts, e.g. "socket-fallback".
    code: str
    message: str
    hint: str = ""
    #: The ranks (or host:pid [dev] keys when the rank is unknown) it applies to.
    ranks: list[str] = field(default_factory=list)


def ranks_of(reports: Iterable[RankReport]) -> list[str]:
    return [r.label for r in reports]


def where_of(reports: Iterable[RankReport]) -> str:
    """ "rank 3 on host node-b, rank 5 on host node-c": who, and where to look."""
    return ", ".join(
        f"{r.label} on host {r.host}" if r.host and r.rank is not None else r.label for r in reports
    )


def warn_findings(
    reports: list[RankReport], harmless: dict[str, list[RankReport]]
) -> list[Finding]:
    return [
        Finding(
            "warning",
            "nccl-warn",
            f"NCCL WARN {w}",
            "read the lines around it in the rank's log",
            ranks_of(who),
        )
        for w, who in harmless.items()
    ]


# IB work completion status (enum ibv_wc_status): what the NIC says went wrong.
_WC_STATUS = {
    1: "local length error",
    2: "local QP operation error",
    4: "local protection error: a buffer's memory registration, often GPUDirect RDMA",
    5: "work request flushed: the queue pair had already failed",
    9: "remote invalid request",
    10: "remote access error",
    11: "remote operation error",
    12: "transport retry counter exceeded: the peer stopped answering",
    13: "RNR retry counter exceeded: the peer posted no receive",
}
# NCCL's IB transport (net_ib.cc, HPC-X ib_plugin.c): `NET/IB : Got completion from peer %s with
# error %d, opcode %d, len %d, vendor err %d` (returns ncclRemoteError), later `... with
# status=%d opcode=...` and `status=%s(%d)`; before 2.12 `Got completion with error %d, opcode
# ...` without the peer. Every one fails the operation: the communicator is dead.
_COMPLETION = re.compile(
    r"Got completion (?:from peer (?P<peer>[^\s<]+)(?:<\d+>)? )?with "
    r"(?:status=(?:\w+\()?(?P<status>\d+)\)?|error (?P<error>\d+))"
    r"(?:.*?vendor[ _]err[ =](?P<vendor>\d+))?"
)
# WARNs that end the communicator, from NCCL's and aws-ofi-nccl's sources: each is printed on a
# path that returns an error (ncclSystemError, ncclInternalError, ncclRemoteError) to the caller.
_FATAL = [
    # ibvwrap.cc: a verbs call failed (ncclSystemError): QP/CQ/MR creation on this host's HCA.
    (re.compile(r"Call to ibv_\w+ failed"), "an InfiniBand verbs call failed"),
    # plugin/net.cc: no network at all (ncclInvalidUsage): nothing can leave the process.
    (re.compile(r"Failed to initialize any NET plugin"), "no NCCL network plugin initialized"),
    # aws-ofi-nccl: the plugin gave up; NCCL falls back to its own transports (or fails).
    (
        re.compile(
            r"NET/OFI .*(?:initialization failed|Initializing plugin failed|Unable to find "
            r"a protocol)"
        ),
        "the aws-ofi-nccl plugin failed to initialize",
    ),
    # aws-ofi-nccl: the libfabric address vector could not be opened: the endpoint is unusable.
    (re.compile(r"Couldn't open AV"), "aws-ofi-nccl could not open its libfabric address vector"),
    # bootstrap.cc: a bootstrap message of the wrong size: another job or NCCL version on the
    # port, or a peer that failed half-way (ncclInternalError).
    (re.compile(r"Message truncated"), "a bootstrap message was truncated"),
    # net_ib.cc: sizes differ between the two sides of a transfer (ncclInternalError).
    (re.compile(r"collective mismatch"), "the two sides of a transfer disagree"),
    # socket.cc / proxy.cc: a peer's socket closed or failed (ncclRemoteError).
    (
        re.compile(
            r"Connection closed by remote peer|Call to recv from .* failed|Socket recv "
            r"failed|Broken pipe|Connection reset"
        ),
        "a peer's connection closed",
    ),
]
_PEER = re.compile(r"(?:peer|from) (?P<peer>[\w.:-]+?)<\d+>")


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


def fatal_findings(
    reports: list[RankReport], network_needed: bool | None
) -> tuple[list[Finding], dict[str, list[RankReport]]]:
    """Errors that ended the run, named by culprit (the peer a rank lost) and witness (the rank
    that printed it); the other WARNs, by message, as harmless warnings."""
    out: list[Finding] = []
    harmless: dict[str, list[RankReport]] = {}
    completions: dict[tuple[str, str | None], list[re.Match[str]]] = {}
    fatal: dict[str, tuple[str, list[RankReport]]] = {}
    for r in reports:
        for w in r.warnings:
            if "Failed to open libibverbs" in w:
                continue
            if c := _COMPLETION.search(w):
                completions.setdefault((r.key, c.group("peer")), []).append(c)
                continue
            why = next((what for rx, what in _FATAL if rx.search(w)), None)
            if why is None and w in r.fatal_warnings:
                why = "a fatal NCCL error (an error trace `file:line -> code` follows it)"
            if why is None:
                harmless.setdefault(w, []).append(r)
            else:
                fatal.setdefault(w, (why, []))[1].append(r)
    by_key = {r.key: r for r in reports}
    for (key, peer), ms in completions.items():
        r = by_key[key]
        codes = sorted({int(m.group("status") or m.group("error")) for m in ms})
        vendor = sorted({m.group("vendor") for m in ms if m.group("vendor")})
        what = "; ".join(f"status {c}: {_WC_STATUS.get(c, 'see ibv_wc_status')}" for c in codes)
        if vendor:
            what += f"; vendor err {', '.join(vendor)}"
        culprit = (
            f"peer {peer} (or the link to it) is the likely culprit"
            if peer
            else "the peer is not named (NCCL < 2.12): its QP's remote end is the likely culprit"
        )
        out.append(
            Finding(
                "error",
                "ib-completion-error",
                f"{culprit}: {seen_by(r)} got {len(ms)} IB completion error"
                f"{'s' if len(ms) > 1 else ''} ({what})",
                "check the peer host's and this host's HCA ports and cables (ibstat, "
                "`ibv_devinfo`, port error counters, dmesg for mlx5 errors), that the peer "
                "process is alive, and for RoCE the GID index and lossless (PFC) settings.",
                [r.label],
            )
        )
    grouped: dict[str, tuple[list[str], list[RankReport]]] = {}
    for w, (why, who) in fatal.items():
        ws, rs = grouped.setdefault(why, ([], []))
        ws.append(w)
        rs.extend(r for r in who if r not in rs)
    for why, (ws, who) in grouped.items():
        peers = sorted({p.group("peer") for w in ws if (p := _PEER.search(w))})
        sev: Severity = "error"
        if "aws-ofi-nccl plugin" in why and network_needed is False:
            sev = "warning"  # one node: NCCL's own transports do without the plugin
        culprit = f"; peer {', '.join(peers)} is the likely culprit" if peers else ""
        more = f" (and {len(ws) - 1} more like it)" if len(ws) > 1 else ""
        out.append(
            Finding(
                sev,
                "nccl-error",
                f"{why} on {', '.join(seen_by(r) for r in who[:4])}{culprit}: "
                f"NCCL WARN {ws[0]}{more}",
                "this error ends the communicator: fix it first, the errors after it follow "
                "from it.",
                ranks_of(who),
            )
        )
    return out, harmless


def torch_findings(errors: list[tuple[str, str, str]]) -> list[Finding]:
    out = []
    for code, who, what in errors:
        if code == "collective-timeout":
            message = f"{who or 'a rank'}'s {what}"
            hint = (
                "the rank that reports the timeout is waiting; the culprit is a rank that never "
                "joined that collective (crashed, hung, or called another one): compare the "
                "SeqNum each rank last reached."
            )
        else:
            message = f"{who + ': ' if who else ''}{what}"
            hint = "the NCCL WARN lines before it in the same log say which peer or link failed."
        out.append(Finding("error", code, message, hint, [who] if who else []))
    return out


__all__ = [
    "Finding",
    "Severity",
    "fatal_findings",
    "ranks_of",
    "seen_by",
    "torch_findings",
    "warn_findings",
    "where_of",
]
