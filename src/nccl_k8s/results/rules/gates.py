"""`--expect-fabric`: whether every rank used the fabric the user expects, and a gate that the log
cannot confirm fails (a passing gate must mean the fabric was seen).
"""

from __future__ import annotations

from nccl_k8s.results.fabrics import FABRIC_NAMES, FABRICS, Fabric, on_fabric
from nccl_k8s.results.findings import Code, Facts, Finding, Rule, ranks_of, where_of
from nccl_k8s.results.nccllog import RankReport

_RERUN = "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET"


def _cannot_confirm(want: Fabric, why: str, reports: list[RankReport]) -> Finding:
    """A gate the log cannot check fails: a passing gate must mean the fabric was seen."""
    return Finding(
        "error",
        f"expect-{want}",
        f"cannot confirm {want}: {why}; {_RERUN}",
        "pass the logs of every pod, from the start of the run (initialization prints what "
        "diagnose reads).",
        ranks_of(reports),
    )


def _expect_nvlink(
    reports: list[RankReport], network_needed: bool | None, mnnvl: bool, nodes: int | None
) -> list[Finding]:
    out: list[Finding] = []
    net = [r for r in reports if any(t.startswith("NET/") for t in r.transports)]
    if net or (network_needed and not mnnvl):
        used = sorted({t for r in net for t in r.transports if t.startswith("NET/")})
        out.append(
            Finding(
                "error",
                "expect-nvlink",
                f"expected NVLink only, but the ranks span {nodes or 'several'} nodes"
                + (" and use " + ", ".join(used) if used else ""),
                "an NVLink-only run must keep all ranks in one node (or one MNNVL domain).",
                ranks_of(net or reports),
            )
        )
        return out
    shm = [r for r in reports if "SHM" in r.transports]
    if shm:
        return [
            Finding(
                "error",
                "expect-nvlink",
                f"expected NVLink, but {where_of(shm)} connect through host shared memory (SHM)",
                "see shm-intra-node: GPU peer-to-peer is unavailable between these GPUs.",
                ranks_of(shm),
            )
        ]
    if network_needed is None and not mnnvl:
        return [
            _cannot_confirm(
                "nvlink",
                "the log does not say that the ranks share one node (no nNodes, and not every "
                "rank it names is a GPU of one host)",
                reports,
            )
        ]
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
    return out


_MNNVL_HINT = (
    "NCCL turns MNNVL on only when every rank's GPU reports a completed NVLink fabric in one "
    "clique and the IMEX channel is in the pod: deploy with --compute-domain (the ComputeDomain's "
    "channel claim, nvidia.com/gpu.clique affinity, NCCL_MNNVL_ENABLE=1, which fails instead of "
    "falling back), and check `nvidia-smi -q` (Fabric State Completed) and `nvidia-imex-ctl -N`."
)


def _expect_mnnvl(reports: list[RankReport], fabrics: dict[str, str | None]) -> list[Finding]:
    """Multi-node NVLink: every rank's communicator has MNNVL on (`comm ... MNNVL 1`, or P2P
    connections `via P2P/MNNVL`) and no connection goes through a network."""
    off = [r for r in reports if r.mnnvl is False or fabrics[r.key] not in (None, "mnnvl")]
    if off:
        used = sorted({_fabric_name(fabrics[r.key]) for r in off if fabrics[r.key]})
        return [
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
    unknown = [r for r in reports if fabrics[r.key] is None]
    if unknown:
        return [
            _cannot_confirm(
                "mnnvl",
                f"{where_of(unknown)} print no `comm ... MNNVL` line and no connection",
                reports,
            )
        ]
    return [
        Finding(
            "info",
            "expect-mnnvl",
            "every rank uses multi-node NVLink (MNNVL 1"
            + (
                ", P2P/MNNVL connections)"
                if any("P2P/MNNVL" in r.transports for r in reports)
                else ")"
            ),
            ranks=ranks_of(reports),
        )
    ]


def _fabric_name(f: str | None) -> str:
    return FABRIC_NAMES.get(str(f), str(f))


def expectation(
    want: Fabric,
    reports: list[RankReport],
    fabrics: dict[str, str | None],
    network_needed: bool | None,
    mnnvl: bool,
    nodes: int | None,
) -> list[Finding]:
    if want == "nvlink":
        return _expect_nvlink(reports, network_needed, mnnvl, nodes)
    if want == "mnnvl":
        return _expect_mnnvl(reports, fabrics)
    if network_needed is False:
        return [
            Finding(
                "info",
                f"expect-{want}",
                f"all ranks are on one node: no inter-node traffic, so --expect-fabric {want} "
                "was not exercised",
            )
        ]
    known = [r for r in reports if fabrics[r.key]]
    if not known:
        return [
            _cannot_confirm(
                want,
                "no rank's network choice (`Using network`, `NET/IB : Using`) or NET connection "
                "is in the log",
                reports,
            )
        ]
    wrong = [r for r in known if not on_fabric(want, r, fabrics[r.key])]
    if not wrong:
        return [Finding("info", f"expect-{want}", f"inter-node traffic uses {want}, as expected")]
    used = ", ".join(sorted({_fabric_name(fabrics[r.key]) for r in wrong}))
    if want == "socket":
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
    if all(fabrics[r.key] == "socket" for r in wrong):
        return []  # reported as socket-fallback, with severity error and the hosts
    if all({fabrics[r.key], want} == {"ib", "roce"} for r in wrong):
        return [
            Finding(
                "warning",
                f"expect-{want}",
                f"inter-node traffic uses {'RoCE' if want == 'ib' else 'IB'} links, expected "
                f"{want}",
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
    return expectation(
        facts.expect_fabric,
        facts.reports,
        facts.fabrics,
        facts.network_needed,
        facts.mnnvl,
        facts.nodes,
    )


EXPECT = Rule(
    "expect-fabric",
    (
        Code(
            "expect-<fabric>",
            ("info", "warning", "error"),
            "the verdict of `--expect-fabric <fabric>`: any rank on another fabric fails it, "
            "named with its host; a gate the log cannot confirm fails (below)",
            "info, warning or error",
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

__all__ = ["EXPECT", "expectation"]
