"""Rules for the paths inside a node: host shared memory (SHM) instead of GPU peer-to-peer, and
NVLink SHARP (NVLS) or CollNet in use."""

from __future__ import annotations

from nccl_k8s.results.findings import Code, Facts, Finding, Rule, ranks_of


def _paths(facts: Facts) -> list[Finding]:
    reports, expect = facts.reports, facts.expect_fabric
    out = []
    shm = [r for r in reports if "SHM" in r.transports]
    if shm:
        out.append(
            Finding(
                "error" if expect == "nvlink" else "warning",
                "shm-intra-node",
                "some intra-node connections go through host shared memory (SHM), not GPU "
                "peer-to-peer",
                "P2P between these GPUs is unavailable or disabled: check NCCL_P2P_DISABLE / "
                "NCCL_P2P_LEVEL, that all GPUs of a pod are in one container, and IPC (hostIPC / "
                "--ipc=host) between processes.",
                ranks_of(shm),
            )
        )
    if any(r.nvls_used for r in reports):
        ch = sorted({r.nvls_channels for r in reports if r.nvls_channels})
        out.append(
            Finding(
                "info",
                "nvls",
                "NVLink SHARP (NVLS) is in use"
                + (f" ({', '.join(map(str, ch))} nvls channels)" if ch else ""),
                ranks=ranks_of(r for r in reports if r.nvls_used),
            )
        )
    if any(r.collnet_used for r in reports):
        out.append(
            Finding(
                "info",
                "collnet",
                "CollNet (in-network reduction, e.g. SHARP) is in use",
                ranks=ranks_of(r for r in reports if r.collnet_used),
            )
        )
    return out


PATHS = Rule(
    "paths",
    (
        Code(
            "shm-intra-node",
            ("warning", "error"),
            "intra-node connections via host shared memory",
            "warning; **error** with `--expect-fabric nvlink`",
        ),
        Code("nvls", ("info",), "NVLink SHARP in use"),
        Code("collnet", ("info",), "CollNet (in-network reduction, e.g. SHARP) in use"),
    ),
    _paths,
)

__all__ = ["PATHS"]
