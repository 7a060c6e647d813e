"""`diagnose --expect-fabric tcpx|tcpxo|gib` (issue 20, acceptance 5 for GKE): passes on public
logs of that fabric and fails on the others'. The logs are stored verbatim under
tests/data/nccl-logs (README.md names their sources); what each shows is read from the file:
`Using network GPUDirectTCPX_v7`, `Using network FasTrak` on two hosts, `via NET/gIB/3/GDRDMA`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.results import diagnose_files
from nccl_k8s.results.diagnose import diagnose_text

LOGS = Path(__file__).parent / "data" / "nccl-logs"

#: Each GKE fabric's public log, and a public log of each other fabric it must not pass.
OF_FABRIC = {
    "tcpx": "gke-a3high-tcpx_gpudirecttcpx_v7_init_excerpt.log",
    "tcpxo": "gke-a3mega-tcpxo_fastrak_using_network_16ranks.log",
    "gib": "gke-a3ultra-ray_gib_gdrdma_benchmarkworker.log",
    "roce": "nccl-tests-185_roce_h100x2.log",
    "ib": "ib_gdr_a100.log",
    "efa": "nccl-1176_srun_l_prefix_efa_bootstrap_truncated.log",
    "socket": "nccl-447_gcp_slurm_socket_2nodes_nccl278.log",
}


def _diagnose(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["diagnose", *args])
    return res.exit_code, res.stderr


@pytest.mark.parametrize("want", ["tcpx", "tcpxo", "gib"])
def test_expect_gke_fabric_passes_on_its_own_public_log(want: str) -> None:
    code, stderr = _diagnose(str(LOGS / OF_FABRIC[want]), "--expect-fabric", want)
    assert code == 0, stderr
    assert f"info expect-{want}: inter-node traffic uses {want}, as expected" in stderr


@pytest.mark.parametrize(
    ("want", "log"),
    [(w, log) for w in ("tcpx", "tcpxo", "gib") for f, log in OF_FABRIC.items() if f != w],
)
def test_expect_gke_fabric_fails_on_the_other_fabrics_logs(want: str, log: str) -> None:
    code, stderr = _diagnose(str(LOGS / log), "--expect-fabric", want)
    assert code == 1, stderr
    assert "error " in stderr.splitlines()[0]


def test_what_each_gke_log_shows() -> None:
    tcpxo = diagnose_files([LOGS / OF_FABRIC["tcpxo"]])
    assert {r.network for r in tcpxo.ranks} == {"FasTrak"} and len(tcpxo.ranks) == 16
    assert (tcpxo.nodes, tcpxo.inter_node) == (2, "tcpxo")
    tcpx = diagnose_files([LOGS / OF_FABRIC["tcpx"]])
    assert [r.network for r in tcpx.ranks if r.network] == ["GPUDirectTCPX_v7"]
    assert tcpx.inter_node == "tcpx"
    code, stderr = _diagnose(str(LOGS / OF_FABRIC["tcpx"]), "--expect-fabric", "tcpxo")
    assert code == 1
    assert "use tcpx (GPUDirect-TCPX), expected tcpxo" in stderr


def test_gib_is_roce_to_every_reader_but_its_own_gate() -> None:
    """gIB carries RDMA over RoCE: the inter-node fabric stays `roce` (and --expect-fabric roce
    passes); --expect-fabric gib asks for Google's plugin, which NCCL's own IB transport over
    the same RoCE NICs is not."""
    gib = diagnose_files([LOGS / OF_FABRIC["gib"]], expect_fabric="gib")
    assert (gib.inter_node, gib.failed) == ("roce", False)
    ib_roce = diagnose_files([LOGS / OF_FABRIC["roce"]], expect_fabric="gib")
    assert ib_roce.inter_node == "roce" and ib_roce.failed


def test_a_socket_fallback_on_gke_fails_the_gate() -> None:
    """Ranks that fell back to TCP sockets fail any GKE fabric (socket-fallback names them)."""
    text = "\n".join(
        f"gke-{n}:1:1 [0] NCCL INFO Using network Socket\n"
        f"gke-{n}:1:1 [0] NCCL INFO comm 0x1 rank {n} nRanks 2 nNodes 2 localRanks 1 localRank 0 "
        "MNNVL 0"
        for n in (0, 1)
    )
    for want in ("tcpx", "tcpxo", "gib"):
        d = diagnose_text(text, expect_fabric=want)  # type: ignore[arg-type]
        assert d.failed and d.inter_node == "socket", want
