"""Read NCCL_DEBUG=INFO logs: what each NCCL process-device pair printed about itself.

`diagnose` judges what this module reads. Lines may carry any launcher prefix (`[1,0]<stdout>:`,
`[155] `, a timestamp, `(RayWorkerWrapper pid=..)`): the NCCL prefix is searched anywhere.

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
  `/CE`), `... via SHM/%s/%s`; older ones without `/%d` and with bus ids `%d[%lx]`; before 2.7
  `Ring %02d : %d[%lx] -> %d[%lx] via P2P/IPC` and `Ring %02d : %d -> %d [receive] via NET/%s/%d`
  (no device), `via direct shared memory` for SHM;
  `CollNet %02d/%1d : %d [send] via COLLNET/%s/%d%s%s` (older `Coll %02d : ...`).
- `NVLS multicast support is %savailable on dev %d`, `NVLS comm %p headRank %d nHeads %d ...`,
  `%d coll channels, %d collnet channels, %d nvls channels, %d p2p channels, %d p2p channels per peer`.
- `Pattern %d, crossNic %d, nChannels %d, bw %f/%f, type %s/%s, sameChannels %d` (graph search):
  the intra/inter path types (NVL = NVLink, PIX/PXB/PHB/SYS = PCIe or host, LOC = one GPU).

- nccl-tests' own failure report, `host: Test NCCL failure common.cu:%d '%s'`, kept per log.

A log excerpt rarely holds every line; every field is Optional.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from nccl_k8s.results.nccltests import failure_in

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
    r"^(?:Channel|Ring) (?P<ch>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)(?:\[[0-9a-fx]+\])? -> "
    r"(?P<dst>\d+)(?:\[[0-9a-fx]+\])? (?:\[(?P<dir>send|receive)\] )?via (?P<via>.+?)\s*$"
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


def _add(xs: list[Any], x: Any) -> None:
    if x not in xs:
        xs.append(x)


class LogParser:
    """Feed it one or more logs (one per pod is fine), then `finish` for the rank reports."""

    def __init__(self) -> None:
        self.reports: dict[str, RankReport] = {}
        self.hosts: set[str] = set()
        self.channels: dict[str, set[int]] = {}
        #: The runs' own failure lines (nccl-tests' "Test NCCL failure ..."), first per log.
        self.failures: list[str] = []

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
        failure: str | None = None
        for line in text.splitlines():
            m = _PREFIX.search(line)
            if not m and failure is None:
                failure = failure_in(line)
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
        if failure is not None:
            self.failures.append(failure)

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
                if net != "Socket":  # GPUDirect RDMA is a property of RDMA NICs, not of TCP
                    gdr = "/GDRDMA" in n.group("flags")
                    rep.net_gdr = gdr if rep.net_gdr is None else (rep.net_gdr and gdr)
            elif via.startswith("P2P/"):
                kind = via[4:].split("/")[0]
                _add(rep.transports, f"P2P/{kind}")
            elif via.startswith("SHM/") or via == "direct shared memory":
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


def link_layers(rep: RankReport) -> set[str]:
    """The link layers ("IB", "RoCE") of the devices NCCL's IB transport listed for this rank."""
    return {d.rsplit("/", 1)[-1] for d in rep.ib_devices}


def fabric_of(network: str, links: set[str]) -> str:
    """What a network NCCL selected carries, by what the plugin is rather than its name:
    NCCL's IB transport and HPC-X's IBext/IBext_v8 plugin carry InfiniBand or RoCE (told apart
    by the device's link layer, InfiniBand when the log lists no device), AWS's aws-ofi-nccl
    ("AWS Libfabric", "OFI") carries EFA, "Socket" is TCP. Another plugin keeps its name."""
    name = network.strip().lower()
    if name == "socket":
        return "socket"
    if name == "ib" or name.startswith("ibext"):
        return "roce" if links == {"RoCE"} else "ib"
    if "libfabric" in name or name.startswith("ofi") or name == "efa":
        return "efa"
    return network


def rank_fabric(rep: RankReport, links: set[str]) -> str | None:
    """What carried (or would carry) this rank's inter-node traffic: the network of its NET
    connections, else the one NCCL selected; None when the log shows neither."""
    nets = [t[4:] for t in rep.transports if t.startswith("NET/")]
    if nets:
        fabrics = {fabric_of(n, link_layers(rep) or links) for n in nets}
        return fabrics.pop() if len(fabrics) == 1 else "mixed"
    if rep.network:
        return fabric_of(rep.network, link_layers(rep) or links)
    return None


__all__ = ["LogParser", "RankReport", "fabric_of", "link_layers", "rank_fabric"]
