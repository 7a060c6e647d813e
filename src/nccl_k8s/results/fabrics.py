"""What carries a rank's inter-node traffic: the fabric a network NCCL selected stands for.

A plugin's name says little (`IBext_v8`, `gIB`, `AWS Libfabric`): what it carries does. The reader
(`nccllog`) records what each process printed; this module names each rank's fabric by the fabric
table (`nccl_k8s.fabrics`, which it re-exports for results' readers); the diagnosis rules and the
fabric gate (`results.rules.gates`) compare it with what was expected.
"""

from __future__ import annotations

from nccl_k8s.fabrics import FABRICS, Fabric, fabric_of, named
from nccl_k8s.results.nccllog import RankReport


def link_layers(rep: RankReport) -> set[str]:
    """The link layers ("IB", "RoCE") of the devices NCCL's IB transport listed for this rank."""
    return {d.rsplit("/", 1)[-1] for d in rep.ib_devices}


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


def on_fabric(want: Fabric, rep: RankReport, fabric: str | None) -> bool:
    """Whether a rank whose inter-node traffic `fabric` carried is on the fabric `want`: by its
    plugin for a fabric the table asks for by plugin (gib), else by the fabric."""
    if not want.by_plugin:
        return fabric == want
    network = rank_network(rep)
    return fabric is not None and network is not None and network.startswith(want.plugins)


__all__ = [
    "FABRICS",
    "Fabric",
    "fabric_of",
    "link_layers",
    "named",
    "on_fabric",
    "rank_fabric",
    "rank_network",
]
