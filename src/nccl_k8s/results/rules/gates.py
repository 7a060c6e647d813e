"""The fabric gate: whether every rank used the fabric expected of it, one rule for every reader.

`--expect-fabric`, `diagnose --platform P` and the deploy's check of a run rendered for platform
P (k8s.run._fabric) all call `fabric_gate` on the same facts, so a log passes or fails them
alike. A gate the log cannot confirm fails: a passing gate must mean the fabric was seen.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from nccl_k8s.fabrics import member
from nccl_k8s.results.fabrics import FABRICS, Fabric, named, on_fabric
from nccl_k8s.results.findings import Code, Facts, Finding, Rule, ranks_of, where_of
from nccl_k8s.results.nccllog import RankReport

_RERUN = "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET"


class GateStatus(str, enum.Enum):
    """What the gate found; only `confirmed` passes."""

    CONFIRMED = "confirmed"
    """Every rank that says used the fabric, and at least one says."""
    WRONG = "wrong"
    """Ranks used another fabric (`FabricGate.wrong`)."""
    UNCONFIRMED = "unconfirmed"
    """The log does not show what the ranks used (for a network fabric: also a log of one node,
    where no byte crossed a network)."""


@dataclass(frozen=True)
class FabricGate:
    """The gate's verdict on one log, with the ranks that fail it."""

    want: Fabric
    status: GateStatus
    findings: tuple[Finding, ...]
    """What diagnose prints for it (none where another rule's error already says it)."""
    wrong: tuple[RankReport, ...] = ()
    """The ranks on another fabric, or those the log leaves unconfirmed."""
    why: str = ""
    """Why the log cannot confirm the fabric (status unconfirmed)."""
    advice: str = _RERUN
    """What would let a log confirm it (status unconfirmed)."""

    @property
    def passed(self) -> bool:
        return self.status is GateStatus.CONFIRMED


_ALL_LOGS = (
    "pass the logs of every pod, from the start of the run (initialization prints what "
    "diagnose reads)."
)


def _unconfirmed(
    want: Fabric,
    why: str,
    reports: list[RankReport],
    advice: str = _RERUN,
    hint: str = _ALL_LOGS,
) -> FabricGate:
    """A gate the log cannot check fails: a passing gate must mean the fabric was seen."""
    finding = Finding(
        "error",
        f"expect-{want}",
        f"cannot confirm {want}: {why}; {advice}",
        hint,
        ranks_of(reports),
    )
    return FabricGate(want, GateStatus.UNCONFIRMED, (finding,), tuple(reports), why, advice)


def _gate(want: Fabric, findings: list[Finding], wrong: list[RankReport]) -> FabricGate:
    """nvlink's and mnnvl's verdicts: an error finding fails the gate."""
    failed = any(f.severity == "error" for f in findings)
    status = GateStatus.WRONG if failed else GateStatus.CONFIRMED
    return FabricGate(want, status, tuple(findings), tuple(wrong) if failed else ())


def _expect_nvlink(
    reports: list[RankReport], network_needed: bool | None, mnnvl: bool, nodes: int | None
) -> FabricGate:
    want = Fabric.NVLINK
    net = [r for r in reports if any(t.startswith("NET/") for t in r.transports)]
    if net or (network_needed and not mnnvl):
        used = sorted({t for r in net for t in r.transports if t.startswith("NET/")})
        finding = (
            Finding(
                "error",
                "expect-nvlink",
                f"expected NVLink only, but the ranks span {nodes or 'several'} nodes"
                + (" and use " + ", ".join(used) if used else ""),
                "an NVLink-only run must keep all ranks in one node (or one MNNVL domain).",
                ranks_of(net or reports),
            ),
        )
        return _gate(want, list(finding), net or reports)
    shm = [r for r in reports if "SHM" in r.transports]
    if shm:
        found = [
            Finding(
                "error",
                "expect-nvlink",
                f"expected NVLink, but {where_of(shm)} connect through host shared memory (SHM)",
                "see shm-intra-node: GPU peer-to-peer is unavailable between these GPUs.",
                ranks_of(shm),
            )
        ]
        return _gate(want, found, shm)
    if network_needed is None and not mnnvl:
        return _unconfirmed(
            want,
            "the log does not say that the ranks share one node (no nNodes, and not every "
            "rank it names is a GPU of one host)",
            reports,
        )
    out: list[Finding] = []
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
                ranks_of(pcie),
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
                ranks=ranks_of(reports),
            )
        )
    return _gate(want, out, [])


_MNNVL_HINT = (
    "NCCL turns MNNVL on only when every rank's GPU reports a completed NVLink fabric in one "
    "clique and the IMEX channel is in the pod: deploy with --compute-domain (the ComputeDomain's "
    "channel claim, nvidia.com/gpu.clique affinity, NCCL_MNNVL_ENABLE=1, which fails instead of "
    "falling back), and check `nvidia-smi -q` (Fabric State Completed) and `nvidia-imex-ctl -N`."
)


def _expect_mnnvl(reports: list[RankReport], fabrics: dict[str, str | None]) -> FabricGate:
    """Multi-node NVLink: every rank's communicator has MNNVL on (`comm ... MNNVL 1`, or P2P
    connections `via P2P/MNNVL`) and no connection goes through a network."""
    off = [r for r in reports if r.mnnvl is False or fabrics[r.key] not in (None, "mnnvl")]
    if off:
        used = sorted({named(fabrics[r.key]) for r in off if fabrics[r.key]})
        found = [
            Finding(
                "error",
                "expect-mnnvl",
                f"{where_of(off)} did not use multi-node NVLink"
                + (" (MNNVL 0)" if any(r.mnnvl is False for r in off) else "")
                + (f": they use {', '.join(used)}" if used else ""),
                _MNNVL_HINT,
                ranks_of(off),
            )
        ]
        return _gate(Fabric.MNNVL, found, off)
    unknown = [r for r in reports if fabrics[r.key] is None]
    if unknown:
        return _unconfirmed(
            Fabric.MNNVL,
            f"{where_of(unknown)} print no `comm ... MNNVL` line and no connection",
            reports,
        )
    confirmed = Finding(
        "info",
        "expect-mnnvl",
        "every rank uses multi-node NVLink (MNNVL 1"
        + (
            ", P2P/MNNVL connections)" if any("P2P/MNNVL" in r.transports for r in reports) else ")"
        ),
        ranks=ranks_of(reports),
    )
    return _gate(Fabric.MNNVL, [confirmed], [])


def fabric_gate(want: Fabric, facts: Facts) -> FabricGate:
    """Whether every rank of the log used `want`: the one rule of `--expect-fabric`, `diagnose
    --platform` and the deploy's fabric check."""
    want = member(want)
    reports, fabrics = facts.reports, facts.fabrics
    if want is Fabric.NVLINK:
        return _expect_nvlink(reports, facts.network_needed, facts.mnnvl, facts.nodes)
    if want is Fabric.MNNVL:
        return _expect_mnnvl(reports, fabrics)
    if facts.network_needed is False:
        # A network fabric is seen only when bytes cross it: a one-node log cannot show it
        # (NCCL still prints `Using network ...`, and sets up no connection over it).
        return _unconfirmed(
            want,
            f"all ranks are on one node: no byte crossed a network, so nothing shows {want} in use",
            reports,
            "run across two nodes or more to check the fabric",
            "a fabric gate passes only where the log shows the fabric carrying traffic; on one "
            "node, `--expect-fabric nvlink` is the gate that applies.",
        )
    known = [r for r in reports if fabrics[r.key]]
    if not known:
        return _unconfirmed(
            want,
            "no rank's network choice (`Using network`, `NET/IB : Using`) or NET connection "
            "is in the log",
            reports,
        )
    wrong = [r for r in known if not on_fabric(want, r, fabrics[r.key])]
    if not wrong:
        confirmed = Finding(
            "info", f"expect-{want}", f"inter-node traffic uses {want}, as expected"
        )
        return FabricGate(want, GateStatus.CONFIRMED, (confirmed,))
    return FabricGate(want, GateStatus.WRONG, tuple(_wrong(want, wrong, fabrics)), tuple(wrong))


def _wrong(want: Fabric, wrong: list[RankReport], fabrics: dict[str, str | None]) -> list[Finding]:
    """What diagnose prints for ranks on another fabric than `want`."""
    used = ", ".join(sorted({named(fabrics[r.key]) for r in wrong}))
    if want is Fabric.SOCKET:
        return [
            Finding(
                "error",
                "expect-socket",
                f"{where_of(wrong)} use {used}, faster than the expected TCP sockets",
                "the run did not use what --expect-fabric socket says: drop the option, or "
                "pass the fabric it used.",
                ranks_of(wrong),
            )
        ]
    if all(fabrics[r.key] == Fabric.SOCKET for r in wrong) and want.rdma:
        return []  # reported as socket-fallback, with severity error and the hosts
    if all({fabrics[r.key], want} == {Fabric.IB, Fabric.ROCE} for r in wrong):
        return [
            Finding(
                "error",
                f"expect-{want}",
                f"{where_of(wrong)} use {'RoCE' if want is Fabric.IB else 'IB'} links, "
                f"expected {want}",
                "NCCL's IB transport carries both; check NCCL_IB_HCA picks the intended ports.",
                ranks_of(wrong),
            )
        ]
    return [
        Finding(
            "error",
            f"expect-{want}",
            f"{where_of(wrong)} use {used}, expected {want}",
            "check which network plugin the image ships (NCCL_NET, NCCL_NET_PLUGIN) and the "
            "pods' RDMA resources.",
            ranks_of(wrong),
        )
    ]


def _expect(facts: Facts) -> list[Finding]:
    if facts.expect_fabric is None:
        return []
    return list(fabric_gate(facts.expect_fabric, facts).findings)


EXPECT = Rule(
    "expect-fabric",
    (
        Code(
            "expect-<fabric>",
            ("info", "error"),
            "the verdict of `--expect-fabric <fabric>` and `--platform P` (the gate a deploy "
            "for P applies): any rank on another fabric fails it, named with its host; a gate "
            "the log cannot confirm fails (below), a network fabric's on a one-node log too",
            "info or error",
            tuple(f"expect-{f}" for f in FABRICS),
        ),
        Code(
            "expect-nvlink-path",
            ("warning",),
            "with `--expect-fabric nvlink`: NCCL's topology search found a PCIe or host path "
            "(PIX/PXB/PHB/SYS) between GPUs, not NVLink (NVL)",
        ),
    ),
    _expect,
)

__all__ = ["EXPECT", "FabricGate", "GateStatus", "fabric_gate"]
