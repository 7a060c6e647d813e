"""Issue 21: the fail-safe. A line that says NCCL warned or failed, in a form no rule knows, still
makes a finding: an unexplained WARN a warning, an unexplained error an error (diagnose exits 1),
named with the line, host and rank; NCCL lines the reader could not place are counted."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.results import diagnose_files, diagnose_text

DATA = Path(__file__).parent / "data"
CORPUS = sorted(
    p
    for d in (DATA / "nccl-logs", DATA / "nccl-tests" / "public")
    for p in d.iterdir()
    if p.suffix in (".log", ".txt", ".md") and p.name != "README.md"
)
FAILSAFE = {"unexplained-nccl-error", "unexplained-nccl-warn", "nccl-lines-not-understood"}


def _init(host: str, rank: int) -> str:
    return (
        f"{host}:12{rank}:45{rank} [0] NCCL INFO comm 0x7f rank {rank} nRanks 2 nNodes 2 "
        "localRanks 1 localRank 0 MNNVL 0"
    )


def _diagnose(tmp_path: Path, text: str) -> tuple[int, list[str]]:
    log = tmp_path / "pod-0.log"
    log.write_text(text + "\n")
    res = CliRunner().invoke(app, ["diagnose", str(log)])
    return res.exit_code, res.stderr.splitlines()


def test_a_fatal_line_with_a_function_in_it_fails_naming_the_error(tmp_path: Path) -> None:
    """NCCL 2.29 prints the function after file:line, in WARNs and in its error traces; the
    WARN's timestamp is NCCL's own default (NCCL_DEBUG_TIMESTAMP_LEVELS=WARN)."""
    text = "\n".join(
        [
            "h1:120:450 [0] NCCL INFO NCCL version 2.29.2+cuda13.0",
            _init("h1", 0),
            _init("h2", 1),
            "[2026-03-02 10:11:12] h1:120:450 [0] gin_host_gdaki.cc:431 (gdakiConnectQp) "
            "NCCL WARN DOCA failure 21",
            "h1:120:450 [0] NCCL INFO transport.cc:212 (ncclTransportP2pSetup) -> 2",
            "h1:120:450 [0] NCCL INFO init.cc:1530 (initTransportsRank) -> 2",
        ]
    )
    code, lines = _diagnose(tmp_path, text)
    assert code == 1
    (first,) = [ln for ln in lines if ln.startswith("error ")]
    assert "NCCL WARN DOCA failure 21" in first
    assert "rank 0" in first and "host h1" in first and "GPU 0" in first


def test_a_made_up_field_after_file_line_still_yields_warn_and_error() -> None:
    text = "\n".join(
        [
            _init("h1", 0),
            _init("h2", 1),
            "h1:120:450 [0] net.cc:12 <stream 7> NCCL WARN NET/IB : retrying a slow QP",
            "h2:121:451 [0] proxy.cc:99 <stream 9> NCCL WARN Proxy Call to rank 0 failed",
            "h2:121:451 [0] NCCL INFO proxy.cc:99 <stream 9> -> 6",
            "h2:121:451 [0] NCCL INFO init.cc:1530 <stream 9> -> 6",
        ]
    )
    d = diagnose_text(text)
    assert d.failed
    found = {f.code: f for f in d.findings if f.code in FAILSAFE}
    assert set(found) == FAILSAFE
    error = found["unexplained-nccl-error"]
    assert error.severity == "error"
    assert error.message == (
        "an NCCL error no rule explains on rank 1 host h2 GPU 0: NCCL WARN Proxy Call to rank 0 "
        "failed, then an error travelled up NCCL's calls (proxy.cc:99 <stream 9> -> 6: "
        "ncclRemoteError)"
    )
    assert error.ranks == ["rank 1 host h2 GPU 0"]
    warn = found["unexplained-nccl-warn"]
    assert warn.severity == "warning"
    assert warn.message == (
        "an NCCL warning no rule explains on host h1 GPU 0: NCCL WARN NET/IB : retrying a slow QP"
    )
    # The WARN that failed is named by its error, not as a warning of its own.
    assert [f.code for f in d.findings].count("unexplained-nccl-warn") == 1
    assert found["nccl-lines-not-understood"].message == (
        "2 NCCL lines not understood, first: h1:120:450 [0] net.cc:12 <stream 7> NCCL WARN "
        "NET/IB : retrying a slow QP"
    )


@pytest.mark.parametrize(
    ("line", "who", "said"),
    [
        (
            "[rank3]: RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO "
            "for details), NCCL version 2.29.2",
            "rank 3",
            "RuntimeError: NCCL error: unhandled system error",
        ),
        (
            "[1,5]<stdout>: ncclCommInitRank failed: ncclInvalidUsage (run with NCCL_DEBUG=WARN)",
            "MPI rank 5",
            "ncclCommInitRank failed: ncclInvalidUsage",
        ),
        (
            "Traceback: torch.distributed.DistStoreError: NCCL communicator init timed out",
            "",
            "torch.distributed.DistStoreError: NCCL communicator init timed out",
        ),
        ("worker-2: Test NCCL failure common.cu:392 'unhandled cuda error'", "", ""),
    ],
)
def test_framework_and_result_code_lines_are_errors(line: str, who: str, said: str) -> None:
    d = diagnose_text(_init("h1", 0) + "\n" + line)
    assert d.failed
    errors = [f for f in d.findings if f.severity == "error"]
    if not said:  # nccl-tests' own failure line: run-failed stands for it, nothing twice
        assert [f.code for f in errors] == ["run-failed"]
        return
    (f,) = errors
    assert f.code == "unexplained-nccl-error"
    assert said in f.message
    assert f.ranks == ([who] if who else [])


def test_a_trace_alone_is_a_failure_nccl_handled() -> None:
    """`net.cc:79 -> 3` with NCCL_IBEXT_DISABLE=1: NCCL probed a network it then did without."""
    d = diagnose_files([DATA / "nccl-logs" / "nccl-1053_socket_lo_ib_disabled.log"])
    assert not d.failed
    assert not [f for f in d.findings if f.code in FAILSAFE]
    handled = "\n".join([_init("h1", 0), "h1:120:450 [0] NCCL INFO net.cc:79 (ncclNetInit) -> 3"])
    assert not [f for f in diagnose_text(handled).findings if f.code in FAILSAFE]


def test_what_a_rule_explains_is_not_reported_again() -> None:
    """A WARN another rule reported as fatal: its trace, in any form, is that error's."""
    text = "\n".join(
        [
            _init("h1", 0),
            "h1:120:450 [0] ibvwrap.cc:100 NCCL WARN Call to ibv_create_qp failed",
            "h1:120:450 [0] NCCL INFO net_ib.cc:800 <made-up> -> 2",
        ]
    )
    d = diagnose_text(text)
    assert [f.code for f in d.findings if f.severity == "error"] == ["nccl-error"]
    assert not [f for f in d.findings if f.code in FAILSAFE]


def test_lines_not_understood_are_counted() -> None:
    text = "\n".join(
        [
            _init("h1", 0),
            "launcher | h1:120:450 | NCCL INFO Channel 00/0 : 0[0] -> 1[0] via NET/IB/0",
            "launcher | h1:120:450 | NCCL INFO Connected all rings",
            # API call tracing has no device by design: NCCL's, not a line the reader missed.
            "h1:120:450 NCCL CALL ncclAllReduce(0x7f,0x7f,1,7,0,0x1,0x2)",
        ]
    )
    (f,) = [f for f in diagnose_text(text).findings if f.code == "nccl-lines-not-understood"]
    assert f.severity == "warning"
    assert f.message == (
        "2 NCCL lines not understood, first: launcher | h1:120:450 | NCCL INFO Channel 00/0 : "
        "0[0] -> 1[0] via NET/IB/0"
    )


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_every_public_log_is_explained(path: Path) -> None:
    """Every WARN and error line of the public logs is one a rule explains: the fail-safe adds
    nothing to them, so no verdict of theirs changed."""
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        d = diagnose_text(text)
    except Exception as e:  # a log without NCCL lines (an nccl-tests table)
        assert "no NCCL log lines found" in str(e)
        return
    assert [f.message for f in d.findings if f.code in FAILSAFE] == []
