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

The findings of the log's own errors live in `findings`, the `--expect-fabric` gate in `gates`;
this module judges the fabric, nodes, GPUDirect RDMA and paths, and gathers them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nccl_k8s.errors import ResultsError, UsageError
from nccl_k8s.results.findings import (
    Finding,
    Severity,
    fatal_findings,
    ranks_of,
    torch_findings,
    warn_findings,
    where_of,
)
from nccl_k8s.results.gates import FABRICS, Fabric, expectation
from nccl_k8s.results.nccllog import (
    LogParser,
    RankReport,
    link_layers,
    rank_fabric,
)

_RDMA: tuple[str, ...] = ("ib", "roce", "efa")


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
                ranks_of(verbs),
            )
        )

    findings += _socket_findings(reports, fabrics, network_needed, expect_fabric, bool(verbs))
    findings += _loopback_findings(reports, fabrics, network_needed)
    findings += _gdr_findings(reports, net_ranks, gdr)
    findings += _path_findings(reports, expect_fabric)
    if expect_fabric is not None:
        findings += expectation(expect_fabric, reports, fabrics, network_needed, mnnvl, nodes)
    fatal, harmless = fatal_findings(reports, network_needed)
    findings += fatal
    findings += torch_findings(torch_errors or [])
    findings += warn_findings(reports, harmless)
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
                    ranks=ranks_of(socket),
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
                f"{where_of(socket)} selected TCP sockets while the other ranks use "
                f"{', '.join(others)}" + (f", expected {expect}" if sev == "error" else ""),
                hint + " " + _MIXED_HINT,
                ranks_of(socket),
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
    return [Finding(sev, "socket-fallback", message, hint, ranks_of(socket))]


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
        message = f"{where_of(lo)} use TCP sockets on the loopback interface across nodes"
    else:
        sev = "warning"
        message = (
            f"{where_of(lo)} use TCP sockets on the loopback interface only: if the ranks span "
            "nodes, they cannot reach each other"
        )
    return [Finding(sev, "socket-loopback", message, _LOOPBACK_HINT, ranks_of(lo))]


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
                ranks_of(r for r in net_ranks if r.net_gdr is False),
            )
        ]
    if gdr is None and no_module:
        return [
            Finding(
                "warning",
                "gdr-off",
                "GPUDirect RDMA disabled for the HCAs (nvidia-peermem not loaded: 'no module')",
                _GDR_HINT,
                ranks_of(no_module),
            )
        ]
    if gdr:
        return [
            Finding(
                "info",
                "gdr-on",
                "GPUDirect RDMA is on for RDMA connections (/GDRDMA)",
                ranks=ranks_of(r for r in net_ranks if r.net_gdr),
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
                ranks_of(shm),
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
                ranks=ranks_of(r for r in reports if r.nvls_used),
            )
        )
    if any(r.collnet_used for r in reports):
        out.append(
            Finding(
                "info",
                "collnet",
                "CollNet (in-network reduction, e.g. SHARP) is in use",
                ranks=ranks_of(r for r in reports if r.collnet_used),
            )
        )
    return out


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
