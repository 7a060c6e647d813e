"""The fabrics: one typed table of what can carry a run's traffic and what proves it in a log.

Each member of `Fabric` is one entry with its facts: the NCCL network plugins whose name alone
says it (`Using network gIB`, `NET/FasTrak`), the libfabric providers that carry it under
aws-ofi-nccl, whether a fall back to TCP sockets betrays it, whether a gate asks for it by the
plugin rather than by the link, and what proves it in an NCCL_DEBUG=INFO log. It lives below
both the platform table (spec.platforms: the fabric each platform's logs must show) and results
(diagnose, `--expect-fabric`, the deploy's fabric gate), which read it and keep no copy.

A new fabric is one member here; `--expect-fabric`, `diagnose --platform`, docs/diagnosis.md's
list and the readers of a log's network names follow from it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True)
class _Facts:
    about: str
    """What it is, for docs and help."""
    proof: str
    """What proves it in a log, as NCCL (or its plugin) prints it."""
    plugins: tuple[str, ...] = ()
    """NCCL network names (lower-cased prefixes of `Using network X` / `NET/X`) that are this
    fabric by themselves: the plugin carries nothing else."""
    providers: tuple[str, ...] = ()
    """libfabric providers that carry it under aws-ofi-nccl (`NET/OFI Selected Provider is p`)."""
    rdma: bool = False
    """A fall back to NCCL's Socket transport betrays it (its ranks should never use TCP)."""
    network: bool = True
    """Carried by a network between nodes (False: NVLink inside a node or an NVLink domain)."""
    spelled: bool = False
    """Messages spell it out (`tcpx (GPUDirect-TCPX)`): its identifier alone says little."""
    by_plugin: bool = False
    """A gate asks for it by the plugin that carries it, not by the link: Google's gIB runs over
    RoCE, so its ranks are `roce` to every other reader and `gib` only to a gate that asks."""


class Fabric(str, enum.Enum):
    """What a rank's inter-node traffic used, and what `--expect-fabric` and a platform ask for.

    A `str`, so a member compares and serialises as its name (`Fabric.GIB == "gib"`)."""

    about: str
    proof: str
    plugins: tuple[str, ...]
    providers: tuple[str, ...]
    rdma: bool
    network: bool
    spelled: bool
    by_plugin: bool

    def __new__(cls, value: str, facts: _Facts) -> Fabric:
        member = str.__new__(cls, value)
        member._value_ = value
        for name, fact in vars(facts).items():
            setattr(member, name, fact)
        return member

    def __str__(self) -> str:
        return str(self.value)

    IB = (
        "ib",
        _Facts(
            "InfiniBand",
            "NCCL's IB transport or HPC-X's IBext plugin (`NET/IB`, `NET/IBext_v8`) on devices whose "
            "link layer is InfiniBand (`NET/IB : Using [0]mlx5_0:1/IB`; InfiniBand when none listed)",
            rdma=True,
        ),
    )
    ROCE = (
        "roce",
        _Facts(
            "RDMA over Converged Ethernet",
            "NCCL's IB transport on devices whose link layer is RoCE (`[0]mlx5_0:1/RoCE`)",
            rdma=True,
        ),
    )
    EFA = (
        "efa",
        _Facts(
            "AWS Elastic Fabric Adapter",
            "aws-ofi-nccl (`NET/AWS Libfabric`, `NET/OFI`) with the efa provider (`Selected "
            "Provider is efa`; efa when the log names no provider)",
            plugins=("efa",),
            providers=("efa",),
            rdma=True,
        ),
    )
    SOCKET = (
        "socket",
        _Facts(
            "TCP sockets",
            "NCCL's Socket transport (`Using network Socket`, `NET/Socket`), or aws-ofi-nccl over "
            "the tcp/sockets/udp providers",
            plugins=("socket",),
            providers=("tcp", "sockets", "udp"),
        ),
    )
    NVLINK = (
        "nvlink",
        _Facts(
            "NVLink inside one node",
            "every rank on one node (nNodes 1, one host) with P2P/NVLink connections and no SHM",
            network=False,
        ),
    )
    MNNVL = (
        "mnnvl",
        _Facts(
            "multi-node NVLink (GB200/GB300 NVL72)",
            "`comm ... MNNVL 1` on every rank, or `via P2P/MNNVL` connections, and no NET connection",
            network=False,
        ),
    )
    TCPX = (
        "tcpx",
        _Facts(
            "GPUDirect-TCPX",
            "Google's GPUDirect-TCPX plugin (`Using network GPUDirectTCPX_v7`): GKE A3 High",
            plugins=("gpudirecttcpx",),
            rdma=True,
            spelled=True,
        ),
    )
    TCPXO = (
        "tcpxo",
        _Facts(
            "GPUDirect-TCPXO",
            "Google's GPUDirect-TCPXO plugin (`Using network FasTrak`): GKE A3 Mega",
            plugins=("fastrak",),
            rdma=True,
            spelled=True,
        ),
    )
    GIB = (
        "gib",
        _Facts(
            "GPUDirect RDMA over RoCE through Google's gIB plugin",
            "Google's gIB plugin (`Using network gIB`, `NET/gIB`): GKE A3 Ultra, A4, A4X",
            plugins=("gib",),
            rdma=True,
            by_plugin=True,
        ),
    )
    CXI = (
        "cxi",
        _Facts(
            "HPE Slingshot",
            "aws-ofi-nccl (`NET/AWS Libfabric`, `NET/OFI`) with the cxi provider (`Selected "
            "Provider is cxi`): HPE Slingshot 11, as on ALCF Polaris",
            providers=("cxi",),
            rdma=True,
            spelled=True,
        ),
    )


#: Every fabric, in the table's order (what `--expect-fabric` accepts).
FABRICS: tuple[Fabric, ...] = tuple(Fabric)

#: NCCL's own IB transport and HPC-X's IBext plugins: InfiniBand or RoCE by the device's link layer.
_IB_TRANSPORTS = ("ib", "ibext")
#: aws-ofi-nccl's names for itself: what it carries is its libfabric provider's.
_OFI = ("aws libfabric", "ofi")


def parse(value: str) -> Fabric | None:
    """The fabric named `value` (any case), or None."""
    v = value.strip().lower()
    return next((f for f in Fabric if f.value == v), None)


def member(value: str) -> Fabric:
    """The fabric named `value`; a ValueError naming the table's fabrics for anything else."""
    found = parse(value)
    if found is None:
        raise ValueError(f"{value!r} is not a fabric: expected one of {', '.join(FABRICS)}")
    return found


def _link(links: set[str]) -> Fabric:
    return Fabric.ROCE if links == {"RoCE"} else Fabric.IB


def fabric_of(network: str, links: set[str], provider: str | None = None) -> str:
    """What a network NCCL selected carries, by what the plugin is rather than its name:
    NCCL's IB transport and HPC-X's IBext/IBext_v8 plugin carry InfiniBand or RoCE (told apart
    by the device's link layer, InfiniBand when the log lists no device); Google's gIB plugin
    carries RDMA over RoCE unless its devices say IB (a gate asking for gib tells it by the
    plugin: `Fabric.by_plugin`); aws-ofi-nccl carries what its libfabric provider does (the
    table's `providers`; verbs -> IB or RoCE), EFA when the log does not name the provider; a
    plugin that is one fabric by itself is that fabric. Another plugin keeps its name."""
    name = network.strip().lower()
    if name in _IB_TRANSPORTS or name.startswith("ibext"):
        return _link(links)
    if name == "gib":
        return Fabric.IB if links == {"IB"} else Fabric.ROCE
    if "libfabric" in name or name.startswith(_OFI):
        if provider is None:
            return Fabric.EFA
        prov = provider.split(";")[0]
        if prov == "verbs":
            return _link(links)
        return next((f for f in Fabric if prov in f.providers), prov)
    return next((f for f in Fabric if f.plugins and name.startswith(f.plugins)), network)


def named(fabric: str | None) -> str:
    """A fabric as messages name it: `tcpx (GPUDirect-TCPX)` where the identifier alone says
    little, else the identifier (or what the log named)."""
    known = parse(fabric) if fabric else None
    if known is None:
        return str(fabric)
    return f"{known.value} ({known.about})" if known.spelled else known.value


def fabrics_table() -> str:
    """The table as docs/diagnosis.md shows it (generated: `python -m nccl_k8s.results.rules`)."""
    rows = [
        "| fabric | what it is | what proves it in a log | TCP sockets instead |",
        "|---|---|---|---|",
    ]
    rows += [
        f"| `{f}` | {f.about} | {f.proof} | {'**error**' if f.rdma else '-'} |" for f in Fabric
    ]
    return "\n".join(rows)


__all__ = ["FABRICS", "Fabric", "fabric_of", "fabrics_table", "member", "named", "parse"]
