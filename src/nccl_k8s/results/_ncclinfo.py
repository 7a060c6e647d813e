"""What NCCL's INFO lines say about a process: its identity (version, rank, communicator), the
network it chose and the devices it listed, the topology (channels, NVLS, GDR), read line by line
into its RankReport by `nccllog.LogParser`. Kept apart from the parser so that each stays small;
the regular expressions here are those only these readers use.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from nccl_k8s.results._ncclfast import via_parts

if TYPE_CHECKING:
    from nccl_k8s.results.nccllog import RankReport

_CHANNELS = re.compile(
    r"^(?P<coll>\d+) coll channels, (?:(?P<collnet>\d+) collnet channels, )?"
    r"(?:(?P<nvls>\d+) nvls channels, )?(?P<p2p>\d+) p2p channels"
)
_COMM = re.compile(
    r"comm 0x[0-9a-f]+ rank (?P<rank>\d+) nRanks (?P<n>\d+) nNodes (?P<nodes>\d+) "
    r"localRanks (?P<lr>\d+) localRank (?P<l>\d+)(?: MNNVL (?P<mnnvl>\d+))?"
)
_ENV = re.compile(r"^(?P<k>NCCL_[A-Z0-9_]+) set by environment to (?P<v>.*?)\s*$")
_GDR_DISTANCE = re.compile(
    r"GPU Direct RDMA Disabled for GPU \S+ / HCA \d+ \((?P<why>distance \d+ >=? \d+)\)"
)
_GDR_HCA = re.compile(
    r"^NET/(?P<net>\S+) : GPU Direct RDMA (?P<state>Enabled|Disabled) for HCA (?P<n>\d+) "
    r"'(?P<name>[^']*)'(?P<why> \(no module\))?"
)
_IB_DEV = re.compile(r"\[(?P<i>\d+)\](?P<name>[^\s:]+):(?P<port>\d+)/(?P<link>IB|RoCE)")
_IB_DEV_OLD = re.compile(r"^NET/IB: \[\d+\] (?P<name>[^\s:]+):(?P<port>\d+)/(?P<link>IB|RoCE)")
_IB_INIT_FAIL = re.compile(r"^Failed to initialize NET plugin (?P<net>\S+)")
_IB_NODEV = re.compile(r"^NET/IB : No device found")
_IB_USING = re.compile(r"^NET/g?IB : Using(?P<devs>.*?)(?: \[RO\])? ?; OOB (?P<oob>\S+)")
_INIT = re.compile(r"comm 0x[0-9a-f]+ rank (?P<rank>\d+) nranks (?P<n>\d+) cudaDev (?P<dev>\d+)")
_INTERNAL_NET = re.compile(r"^Using internal Network (?P<net>\S+)")
LIBIBVERBS = re.compile(r"Failed to open libibverbs")
_NO_PLUGIN = re.compile(
    r"^NET/Plugin ?: (?:No plugin found|Could not find:? libnccl-net|Plugin load returned)"
)
_NVLS_AVAIL = re.compile(r"^NVLS multicast support is (?P<not>not )?available on dev (?P<d>\d+)")
_NVLS_COMM = re.compile(r"^NVLS comm 0x[0-9a-f]+ headRank")
_OFI_PROVIDER = re.compile(r"^NET/OFI Selected [Pp]rovider is (?P<p>[\w;+-]+)")
_PATTERN = re.compile(
    r"^Pattern \d+, crossNic \d+, nChannels \d+, .*type (?P<intra>\w+)/(?P<inter>\w+)"
)
_RANK_OLD = re.compile(r"^rank (?P<rank>\d+) nranks (?P<n>\d+)\s*$")
_SOCK_IF = re.compile(r"\[(?P<i>\d+)\](?P<name>[^\s:]+):(?P<addr>\S+)")
_SOCK_USING = re.compile(r"^NET/Socket : Using(?P<ifs>.*)$")
_USING_NET = re.compile(r"^Using network (?P<net>.+?)\s*$")
_VERSION = re.compile(r"^NCCL version (?P<v>\d+\.\d+\.\d+)\S*?(?:\+cuda(?P<cuda>\d+\.\d+))?")


def _older(version: str, than: tuple[int, int]) -> bool:
    major, minor = (int(x) for x in version.split(".")[:2])
    return (major, minor) < than


def set_version(rep: RankReport, ver: tuple[str, str | None]) -> None:
    if rep.nccl_version is None:
        rep.nccl_version, rep.cuda_version = ver


def add_once(xs: list[Any], x: Any) -> None:
    if x not in xs:
        xs.append(x)


def read_via(rep: RankReport, via: str) -> None:
    """The transport of a connection line (`via NET/IB/0/GDRDMA`, `via P2P/IPC`, ...)."""
    transport, dev, gdr = via_parts(via)
    add_once(rep.transports, transport)
    if dev is not None:
        add_once(rep.net_devs, dev)
    if gdr is not None:
        rep.net_gdr = gdr if rep.net_gdr is None else (rep.net_gdr and gdr)


def read_identity(rep: RankReport, msg: str) -> bool:
    """Who the process is: version, rank, ranks, nodes, the network NCCL chose."""
    if m := _VERSION.match(msg):
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
    elif m := _USING_NET.match(msg) or _INTERNAL_NET.match(msg):
        rep.network = m.group("net")
    elif m := _IB_DEV_OLD.match(msg):
        add_once(rep.ib_devices, f"{m.group('name')}:{m.group('port')}/{m.group('link')}")
    elif m := _RANK_OLD.match(msg):
        rep.rank = int(m.group("rank"))
        rep.nranks = int(m.group("n"))
    else:
        return False
    return True


def read_network(rep: RankReport, msg: str) -> bool:
    """The network transports' own lines: devices, interfaces, GPUDirect RDMA, plugins."""
    if m := _OFI_PROVIDER.match(msg):
        rep.ofi_provider = m.group("p").lower()
    elif m := _GDR_DISTANCE.search(msg):
        rep.gdr_distance = m.group("why")
    elif m := _IB_USING.match(msg):
        for d in _IB_DEV.finditer(m.group("devs")):
            add_once(rep.ib_devices, f"{d.group('name')}:{d.group('port')}/{d.group('link')}")
    elif _IB_NODEV.match(msg):
        rep.ib_no_device = True
    elif m := _SOCK_USING.match(msg):
        for i in _SOCK_IF.finditer(m.group("ifs")):
            add_once(rep.socket_ifaces, f"{i.group('name')}:{i.group('addr')}")
    elif m := _GDR_HCA.match(msg):
        rep.gdr_hca[m.group("name")] = m.group("state") == "Enabled"
        if m.group("why"):
            rep.gdr_no_module = True
    elif LIBIBVERBS.search(msg):
        rep.libibverbs_missing = True
    elif _NO_PLUGIN.match(msg):
        rep.no_net_plugin = True
    elif m := _IB_INIT_FAIL.match(msg):
        add_once(rep.net_init_failed, m.group("net"))
    else:
        return False
    return True


def read_topology(rep: RankReport, msg: str) -> bool:
    """The environment, channel counts, NVLS and the graph search's path types."""
    if m := _ENV.match(msg):
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
        add_once(rep.transports, "NVLS")
    elif m := _PATTERN.match(msg):
        rep.intra_path = m.group("intra")
    else:
        return False
    return True


def implied_network(rep: RankReport, ib_listed: bool) -> str | None:
    """The network of a process whose log lacks the `Using network` line (old NCCL, or an
    excerpt): IB when its transport listed devices. NCCL <= 2.5 prints `NET/Socket : Using` in
    every process, IB or not (bootstrap), so there a socket list is Socket only when the log
    says why IB was not used; later ones list sockets only when the socket transport was set
    up, i.e. no RDMA network initialized."""
    ib_off = (
        rep.ib_no_device
        or rep.libibverbs_missing
        or rep.env.get("NCCL_IB_DISABLE", "").rstrip(".") == "1"
        or "IB" in rep.net_init_failed
    )
    old = rep.nccl_version is not None and _older(rep.nccl_version, (2, 6))
    if rep.ib_devices:
        return "IB"
    if rep.socket_ifaces and (ib_off or not (old or ib_listed)):
        return "Socket"
    return None


__all__ = [
    "LIBIBVERBS",
    "add_once",
    "implied_network",
    "read_identity",
    "read_network",
    "read_topology",
    "read_via",
    "set_version",
]
