"""Issue 35: NCCL 2.31's `NCCL DIAG` reports become findings.

Today's code reads none of these lines: a file of them is refused ("no NCCL log lines found", exit
2). The files are the vendors' documented example output (tests/data/nccl-logs/diag/README.md);
expected values read from them.
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.results.diagnose import diagnose_files, diagnose_text

DIAG = Path(__file__).parent / "data" / "nccl-logs" / "diag"


def _diagnose(path: Path) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, ["diagnose", str(path)])
    return res.exit_code, res.stdout, res.stderr


def test_failed_p2p_verification_is_an_error_and_an_outlier_a_warning() -> None:
    d = diagnose_files([DIAG / "nccl-docs_v2.31_active_diagnostics_examples.log"])
    assert d.failed
    by_code = {f.code: f for f in d.findings}
    assert by_code["nccl-diag-failed"].message == (
        "NCCL's diagnostics: p2p: only 52/56 GPU-to-GPU peer accesses passed verification"
    )
    issue = by_code["nccl-diag-issue"]
    assert issue.severity == "warning"
    assert issue.message.startswith("NCCL's diagnostics on node0: net bw: 265.1/391.5/398.0")
    assert "cross-nic rank 3 (node0): 265.1 Gbit/s, >30% off median 391.5 Gbit/s" in issue.message
    assert by_code["nccl-diag-ok"].message == (
        "NCCL's diagnostics passed: net bw, p2p; diagnostics completed in 245.3 ms across 8 ranks"
    )


def test_ras_environment_mismatch_is_named_with_its_ranks() -> None:
    res = CliRunner().invoke(
        app, ["diagnose", str(DIAG / "rccl-docs_ras_diagnostics_examples.log")]
    )
    assert res.exit_code == 0  # a difference to review, not a failure
    lines = res.stderr.splitlines()
    assert lines[0].startswith(
        "warning nccl-diag-issue: NCCL's diagnostics on node01: NCCL environment: mismatch "
        "across 16 ranks in comm 0x5fa31c27a9e0d1b4 for NCCL_BUFFSIZE; NCCL environment: "
        "NCCL_BUFFSIZE=(unset) on rank(s) {0,1,2,3,4,5,6,7}; NCCL environment: "
        "NCCL_BUFFSIZE=8388608 on rank(s) {8,9,10,11,12,13,14,15}"
    )
    assert any(
        ln.startswith(
            "info nccl-diag-ok: NCCL's diagnostics passed: ECC, GPU inventory, HIP driver "
            "version, NCCL environment, XGMI; diagnostics completed in 38.4 ms across 8 ranks"
        )
        for ln in lines
    )


def test_a_failed_p2p_edge_is_an_error_and_the_expected_notice_no_issue() -> None:
    """RCCL's page: an edge named by its fields and `reason=noDescriptor` is a failed edge (before:
    a warning, exit 0); the peer-access notice it calls expected is no issue of its own."""
    code, _, stderr = _diagnose(DIAG / "rccl-docs_active_diagnostics_p2p_examples.log")
    assert code == 1
    lines = stderr.splitlines()
    assert lines[0].startswith(
        "error nccl-diag-failed: NCCL's diagnostics on node01: p2p: destination buffer "
        "unavailable srcRank=0 srcCudaDev=0 srcNvmlDev=0 dstRank=1 dstCudaDev=1 dstNvmlDev=1 "
        "path=XGMI handle=LEGACY_CUDA_IPC reason=noDescriptor;"
    )
    assert not [ln for ln in lines if ln.startswith("warning ")]
    assert any(
        ln.startswith(
            "info nccl-diag-ok: NCCL's diagnostics passed: p2p; diagnostics completed in 40.0 ms "
            "across 8 ranks"
        )
        for ln in lines
    )


def test_a_partial_p2p_summary_in_the_newer_words_is_an_error() -> None:
    """The summary of NCCL 2.31.2 / RCCL when some edges failed, as RCCL's unit test of
    `ncclDiagP2pReportSummary` prints it (ROCm/rocm-systems, code index file id 70885025108)."""
    d = diagnose_text("node01:15 NCCL DIAG [INFO] p2p: 4/6 directed GPU P2P edges verified")
    assert [(f.severity, f.code) for f in d.findings] == [("error", "nccl-diag-failed")]


def test_nvidias_ras_report_reads_its_mismatch_and_its_peers() -> None:
    code, _, stderr = _diagnose(DIAG / "nccl-docs_v2.31_ras_diagnostics_examples.log")
    assert code == 0  # a difference to review, not a failure
    lines = stderr.splitlines()
    assert lines[0] == (
        "warning nccl-diag-issue: NCCL's diagnostics on node042: NCCL environment: mismatch "
        "across 8 ranks in comm 0x1234 for NCCL_DEBUG; NCCL environment: NCCL_DEBUG=INFO on "
        "rank(s) {0,1,2,3}; NCCL environment: NCCL_DEBUG=WARN on rank(s) {4,5,6,7}; NCCL "
        "environment: 1 NCCL_* env var(s) differ across ranks in comm 0x1234"
    )
    assert any(
        ln.startswith(
            "info nccl-diag-ok: NCCL's diagnostics passed: CUDA driver version, ECC, GPU "
            "inventory, NCCL environment, NVLink; diagnostics completed in 12.3 ms across 8 RAS "
            "peers"
        )
        for ln in lines
    )
