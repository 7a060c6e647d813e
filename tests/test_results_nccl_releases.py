"""Issue 21, acceptance 1, 2 and 4 on NCCL's own logs: every release's line shapes from 2.18 to
2.30 are read (tests/data/nccl-logs/releases, public logs kept verbatim), a fatal line with the
2.30 function after `file:line` fails the diagnosis naming the error and where, a failure NCCL
handled is not fatal, and one process driving several GPUs is one node.

The expected values were read from the files by eye: the versions they print, their hosts and
`nNodes` lines, the transports of their connection lines, their WARNs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.results import diagnose_files, diagnose_text

DATA = Path(__file__).parent / "data"
RELEASES = DATA / "nccl-logs" / "releases"
FAILED_5090 = DATA / "nccl-tests" / "public" / "nccl-tests-287_rtx5090x2_debug_failure.log"


# file -> (NCCL versions the lines print, nodes, network needed, inter-node fabric, GDR on
# RDMA connections, the diagnosis fails, findings by code)
EXPECTED: dict[
    str, tuple[set[str | None], int | None, bool | None, str | None, bool | None, bool, set[str]]
] = {
    "nccl-1052_v2.18.5_roce_2hosts.log": ({"2.18.5"}, 2, True, "roce", None, False, set()),
    "nccl-1267_v2.19.3_socket_one_rank.log": (
        {"2.19.3"},
        1,
        False,
        None,
        None,
        False,
        {"single-node-socket"},
    ),
    "nccl-1185_v2.20.3_host_redacted_ibext.log": ({None}, None, None, "ib", None, False, set()),
    "nccl-1591_v2.21.5_vllm_ray_topology.log": ({"2.21.5"}, None, None, None, None, False, set()),
    "nccl-1538_v2.22.3_torchrun_ibext_plugin.log": (
        {"2.22.3"},
        None,
        None,
        None,
        None,
        False,
        set(),
    ),
    "nccl-tests-311_v2.23.4_sharp_4hosts_init.log": ({"2.23.4"}, 4, True, "ib", None, False, set()),
    # One rank (`nRanks 1 nNodes 1`) of pid 698986 on Socket; lines 169 and 173 carry fragments
    # that another process (698976) wrote into the same NCCL_DEBUG_FILE, none of them a WARN.
    "cs244c_v2.24.3_shared_debug_file_one_rank.log": (
        {"2.24.3"},
        1,
        False,
        None,
        None,
        False,
        {"single-node-socket"},
    ),
    "tinygrad-35_v2.26.2_one_process_2gpu_initall.log": (
        {"2.26.2", None},
        1,
        False,
        None,
        None,
        False,
        {"single-node-socket"},
    ),
    "aws-p4d_v2.27.7_ofi_init_failed_socket.log": (
        {"2.27.7"},
        None,
        None,
        "socket",
        None,
        True,
        {"nccl-error", "socket-fallback", "nccl-warn"},
    ),
    "dgx-spark_v2.28.9_roce_2nodes_gin.log": ({"2.28.9"}, 2, True, "roce", None, False, set()),
    "aws-efa_v2.29.2_2nodes_cuda_failure_enqueue.log": (
        {"2.29.2"},
        2,
        True,
        "efa",
        False,
        True,
        {"nccl-error", "run-failed", "gdr-off"},
    ),
    "nccl-2094_v2.29.7_stripped_host_prefix.log": (
        {"2.29.7", None},
        None,
        None,
        "socket",
        None,
        False,
        {"libibverbs-missing", "socket-fallback", "nccl-warn"},
    ),
    "nccl-2237_v2.30.7_gin_gdaki_function_names.log": (
        {None},
        None,
        None,
        None,
        None,
        True,
        {"nccl-error"},
    ),
    # Four WARNs of one process on teardown, no error trace after any: the Cuda failures are
    # fatal, the two teardown WARNs after them warnings.
    "nccl-2303_v2.30.7_cuda_failure_teardown_no_trace.log": (
        {None},
        None,
        None,
        None,
        None,
        True,
        {"nccl-error", "nccl-warn"},
    ),
    "nccl-1808_unversioned_empty_host_ibext_v10.log": (
        {None},
        None,
        True,
        "ib",
        True,
        False,
        {"nccl-warn", "gdr-on"},
    ),
}


def test_the_release_corpus_is_what_the_readme_lists() -> None:
    files = sorted(p.name for p in RELEASES.glob("*.log"))
    assert files == sorted(EXPECTED)
    readme = (RELEASES / "README.md").read_text()
    for name in files:
        assert f"`{name}`" in readme, name
    minors = {m.group(1) for name in files if (m := re.search(r"_v(2\.\d+)\.\d+_", name))}
    # Every minor release from 2.18 to 2.30 but 2.25 (nccl-tests-287).
    assert minors == {f"2.{m}" for m in range(18, 31)} - {"2.25"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_release_is_read(name: str) -> None:
    versions, nodes, needed, fabric, gdr, failed, codes = EXPECTED[name]
    d = diagnose_files([RELEASES / name])
    assert {r.nccl_version for r in d.ranks} == versions
    assert (d.nodes, d.network_needed, d.inter_node, d.gdr) == (nodes, needed, fabric, gdr)
    assert d.failed is failed
    # Every NCCL line of these releases is placed: no "not understood" nor unexplained finding.
    assert {f.code for f in d.findings} == codes


def test_the_2_25_log_of_the_corpus_is_read() -> None:
    d = diagnose_files([FAILED_5090])
    # Rank 0 prints the version line; rank 1, in the same process, does not.
    assert {r.nccl_version for r in d.ranks} == {"2.25.1", None}
    assert (d.nodes, d.network_needed) == (1, False)


def test_2_30_a_fatal_line_with_its_function_exits_1_naming_error_and_host(tmp_path: Path) -> None:
    """gin_host_gdaki.cc:431 (gdakiConnectQp) NCCL WARN DOCA failure 21, then its traces with
    functions: the only fatal lines of the log."""
    res = CliRunner().invoke(
        app, ["diagnose", str(RELEASES / "nccl-2237_v2.30.7_gin_gdaki_function_names.log")]
    )
    assert res.exit_code == 1
    (error,) = [ln for ln in res.stderr.splitlines() if ln.startswith("error ")]
    assert "NCCL WARN DOCA failure 21" in error
    assert "host worker-0 GPU 0" in error and "host worker-0 GPU 1" in error


def test_2_30_the_same_lines_with_a_rank_name_the_rank(tmp_path: Path) -> None:
    """The 2.30 WARN and trace lines of the corpus behind an init line naming rank 3."""
    lines = (RELEASES / "nccl-2237_v2.30.7_gin_gdaki_function_names.log").read_text().splitlines()
    init = (
        "worker-0:862519:862553 [0] NCCL INFO comm 0x7f rank 3 nRanks 4 nNodes 2 localRanks 2 "
        "localRank 0 MNNVL 0"
    )
    d = diagnose_text("\n".join([init, lines[2], lines[3]]))
    (error,) = [f for f in d.findings if f.severity == "error"]
    assert "DOCA failure 21" in error.message and "rank 3 host worker-0 GPU 0" in error.message


def test_a_failure_nccl_handled_is_not_fatal() -> None:
    """2.29.7: `[5] misc/ibvwrap.cc:173 NCCL WARN lib wrapper not initialized.`, its trace
    `transport/net_ib/gdr.cc:56 -> 3`, then `Failed to initialize any GIN plugin` and the run
    goes on (`Using network Socket`): a warning, not the run's end."""
    name = "nccl-2094_v2.29.7_stripped_host_prefix.log"
    d = diagnose_files([RELEASES / name])
    assert not d.failed
    (warn,) = [f for f in d.findings if f.code == "nccl-warn"]
    assert warn.message == "NCCL WARN lib wrapper not initialized." and warn.ranks == [
        "(no host) [5]"
    ]
    # Without NCCL's word that it carried on, the same WARN and trace end the run.
    lines = (RELEASES / name).read_text().splitlines()
    cut = "\n".join(ln for ln in lines if "Failed to initialize any GIN plugin" not in ln)
    assert diagnose_text(cut).failed


def test_one_process_driving_two_gpus_is_one_node() -> None:
    """nccl-tests -g 2 (the 2.25.1 log): both `# Rank` lines with pid 4766 on GENOA-06, and of
    NCCL's lines only rank 0's `Using network Socket`: one node, so Socket is harmless."""
    lines = FAILED_5090.read_text().splitlines()
    ranks = [ln for ln in lines if ln.startswith("#  Rank")]
    assert len(ranks) == 2
    socket = [ln for ln in lines if ln.startswith("GENOA-06:4766:4780 [0] NCCL INFO Using network")]
    d = diagnose_text("\n".join([*ranks, *socket]))
    assert (d.nodes, d.network_needed) == (1, False)
    assert d.nodes_evidence == "nccl-tests' device list: 2 ranks in 1 process on 1 host"
    assert [f.code for f in d.findings] == ["single-node-socket"]
    # Without the device list the same line cannot say how many nodes: a socket warning.
    alone = diagnose_text("\n".join(socket))
    assert alone.nodes is None and "socket-fallback" in {f.code for f in alone.findings}


def test_a_device_list_cut_above_does_not_count_nodes() -> None:
    """The 2.26.2 excerpt starts at `#  Rank  1`: rank 0's line is missing, so the list says
    nothing of the world; the ranks NCCL names (ncclCommInitAll 0 and 1 of 2, one pid) do."""
    d = diagnose_files([RELEASES / "tinygrad-35_v2.26.2_one_process_2gpu_initall.log"])
    assert d.nodes_evidence.startswith("one host (lam-MU72-SU0-00), one process")
