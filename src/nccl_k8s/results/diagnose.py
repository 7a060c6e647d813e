"""Diagnose NCCL_DEBUG=INFO logs: what each rank actually used, and what is wrong with it.

The most common real problem with multi-node NCCL is silent: libibverbs is missing from the image, or
the RDMA device is not in the pod, and NCCL falls back to TCP sockets; the job runs, at a fraction of
the bandwidth. The evidence is in the INFO log, which nobody reads. `nccllog` reads it; this module
judges it:

- which fabric carried each rank's inter-node traffic, by what the network plugin carries (NCCL's
  IB transport or HPC-X's IBext* -> InfiniBand or RoCE by the device's link layer; Google's gIB ->
  RoCE; aws-ofi-nccl's "AWS Libfabric" -> its libfabric provider: EFA, HPE Slingshot (cxi), TCP;
  "Socket" -> TCP), per rank, so that one rank on Socket among ranks on IB is seen and named with
  its host;
- how many nodes the ranks span: nNodes when NCCL prints it, the number of hosts, or one node when
  one host's GPUs hold every rank the log mentions and no connection leaves it;
- GPUDirect RDMA on RDMA connections (never asked of TCP), SHM instead of P2P, NVLS, CollNet, NCCL
  warnings, and the run's own failure line;
- fatal errors (IB completion errors, failed verbs calls, plugin failures, PyTorch watchdog
  timeouts, ...): errors naming the culprit peer when the line has one and the rank that saw it;
- `--expect-fabric`: ib, roce, efa, socket or nvlink; any rank on another fabric fails it, and so
  does a log that cannot confirm it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from nccl_k8s.errors import ResultsError, UsageError
from nccl_k8s.results.nccllog import (
    FABRIC_NAMES,
    LogParser,
    RankReport,
    link_layers,
    rank_fabric,
)

Severity = Literal["info", "warning", "error"]
Fabric = Literal["ib", "roce", "efa", "socket", "nvlink"]
FABRICS: tuple[Fabric, ...] = get_args(Fabric)
_RDMA: tuple[str, ...] = ("ib", "roce", "efa")


@dataclass
class Finding:
    severity: Severity
    #: Stable identifier for tests and scripts, e.g. "socket-fallback".
    code: str
    message: str
    hint: str = ""
    #: The ranks (or host:pid [dev] keys when the rank is unknown) it applies to.
    ranks: list[str] = field(default_factory=list)


@dataclass
class Diagnosis:
    ranks: list[RankReport]
    findings: list[Finding]
    #: Nodes the communicator spans, when the log says (nNodes, several hosts, or one host).
    nodes: int | None
    #: Whether any byte had to cross a network: False for one node, None when the log cannot tell.
    network_needed: bool | None
    #: "ib", "roce", "efa", "socket", another plugin's name, "mixed" (ranks disagree), or None:
    #: what inter-node traffic used.
    inter_node: str | None
    #: GPUDirect RDMA on RDMA connections: True, False, or None when no such connection was seen.
    gdr: bool | None
    expect_fabric: Fabric | None = None
    sources: list[str] = field(default_factory=list)
    #: How `nodes` was known: "nNodes", "N hosts", "one host, one process, ...", or "".
    nodes_evidence: str = ""
    #: The runs' own failure lines ("Test NCCL failure common.cu:392 ...").
    failures: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(f.severity == "error" for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["failed"] = self.failed
        for r, rep in zip(d["ranks"], self.ranks, strict=True):
            r["net"] = rep.net_summary()
        return d


_SOCKET_HINT = (
    "NCCL found no usable RDMA device, so inter-node traffic runs over TCP at a fraction of the "
    "fabric's bandwidth. Check that the image has rdma-core/libibverbs, that the pod requests the "
    "RDMA resource (e.g. rdma/ib, or your device plugin's name) and sees /dev/infiniband, and "
    "NCCL_IB_HCA / NCCL_SOCKET_IFNAME; if TCP is intended, pass --expect-fabric socket."
)
_IB_DISABLED_HINT = (
    "IB/RoCE was disabled by the environment (NCCL_IB_DISABLE=1), not missing: unset "
    "NCCL_IB_DISABLE (and NCCL_IBEXT_DISABLE) in the pod spec to let NCCL use the RDMA devices; "
    "if TCP is intended, pass --expect-fabric socket."
)
_LOOPBACK_HINT = (
    "the loopback interface reaches no other node: set NCCL_SOCKET_IFNAME to the interface that "
    "carries inter-node traffic (e.g. eth0, or ^lo,docker to exclude)."
)
_GDR_DISTANCE_HINT = (
    "NCCL turned GPUDirect RDMA off because GPU and NIC are too far apart on PCIe (the distance "
    "is above NCCL_NET_GDR_LEVEL), not for want of nvidia-peermem: use the NIC under the GPU's "
    "PCIe switch (NCCL_IB_HCA, `nvidia-smi topo -m`), or raise NCCL_NET_GDR_LEVEL (PHB, SYS) "
    "where the platform supports GPUDirect across the host bridge."
)
_LIBIBVERBS_HINT = (
    "libibverbs.so is missing in the container: install rdma-core (libibverbs1, ibverbs-providers) "
    "in the image, or use an image built for RDMA (e.g. NGC PyTorch)."
)
_GDR_HINT = (
    "without GPUDirect RDMA the NIC reads and writes GPU data through host memory. Load the "
    "nvidia-peermem kernel module on the nodes (or use DMA-BUF: NCCL >= 2.13, kernel >= 5.12), "
    "check NCCL_NET_GDR_LEVEL, and that GPU and NIC share a PCIe switch."
)
_MIXED_HINT = (
    "ranks of one job must use one fabric: compare the named pods' images (rdma-core, the NCCL "
    "net plugin), their RDMA resources and NCCL_* environment with the others'."
)


def _ranks(reports: Iterable[RankReport]) -> list[str]:
    return [r.label for r in reports]


def _where(reports: Iterable[RankReport]) -> str:
    """ "rank 3 on host node-b, rank 5 on host node-c": who, and where to look."""
    return ", ".join(
        f"{r.label} on host {r.host}" if r.host and r.rank is not None else r.label for r in reports
    )


def _nodes(reports: list[RankReport], hosts: set[str]) -> tuple[int | None, str]:
    nnodes = [r.nnodes for r in reports if r.nnodes is not None]
    if nnodes:
        return max(nnodes), "nNodes"
    if len(hosts) > 1:
        return len(hosts), f"{len(hosts)} hosts"
    if len(hosts) != 1 or any(t.startswith("NET/") for r in reports for t in r.transports):
        return None, ""
    # One host and no network connection: one node, if its GPUs hold every rank the log names
    # (an excerpt of one pod of a bigger job names ranks beyond them).
    seen = {r.rank for r in reports if r.rank is not None} | {p for r in reports for p in r.peers}
    nranks = {r.nranks for r in reports if r.nranks is not None}
    local = len(reports)
    if (seen and max(seen) < local and all(n <= local for n in nranks)) or nranks == {local}:
        pids = {r.pid for r in reports}
        procs = "one process" if len(pids) == 1 else f"{len(pids)} processes"
        return 1, f"one host ({next(iter(hosts))}), {procs}, every rank on its {local} GPUs"
    return None, ""


def analyse(
    reports: list[RankReport],
    hosts: set[str],
    *,
    expect_fabric: Fabric | None = None,
    failures: list[str] | None = None,
    torch_errors: list[tuple[str, str, str]] | None = None,
) -> Diagnosis:
    findings: list[Finding] = []
    if not reports:
        raise ResultsError(
            "no NCCL log lines found: run with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,NET "
            "or unset) and pass the pods' logs"
        )
    failures = list(failures or [])
    mnnvl = any(r.mnnvl for r in reports)
    net_ranks = [r for r in reports if any(t.startswith("NET/") for t in r.transports)]
    nodes, nodes_evidence = _nodes(reports, hosts)
    network_needed = None if nodes is None else nodes > 1
    if net_ranks:
        network_needed = True

    links = {x for r in reports for x in link_layers(r)}
    providers = {r.ofi_provider for r in reports if r.ofi_provider}
    provider = next(iter(providers)) if len(providers) == 1 else None
    fabrics = {r.key: rank_fabric(r, links, provider) for r in reports}
    distinct = sorted({f for f in fabrics.values() if f})
    inter_node: str | None = None
    if network_needed is not False and distinct:
        inter_node = distinct[0] if len(distinct) == 1 else "mixed"
    gdr_values = [r.net_gdr for r in net_ranks if r.net_gdr is not None]
    gdr = all(gdr_values) if gdr_values else None

    versions = sorted({r.nccl_version for r in reports if r.nccl_version})
    if len(versions) > 1:
        findings.append(
            Finding(
                "warning",
                "nccl-version-mismatch",
                f"ranks run different NCCL versions: {', '.join(versions)}",
                "use one image for all pods; mixed NCCL versions can hang or corrupt collectives.",
            )
        )

    verbs = [r for r in reports if r.libibverbs_missing]
    if verbs:
        findings.append(
            Finding(
                "info" if network_needed is False else "warning",
                "libibverbs-missing",
                "NCCL could not open libibverbs.so: the IB/RoCE transport is unavailable",
                _LIBIBVERBS_HINT,
                _ranks(verbs),
            )
        )

    findings += _socket_findings(reports, fabrics, network_needed, expect_fabric, bool(verbs))
    findings += _loopback_findings(reports, fabrics, network_needed)
    findings += _gdr_findings(reports, net_ranks, gdr)
    findings += _path_findings(reports, expect_fabric)
    if expect_fabric is not None:
        findings += _expectation(expect_fabric, reports, fabrics, network_needed, mnnvl, nodes)
    fatal, harmless = _fatal_findings(reports, network_needed)
    findings += fatal
    findings += _torch_findings(torch_errors or [])
    findings += _warn_findings(reports, harmless)
    for line in failures:
        findings.append(
            Finding(
                "error",
                "run-failed",
                f"the run failed: {line}",
                "the NCCL WARN lines above it in the same log say why.",
            )
        )

    order = {"error": 0, "warning": 1, "info": 2}
    findings.sort(key=lambda f: order[f.severity])
    return Diagnosis(
        ranks=reports,
        findings=findings,
        nodes=nodes,
        network_needed=network_needed,
        inter_node=inter_node,
        gdr=gdr,
        expect_fabric=expect_fabric,
        nodes_evidence=nodes_evidence,
        failures=failures,
    )


def _socket_findings(
    reports: list[RankReport],
    fabrics: dict[str, str | None],
    network_needed: bool | None,
    expect: Fabric | None,
    verbs: bool,
) -> list[Finding]:
    socket = [r for r in reports if fabrics[r.key] == "socket"]
    others = sorted({f for f in fabrics.values() if f and f != "socket"})
    if expect == "socket" and network_needed is not False:
        return []  # what was asked for: the expect-socket finding says so
    disabled = [r for r in socket if r.env.get("NCCL_IB_DISABLE", "").rstrip(".") == "1"]
    if disabled:
        hint = _IB_DISABLED_HINT
    else:
        hint = (_LIBIBVERBS_HINT + " " if verbs else "") + _SOCKET_HINT
    if network_needed is False:
        if socket:
            return [
                Finding(
                    "info",
                    "single-node-socket",
                    "all ranks are on one node: no byte crossed a network (NCCL reports "
                    "'Using network Socket', which is harmless here)",
                    ranks=_ranks(socket),
                )
            ]
        return []
    if not socket:
        return []
    if others:
        # Some ranks on TCP while the rest use an RDMA fabric: always wrong, and the slowest rank
        # sets the pace of every collective.
        sev: Severity = "error" if expect in (*_RDMA, "nvlink") else "warning"
        return [
            Finding(
                sev,
                "socket-fallback",
                f"{_where(socket)} selected TCP sockets while the other ranks use "
                f"{', '.join(others)}" + (f", expected {expect}" if sev == "error" else ""),
                hint + " " + _MIXED_HINT,
                _ranks(socket),
            )
        ]
    ifaces = sorted({i.split(":")[0] for r in reports for i in r.socket_ifaces})
    on = f" on {', '.join(ifaces)}" if ifaces else ""
    if network_needed:
        sev = "error" if expect in (*_RDMA, "nvlink") else "warning"
        seen = "went" if any("NET/Socket" in r.transports for r in socket) else "goes"
        message = f"inter-node traffic {seen} over TCP sockets (NET/Socket{on})"
    else:
        sev = "error" if expect in _RDMA else "warning"
        message = (
            "NCCL selected the Socket network (TCP): if these ranks span nodes, inter-node "
            "traffic goes over TCP"
        )
    if sev == "error":
        message += f", expected {expect}"
    return [Finding(sev, "socket-fallback", message, hint, _ranks(socket))]


def _loopback_findings(
    reports: list[RankReport], fabrics: dict[str, str | None], network_needed: bool | None
) -> list[Finding]:
    """Sockets on `lo` (NCCL_SOCKET_IFNAME=lo) can carry nothing between nodes."""
    lo = [
        r
        for r in reports
        if fabrics[r.key] == "socket"
        and r.socket_ifaces
        and all(i.startswith("lo:") or ":127." in i for i in r.socket_ifaces)
    ]
    if not lo or network_needed is False:
        return []
    if network_needed:
        sev: Severity = "error"
        message = f"{_where(lo)} use TCP sockets on the loopback interface across nodes"
    else:
        sev = "warning"
        message = (
            f"{_where(lo)} use TCP sockets on the loopback interface only: if the ranks span "
            "nodes, they cannot reach each other"
        )
    return [Finding(sev, "socket-loopback", message, _LOOPBACK_HINT, _ranks(lo))]


def _gdr_findings(
    reports: list[RankReport], net_ranks: list[RankReport], gdr: bool | None
) -> list[Finding]:
    no_module = [r for r in reports if r.gdr_no_module]
    distance = sorted({r.gdr_distance for r in reports if r.gdr_distance})
    if gdr is False:
        why = ""
        if no_module:
            why = " (nvidia-peermem not loaded: 'no module')"
        elif distance:
            why = f" (GPU and NIC too far apart on PCIe: {', '.join(distance)})"
        return [
            Finding(
                "warning",
                "gdr-off",
                "GPUDirect RDMA is off on RDMA connections" + why,
                _GDR_DISTANCE_HINT if distance and not no_module else _GDR_HINT,
                _ranks(r for r in net_ranks if r.net_gdr is False),
            )
        ]
    if gdr is None and no_module:
        return [
            Finding(
                "warning",
                "gdr-off",
                "GPUDirect RDMA disabled for the HCAs (nvidia-peermem not loaded: 'no module')",
                _GDR_HINT,
                _ranks(no_module),
            )
        ]
    if gdr:
        return [
            Finding(
                "info",
                "gdr-on",
                "GPUDirect RDMA is on for RDMA connections (/GDRDMA)",
                ranks=_ranks(r for r in net_ranks if r.net_gdr),
            )
        ]
    return []


def _path_findings(reports: list[RankReport], expect: Fabric | None) -> list[Finding]:
    out = []
    shm = [r for r in reports if "SHM" in r.transports]
    if shm:
        out.append(
            Finding(
                "error" if expect == "nvlink" else "warning",
                "shm-intra-node",
                "some intra-node connections go through host shared memory (SHM), not GPU "
                "peer-to-peer",
                "P2P between these GPUs is unavailable or disabled: check NCCL_P2P_DISABLE / "
                "NCCL_P2P_LEVEL, that all GPUs of a pod are in one container, and IPC (hostIPC / "
                "--ipc=host) between processes.",
                _ranks(shm),
            )
        )
    if any(r.nvls_used for r in reports):
        ch = sorted({r.nvls_channels for r in reports if r.nvls_channels})
        out.append(
            Finding(
                "info",
                "nvls",
                "NVLink SHARP (NVLS) is in use"
                + (f" ({', '.join(map(str, ch))} nvls channels)" if ch else ""),
                ranks=_ranks(r for r in reports if r.nvls_used),
            )
        )
    if any(r.collnet_used for r in reports):
        out.append(
            Finding(
                "info",
                "collnet",
                "CollNet (in-network reduction, e.g. SHARP) is in use",
                ranks=_ranks(r for r in reports if r.collnet_used),
            )
        )
    return out


def _warn_findings(
    reports: list[RankReport], harmless: dict[str, list[RankReport]]
) -> list[Finding]:
    return [
        Finding(
            "warning",
            "nccl-warn",
            f"NCCL WARN {w}",
            "read the lines around it in the rank's log",
            _ranks(who),
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


def _seen_by(r: RankReport) -> str:
    """Who printed it: rank, host and GPU, as far as the log says."""
    parts = [r.label] if r.rank is not None else []
    if r.host:
        parts.append(f"host {r.host}")
    if r.cuda_dev is not None:
        parts.append(f"GPU {r.cuda_dev}")
    if r.rank is None and r.launcher_rank is not None:
        parts.append(f"MPI rank {r.launcher_rank}")
    return " ".join(parts) if parts else r.key


def _fatal_findings(
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
                f"{culprit}: {_seen_by(r)} got {len(ms)} IB completion error"
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
                f"{why} on {', '.join(_seen_by(r) for r in who[:4])}{culprit}: "
                f"NCCL WARN {ws[0]}{more}",
                "this error ends the communicator: fix it first, the errors after it follow "
                "from it.",
                _ranks(who),
            )
        )
    return out, harmless


def _torch_findings(errors: list[tuple[str, str, str]]) -> list[Finding]:
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


_RERUN = "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET"


def _cannot_confirm(want: Fabric, why: str, reports: list[RankReport]) -> Finding:
    """A gate the log cannot check fails: a passing gate must mean the fabric was seen."""
    return Finding(
        "error",
        f"expect-{want}",
        f"cannot confirm {want}: {why}; {_RERUN}",
        "pass the logs of every pod, from the start of the run (initialization prints what "
        "diagnose reads).",
        _ranks(reports),
    )


def _expect_nvlink(
    reports: list[RankReport], network_needed: bool | None, mnnvl: bool, nodes: int | None
) -> list[Finding]:
    out: list[Finding] = []
    net = [r for r in reports if any(t.startswith("NET/") for t in r.transports)]
    if net or (network_needed and not mnnvl):
        used = sorted({t for r in net for t in r.transports if t.startswith("NET/")})
        out.append(
            Finding(
                "error",
                "expect-nvlink",
                f"expected NVLink only, but the ranks span {nodes or 'several'} nodes"
                + (" and use " + ", ".join(used) if used else ""),
                "an NVLink-only run must keep all ranks in one node (or one MNNVL domain).",
                _ranks(net or reports),
            )
        )
        return out
    shm = [r for r in reports if "SHM" in r.transports]
    if shm:
        return [
            Finding(
                "error",
                "expect-nvlink",
                f"expected NVLink, but {_where(shm)} connect through host shared memory (SHM)",
                "see shm-intra-node: GPU peer-to-peer is unavailable between these GPUs.",
                _ranks(shm),
            )
        ]
    if network_needed is None and not mnnvl:
        return [
            _cannot_confirm(
                "nvlink",
                "the log does not say that the ranks share one node (no nNodes, and not every "
                "rank it names is a GPU of one host)",
                reports,
            )
        ]
    pcie = [r for r in reports if r.intra_path and r.intra_path not in ("NVL", "LOC")]
    if pcie:
        out.append(
            Finding(
                "warning",
                "expect-nvlink-path",
                "NCCL's topology search found a "
                + "/".join(sorted({r.intra_path or "" for r in pcie}))
                + " path (PCIe or host) between GPUs, not NVLink (NVL)",
                "check `nvidia-smi topo -m`; a VM or a pod may see GPUs without their NVLinks.",
                _ranks(pcie),
            )
        )
    if not out:
        p2p = any(t.startswith("P2P/") or t == "NVLS" for r in reports for t in r.transports)
        out.append(
            Finding(
                "info",
                "expect-nvlink",
                "no network needed: traffic stays on NVLink/P2P within the node"
                + (" (MNNVL)" if mnnvl else "")
                + ("" if p2p else " (no connection line shows which P2P path)"),
                ranks=_ranks(reports),
            )
        )
    return out


def _fabric_name(f: str | None) -> str:
    return FABRIC_NAMES.get(str(f), str(f))


def _expectation(
    want: Fabric,
    reports: list[RankReport],
    fabrics: dict[str, str | None],
    network_needed: bool | None,
    mnnvl: bool,
    nodes: int | None,
) -> list[Finding]:
    if want == "nvlink":
        return _expect_nvlink(reports, network_needed, mnnvl, nodes)
    if network_needed is False:
        return [
            Finding(
                "info",
                f"expect-{want}",
                f"all ranks are on one node: no inter-node traffic, so --expect-fabric {want} "
                "was not exercised",
            )
        ]
    known = [r for r in reports if fabrics[r.key]]
    if not known:
        return [
            _cannot_confirm(
                want,
                "no rank's network choice (`Using network`, `NET/IB : Using`) or NET connection "
                "is in the log",
                reports,
            )
        ]
    wrong = [r for r in known if fabrics[r.key] != want]
    if not wrong:
        return [Finding("info", f"expect-{want}", f"inter-node traffic uses {want}, as expected")]
    used = ", ".join(sorted({_fabric_name(fabrics[r.key]) for r in wrong}))
    if want == "socket":
        return [
            Finding(
                "error",
                "expect-socket",
                f"{_where(wrong)} use {used}, faster than the expected TCP sockets",
                "the run did not use what --expect-fabric socket says: drop the option, or "
                "pass the fabric it used.",
                _ranks(wrong),
            )
        ]
    if all(fabrics[r.key] == "socket" for r in wrong):
        return []  # reported as socket-fallback, with severity error and the hosts
    if all({fabrics[r.key], want} == {"ib", "roce"} for r in wrong):
        return [
            Finding(
                "warning",
                f"expect-{want}",
                f"inter-node traffic uses {'RoCE' if want == 'ib' else 'IB'} links, expected "
                f"{want}",
                "NCCL's IB transport carries both; check NCCL_IB_HCA picks the intended ports.",
                _ranks(wrong),
            )
        ]
    return [
        Finding(
            "error",
            f"expect-{want}",
            f"{_where(wrong)} use {used}, expected {want}",
            "check which network plugin the image ships (NCCL_NET, NCCL_NET_PLUGIN) and the "
            "pods' RDMA resources.",
            _ranks(wrong),
        )
    ]


def diagnose_text(
    texts: Iterable[str] | str,
    *,
    expect_fabric: Fabric | None = None,
) -> Diagnosis:
    """Diagnose one or more logs (e.g. one per pod) as one communicator's evidence."""
    p = LogParser()
    for t in [texts] if isinstance(texts, str) else texts:
        p.feed(t)
    return analyse(
        p.finish(),
        p.hosts,
        expect_fabric=expect_fabric,
        failures=p.failures,
        torch_errors=p.torch_errors,
    )


def diagnose_files(
    paths: Iterable[str | Path], *, expect_fabric: Fabric | None = None
) -> Diagnosis:
    texts = []
    names = []
    for path in paths:
        pth = Path(path)
        try:
            texts.append(pth.read_text(encoding="utf-8", errors="replace"))
        except FileNotFoundError:
            raise ResultsError(f"{pth}: no such log file", path=str(pth)) from None
        except IsADirectoryError:
            raise ResultsError(f"{pth} is a directory, not a log file", path=str(pth)) from None
        except OSError as e:
            raise ResultsError(f"{pth}: cannot read: {e.strerror}", path=str(pth)) from None
        names.append(str(pth))
    try:
        d = diagnose_text(texts, expect_fabric=expect_fabric)
    except ResultsError as e:
        raise ResultsError(f"{', '.join(names)}: {e}") from None
    d.sources = names
    return d


def parse_fabric(value: str | None) -> Fabric | None:
    if value is None:
        return None
    v = value.strip().lower()
    for f in FABRICS:
        if v == f:
            return f
    raise UsageError(
        f"--expect-fabric {value!r}: expected one of {', '.join(FABRICS)}", key="expect_fabric"
    )


__all__ = [
    "FABRICS",
    "Diagnosis",
    "Fabric",
    "Finding",
    "RankReport",
    "diagnose_files",
    "diagnose_text",
    "parse_fabric",
]
