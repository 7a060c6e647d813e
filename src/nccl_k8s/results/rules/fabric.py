"""Rules for the fabric of inter-node traffic: no libibverbs, the silent fall back to TCP sockets
(all ranks, or some among RDMA ones), sockets on the loopback interface, GPUDirect RDMA off."""

from __future__ import annotations

from nccl_k8s.results.fabrics import FABRICS, Fabric
from nccl_k8s.results.findings import (
    Code,
    Facts,
    Finding,
    Rule,
    Severity,
    ranks_of,
    traces_of,
    where_of,
)
from nccl_k8s.results.nccllog import RankReport

#: The fabrics a fall back to NCCL's Socket transport betrays (an error when expected; the fabric
#: table's `rdma`): the RDMA ones, and Google's GPUDirect plugins (TCPX and TCPXO move TCP
#: through their own plugin and GPU NICs, not through NCCL's sockets on eth0).
_RDMA: tuple[Fabric, ...] = tuple(f for f in FABRICS if f.rdma)
_ON_SOCKET_ERROR = ", ".join(f"`{f}`" for f in (*_RDMA, Fabric.NVLINK))

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


def _libibverbs(facts: Facts) -> list[Finding]:
    verbs = [r for r in facts.reports if r.libibverbs_missing]
    if not verbs:
        return []
    return [
        Finding(
            "info" if facts.network_needed is False else "warning",
            "libibverbs-missing",
            "NCCL could not open libibverbs.so: the IB/RoCE transport is unavailable",
            _LIBIBVERBS_HINT,
            ranks_of(verbs),
            # The WARN, and the error traces the missing transport left after it.
            [w for r in verbs for w in r.warnings if "Failed to open libibverbs" in w]
            + traces_of(facts.reports, verbs),
        )
    ]


LIBIBVERBS = Rule(
    "libibverbs",
    (
        Code(
            "libibverbs-missing",
            ("warning", "info"),
            "`Failed to open libibverbs.so`",
            "warning (info on one node)",
        ),
    ),
    _libibverbs,
)


def _socket(facts: Facts) -> list[Finding]:
    verbs = any(r.libibverbs_missing for r in facts.reports)
    return _socket_findings(
        facts.reports, facts.fabrics, facts.network_needed, facts.expect_fabric, verbs
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


SOCKET = Rule(
    "socket",
    (
        Code(
            "socket-fallback",
            ("warning", "error"),
            "inter-node traffic goes (or, nodes unknown, would go) over TCP sockets; when only "
            "some ranks are on TCP, it names them and their hosts; the hint says when "
            "`NCCL_IB_DISABLE=1` turned IB off",
            f"warning; **error** with `--expect-fabric` {_ON_SOCKET_ERROR}; none with `socket`",
        ),
        Code("single-node-socket", ("info",), "one node, `Using network Socket`"),
    ),
    _socket,
)
LOOPBACK = Rule(
    "loopback",
    (
        Code(
            "socket-loopback",
            ("error", "warning"),
            "the sockets are on `lo` (127.x): set NCCL_SOCKET_IFNAME",
            "**error** across nodes; warning when nodes are unknown",
        ),
    ),
    lambda facts: _loopback_findings(facts.reports, facts.fabrics, facts.network_needed),
)
GDR = Rule(
    "gdr",
    (
        Code(
            "gdr-off",
            ("warning",),
            "NET connections without `/GDRDMA`, or HCAs with GDR disabled `(no module)`; the "
            "hint says when the PCIe distance (`distance 3 >= 2`), not nvidia-peermem, turned "
            "it off",
        ),
        Code("gdr-on", ("info",), "NET connections use GPUDirect RDMA"),
    ),
    lambda facts: _gdr_findings(facts.reports, facts.net_ranks, facts.gdr),
)

__all__ = ["GDR", "LIBIBVERBS", "LOOPBACK", "SOCKET"]
