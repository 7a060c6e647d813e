"""Rules for the log's own errors: fatal NCCL WARNs named by culprit and witness, IB completion
errors, the other WARNs as warnings; PyTorch's watchdog timeouts and errors; the run's own failure
line."""

from __future__ import annotations

import re

from nccl_k8s.results.findings import (
    Code,
    Facts,
    Finding,
    Rule,
    Severity,
    ranks_of,
    seen_by,
    traces_of,
)
from nccl_k8s.results.nccllog import LineInterest, RankReport
from nccl_k8s.results.pastes import failure_in

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
    # bootstrap.cc: the root got a rank's hello whose world differs (`Bootstrap Root : mismatch
    # in info from procs, nranks 16 vs 16, ... offset 0 vs 1305411586`, before 2.23 `mismatch in
    # rank count`); the root gives up and the ranks hang: another job on the root's port, or
    # ranks that disagree on the world.
    (
        re.compile(r"Bootstrap Root : mismatch"),
        "NCCL's bootstrap root got a hello from a process of another world (another job on "
        "its port, or ranks that disagree on the world size)",
    ),
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
    # socket.cc (bootstrap, proxy): a connection to a peer could not be made or timed out
    # (ncclSystemError / ncclRemoteError); bootstrap.cc: no interface to bootstrap over.
    # socket.cc's own words when the retries run out or poll() gives up (`socketStartConnect:
    # exceeded timeouts (3)`, `socketPollConnect poll() returned 1, no POLLOUT events`).
    (
        re.compile(
            r"Connect to \S+ (?:failed|returned)|connect(?:ion)? (?:to \S+ )?timed out|Bootstrap : no socket "
            r"interface found|socket(?:Start|Poll)Connect\b.*?(?:exceeded|poll\(\))",
            re.IGNORECASE,
        ),
        "a connection to a peer could not be made (an unreachable address, a firewall, or the "
        "wrong interface: NCCL_SOCKET_IFNAME)",
    ),
    # aws-ofi-nccl: a libfabric request failed (`NET/OFI Request ... completed with error`).
    (re.compile(r"NET/OFI .*completed with error"), "a libfabric (EFA/OFI) transfer failed"),
]
# CUDACHECK (checks.h): a CUDA call failed (ncclUnhandledCudaError). After a kernel fault
# (`unspecified launch failure`, an Xid) the context is dead and every later call fails too:
# NCCL 2.30 prints such WARNs on teardown paths (ncclStrongStreamSynchronize, ncclMemFree) with
# no error trace after them. Fatal either way; where a trace follows, that names it.
_CUDA_FAILURE = (re.compile(r"Cuda failure"), "a CUDA call failed on this GPU")
# PyTorch's own words for an NCCL failure it saw before NCCL said anything (no `Last error:`):
# ProcessGroupNCCL's bootstrap waits in the c10d store for rank 0's ncclUniqueId
# (`[4] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value
# store by key '0', but store->get('0') got error: Socket Timeout`, `wait timeout after 600000ms`).
_TORCH_FORMS = [
    (
        re.compile(
            r"retriev\w+ ncclUniqueId from \[(?P<peer>\d+)\].*got error:.*time ?out",
            re.IGNORECASE,
        ),
        "NCCL's bootstrap timed out: this rank waited in the c10d store for rank {peer}'s "
        "ncclUniqueId, which rank {peer} never published (it crashed or is stuck before this "
        "collective) or this rank could not fetch (MASTER_ADDR/MASTER_PORT unreachable)",
        "read rank {peer}'s log first (did it crash or hang before this point?), then check that "
        "every rank reaches MASTER_ADDR:MASTER_PORT (firewall, the interface: "
        "NCCL_SOCKET_IFNAME) and starts within the timeout.",
    ),
    # The watchdog's CUDA check of a collective failed: the GPU's context is dead (a kernel
    # fault: an Xid, a bad kernel), every later call fails too.
    (
        re.compile(r"watchdog thread terminated with exception: CUDA error: (?P<what>[^.\n]+)"),
        "a CUDA call failed on this GPU ({what}), caught by PyTorch's NCCL watchdog: the GPU's "
        "context is dead (a kernel fault; look for an Xid in the host's kernel log)",
        "check the host's kernel log (dmesg) for an Xid of that GPU and rerun with "
        "CUDA_LAUNCH_BLOCKING=1 to find the kernel; a GPU that keeps failing is one to drain.",
    ),
]
# The peer a WARN names: `from peer`, `Call to recv from`, `Connect to` (2.2x) or `connect to`
# (2.30's `ncclOsSocketPollConnect: connect to 10.82.101.249<37857> returned ...`).
_PEER = re.compile(r"(?:peer|from|[Cc]onnect to) (?P<peer>[\w.:-]+?)<\d+>")


def _classify(
    reports: list[RankReport],
) -> tuple[
    dict[tuple[str, str | None], list[re.Match[str]]],
    dict[str, tuple[str, list[RankReport]]],
    dict[str, list[RankReport]],
]:
    """Each WARN, by what it is: an IB completion error (per rank and peer), a fatal error (by
    message: why, and who printed it) or a harmless one (by message: who printed it)."""
    completions: dict[tuple[str, str | None], list[re.Match[str]]] = {}
    fatal: dict[str, tuple[str, list[RankReport]]] = {}
    harmless: dict[str, list[RankReport]] = {}
    for r in reports:
        for w in r.warnings:
            if "Failed to open libibverbs" in w:
                continue  # libibverbs-missing says it
            if c := _COMPLETION.search(w):
                completions.setdefault((r.key, c.group("peer")), []).append(c)
                continue
            why = fatal_reason(w)
            if why is None and w in r.fatal_warnings:
                why = "a fatal NCCL error (an error trace `file:line -> code` follows it)"
            if why is None and _CUDA_FAILURE[0].search(w):
                why = _CUDA_FAILURE[1]
            if why is None:
                harmless.setdefault(w, []).append(r)
            else:
                fatal.setdefault(w, (why, []))[1].append(r)
    return completions, fatal, harmless


def fatal_reason(warn: str) -> str | None:
    """What an NCCL WARN (the log's text) that ends the communicator says failed; None for any
    other WARN (a `Cuda failure` and a WARN followed by an error trace are fatal too: their
    callers know)."""
    return next((what for rx, what in _FATAL if rx.search(warn)), None)


def _completion_findings(
    reports: list[RankReport],
    completions: dict[tuple[str, str | None], list[re.Match[str]]],
) -> list[Finding]:
    out: list[Finding] = []
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
                [m.string for m in ms] + traces_of(reports, [r]),
            )
        )
    return out


def _fatal_findings(
    reports: list[RankReport],
    fatal: dict[str, tuple[str, list[RankReport]]],
    network_needed: bool | None,
) -> list[Finding]:
    out: list[Finding] = []
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
                ws + traces_of(reports, who),
            )
        )
    return out


def _warns(facts: Facts) -> list[Finding]:
    """Errors that ended the run, named by culprit (the peer a rank lost) and witness (the rank
    that printed it); the other WARNs, by message, as harmless warnings."""
    completions, fatal, harmless = _classify(facts.reports)
    out = _completion_findings(facts.reports, completions)
    out += _fatal_findings(facts.reports, fatal, facts.network_needed)
    out += [
        Finding(
            "warning",
            "nccl-warn",
            f"NCCL WARN {w}",
            "read the lines around it in the rank's log",
            ranks_of(who),
            [w],
        )
        for w, who in harmless.items()
    ]
    return out


WARNS = Rule(
    "nccl-warn",
    (
        Code(
            "ib-completion-error",
            ("error",),
            "IB work completion errors: names the peer address as the likely culprit (link or "
            "host), the rank, host and GPU that saw it, the status and vendor error",
        ),
        Code(
            "nccl-error",
            ("error", "warning"),
            "a fatal WARN: `Call to ibv_* failed`, `Failed to initialize any NET plugin`, "
            "aws-ofi-nccl initialization failed, `Couldn't open AV`, `Message truncated`, "
            "`Bootstrap Root : mismatch`, "
            "`collective mismatch`, a peer's socket closed, a connection that could not be made "
            "or timed out (`socketPollConnect` / `socketStartConnect` giving up included), a "
            "failed libfabric request, `Cuda failure` (with or without a trace), "
            "or any WARN followed by NCCL's error trace; names who printed it and the peer when "
            "the line has one",
            "**error** (the aws-ofi-nccl init failure on one node: warning)",
        ),
        Code(
            "nccl-warn",
            ("warning",),
            "each distinct `NCCL WARN` message that is not fatal (above), with the ranks that "
            "printed it",
        ),
    ),
    _warns,
)


def _torch(facts: Facts) -> list[Finding]:
    out = []
    for e in facts.torch_events:
        who = f"rank {e.rank}" if e.rank is not None else ""
        where = " on ".join(p for p in (who, f"host {e.host}" if e.host else "") if p)
        if e.timeout is not None:
            t = e.timeout
            code = "collective-timeout"
            message = (
                f"{who or 'a rank'}'s {t.op} (SeqNum {t.seq}) ran for {t.ms} ms before the "
                "watchdog timed it out"
            )
            hint = (
                "the rank that reports the timeout is waiting; the culprit is a rank that never "
                "joined that collective (crashed, hung, or called another one): compare the "
                "SeqNum each rank last reached."
            )
        elif e.last_error:
            code = "torch-nccl-error"
            why, peer = explain(e.last_error)
            culprit = f"; peer {peer} is the likely culprit" if peer else ""
            message = (
                f"{where + ': ' if where else ''}{why}{culprit}. NCCL's last error: {e.last_error}"
            )
            if e.error != e.last_error:
                message += f". PyTorch: {e.error}"
            hint = (
                "NCCL's own message above names what failed; the NCCL WARN lines of that rank "
                "(NCCL_DEBUG=WARN or INFO) say more."
            )
        elif (known := _torch_reason(e.error)) is not None:
            code = "torch-nccl-error"
            reason, hint = known
            message = f"{where + ': ' if where else ''}{reason}. PyTorch: {e.error}"
        else:
            code = "torch-nccl-error"
            message = f"{where + ': ' if where else ''}{e.error}"
            hint = "the NCCL WARN lines before it in the same log say which peer or link failed."
        stands_for = [t for t in (e.text, e.last_error, e.result) if t]
        out.append(Finding("error", code, message, hint, [who] if who else [], stands_for))
    return out


def _torch_reason(error: str) -> tuple[str, str] | None:
    """What PyTorch's own error about NCCL says failed, and what to do, where its form is known."""
    for rx, what, hint in _TORCH_FORMS:
        if m := rx.search(error):
            return what.format(**m.groupdict()), hint.format(**m.groupdict())
    return None


def explain(message: str) -> tuple[str, str | None]:
    """What an NCCL WARN message (PyTorch's `Last error:`) says failed, and the peer it names."""
    if c := _COMPLETION.search(message):
        code = int(c.group("status") or c.group("error"))
        why = f"an IB completion error (status {code}: {_WC_STATUS.get(code, 'see ibv_wc_status')})"
        return why, c.group("peer")
    why = next(
        (what for rx, what in (*_FATAL, _CUDA_FAILURE) if rx.search(message)), "an NCCL error"
    )
    peer = _PEER.search(message)
    return why, peer.group("peer") if peer else None


TORCH = Rule(
    "torch",
    (
        Code(
            "collective-timeout",
            ("error",),
            "PyTorch's watchdog timed a collective out (rank, op, SeqNum)",
        ),
        Code(
            "torch-nccl-error",
            ("error",),
            "PyTorch's DistBackendError / remote-process errors about NCCL, with what NCCL's "
            "`Last error:` says failed (IB completion status, a closed or refused connection, a "
            "CUDA failure) and the peer it names, or what PyTorch's own words say (the bootstrap "
            "timing out waiting for rank 0's ncclUniqueId, the watchdog dying of a CUDA error); "
            "the rank from `[rankN]:` behind any launcher prefix: also from a paste holding no "
            "NCCL line",
        ),
    ),
    _torch,
)


def _run_failed(facts: Facts) -> list[Finding]:
    # The reader keeps each log's first failure line; the others say the same of other ranks.
    said = [ln.text for ln in facts.lines if ln.key is None and failure_in(ln.text)]
    return [
        Finding(
            "error",
            "run-failed",
            f"the run failed: {line}",
            "the NCCL WARN lines above it in the same log say why.",
            evidence=[line, *said],
        )
        for line in facts.log.failures
    ]


RUN_FAILED = Rule(
    "run-failed",
    (
        Code(
            "run-failed",
            ("error",),
            "the log holds the run's own failure line (`Test NCCL failure ...`)",
        ),
    ),
    _run_failed,
    LineInterest(unplaced=True),  # the failure lines of every log
)

__all__ = ["RUN_FAILED", "TORCH", "WARNS", "explain", "fatal_reason"]
