"""What carries a rank's inter-node traffic: the fabric a network NCCL selected stands for.

A plugin's name says little (`IBext_v8`, `gIB`, `AWS Libfabric`): what it carries does. The reader
(`nccllog`) records what each process printed; this module names the fabric; the diagnosis rules
and the `--expect-fabric` gate compare it with what was expected.
"""

from __future__ import annotations

from typing import Literal, get_args

from nccl_k8s.results.nccllog import RankReport

#: What `--expect-fabric` may ask for.
Fabric = Literal["ib", "roce", "efa", "socket", "nvlink", "mnnvl"]
FABRICS: tuple[Fabric, ...] = get_args(Fabric)


def link_layers(rep: RankReport) -> set[str]:
    """The link layers ("IB", "RoCE") of the devices NCCL's IB transport listed for this rank."""
    return {d.rsplit("/", 1)[-1] for d in rep.ib_devices}


#: What libfabric providers carry, for aws-ofi-nccl (`NET/OFI Selected Provider is <p>`).
_OFI_FABRICS = {"efa": "efa", "cxi": "cxi", "tcp": "socket", "sockets": "socket", "udp": "socket"}

#: Fabrics named for a reader, where the identifier alone says little.
FABRIC_NAMES = {"cxi": "cxi (HPE Slingshot)"}


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


__all__ = ["FABRICS", "FABRIC_NAMES", "Fabric", "fabric_of", "link_layers", "rank_fabric"]
