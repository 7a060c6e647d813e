"""What carries a rank's inter-node traffic: the fabric a network NCCL selected stands for.

A plugin's name says little (`IBext_v8`, `gIB`, `AWS Libfabric`): what it carries does. The reader
(`nccllog`) records what each process printed; this module names the fabric; the diagnosis rules
and the `--expect-fabric` gate compare it with what was expected.
"""

from __future__ import annotations

from typing import Literal, get_args

from nccl_k8s.results.nccllog import RankReport

#: What `--expect-fabric` may ask for. tcpx and tcpxo are Google's GPUDirect-TCPX (A3 High) and
#: GPUDirect-TCPXO (A3 Mega) plugins; gib is Google's gIB plugin (A3 Ultra, A4, A4X), RDMA over
#: RoCE: its ranks are `roce` to every other reader, and `gib` only to a gate that asks for it.
#: mnnvl: multi-node NVLink (GB200/GB300 NVL72 ComputeDomains).
Fabric = Literal["ib", "roce", "efa", "socket", "nvlink", "mnnvl", "tcpx", "tcpxo", "gib"]
FABRICS: tuple[Fabric, ...] = get_args(Fabric)


def link_layers(rep: RankReport) -> set[str]:
    """The link layers ("IB", "RoCE") of the devices NCCL's IB transport listed for this rank."""
    return {d.rsplit("/", 1)[-1] for d in rep.ib_devices}


#: What libfabric providers carry, for aws-ofi-nccl (`NET/OFI Selected Provider is <p>`).
_OFI_FABRICS = {"efa": "efa", "cxi": "cxi", "tcp": "socket", "sockets": "socket", "udp": "socket"}

#: Fabrics named for a reader, where the identifier alone says little.
FABRIC_NAMES = {
    "cxi": "cxi (HPE Slingshot)",
    "tcpx": "tcpx (GPUDirect-TCPX)",
    "tcpxo": "tcpxo (GPUDirect-TCPXO)",
}

#: Fabrics named for the NCCL network plugin that carries them rather than for the link: a rank
#: is on one when its network is that plugin (lower-cased, as NCCL prints it: `NET/gIB`).
PLUGIN_FABRICS: dict[str, str] = {"gib": "gib"}


def fabric_of(network: str, links: set[str], provider: str | None = None) -> str:
    """What a network NCCL selected carries, by what the plugin is rather than its name:
    NCCL's IB transport and HPC-X's IBext/IBext_v8 plugin carry InfiniBand or RoCE (told apart
    by the device's link layer, InfiniBand when the log lists no device); Google's gIB plugin
    (A3 Ultra, A4) carries RDMA over RoCE unless its devices say IB; aws-ofi-nccl ("AWS
    Libfabric", "OFI") carries what its libfabric provider does (efa -> EFA, cxi -> HPE
    Slingshot, tcp/sockets -> TCP, verbs -> IB or RoCE), EFA when the log does not name the
    provider; "Socket" is TCP. Another plugin keeps its name."""
    name = network.strip().lower()
    if name == "socket":
        return "socket"
    if name == "ib" or name.startswith("ibext"):
        return "roce" if links == {"RoCE"} else "ib"
    if name == "gib":
        return "ib" if links == {"IB"} else "roce"
    # Google's plugins: NCCL prints the plugin's name, "GPUDirectTCPX_v7" (nccl-plugin-
    # gpudirecttcpx src/nccl_plugin.cc) and "FasTrak" (GPUDirect-TCPXO).
    if name.startswith("gpudirecttcpx"):
        return "tcpx"
    if name == "fastrak":
        return "tcpxo"
    if "libfabric" in name or name.startswith("ofi") or name == "efa":
        if provider is None:
            return "efa"
        prov = provider.split(";")[0]
        if prov == "verbs":
            return "roce" if links == {"RoCE"} else "ib"
        return _OFI_FABRICS.get(prov, prov)
    return network


def rank_fabric(rep: RankReport, links: set[str], provider: str | None = None) -> str | None:
    """What carried (or would carry) this rank's inter-node traffic: the network of its NET
    connections, else multi-node NVLink when NCCL enabled it (`comm ... MNNVL 1`, or P2P
    connections `via P2P/MNNVL`: NCCL 2.30 transport/p2p.cc names them so only when comm->MNNVL),
    else the network NCCL selected (printed even when MNNVL carries everything); None when the
    log shows none of them. `links` and `provider` are the log's, used when the rank's own lines
    do not say."""
    own = link_layers(rep) or links
    prov = rep.ofi_provider or provider
    nets = [t[4:] for t in rep.transports if t.startswith("NET/")]
    if nets:
        fabrics = {fabric_of(n, own, prov) for n in nets}
        return fabrics.pop() if len(fabrics) == 1 else "mixed"
    if rep.mnnvl or "P2P/MNNVL" in rep.transports:
        return "mnnvl"
    if rep.network:
        return fabric_of(rep.network, own, prov)
    return None


def rank_network(rep: RankReport) -> str | None:
    """The network plugin of the rank's NET connections, else the one NCCL selected, lower-cased
    ("gib", "ib", "socket"); "mixed" when its connections use several, None when unknown."""
    nets = {t[4:].lower() for t in rep.transports if t.startswith("NET/")}
    if nets:
        return nets.pop() if len(nets) == 1 else "mixed"
    return rep.network.strip().lower() if rep.network else None


def on_fabric(want: str, rep: RankReport, fabric: str | None) -> bool:
    """Whether a rank whose inter-node traffic `fabric` carried is on the fabric `want`: by its
    plugin for a plugin's fabric (gib), else by the fabric."""
    plugin = PLUGIN_FABRICS.get(want)
    if plugin is None:
        return fabric == want
    return fabric is not None and rank_network(rep) == plugin


__all__ = [
    "FABRICS",
    "FABRIC_NAMES",
    "PLUGIN_FABRICS",
    "Fabric",
    "fabric_of",
    "link_layers",
    "on_fabric",
    "rank_fabric",
    "rank_network",
]
