"""Issue 5, acceptance 4: `diagnose` names each rank's transport and GPUDirect RDMA state, fails the
socket fallback under --expect-fabric ib with a hint, and sees that an NVLink-only run needs no network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.results import diagnose_files, diagnose_text
from nccl_k8s.results.diagnose import Diagnosis
from nccl_k8s.results.nccllog import RankReport

LOGS = Path(__file__).parent / "data" / "nccl-logs"


def _diagnose(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, ["diagnose", *args])
    return res.exit_code, res.stdout, res.stderr


def test_ib_with_gpudirect_rdma() -> None:
    d = diagnose_files([LOGS / "ib_gdr_a100.log"])
    assert [r.rank for r in d.ranks] == [0, 1, 2, 3]
    assert {tuple(r.transports) for r in d.ranks} == {("NET/IB",)}
    assert [r.net_devs for r in d.ranks] == [[4, 5], [5], [2], [0, 2]]
    assert all(r.net_gdr is True for r in d.ranks)
    assert (d.inter_node, d.gdr, d.network_needed, d.failed) == ("ib", True, True, False)
    assert d.ranks[0].net_summary() == "NET/IB dev 4,5 GDR on"
    code, _, stderr = _diagnose(str(LOGS / "ib_gdr_a100.log"), "--expect-fabric", "ib")
    assert code == 0
    assert "info expect-ib: inter-node traffic uses ib, as expected" in stderr


def test_ib_without_gpudirect_rdma_two_hosts() -> None:
    d = diagnose_files([LOGS / "ib_no_gdr_module.log"])
    by_host = {r.host: r for r in d.ranks}
    assert by_host["6a5a91752e39"].rank == 0 and by_host["21346d5cefce"].rank == 1
    assert all(r.transports == ["NET/IB"] and r.net_gdr is False for r in d.ranks)
    assert by_host["21346d5cefce"].gdr_hca == {"mlx5_1": False, "mlx5_2": False, "mlx5_3": False}
    assert (d.nodes, d.inter_node, d.gdr) == (2, "ib", False)
    (gdr_off,) = [f for f in d.findings if f.code == "gdr-off"]
    assert gdr_off.severity == "warning"
    assert "no module" in gdr_off.message and "nvidia-peermem" in gdr_off.hint
    code, stdout, _ = _diagnose(str(LOGS / "ib_no_gdr_module.log"), "--expect-fabric", "ib")
    assert code == 0
    assert "inter-node: ib, GPUDirect RDMA off" in stdout


def test_socket_fallback_fails_expect_ib_with_a_hint() -> None:
    log = str(LOGS / "socket_fallback_h100.log")
    d = diagnose_files([log])
    assert len(d.ranks) == 4  # four processes of one pod, cudaDev 1..4
    assert {r.network for r in d.ranks} == {"Socket"}
    assert {tuple(r.socket_ifaces) for r in d.ranks} == {("eth0:10.177.137.15<0>",)}
    assert d.inter_node == "socket"
    assert not d.failed  # without an expectation it is a warning...
    code, _, stderr = _diagnose(log)
    assert code == 0
    assert "warning socket-fallback" in stderr

    code, _, stderr = _diagnose(log, "--expect-fabric", "ib")  # ...with one, a failure
    assert code == 1
    first = stderr.splitlines()[0]
    assert first.startswith("error socket-fallback: NCCL selected the Socket network (TCP)")
    assert "expected ib" in first
    assert "hint: libibverbs.so is missing in the container" in stderr
    assert "rdma-core" in stderr and "/dev/infiniband" in stderr
    assert "warning libibverbs-missing" in stderr

    code, _, _ = _diagnose(log, "--expect-fabric", "socket")
    assert code == 0


def test_single_gpu_run_needs_no_network() -> None:
    d = diagnose_files([LOGS / "h200x1_single_gpu_info.log"])
    (r,) = d.ranks
    assert (r.rank, r.nranks, r.nnodes) == (0, 1, 1)
    assert (r.nccl_version, r.cuda_version, r.network) == ("2.28.9", "13.0", "Socket")
    assert (r.coll_channels, r.nvls_channels, r.p2p_channels) == (64, 0, 64)
    assert r.ib_no_device and r.net_init_failed == ["IB"]
    assert (d.network_needed, d.inter_node, d.failed) == (False, None, False)
    assert [f.code for f in d.findings] == ["single-node-socket"]
    # One node: no byte crossed a network, so nothing shows IB (or any network) in use, and a
    # passing gate must mean the fabric was seen (issue 35; before, "not exercised", exit 0).
    for fabric in ("ib", "efa", "socket"):
        code, _, stderr = _diagnose(
            str(LOGS / "h200x1_single_gpu_info.log"), "--expect-fabric", fabric
        )
        assert code == 1, fabric
        assert stderr.splitlines()[0] == (
            f"error expect-{fabric}: cannot confirm {fabric}: all ranks are on one node: no byte "
            f"crossed a network, so nothing shows {fabric} in use; run across two nodes or more "
            "to check the fabric [rank 0]"
        )
    # nvlink's point is one node: it passes there.
    code, _, _ = _diagnose(str(LOGS / "h200x1_single_gpu_info.log"), "--expect-fabric", "nvlink")
    assert code == 0


def test_handmade_nvlink_only_needs_no_network() -> None:
    log = str(LOGS / "handmade_nvlink_only_4gpu.log")
    d = diagnose_files([log], expect_fabric="nvlink")
    assert [r.rank for r in d.ranks] == [0, 1, 2, 3]
    assert {tuple(r.transports) for r in d.ranks} == {("NVLS", "P2P/CUMEM")}
    assert {r.intra_path for r in d.ranks} == {"NVL"}
    assert {(r.coll_channels, r.nvls_channels, r.p2p_channels) for r in d.ranks} == {(32, 16, 32)}
    assert (d.nodes, d.network_needed, d.inter_node, d.gdr) == (1, False, None, None)
    assert not d.failed
    codes = {f.code: f for f in d.findings}
    assert codes["expect-nvlink"].message.startswith("no network needed")
    assert "16 nvls channels" in codes["nvls"].message
    code, stdout, _ = _diagnose(log, "--expect-fabric", "nvlink")
    assert code == 0
    assert "no network needed (all ranks on one node)" in stdout
    code, stdout, _ = _diagnose(log, "-o", "json")
    doc = json.loads(stdout)
    assert doc["network_needed"] is False and doc["failed"] is False
    assert [r["net"] for r in doc["ranks"]] == [
        "Socket selected on eth0, no NET connection seen"
    ] * 4


def _two_node_log(via: str, ib_line: str = "") -> str:
    lines = []
    for host, rank, peer in (("node-a", 0, 1), ("node-b", 1, 0)):
        pre = f"2026-12-03T05:00:00.000Z {host}:10:11 [0] NCCL INFO "
        if ib_line:
            lines.append(pre + ib_line)
        lines.append(
            pre + f"comm 0x1 rank {rank} nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0"
        )
        lines.append(pre + f"Channel 00/0 : {rank}[0] -> {peer}[0] [send] via {via}")
        lines.append(pre + f"Channel 00/0 : {peer}[0] -> {rank}[0] [receive] via {via}")
    return "\n".join(lines)


def test_inter_node_sockets_seen_in_connections() -> None:
    text = _two_node_log("NET/Socket/0")
    d = diagnose_text(text, expect_fabric="ib")
    assert [r.transports for r in d.ranks] == [["NET/Socket"], ["NET/Socket"]]
    assert (d.nodes, d.inter_node, d.failed) == (2, "socket", True)
    assert (
        d.findings[0].message
        == "inter-node traffic went over TCP sockets (NET/Socket), expected ib"
    )
    assert diagnose_text(text, expect_fabric="nvlink").failed
    assert not diagnose_text(text, expect_fabric="socket").failed


def test_roce_is_told_from_ib() -> None:
    ib_line = "NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>"
    text = _two_node_log("NET/IB/1/GDRDMA", ib_line)
    d = diagnose_text(text, expect_fabric="roce")
    assert (d.inter_node, d.gdr, d.failed) == ("roce", True, False)
    assert d.ranks[0].ib_devices == ["mlx5_0:1/RoCE", "mlx5_1:1/RoCE"]
    # The gate asked for InfiniBand: RoCE links fail it, as they fail a deploy for an ib platform.
    mismatch = diagnose_text(text, expect_fabric="ib")
    assert mismatch.failed
    assert [f.severity for f in mismatch.findings if f.code == "expect-ib"] == ["error"]


def test_bad_input(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("no NCCL here\njust text\n")
    code, stdout, stderr = _diagnose(str(tmp_path / "notes.txt"))
    assert code == 2 and stdout == ""
    assert stderr.strip().endswith(
        "no NCCL log lines found: run with NCCL_DEBUG=INFO (and "
        "NCCL_DEBUG_SUBSYS=INIT,NET or unset) and pass the pods' logs"
    )
    code, _, stderr = _diagnose(str(LOGS / "ib_gdr_a100.log"), "--expect-fabric", "infiniband")
    assert code == 2
    assert stderr.strip() == (
        "error: --expect-fabric 'infiniband': expected one of ib, roce, efa, socket, nvlink, "
        "mnnvl, tcpx, tcpxo, gib, cxi"
    )


PUBLIC = LOGS.parent / "nccl-tests" / "public"
EFA = PUBLIC / "aws-eks-efa_t4x2_mpijob_launcher.log"
FAILED_5090 = PUBLIC / "nccl-tests-287_rtx5090x2_debug_failure.log"

# What each log says, read from the file: nodes (nNodes, hosts, or None), whether a network was
# needed, the fabric of the inter-node traffic, GPUDirect RDMA on RDMA connections.
EXPECTED = {
    "h200x1_single_gpu_info.log": (1, False, None, None),
    "handmade_nvlink_only_4gpu.log": (1, False, None, None),
    "handmade_mnnvl_2nodes_4gpu.log": (2, True, "mnnvl", None),
    "ib_gdr_a100.log": (None, True, "ib", True),
    "ib_no_gdr_module.log": (2, True, "ib", False),
    "ibext_v8_a100x8_4nodes_gdr.log": (4, True, "ib", True),
    "ibext_v8_a100x8_4nodes_init.log": (4, True, "ib", None),
    "nccl-1773_single_process_8gpu_p2p.log": (1, False, None, None),
    "nccl-226_legacy_ring_net_socket.log": (15, True, "socket", None),
    "nccl-302_legacy_ring_rank_prefix_ib_roce.log": (None, None, "ib", None),
    "nccl-952_socket_net_p2p_ipc.log": (None, True, "socket", None),
    "nccl-tests-185_roce_h100x2.log": (2, True, "roce", None),
    "nccl-tests-29_legacy_ring_p2p_4nodes.log": (4, True, None, None),
    "socket_fallback_h100.log": (None, None, "socket", None),
    # Issue: 39 new public logs (tests/data/nccl-logs/README.md, "Public logs added for the
    # diagnose review"): what each says, read from the file.
    "aws-ofi-nccl-24_horovod_efa_ring_ompi.log": (4, True, "efa", False),
    "aws-ofi-nccl-715_sagemaker_ofi_fail_socket.log": (None, None, "socket", None),
    "aws-ofi-nccl-889_cloudwatch_dup_bootstrap.log": (None, None, None, None),
    "aws-ofi-nccl-889_cloudwatch_dup_efa_init_fail.log": (None, None, None, None),
    "gke-a3ultra-ray_gib_gdrdma_benchmarkworker.log": (None, True, "roce", True),
    # Issue 20: GKE's TCPX and TCPXO plugins (README.md, "Public logs added for the GKE fabrics").
    "gke-a3mega-tcpxo_fastrak_using_network_16ranks.log": (2, True, "tcpxo", None),
    "gke-a3high-tcpx_gpudirecttcpx_v7_init_excerpt.log": (None, None, "tcpx", None),
    "horovod-666_nccl23_socket_no_NCCL_tag.log": (None, None, "socket", None),
    "nccl-1053_socket_lo_ib_disabled.log": (None, None, "socket", None),
    "nccl-1176_srun_l_prefix_efa_bootstrap_truncated.log": (2, True, "efa", True),
    "nccl-1405_ib_plugin_completion_error_k8s.log": (None, None, None, None),
    "nccl-1609_h800_nvls_heads_timeout_excerpt.log": (None, None, None, None),
    "nccl-179_nccl237_ib_old_format.log": (None, None, "ib", None),
    "nccl-224_nccl242_ompi_roce_34dev_empty_oob.log": (2, True, "roce", None),
    "nccl-380_roce_nccl278_ibv_create_cq.log": (None, True, "roce", False),
    "nccl-392_stripped_host_prefix_ib_no_gdr.log": (None, True, "ib", False),
    "nccl-447_gcp_slurm_socket_2nodes_nccl278.log": (2, True, "socket", None),
    "nccl-562_ibext_nccl28_ibv_create_qp_tf.log": (None, None, "ib", None),
    "nccl-tests-213_hw14_separate_runs_nnodes1.log": (1, False, None, None),
    "nccl-tests-252_ib_completion_error4_kolyoz.log": (2, True, None, None),
    "nv_peer_memory-56_nccl247_init_socket_and_ib_lines.log": (2, True, "ib", None),
    "nv_peer_memory-56_nccl24_ring_ib_gdr_disabled_distance.log": (2, True, "ib", False),
    "oneflow-10344_old_direct_shared_memory.log": (1, False, None, None),
    "polaris-cxi_aws-ofi-nccl_16ranks_4nodes_working.log": (4, True, "cxi", None),
    "polaris-cxi_aws-ofi-nccl_init_failure.log": (None, None, None, None),
    "sglang-3836_ibext_v8_commsplit_watchdog_timeout.log": (None, True, "ib", True),
    # Issue 20: AKS's own MPIJob (README.md, "Public logs added for issue 20"): two pods
    # (nccl-tests-worker-0 and -1), 8 ranks each, NET/IB between them, GDRDMA on the connections.
    "aks-rdma-infiniband-30_mpijob_ib_gdrdma_connections.log": (2, True, "ib", True),
    "aks-rdma-infiniband-30_mpijob_ib_init.log": (2, True, "ib", None),
    # Issue 22 (diagnose on a large log): one p4d pod, 4 ranks on llama-3-8b-node-0-0, `nNodes 1`
    # (line 607), `Using network Libfabric` but every channel via P2P/CUMEM: no inter-node traffic.
    "training-on-eks_p4d_1pod_4proc_deepspeed_efa.log": (1, False, None, None),
    # WARNs and traces of GPUs 1 and 3 of one process, no rank or connection line: unknown.
    "nccl-1528_cuda_failure_named_symbol_without_trace.log": (None, None, None, None),
}


def test_every_log_of_the_corpus_is_listed() -> None:
    assert sorted(p.name for p in LOGS.glob("*.log")) == sorted(EXPECTED)
    readme = (LOGS / "README.md").read_text()
    for name in EXPECTED:
        assert name in readme, name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_log_says_its_nodes_and_fabric(name: str) -> None:
    d = diagnose_files([LOGS / name])
    assert (d.nodes, d.network_needed, d.inter_node, d.gdr) == EXPECTED[name]


def test_ibext_gdr_log_passes_expect_ib() -> None:
    """Issue 10, acceptance 3: HPC-X's IBext_v8 plugin carries InfiniBand."""
    log = str(LOGS / "ibext_v8_a100x8_4nodes_gdr.log")
    d = diagnose_files([log], expect_fabric="ib")
    assert not d.failed
    assert {t for r in d.ranks for t in r.transports} == {"NET/IBext_v8", "P2P/CUMEM"}
    assert d.ranks[0].net_summary() == "NET/IBext_v8 dev 1 GDR on"
    code, stdout, stderr = _diagnose(log, "--expect-fabric", "ib")
    assert code == 0
    assert "nodes: 4; inter-node: ib, GPUDirect RDMA on" in stdout
    assert "info expect-ib: inter-node traffic uses ib, as expected" in stderr
    # The plugin's selection line and IB link layer, without connection lines, say the same.
    init = diagnose_files([LOGS / "ibext_v8_a100x8_4nodes_init.log"], expect_fabric="ib")
    assert {r.network for r in init.ranks} == {"IBext_v8"} and not init.failed
    assert diagnose_files([log], expect_fabric="efa").failed


def test_roce_efa_and_socket_are_told_apart() -> None:
    roce = str(LOGS / "nccl-tests-185_roce_h100x2.log")
    assert _diagnose(roce, "--expect-fabric", "roce")[0] == 0
    d = diagnose_files([roce], expect_fabric="ib")
    assert d.failed
    (message,) = [f.message for f in d.findings if f.code == "expect-ib"]
    assert message.endswith(" use RoCE links, expected ib"), message
    code, stdout, stderr = _diagnose(str(EFA), "--expect-fabric", "efa")
    assert code == 0 and "inter-node: efa" in stdout
    code, _, stderr = _diagnose(str(EFA), "--expect-fabric", "ib")
    assert code == 1
    assert stderr.splitlines()[0] == (
        "error expect-ib: rank 0 on host test-nccl-efa-worker-0, rank 1 on host "
        "test-nccl-efa-worker-1 use efa, expected ib [rank 0, rank 1]"
    )


def test_one_rank_on_socket_among_ib_ranks_fails_naming_its_host(tmp_path: Path) -> None:
    """Issue 10, acceptance 3: two pods' logs, one of whose images lacks libibverbs."""
    ib_pod = [
        ln
        for ln in (LOGS / "ib_no_gdr_module.log").read_text().splitlines()
        if ln.startswith("6a5a91752e39:")  # rank 0's host
    ]
    socket_pod = [
        ln
        for ln in (LOGS / "socket_fallback_h100.log").read_text().splitlines()
        if ":2337:" in ln  # one process of that pod
    ]
    (tmp_path / "pod-0.log").write_text("\n".join(ib_pod) + "\n")
    (tmp_path / "pod-1.log").write_text("\n".join(socket_pod) + "\n")
    logs = [str(tmp_path / "pod-0.log"), str(tmp_path / "pod-1.log")]
    d = diagnose_files(logs)
    assert (d.nodes, d.inter_node) == (2, "mixed")
    code, _, stderr = _diagnose(*logs, "--expect-fabric", "ib")
    assert code == 1
    host = "h100-kickoff-llama-70b-chat-20230328-bcf75c4f6-gn6nd"
    assert stderr.splitlines()[0] == (
        f"error socket-fallback: {host}:2337 [1] selected TCP sockets while the other ranks "
        f"use ib, expected ib [{host}:2337 [1]]"
    )
    # Without an expectation it is still a warning: one slow rank sets every collective's pace.
    code, _, stderr = _diagnose(*logs)
    assert code == 0 and "warning socket-fallback:" in stderr


def test_single_node_p2p_log_needs_no_network() -> None:
    """Issue 10, acceptance 3: one host, one process, eight GPUs, no nNodes line."""
    log = str(LOGS / "nccl-1773_single_process_8gpu_p2p.log")
    d = diagnose_files([log], expect_fabric="nvlink")
    assert (d.nodes, d.network_needed, d.inter_node) == (1, False, None)
    assert d.nodes_evidence == "one host (10-4-3-3), one process, every rank on its 7 GPUs"
    assert not d.failed
    assert [f.code for f in d.findings] == ["expect-nvlink"]  # no socket-fallback, no GDR warning
    code, stdout, stderr = _diagnose(log, "--expect-fabric", "nvlink")
    assert code == 0
    assert "nodes: 1; no network needed (all ranks on one node)" in stdout
    assert stderr.strip() == (
        "info expect-nvlink: no network needed: traffic stays on NVLink/P2P within the node "
        "[7 ranks]"
    )


def test_legacy_ring_lines_are_read() -> None:
    p2p = diagnose_files([LOGS / "nccl-tests-29_legacy_ring_p2p_4nodes.log"])
    by_key = {r.key: r for r in p2p.ranks}
    assert (by_key["server4:45888 [2]"].rank, by_key["server4:45888 [2]"].peers) == (26, [24])
    assert {tuple(r.transports) for r in p2p.ranks} == {("P2P/IPC",)}
    sockets = diagnose_files([LOGS / "nccl-226_legacy_ring_net_socket.log"])
    assert {tuple(r.transports) for r in sockets.ranks} == {("NET/Socket",)}
    assert by_rank(sockets, 44).peers == [43]
    prefixed = diagnose_files([LOGS / "nccl-302_legacy_ring_rank_prefix_ib_roce.log"])
    (rank,) = prefixed.ranks
    assert (rank.rank, rank.peers, rank.transports) == (155, [153, 154, 157], ["P2P/IPC"])
    assert rank.ib_devices == [
        "mlx5_1:1/IB",
        "mlx5_3:1/IB",
        "mlx5_0:1/IB",
        "mlx5_2:1/RoCE",
        "mlx5_4:1/IB",
    ]


def by_rank(d: Diagnosis, rank: int) -> RankReport:
    (r,) = [r for r in d.ranks if r.rank == rank]
    return r


def test_gdr_is_never_asked_of_tcp() -> None:
    for name in ("nccl-226_legacy_ring_net_socket.log", "nccl-952_socket_net_p2p_ipc.log"):
        d = diagnose_files([LOGS / name])
        assert d.gdr is None and {r.net_gdr for r in d.ranks} == {None}
        assert not [f for f in d.findings if f.code.startswith("gdr")], name


def test_a_failed_run_is_surfaced() -> None:
    code, stdout, stderr = _diagnose(str(FAILED_5090))
    assert code == 1
    # The WARN is followed by NCCL's error trace (`enqueue.cc:... -> 1`): it is the cause, named
    # with the rank, host and GPU that printed it, before the run's own failure line.
    assert stderr.splitlines()[0] == (
        "error nccl-error: a fatal NCCL error (an error trace `file:line -> code` follows it) "
        "on rank 1 host GENOA-06 GPU 1: NCCL WARN Cuda failure 1 'invalid argument' [rank 1]"
    )
    assert (
        "error run-failed: the run failed: GENOA-06: Test NCCL failure common.cu:392 "
        "'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / '"
    ) in stderr.splitlines()
    assert "nodes: 1; no network needed (all ranks on one node)" in stdout


def _first(*args: str) -> tuple[int, str]:
    """Exit code and the first line of stderr (the most severe finding) of `diagnose`."""
    code, _, stderr = _diagnose(*args)
    return code, stderr.splitlines()[0] if stderr else ""


def test_aws_ofi_nccl_fabric_is_its_libfabric_provider() -> None:
    """aws-ofi-nccl carries what its provider does: cxi is HPE Slingshot, not EFA."""
    cxi = str(LOGS / "polaris-cxi_aws-ofi-nccl_16ranks_4nodes_working.log")
    (r,) = diagnose_files([cxi]).ranks
    assert (r.network, r.ofi_provider, r.nnodes) == ("AWS Libfabric", "cxi", 4)
    code, line = _first(cxi, "--expect-fabric", "efa")
    assert code == 1
    assert line.startswith("error expect-efa: rank 0 use cxi (HPE Slingshot), expected efa")
    # The same plugin with `Selected provider is efa` (aws-ofi-nccl 1.14 wording) is EFA, and
    # a TCP provider is TCP: built from NCCL's and the plugin's format strings.
    for provider, fabric in (("efa, fabric is efa", "efa"), ("tcp", "socket"), ("cxi", "cxi")):
        text = "\n".join(
            f"h{n}:1:2 [0] NCCL INFO {line}"
            for n in (0, 1)
            for line in (
                f"NET/OFI Selected provider is {provider} (found 4 nics)",
                "Using network AWS Libfabric",
                f"comm 0x1 rank {n} nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
            )
        )
        assert diagnose_text(text).inter_node == fabric, provider


def test_google_gib_plugin_is_rdma_over_roce() -> None:
    log = str(LOGS / "gke-a3ultra-ray_gib_gdrdma_benchmarkworker.log")
    d = diagnose_files([log], expect_fabric="roce")
    assert {t for r in d.ranks for t in r.transports} == {"NET/gIB"}
    assert (d.inter_node, d.gdr, d.failed) == ("roce", True, False)
    # gIB runs on RoCE (A3 Ultra, A4): a gate that asks for InfiniBand fails on its RoCE links.
    code, _, stderr = _diagnose(log, "--expect-fabric", "ib")
    assert code == 1 and "use RoCE links, expected ib" in stderr, stderr


@pytest.mark.parametrize(
    ("name", "fabric"),
    [
        ("nv_peer_memory-56_nccl247_init_socket_and_ib_lines.log", "ib"),
        ("nccl-224_nccl242_ompi_roce_34dev_empty_oob.log", "roce"),
    ],
)
def test_old_nccl_socket_list_at_init_is_not_a_socket_choice(name: str, fabric: str) -> None:
    """NCCL <= 2.5 prints `NET/Socket : Using` in every process, also when IB is used."""
    d = diagnose_files([LOGS / name])
    assert "Socket" not in {r.network for r in d.ranks}
    assert not [f for f in d.findings if f.code == "socket-fallback"]
    assert _first(str(LOGS / name), "--expect-fabric", fabric)[0] == 0


def test_ib_completion_error_names_the_peer_and_who_saw_it() -> None:
    code, line = _first(str(LOGS / "nccl-1405_ib_plugin_completion_error_k8s.log"))
    assert code == 1
    assert line == (
        "error ib-completion-error: peer 10.216.210.236 (or the link to it) is the likely "
        "culprit: host kp-ddp-worker-0 GPU 4 got 3 IB completion errors (status 12: transport "
        "retry counter exceeded: the peer stopped answering; vendor err 129) "
        "[kp-ddp-worker-0:3468 [4]]"
    )
    code, line = _first(str(LOGS / "nccl-tests-252_ib_completion_error4_kolyoz.log"))
    assert code == 1
    assert "peer 10.0.35.1" in line and "host kolyoz2 GPU 0" in line and "status 4" in line
    # Before NCCL 2.12 the line names no peer (net_ib.cc `Got completion with error %d, ...`).
    old = (
        "n1:5:6 [0] transport/net_ib.cc:789 NCCL WARN NET/IB : Got completion with error 12, "
        "opcode 1, len 0, vendor err 129\nn1:5:6 [0] NCCL INFO include/net.h:28 -> 2"
    )
    (f,) = [f for f in diagnose_text(old).findings if f.code == "ib-completion-error"]
    assert f.severity == "error" and "status 12" in f.message and "host n1 GPU 0" in f.message


@pytest.mark.parametrize(
    ("name", "first"),
    [
        (
            "nccl-380_roce_nccl278_ibv_create_cq.log",
            "error nccl-error: an InfiniBand verbs call failed on rank 0 host spark01 GPU 0: "
            "NCCL WARN Call to ibv_create_cq failed [rank 0]",
        ),
        (
            "nccl-562_ibext_nccl28_ibv_create_qp_tf.log",
            "error nccl-error: an InfiniBand verbs call failed on host hai-a100-3 "
            "GPU 4, host hai-a100-3 GPU 5, host hai-a100-3 GPU 6: NCCL WARN Call to "
            "ibv_create_qp failed",
        ),
        (
            "aws-ofi-nccl-24_horovod_efa_ring_ompi.log",
            "error nccl-error: aws-ofi-nccl could not open its libfabric address vector on rank "
            "23 host ip-172-32-45-165 GPU 7: NCCL WARN NET/OFI Couldn't open AV. RC: -22, "
            "ERROR: Invalid argument [rank 23]",
        ),
        (
            "nccl-1176_srun_l_prefix_efa_bootstrap_truncated.log",
            "error nccl-error: a bootstrap message was truncated on host "
            "compute-st-p4de24xlarge-2 GPU 4: NCCL WARN Message truncated : received 256 "
            "bytes instead of 4",
        ),
        (
            "aws-ofi-nccl-889_cloudwatch_dup_efa_init_fail.log",
            "error nccl-error: the aws-ofi-nccl plugin failed to initialize on host "
            "ip-10-36-29-253 GPU 0: NCCL WARN NET/OFI aws-ofi-nccl initialization failed",
        ),
        (
            "polaris-cxi_aws-ofi-nccl_init_failure.log",
            "error nccl-error: the aws-ofi-nccl plugin failed to initialize on host "
            "x3002c0s31b0n0 GPU 0: NCCL WARN NET/OFI Unable to find a protocol that worked.  "
            "Failing initialization. (and 2 more like it)",
        ),
        (
            "sglang-3836_ibext_v8_commsplit_watchdog_timeout.log",
            "error collective-timeout: rank 4's ALLREDUCE (SeqNum 5653) ran for 600011 ms "
            "before the watchdog timed it out [rank 4]",
        ),
    ],
)
def test_fatal_errors_fail_the_diagnosis(name: str, first: str) -> None:
    code, line = _first(str(LOGS / name))
    assert code == 1
    assert line.startswith(first), line


def test_nccl_229_function_after_file_line_is_read() -> None:
    """NCCL 2.29 prints the function after file:line in WARNs and error traces (debug.cc
    `%s:%d (%s) NCCL WARN`, checks.h INFO_LOC `%s:%d (%s) -> %d`); its WARNs carry NCCL's default
    timestamp."""
    text = "\n".join(
        [
            "h1:120:450 [0] NCCL INFO comm 0x7f rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 "
            "MNNVL 0",
            "[2026-03-02 10:11:12] h1:120:450 [0] gin_host_gdaki.cc:431 (gdakiConnectQp) NCCL "
            "WARN DOCA failure 21",
            "h1:120:450 [0] NCCL INFO transport.cc:212 (ncclTransportP2pSetup) -> 2",
            "h1:120:450 [0] NCCL INFO init.cc:1530 (initTransportsRank) -> 2",
        ]
    )
    d = diagnose_text(text)
    (r,) = d.ranks
    assert r.warnings == r.fatal_warnings == ["DOCA failure 21"]
    assert r.error_traces == [
        "transport.cc:212 (ncclTransportP2pSetup) -> 2",
        "init.cc:1530 (initTransportsRank) -> 2",
    ]
    assert [(f.severity, f.code, f.message) for f in d.findings] == [
        (
            "error",
            "nccl-error",
            "a fatal NCCL error (an error trace `file:line -> code` follows it) on rank 0 host h1 "
            "GPU 0: NCCL WARN DOCA failure 21",
        )
    ]


def test_torch_errors_and_harmless_warns() -> None:
    text = (
        "[rank3]:[E ProcessGroupNCCL.cpp:1] torch.distributed.DistBackendError: NCCL error in: "
        "ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL "
        "version 2.19.3\n"
        "h:1:2 [0] init.cc:100 NCCL WARN NCCL_P2P_LEVEL is deprecated\n"
        "h:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 1 nNodes 1 localRanks 1 localRank 0 MNNVL 0"
    )
    d = diagnose_text(text)
    codes = {f.code: f for f in d.findings}
    assert codes["torch-nccl-error"].severity == "error"
    assert codes["torch-nccl-error"].ranks == ["rank 3"]
    # A WARN after which no error travels up stays a warning.
    assert codes["nccl-warn"].severity == "warning"


def test_wrong_fabric_with_plugin_warn_lines() -> None:
    """All five WARN lines of the plugin failure are read, C++ signatures and all."""
    (r,) = [
        r
        for r in diagnose_files([LOGS / "polaris-cxi_aws-ofi-nccl_init_failure.log"]).ranks
        if r.host
    ]
    assert len(r.warnings) == 5
    assert r.warnings[-1] == "Failed to initialize any NET plugin"


def test_cloudwatch_timestamp_glued_to_the_host() -> None:
    d = diagnose_files([LOGS / "aws-ofi-nccl-889_cloudwatch_dup_bootstrap.log"])
    (r,) = d.ranks
    assert (r.key, r.nccl_version, r.cuda_version) == ("ip-10-36-29-253:79 [0]", "2.21.5", "12.8")
    assert d.nodes is None  # one host: not two
    # The repeat after ` | ` is not part of the message.
    dup = diagnose_files([LOGS / "aws-ofi-nccl-889_cloudwatch_dup_efa_init_fail.log"])
    assert dup.ranks[0].ofi_provider == "efa"
    assert "NET/OFI GDR disabled on GDR-supported instance type p4d.24xlarge" in (
        dup.ranks[0].warnings
    )


def test_nccl_23_lines_without_the_nccl_tag() -> None:
    (r,) = diagnose_files([LOGS / "horovod-666_nccl23_socket_no_NCCL_tag.log"]).ranks
    assert (r.key, r.network) == ("seyun:17280 [0]", "Socket")
    d = diagnose_files([LOGS / "nccl-179_nccl237_ib_old_format.log"], expect_fabric="ib")
    first = by_rank(d, 0)
    assert (first.nranks, first.nccl_version, first.network) == (8, "2.3.7", "IB")
    assert first.ib_devices == ["mlx5_1:1/IB", "mlx5_3:1/IB", "mlx5_0:1/IB", "mlx5_2:1/IB"]
    assert not d.failed


def test_bare_version_line_belongs_to_the_run() -> None:
    d = diagnose_files([LOGS / "nccl-447_gcp_slurm_socket_2nodes_nccl278.log"])
    assert {r.key: r.nccl_version for r in d.ranks} == {
        "slurm-train-compute-0-0:2139 [0]": "2.7.8",
        "slurm-train-compute-0-1:2119 [1]": "2.7.8",
    }
    (r,) = diagnose_files([LOGS / "nccl-380_roce_nccl278_ibv_create_cq.log"]).ranks
    assert (r.nccl_version, r.cuda_version) == ("2.7.8", "11.0")


def test_ranks_from_launcher_tags_and_stripped_prefixes() -> None:
    d = diagnose_files([LOGS / "aws-ofi-nccl-24_horovod_efa_ring_ompi.log"])
    (nic,) = [r for r in d.ranks if r.key == "ip-172-32-36-209:8800 [7]"]
    assert (nic.rank, nic.launcher_rank) == (None, 31)
    assert nic.label == "ip-172-32-36-209:8800 [7] (MPI rank 31)"
    stripped = diagnose_files([LOGS / "nccl-392_stripped_host_prefix_ib_no_gdr.log"])
    assert [(r.key, r.rank) for r in stripped.ranks] == [
        ("(no host) [3]", 11),
        ("(no host) [4]", 12),
        ("(no host) [5]", 13),
    ]


def test_expect_socket_fails_on_a_faster_fabric() -> None:
    code, line = _first(str(LOGS / "ib_gdr_a100.log"), "--expect-fabric", "socket")
    assert code == 1
    assert line.startswith("error expect-socket: rank 0 on host ")
    assert "use ib, faster than the expected TCP sockets" in line
    code, _, stderr = _diagnose(
        str(LOGS / "nccl-447_gcp_slurm_socket_2nodes_nccl278.log"), "--expect-fabric", "socket"
    )
    assert code == 0 and "socket-fallback" not in stderr
    assert "info expect-socket: inter-node traffic uses socket, as expected" in stderr


@pytest.mark.parametrize(
    ("name", "first"),
    [
        (
            "oneflow-10344_old_direct_shared_memory.log",
            "error shm-intra-node: some intra-node connections go through host shared memory",
        ),
        (
            "nccl-1609_h800_nvls_heads_timeout_excerpt.log",
            "error expect-nvlink: cannot confirm nvlink: the log does not say that the ranks "
            "share one node",
        ),
    ],
)
def test_expect_nvlink_needs_evidence(name: str, first: str) -> None:
    code, _, stderr = _diagnose(str(LOGS / name), "--expect-fabric", "nvlink")
    assert code == 1
    assert stderr.splitlines()[0].startswith(first)
    assert "traffic stays on NVLink/P2P" not in stderr
    # nNodes 1 is evidence enough.
    ok = str(LOGS / "nccl-tests-213_hw14_separate_runs_nnodes1.log")
    assert _diagnose(ok, "--expect-fabric", "nvlink")[0] == 0


def test_a_gate_the_log_cannot_confirm_fails() -> None:
    code, _, stderr = _diagnose(
        str(LOGS / "nccl-1405_ib_plugin_completion_error_k8s.log"), "--expect-fabric", "roce"
    )
    assert code == 1
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith("error expect-roce")]
    assert line == (
        "error expect-roce: cannot confirm roce: no rank's network choice (`Using network`, "
        "`NET/IB : Using`) or NET connection is in the log; rerun with NCCL_DEBUG=INFO "
        "NCCL_DEBUG_SUBSYS=INIT,NET [kp-ddp-worker-0:3468 [4]]"
    )


def test_socket_on_loopback_and_ib_disabled_by_the_environment() -> None:
    d = diagnose_files([LOGS / "nccl-1053_socket_lo_ib_disabled.log"])
    codes = {f.code: f for f in d.findings}
    assert codes["socket-loopback"].severity == "warning"  # nodes unknown in this excerpt
    assert "NCCL_SOCKET_IFNAME" in codes["socket-loopback"].hint
    assert codes["socket-fallback"].hint.startswith(
        "IB/RoCE was disabled by the environment (NCCL_IB_DISABLE=1)"
    )
    assert "libibverbs" not in codes["socket-fallback"].hint
    # Two nodes over lo: an error of its own.
    text = "\n".join(
        f"n{n}:1:2 [0] NCCL INFO {line}"
        for n in (0, 1)
        for line in (
            "NET/Socket : Using [0]lo:127.0.0.1<0>",
            "Using network Socket",
            f"comm 0x1 rank {n} nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
        )
    )
    (lo,) = [f for f in diagnose_text(text).findings if f.code == "socket-loopback"]
    assert lo.severity == "error"


def test_gdr_off_by_pcie_distance_is_not_peermem() -> None:
    d = diagnose_files([LOGS / "nv_peer_memory-56_nccl24_ring_ib_gdr_disabled_distance.log"])
    (f,) = [f for f in d.findings if f.code == "gdr-off"]
    assert "distance 3 >= 2" in f.message
    assert "NCCL_NET_GDR_LEVEL" in f.hint and "not for want of nvidia-peermem" in f.hint
