"""Issue 20: the `mnnvl` fabric (GB200/GB300 NVL72 multi-node NVLink) and `diagnose
--expect-fabric mnnvl`. Expected values come from reading the logs (tests/data/nccl-logs,
README.md there): NCCL prints `comm ... MNNVL 1` and names every P2P connection `via P2P/MNNVL`
when multi-node NVLink is on (v2.30.7-1 init.cc, mnnvl.cc, transport/p2p.cc)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.results.diagnose import diagnose_files, diagnose_text
from nccl_k8s.results.fabrics import FABRICS

LOGS = Path(__file__).parent / "data" / "nccl-logs"
MNNVL_LOG = LOGS / "handmade_mnnvl_2nodes_4gpu.log"


def _expect(findings: list, code: str = "expect-mnnvl") -> list:  # type: ignore[type-arg]
    return [f for f in findings if f.code == code]


def test_mnnvl_is_a_fabric_diagnose_accepts() -> None:
    assert "mnnvl" in FABRICS


def test_a_multi_node_nvlink_run_passes_expect_mnnvl_and_carries_its_fabric() -> None:
    d = diagnose_files([MNNVL_LOG], expect_fabric="mnnvl")
    assert not d.failed
    (verdict,) = _expect(d.findings)
    assert verdict.severity == "info"
    assert verdict.message == "every rank uses multi-node NVLink (MNNVL 1, P2P/MNNVL connections)"
    # Two hosts although NCCL says nNodes 1 (its graph spans the clique), and the traffic
    # between them is MNNVL, not the IB network NCCL still names.
    assert (d.nodes, d.network_needed, d.inter_node) == (2, True, "mnnvl")
    assert "2 hosts" in d.nodes_evidence
    assert [r.mnnvl for r in d.ranks] == [True] * 4


def test_the_same_run_is_not_ib_nor_a_socket_fallback() -> None:
    d = diagnose_files([MNNVL_LOG], expect_fabric="ib")
    (verdict,) = _expect(d.findings, "expect-ib")
    assert verdict.severity == "error"
    assert "use mnnvl, expected ib" in verdict.message
    assert not [f for f in d.findings if f.code.startswith("socket")]


@pytest.mark.parametrize(
    ("log", "used"),
    [
        ("socket_fallback_h100.log", "socket"),
        ("ib_gdr_a100.log", "ib"),
        ("handmade_nvlink_only_4gpu.log", "socket"),
    ],
)
def test_other_fabrics_fail_expect_mnnvl_naming_what_they_used(log: str, used: str) -> None:
    d = diagnose_files([LOGS / log], expect_fabric="mnnvl")
    assert d.failed
    (verdict,) = _expect(d.findings)
    assert verdict.severity == "error"
    assert verdict.message.endswith(
        f"did not use multi-node NVLink{' (MNNVL 0)' if 'nvlink' in log else ''}: they use {used}"
    )
    assert "--compute-domain" in verdict.hint


def test_one_rank_without_mnnvl_fails_the_run_and_is_named() -> None:
    """Rank 3's communicator came up without MNNVL (its GPU not in the clique): it alone is
    named, with its host."""
    text = MNNVL_LOG.read_text().replace(
        "rank 3 nRanks 4 nNodes 1 localRanks 4 localRank 3 MNNVL 1",
        "rank 3 nRanks 4 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
    )
    text = "\n".join(
        line.replace("via P2P/MNNVL", "[send] via NET/IB/0/GDRDMA")
        if " 3[1] -> 0[0] " in line
        else line
        for line in text.splitlines()
        if "MNNVL 1 cliqueId 7ffe cliqueSize 4 cliqueRank 3" not in line
    )
    d = diagnose_text([text], expect_fabric="mnnvl")
    (verdict,) = _expect(d.findings)
    assert verdict.severity == "error"
    assert verdict.message == (
        "rank 3 on host gb200-r1-n1 did not use multi-node NVLink (MNNVL 0): they use ib"
    )


def test_a_log_without_mnnvl_lines_cannot_confirm_it() -> None:
    text = "\n".join(
        line
        for line in MNNVL_LOG.read_text().splitlines()
        if not any(s in line for s in ("MNNVL", "Using network", "NET/IB"))
    )
    d = diagnose_text([text], expect_fabric="mnnvl")
    (verdict,) = _expect(d.findings)
    assert verdict.severity == "error"
    assert verdict.message.startswith("cannot confirm mnnvl: ")


def test_the_cli_gate_exits_by_the_verdict() -> None:
    ok = CliRunner().invoke(app, ["diagnose", str(MNNVL_LOG), "--expect-fabric", "mnnvl"])
    assert ok.exit_code == 0, ok.output
    bad = CliRunner().invoke(
        app, ["diagnose", str(LOGS / "ib_gdr_a100.log"), "--expect-fabric", "mnnvl"]
    )
    assert bad.exit_code == 1, bad.output
    assert "did not use multi-node NVLink" in bad.output
