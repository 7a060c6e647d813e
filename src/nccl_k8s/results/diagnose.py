"""Diagnose NCCL_DEBUG=INFO logs: what each rank actually used, and what is wrong with it.

The most common real problem with multi-node NCCL is silent: libibverbs is missing from the image, or
the RDMA device is not in the pod, and NCCL falls back to TCP sockets; the job runs, at a fraction of
the bandwidth. The evidence is in the INFO log, which nobody reads. This module reads it.

Parsing follows the strings NCCL itself prints (quoted from NCCL's source, 2.4 to 2.28):

- line prefix (debug.cc): `%s:%d:%d [%d] NCCL INFO ` = host:pid:tid [cudaDev]; warnings add the
  source location: `%s:%d:%d [%d] %s:%d NCCL WARN `.
- `NCCL version %s` (init.cc; the string is `2.28.9+cuda13.0`).
- `comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d` (init.cc, 2.12+);
  `ncclCommInitRank comm %p rank %d nranks %d cudaDev %d ...` (older and newer init lines).
- `Using network %s` (init.cc): the network plugin NCCL chose (IB, Socket, or an external plugin).
- `NET/IB : Using%s %s; OOB %s:%s` with ` [%d]%s:%d/%s` per device (IB or RoCE link layer);
  `NET/IB : No device found.`; `Failed to open libibverbs.so[.1]` (ibvwrap);
  `NET/Socket : Using%s` with ` [%d]%s:%s` per interface;
  `NET/Plugin : No plugin found (libnccl-net.so)...` / `NET/Plugin: Could not find: libnccl-net.so`.
- `NET/%s : GPU Direct RDMA %s for HCA %d '%s'` (graph/topo.cc), older
  `NET/IB : GPU Direct RDMA Disabled for HCA %d '%s' (no module)` (net_ib.cc).
- connections, one per channel and peer (transport/*.cc):
  `Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s` (`/GDRDMA`, `(PCI)`, `/Shared`),
  `... [receive] via NET/%s/%d...`, with PXN `via NET/%s/%d(%d)...`;
  `Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/%s%s%s` (IPC, CUMEM, MNNVL, direct pointer; `/read`,
  `/CE`), `... via SHM/%s/%s`; older ones without `/%d` and with bus ids `%d[%lx]`;
  `CollNet %02d/%1d : %d [send] via COLLNET/%s/%d%s%s` (older `Coll %02d : ...`).
- `NVLS multicast support is %savailable on dev %d`, `NVLS comm %p headRank %d nHeads %d ...`,
  `%d coll channels, %d collnet channels, %d nvls channels, %d p2p channels, %d p2p channels per peer`.
- `Pattern %d, crossNic %d, nChannels %d, bw %f/%f, type %s/%s, sameChannels %d` (graph search):
  the intra/inter path types (NVL = NVLink, PIX/PXB/PHB/SYS = PCIe or host, LOC = one GPU).

A log excerpt rarely holds every line; every field is Optional and each finding says what it saw.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from nccl_k8s.errors import ResultsError

Severity = Literal["info", "warning", "error"]
Fabric = Literal["ib", "roce", "socket", "nvlink"]
FABRICS: tuple[Fabric, ...] = get_args(Fabric)

# host:pid:tid [dev] (file:line )?NCCL LEVEL message. Anything may precede it (timestamps, pod names).
_PREFIX = re.compile(
    r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\](?: \S+:\d+)? "
    r"NCCL (?P<level>INFO|WARN|ABORT|TRACE)\s?(?P<msg>.*)$"
)
# Lines printed without the host prefix (some launchers strip it): "NCCL INFO ..." at the start,
# after at most one token (a timestamp).
_BARE = re.compile(r"^\s*(?:\S+\s+)?NCCL (?P<level>INFO|WARN)\s(?P<msg>.*)$")

_VERSION = re.compile(r"^NCCL version (?P<v>\d+\.\d+\.\d+)\S*?(?:\+cuda(?P<cuda>\d+\.\d+))?")
_COMM = re.compile(
    r"comm 0x[0-9a-f]+ rank (?P<rank>\d+) nRanks (?P<n>\d+) nNodes (?P<nodes>\d+) "
    r"localRanks (?P<lr>\d+) localRank (?P<l>\d+)(?: MNNVL (?P<mnnvl>\d+))?"
)
_INIT = re.compile(r"comm 0x[0-9a-f]+ rank (?P<rank>\d+) nranks (?P<n>\d+) cudaDev (?P<dev>\d+)")
_USING_NET = re.compile(r"^Using network (?P<net>.+?)\s*$")
_IB_USING = re.compile(r"^NET/IB : Using(?P<devs>.*?)(?: \[RO\])? ?; OOB (?P<oob>\S+)")
_IB_DEV = re.compile(r"\[(?P<i>\d+)\](?P<name>[^\s:]+):(?P<port>\d+)/(?P<link>IB|RoCE)")
_IB_NODEV = re.compile(r"^NET/IB : No device found")
_SOCK_USING = re.compile(r"^NET/Socket : Using(?P<ifs>.*)$")
_SOCK_IF = re.compile(r"\[(?P<i>\d+)\](?P<name>[^\s:]+):(?P<addr>\S+)")
_GDR_HCA = re.compile(
    r"^NET/(?P<net>\S+) : GPU Direct RDMA (?P<state>Enabled|Disabled) for HCA (?P<n>\d+) "
    r"'(?P<name>[^']*)'(?P<why> \(no module\))?"
)
_LIBIBVERBS = re.compile(r"Failed to open libibverbs")
_NO_PLUGIN = re.compile(
    r"^NET/Plugin ?: (?:No plugin found|Could not find:? libnccl-net|Plugin load returned)"
)
_IB_INIT_FAIL = re.compile(r"^Failed to initialize NET plugin (?P<net>\S+)")
_ENV = re.compile(r"^(?P<k>NCCL_[A-Z0-9_]+) set by environment to (?P<v>.*?)\s*$")
_CHAN = re.compile(
    r"^Channel (?P<ch>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)\[[0-9a-fx]+\] -> "
    r"(?P<dst>\d+)\[[0-9a-fx]+\] (?:\[(?P<dir>send|receive)\] )?via (?P<via>.+?)\s*$"
)
_VIA_NET = re.compile(r"^NET/(?P<net>[^/]+)/(?P<dev>\d+)(?:\((?P<proxy>\d+)\))?(?P<flags>.*)$")
_COLLNET = re.compile(
    r"^Coll(?:Net)? (?P<ch>\d+)(?:/\d+)? : (?P<rank>\d+) \[(?P<dir>send|receive)\] via COLLNET/"
)
_RING_LIST = re.compile(r"^Channel (?P<ch>\d+)/(?P<n>\d+) :(?: \d+)+\s*$")
_CHANNELS = re.compile(
    r"^(?P<coll>\d+) coll channels, (?:(?P<collnet>\d+) collnet channels, )?"
    r"(?:(?P<nvls>\d+) nvls channels, )?(?P<p2p>\d+) p2p channels"
)
_NVLS_AVAIL = re.compile(r"^NVLS multicast support is (?P<not>not )?available on dev (?P<d>\d+)")
_NVLS_COMM = re.compile(r"^NVLS comm 0x[0-9a-f]+ headRank")
_PATTERN = re.compile(
    r"^Pattern \d+, crossNic \d+, nChannels \d+, .*type (?P<intra>\w+)/(?P<inter>\w+)"
)


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
class RankReport:
    """What one NCCL process-device pair printed. Key: host:pid [cudaDev]."""

    key: str
    host: str | None = None
    pid: int | None = None
    cuda_dev: int | None = None
    rank: int | None = None
    nranks: int | None = None
    nnodes: int | None = None
    mnnvl: bool | None = None
    nccl_version: str | None = None
    cuda_version: str | None = None
    #: The network NCCL chose ("IB", "Socket", a plugin's name), from `Using network`.
    network: str | None = None
    ib_devices: list[str] = field(default_factory=list)
    ib_no_device: bool = False
    socket_ifaces: list[str] = field(default_factory=list)
    #: HCA name -> GPUDirect RDMA possible (from the topology's per-HCA line).
    gdr_hca: dict[str, bool] = field(default_factory=dict)
    gdr_no_module: bool = False
    #: Transports seen in this rank's connection lines: "NET/IB", "NET/Socket", "P2P/IPC", "SHM", ...
    transports: list[str] = field(default_factory=list)
    #: NET device indices used by connections, and whether those connections use GDR.
    net_devs: list[int] = field(default_factory=list)
    net_gdr: bool | None = None
    peers: list[int] = field(default_factory=list)
    coll_channels: int | None = None
    nvls_channels: int | None = None
    p2p_channels: int | None = None
    #: Distinct channel ids in connection lines (an excerpt may show fewer than exist).
    channels_seen: int = 0
    nvls_available: bool | None = None
    nvls_used: bool = False
    collnet_used: bool = False
    intra_path: str | None = None
    libibverbs_missing: bool = False
    no_net_plugin: bool = False
    net_init_failed: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else self.key

    def net_summary(self) -> str:
        """One phrase: what carried (or would carry) this rank's inter-node traffic."""
        nets = [t for t in self.transports if t.startswith("NET/")]
        if nets:
            parts = [", ".join(nets)]
            if self.net_devs:
                parts.append("dev " + ",".join(str(d) for d in self.net_devs))
            if self.net_gdr is not None:
                parts.append("GDR on" if self.net_gdr else "GDR off")
            return " ".join(parts)
        if self.network:
            where = ""
            if self.network == "Socket" and self.socket_ifaces:
                where = " on " + ",".join(i.split(":")[0] for i in self.socket_ifaces)
            elif self.network == "IB" and self.ib_devices:
                where = " on " + ",".join(self.ib_devices)
            return f"{self.network} selected{where}, no NET connection seen"
        return "-"


@dataclass
class Diagnosis:
    ranks: list[RankReport]
    findings: list[Finding]
    #: Nodes the communicator spans, when the log says (nNodes, or several hosts).
    nodes: int | None
    #: Whether any byte had to cross a network: False for one node, None when the log cannot tell.
    network_needed: bool | None
    #: "ib", "roce", "socket", another plugin's name, or None: what inter-node traffic used.
    inter_node: str | None
    #: GPUDirect RDMA on NET connections: True, False, or None when no NET connection was seen.
    gdr: bool | None
    expect_fabric: Fabric | None = None
    sources: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(f.severity == "error" for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["failed"] = self.failed
        for r, rep in zip(d["ranks"], self.ranks, strict=True):
            r["net"] = rep.net_summary()
        return d


def _add(xs: list[Any], x: Any) -> None:
    if x not in xs:
        xs.append(x)


class _Parser:
    def __init__(self) -> None:
        self.reports: dict[str, RankReport] = {}
        self.hosts: set[str] = set()
        self.channels: dict[str, set[int]] = {}

    def report(self, host: str | None, pid: int | None, dev: int | None) -> RankReport:
        key = f"{host}:{pid} [{dev}]" if host is not None else "(no prefix)"
        rep = self.reports.get(key)
        if rep is None:
            rep = self.reports[key] = RankReport(key=key, host=host, pid=pid, cuda_dev=dev)
            self.channels[key] = set()
        if host:
            self.hosts.add(host)
        return rep

    def feed(self, text: str) -> None:
        for line in text.splitlines():
            m = _PREFIX.search(line)
            if m:
                rep = self.report(m.group("host"), int(m.group("pid")), int(m.group("dev")))
                level, msg = m.group("level"), m.group("msg").strip()
            else:
                b = _BARE.search(line)
                if not b:
                    continue
                rep = self.report(None, None, None)
                level, msg = b.group("level"), b.group("msg").strip()
            if level in ("WARN", "ABORT"):
                _add(rep.warnings, msg)
                if _LIBIBVERBS.search(msg):
                    rep.libibverbs_missing = True
                continue
            self.info(rep, msg)

    def set_rank(self, rep: RankReport, rank: int) -> None:
        if rep.rank is None:
            rep.rank = rank

    def info(self, rep: RankReport, msg: str) -> None:
        if m := _CHAN.match(msg):
            self.channels[rep.key].add(int(m.group("ch")))
            src, dst, direction = int(m.group("src")), int(m.group("dst")), m.group("dir")
            # NET lines: the local rank is the sender of [send], the receiver of [receive];
            # P2P/SHM lines are printed by the sending side.
            me, peer = (dst, src) if direction == "receive" else (src, dst)
            self.set_rank(rep, me)
            _add(rep.peers, peer)
            via = m.group("via")
            if n := _VIA_NET.match(via):
                net = n.group("net")
                _add(rep.transports, f"NET/{net}")
                _add(rep.net_devs, int(n.group("dev")))
                gdr = "/GDRDMA" in n.group("flags")
                rep.net_gdr = gdr if rep.net_gdr is None else (rep.net_gdr and gdr)
            elif via.startswith("P2P/"):
                kind = via[4:].split("/")[0]
                _add(rep.transports, f"P2P/{kind}")
            elif via.startswith("SHM/"):
                _add(rep.transports, "SHM")
            else:
                _add(rep.transports, via.split("/")[0])
        elif m := _RING_LIST.match(msg):
            if rep.coll_channels is None:
                rep.coll_channels = int(m.group("n"))
        elif m := _COLLNET.match(msg):
            rep.collnet_used = True
            _add(rep.transports, "COLLNET")
            self.set_rank(rep, int(m.group("rank")))
        elif m := _VERSION.match(msg):
            rep.nccl_version = m.group("v")
            rep.cuda_version = m.group("cuda")
        elif m := _COMM.search(msg):
            rep.rank = int(m.group("rank"))
            rep.nranks = int(m.group("n"))
            rep.nnodes = int(m.group("nodes"))
            if m.group("mnnvl") is not None:
                rep.mnnvl = m.group("mnnvl") == "1"
        elif m := _INIT.search(msg):
            rep.rank = int(m.group("rank"))
            rep.nranks = int(m.group("n"))
        elif m := _USING_NET.match(msg):
            rep.network = m.group("net")
        elif m := _IB_USING.match(msg):
            for d in _IB_DEV.finditer(m.group("devs")):
                _add(rep.ib_devices, f"{d.group('name')}:{d.group('port')}/{d.group('link')}")
        elif _IB_NODEV.match(msg):
            rep.ib_no_device = True
        elif m := _SOCK_USING.match(msg):
            for i in _SOCK_IF.finditer(m.group("ifs")):
                _add(rep.socket_ifaces, f"{i.group('name')}:{i.group('addr')}")
        elif m := _GDR_HCA.match(msg):
            rep.gdr_hca[m.group("name")] = m.group("state") == "Enabled"
            if m.group("why"):
                rep.gdr_no_module = True
        elif _LIBIBVERBS.search(msg):
            rep.libibverbs_missing = True
        elif _NO_PLUGIN.match(msg):
            rep.no_net_plugin = True
        elif m := _IB_INIT_FAIL.match(msg):
            _add(rep.net_init_failed, m.group("net"))
        elif m := _ENV.match(msg):
            rep.env[m.group("k")] = m.group("v")
        elif m := _CHANNELS.match(msg):
            rep.coll_channels = int(m.group("coll"))
            rep.p2p_channels = int(m.group("p2p"))
            if m.group("nvls") is not None:
                rep.nvls_channels = int(m.group("nvls"))
                if rep.nvls_channels > 0:
                    rep.nvls_used = True
        elif m := _NVLS_AVAIL.match(msg):
            rep.nvls_available = m.group("not") is None
        elif _NVLS_COMM.match(msg):
            rep.nvls_used = True
            _add(rep.transports, "NVLS")
        elif m := _PATTERN.match(msg):
            rep.intra_path = m.group("intra")

    def finish(self) -> list[RankReport]:
        for key, rep in self.reports.items():
            rep.channels_seen = len(self.channels[key])
            if rep.nvls_used:
                _add(rep.transports, "NVLS")
            rep.transports.sort()
            rep.net_devs.sort()
            rep.peers.sort()
            if rep.network is None:
                # Old NCCL or an excerpt without the "Using network" line: the initialized
                # transport tells, Socket only being set up when IB was not.
                if rep.socket_ifaces and not rep.ib_devices:
                    rep.network = "Socket"
                elif rep.ib_devices:
                    rep.network = "IB"
        return sorted(
            self.reports.values(),
            key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.key),
        )


def _fabric_of(net: str, reports: list[RankReport]) -> str:
    if net == "Socket":
        return "socket"
    if net == "IB":
        links = {d.rsplit("/", 1)[-1] for r in reports for d in r.ib_devices}
        return "roce" if links == {"RoCE"} else "ib"
    return net


_SOCKET_HINT = (
    "NCCL found no usable RDMA device, so inter-node traffic runs over TCP at a fraction of the "
    "fabric's bandwidth. Check that the image has rdma-core/libibverbs, that the pod requests the "
    "RDMA resource (e.g. rdma/ib, or your device plugin's name) and sees /dev/infiniband, and "
    "NCCL_IB_HCA / NCCL_SOCKET_IFNAME; if TCP is intended, pass --expect-fabric socket."
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


def _ranks(reports: Iterable[RankReport]) -> list[str]:
    return [r.label for r in reports]


def analyse(
    reports: list[RankReport], hosts: set[str], *, expect_fabric: Fabric | None = None
) -> Diagnosis:
    findings: list[Finding] = []
    if not reports:
        raise ResultsError(
            "no NCCL log lines found: run with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,NET "
            "or unset) and pass the pods' logs"
        )
    nnodes = [r.nnodes for r in reports if r.nnodes is not None]
    mnnvl = any(r.mnnvl for r in reports)
    net_ranks = [r for r in reports if any(t.startswith("NET/") for t in r.transports)]
    nodes: int | None
    if nnodes:
        nodes = max(nnodes)
    elif len(hosts) > 1:
        nodes = len(hosts)
    else:
        nodes = None
    network_needed = None if nodes is None else nodes > 1
    if net_ranks:
        network_needed = True

    used_nets = sorted({t[4:] for r in net_ranks for t in r.transports if t.startswith("NET/")})
    selected = sorted({r.network for r in reports if r.network})
    inter_node: str | None = None
    if used_nets:
        inter_node = _fabric_of(used_nets[0], reports) if len(used_nets) == 1 else "mixed"
    elif network_needed is not False and len(selected) == 1:
        inter_node = _fabric_of(selected[0], reports)
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

    socket_ranks = [r for r in reports if "NET/Socket" in r.transports or (r.network == "Socket")]
    if inter_node == "socket" and network_needed:
        sev: Severity = "error" if expect_fabric in ("ib", "roce", "nvlink") else "warning"
        ifaces = sorted({i.split(":")[0] for r in reports for i in r.socket_ifaces})
        on = f" on {', '.join(ifaces)}" if ifaces else ""
        seen = "went" if used_nets else "goes"
        findings.append(
            Finding(
                sev,
                "socket-fallback",
                f"inter-node traffic {seen} over TCP sockets (NET/Socket{on})"
                + (f", expected {expect_fabric}" if expect_fabric and sev == "error" else ""),
                (_LIBIBVERBS_HINT + " " if verbs else "") + _SOCKET_HINT,
                _ranks(socket_ranks),
            )
        )
    elif inter_node == "socket" and network_needed is None:
        sev = "error" if expect_fabric in ("ib", "roce") else "warning"
        findings.append(
            Finding(
                sev,
                "socket-fallback",
                "NCCL selected the Socket network (TCP): if these ranks span nodes, inter-node "
                "traffic goes over TCP" + (f", expected {expect_fabric}" if sev == "error" else ""),
                (_LIBIBVERBS_HINT + " " if verbs else "") + _SOCKET_HINT,
                _ranks(socket_ranks),
            )
        )
    elif network_needed is False and "Socket" in selected:
        findings.append(
            Finding(
                "info",
                "single-node-socket",
                "all ranks are on one node: no byte crossed a network (NCCL reports "
                "'Using network Socket', which is harmless here)",
                ranks=_ranks(r for r in reports if r.network == "Socket"),
            )
        )

    if gdr is False:
        no_mod = any(r.gdr_no_module for r in reports)
        findings.append(
            Finding(
                "warning",
                "gdr-off",
                "GPUDirect RDMA is off on NET connections"
                + (" (nvidia-peermem not loaded: 'no module')" if no_mod else ""),
                _GDR_HINT,
                _ranks(r for r in net_ranks if r.net_gdr is False),
            )
        )
    elif gdr is None and any(r.gdr_no_module for r in reports):
        findings.append(
            Finding(
                "warning",
                "gdr-off",
                "GPUDirect RDMA disabled for the HCAs (nvidia-peermem not loaded: 'no module')",
                _GDR_HINT,
                _ranks(r for r in reports if r.gdr_no_module),
            )
        )
    elif gdr:
        findings.append(
            Finding(
                "info",
                "gdr-on",
                "GPUDirect RDMA is on for NET connections (/GDRDMA)",
                ranks=_ranks(net_ranks),
            )
        )

    shm = [r for r in reports if "SHM" in r.transports]
    if shm:
        findings.append(
            Finding(
                "error" if expect_fabric == "nvlink" else "warning",
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
        findings.append(
            Finding(
                "info",
                "nvls",
                "NVLink SHARP (NVLS) is in use"
                + (f" ({', '.join(map(str, ch))} nvls channels)" if ch else ""),
                ranks=_ranks(r for r in reports if r.nvls_used),
            )
        )
    if any(r.collnet_used for r in reports):
        findings.append(
            Finding(
                "info",
                "collnet",
                "CollNet (in-network reduction, e.g. SHARP) is in use",
                ranks=_ranks(r for r in reports if r.collnet_used),
            )
        )

    if expect_fabric is not None:
        findings.extend(
            _expectation(expect_fabric, reports, network_needed, inter_node, mnnvl, nodes)
        )

    seen_warn: dict[str, list[str]] = {}
    for r in reports:
        for w in r.warnings:
            if _LIBIBVERBS.search(w):
                continue
            seen_warn.setdefault(w, []).append(r.label)
    for w, who in seen_warn.items():
        findings.append(
            Finding(
                "warning",
                "nccl-warn",
                f"NCCL WARN {w}",
                "read the lines around it in the rank's log",
                who,
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
    )


def _expectation(
    want: Fabric,
    reports: list[RankReport],
    network_needed: bool | None,
    inter_node: str | None,
    mnnvl: bool,
    nodes: int | None,
) -> list[Finding]:
    out: list[Finding] = []
    if want == "nvlink":
        net = [r for r in reports if any(t.startswith("NET/") for t in r.transports)]
        if net or (network_needed and not mnnvl):
            out.append(
                Finding(
                    "error",
                    "expect-nvlink",
                    f"expected NVLink only, but the ranks span {nodes or 'several'} nodes"
                    + (
                        " and use "
                        + ", ".join(
                            sorted({t for r in net for t in r.transports if t.startswith("NET/")})
                        )
                        if net
                        else ""
                    ),
                    "an NVLink-only run must keep all ranks in one node (or one MNNVL domain).",
                    _ranks(net or reports),
                )
            )
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
            out.append(
                Finding(
                    "info",
                    "expect-nvlink",
                    "no network needed: traffic stays on "
                    "NVLink/P2P within the node" + (" (MNNVL)" if mnnvl else ""),
                    ranks=_ranks(reports),
                )
            )
        return out
    if network_needed is False:
        out.append(
            Finding(
                "info",
                f"expect-{want}",
                f"all ranks are on one node: no inter-node traffic, so --expect-fabric {want} "
                "was not exercised",
            )
        )
        return out
    if inter_node is None:
        out.append(
            Finding(
                "warning",
                f"expect-{want}",
                f"cannot tell from the log which network carried inter-node traffic "
                f"(expected {want})",
                "run with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS unset or including INIT,NET.",
            )
        )
    elif inter_node == "socket" and want == "socket":
        out.append(
            Finding("info", "expect-socket", "inter-node traffic uses TCP sockets, as expected")
        )
    elif inter_node == "socket":
        pass  # already reported as socket-fallback with severity error
    elif inter_node == want:
        out.append(
            Finding("info", f"expect-{want}", f"inter-node traffic uses {want}, as expected")
        )
    elif {inter_node, want} == {"ib", "roce"}:
        out.append(
            Finding(
                "warning",
                f"expect-{want}",
                f"inter-node traffic uses {inter_node.upper() if inter_node == 'roce' else 'IB'} "
                f"links, expected {want}",
                "NCCL's IB transport carries both; check NCCL_IB_HCA picks the intended ports.",
            )
        )
    elif want == "socket":
        out.append(
            Finding(
                "info",
                "expect-socket",
                f"inter-node traffic uses {inter_node}, faster than the expected TCP sockets",
            )
        )
    else:
        out.append(
            Finding(
                "error",
                f"expect-{want}",
                f"inter-node traffic uses {inter_node}, expected {want}",
                "check which network plugin the image ships (NCCL_NET, NCCL_NET_PLUGIN).",
            )
        )
    return out


def diagnose_text(
    texts: Iterable[str] | str,
    *,
    expect_fabric: Fabric | None = None,
) -> Diagnosis:
    """Diagnose one or more logs (e.g. one per pod) as one communicator's evidence."""
    p = _Parser()
    for t in [texts] if isinstance(texts, str) else texts:
        p.feed(t)
    return analyse(p.finish(), p.hosts, expect_fabric=expect_fabric)


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
    from nccl_k8s.errors import UsageError

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
