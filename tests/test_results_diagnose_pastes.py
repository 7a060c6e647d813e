"""Issue 35: real failures as people paste them are diagnosed, not refused or called clean.

Every file is a verbatim excerpt of a public thread (tests/data/nccl-logs/README.md says where);
the expected values below were read from the files, not from the parser.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.results.diagnose import diagnose_files

LOGS = Path(__file__).parent / "data" / "nccl-logs"
ONLY = LOGS / "errors-only"


def _diagnose(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, ["diagnose", *args])
    return res.exit_code, res.stdout, res.stderr


def _errors(path: Path) -> list[tuple[str, str, list[str]]]:
    d = diagnose_files([path])
    return [(f.code, f.message, f.ranks) for f in d.findings if f.severity == "error"]


# Today's code refuses each of these files ("no NCCL log lines found", exit 2): none holds a line
# with NCCL's `host:pid:tid [dev]` prefix.
def test_pytorch_error_names_nccls_last_error_and_the_peer() -> None:
    # NVIDIA/nccl#2076: `Last error:` then `socketProgressOpt: Call to recv from 172....<33759>
    # failed : Connection reset by peer`; no rank or host in the text.
    (err,) = _errors(ONLY / "nccl-2076_distbackenderror_last_error_connection_reset.log")
    code, message, ranks = err
    assert code == "torch-nccl-error" and ranks == []
    assert message.startswith("a peer's connection closed; peer 172.... is the likely culprit.")
    assert "Call to recv from 172....<33759> failed : Connection reset by peer" in message


def test_pytorch_error_names_the_rank_it_prints() -> None:
    # NVIDIA/nccl#1928: every line `[rank3]: `, NET/OFI request completed with error.
    (err,) = _errors(ONLY / "nccl-1928_rank3_distbackenderror_ofi_undeliverable.log")
    code, message, ranks = err
    assert (code, ranks) == ("torch-nccl-error", ["rank 3"])
    assert message.startswith("rank 3: a libfabric (EFA/OFI) transfer failed.")
    assert message.endswith("NCCL version 2.28.8")
    assert "NET/OFI Request 0x7f14cc5b60c0 completed with error. RC: 113." in message


def test_bootstrap_connect_failure_names_the_peer() -> None:
    code, _, stderr = _diagnose(
        str(ONLY / "pytorch-transformer-distributed-1_bootstrap_connect_no_route.log")
    )
    assert code == 1
    first = stderr.splitlines()[0]
    assert first.startswith(
        "error torch-nccl-error: a connection to a peer could not be made (an unreachable "
        "address, a firewall, or the wrong interface: NCCL_SOCKET_IFNAME); peer 192.168.19.14 "
        "is the likely culprit."
    )
    # PyTorch's `ncclSystemError: ...` line is part of the same error, not a second one.
    assert "unexplained" not in stderr


def test_a_loggers_prefix_is_cut_from_the_last_error() -> None:
    # NVIDIA/nccl#1247: Ray's `(RayWorkerVllm pid=7602) ERROR 04-07 00:57:46 ray_utils.py:45] `.
    (err,) = _errors(ONLY / "nccl-1247_ray_vllm_last_error_busid.log")
    assert "NCCL's last error: Attribute busid of node nic not found." in err[1]


def test_watchdog_timeout_alone() -> None:
    # NVIDIA/nccl#1730: two `[rank118]:` lines of ProcessGroupNCCL, no NCCL line.
    (err,) = _errors(ONLY / "nccl-1730_watchdog_timeout_rank118.log")
    assert err == (
        "collective-timeout",
        "rank 118's ALLREDUCE (SeqNum 2398459) ran for 1800068 ms before the watchdog timed it out",
        ["rank 118"],
    )


def test_ib_completion_error_pasted_alone() -> None:
    # NVIDIA/nccl#1664 (in a sentence, `NET/IBP:` without prefix or tag) and #1814 (the title).
    for name, peer in (
        ("nccl-1664_ibp_completion_status12_in_prose.log", "7.6.13.83"),
        ("nccl-1814_title_ib_completion_status12.log", "xxx.xxx.xxx.xxx"),
    ):
        code, _, stderr = _diagnose(str(ONLY / name))
        assert code == 1, name
        assert stderr.startswith(
            f"error ib-completion-error: peer {peer} (or the link to it) is the likely culprit: "
        )
        assert "(status 12: transport retry counter exceeded: the peer stopped answering; " in (
            stderr
        )
        assert "; vendor err 129)" in stderr


def test_nothing_nccl_related_is_still_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("Last error:\nno NCCL here\n")
    code, stdout, _ = _diagnose(str(tmp_path / "notes.txt"))
    assert code == 2 and stdout == ""


# Today: the three WARNs of NVIDIA/nccl#2303 are warnings and the exit is 0 (a Cuda-failure WARN
# with no error trace after it was read as harmless).
def test_cuda_failure_without_a_trace_is_fatal() -> None:
    log = LOGS / "releases" / "nccl-2303_v2.30.7_cuda_failure_teardown_no_trace.log"
    code, _, stderr = _diagnose(str(log))
    assert code == 1
    assert stderr.splitlines()[0] == (
        "error nccl-error: a CUDA call failed on this GPU on host watchtower-navy-cn13 GPU 1: "
        "NCCL WARN Cuda failure 'unspecified launch failure' [watchtower-navy-cn13:2619531 [1]]"
    )


def test_cuda_failure_is_fatal_on_every_gpu_that_printed_it() -> None:
    # NVIDIA/nccl#1528: GPU 1's WARN has a trace after it, GPU 3's four WARNs have none; today
    # GPU 3 is only a warning.
    d = diagnose_files([LOGS / "nccl-1528_cuda_failure_named_symbol_without_trace.log"])
    (f,) = d.findings
    assert (f.severity, f.code) == ("error", "nccl-error")
    assert f.ranks == ["c76d92cccb6e:72 [1]", "c76d92cccb6e:72 [3]"]


def test_a_launchers_host_prefix_names_the_host() -> None:
    # NVIDIA/nccl#1029: `rdma-test-gpu-worker-1: ` before every line; `Cuda failure
    # 'initialization error'` after `Last error:`.
    (err,) = _errors(ONLY / "nccl-1029_pdsh_host_last_error_cuda_init.log")
    assert err[1].startswith(
        "host rdma-test-gpu-worker-1: a CUDA call failed on this GPU. NCCL's last error: Cuda "
        "failure 'initialization error'. PyTorch: torch.distributed.DistBackendError: NCCL error"
    )


# Issue 35, acceptance 4: more real pastes of each error-only class (errors-only/README.md).
@pytest.mark.parametrize(
    ("name", "rank"),
    [
        # `B-nemo-ft3/0 [default1]:[rank1]: torch.distributed.DistBackendError: [1] is setting up
        # NCCL communicator and retrieving ncclUniqueId from [0] ... wait timeout after 600000ms`
        ("nemo-speech-14399_store_get_wait_timeout.log", 1),
        # `torch.distributed.DistBackendError: [4] is setting up ... got error: Socket Timeout`
        ("llamafactory-3698_store_get_socket_timeout.log", 4),
    ],
)
def test_a_bootstrap_store_timeout_names_the_rank_and_what_it_waited_for(
    name: str, rank: int
) -> None:
    # Before: PyTorch's text alone, and no rank (behind a launcher's prefix, or in `[4] is ...`).
    (err,) = _errors(ONLY / name)
    code, message, ranks = err
    assert (code, ranks) == ("torch-nccl-error", [f"rank {rank}"])
    assert message.startswith(
        f"rank {rank}: NCCL's bootstrap timed out: this rank waited in the c10d store for rank "
        "0's ncclUniqueId, which rank 0 never published"
    )
    assert f"PyTorch: torch.distributed.DistBackendError: [{rank}] is setting up" in message


def test_a_socket_connect_that_gave_up_is_an_error_in_a_prefix_nobody_knows() -> None:
    # NVIDIA/nccl#1618: grep's `rank_604.s12gn3064.4031852.log:` then a logger's own
    # `[0604/1024][...] [misc/socket.cc:586] [s12gn3064:pid=3942408] NCCL WARN socketPollConnect
    # poll() returned 1, no POLLOUT events`, twice. Before: an unexplained warning, exit 0.
    code, _, stderr = _diagnose(str(ONLY / "nccl-1618_socketpollconnect_no_pollout_grep.log"))
    assert code == 1
    assert stderr.splitlines()[0].startswith(
        "error unexplained-nccl-error: an NCCL error no rule explains on host s12gn3064: a "
        "connection to a peer could not be made (an unreachable address, a firewall, or the "
        "wrong interface: NCCL_SOCKET_IFNAME): NCCL WARN socketPollConnect poll() returned 1, "
        "no POLLOUT events (1 more like it)"
    )


@pytest.mark.parametrize(
    ("name", "timeouts"),
    [
        (
            "basicsr-737_watchdog_allreduce_seq808.log",
            [
                (1, "ALLREDUCE", 808, 600020),
                (0, "ALLREDUCE", 808, 600030),
                (2, "ALLREDUCE", 808, 600061),
            ],
        ),
        (  # each line behind `[80746] `
            "llamafactory-7396_watchdog_numbered_lines.log",
            [(0, "ALLREDUCE", 1580, 600060), (4, "ALLREDUCE", 1580, 600067)],
        ),
        (  # hard-wrapped (`OpTy` / `pe=BROADCAST`): before, "no NCCL log lines found", exit 2
            "open-r1-620_watchdog_broadcast_hard_wrapped.log",
            [
                (1, "BROADCAST", 4, 1800010),
                (2, "BROADCAST", 4, 1800010),
                (3, "BROADCAST", 4, 1800011),
                (6, "BROADCAST", 4, 1800010),
                (5, "BROADCAST", 4, 1800010),
            ],
        ),
    ],
)
def test_watchdog_timeouts_pasted_alone(
    name: str, timeouts: list[tuple[int, str, int, int]]
) -> None:
    assert _diagnose(str(ONLY / name))[0] == 1
    assert _errors(ONLY / name) == [
        (
            "collective-timeout",
            f"rank {r}'s {op} (SeqNum {seq}) ran for {ms} ms before the watchdog timed it out",
            [f"rank {r}"],
        )
        for r, op, seq, ms in timeouts
    ]


@pytest.mark.parametrize(
    ("name", "rank", "said"),
    [
        (
            "deepseek-moe-47_watchdog_terminated_cuda_error.log",
            1,
            "Process group watchdog thread terminated with exception: CUDA error: unspecified "
            "launch failure",
        ),
        (
            "llama-cookbook-290_nccl_watchdog_terminated_cuda_error.log",
            0,
            "NCCL watchdog thread terminated with exception: CUDA error: unspecified launch failure",
        ),
    ],
)
def test_a_watchdog_that_died_of_a_cuda_error_is_a_cuda_failure(
    name: str, rank: int, said: str
) -> None:
    # Before: "no NCCL log lines found", exit 2 (no NCCL line, no DistBackendError).
    (err,) = _errors(ONLY / name)
    assert err == (
        "torch-nccl-error",
        f"rank {rank}: a CUDA call failed on this GPU (unspecified launch failure), caught by "
        "PyTorch's NCCL watchdog: the GPU's context is dead (a kernel fault; look for an Xid in "
        f"the host's kernel log). PyTorch: {said}",
        [f"rank {rank}"],
    )


def test_a_bootstrap_connect_that_gave_up_names_the_peer_and_nothing_twice() -> None:
    # devopsrustem/slurmv4: NCCL 2.30's `ncclOsSocketPollConnect: connect to 10.82.101.249<37857>
    # returned Connection refused, exceeded error retry count after 35 attempts`, a traceback whose
    # source line `raise RuntimeError(f"NCCL error: {error_str}")` is echoed, then the error.
    # Before: no peer named (`connect to`, lower case), "host RuntimeError", and the echoed
    # source line an unexplained error of its own.
    errors = _errors(ONLY / "slurmv4-6_ncclossocketpollconnect_refused_sglang.log")
    assert errors == [
        (
            "nccl-error",
            "a connection to a peer could not be made (an unreachable address, a firewall, or "
            "the wrong interface: NCCL_SOCKET_IFNAME) on host tpgds-aihub0003 GPU 3; peer "
            "10.82.101.249 is the likely culprit: NCCL WARN ncclOsSocketPollConnect: connect to "
            "10.82.101.249<37857> returned Connection refused, exceeded error retry count after "
            "35 attempts",
            ["tpgds-aihub0003:2387398 [3]"],
        ),
        (
            "torch-nccl-error",
            "NCCL error: remote process exited or there was a network error",
            [],
        ),
    ]


def test_a_bootstrap_root_mismatch_is_fatal() -> None:
    # devopsrustem/slurmv4: `bootstrap.cc:345 NCCL WARN Bootstrap Root : mismatch in info from
    # procs, nranks 16 vs 16, nroots 1 vs 1, iroot 0 vs 0, offset 0 vs 1305411586` in two
    # processes of one host. Before: two warnings, exit 0 (the root gives up; the ranks hang).
    code, _, stderr = _diagnose(str(ONLY / "slurmv4-6_bootstrap_root_mismatch.log"))
    assert code == 1
    assert stderr.splitlines()[0].startswith(
        "error nccl-error: NCCL's bootstrap root got a hello from a process of another world "
        "(another job on its port, or ranks that disagree on the world size) on host "
        "tpgds-aihub0003 GPU 0, host tpgds-aihub0003 GPU 0: NCCL WARN Bootstrap Root : mismatch "
        "in info from procs, nranks 16 vs 16, nroots 1 vs 1, iroot 0 vs 0, offset 0 vs "
        "1305411586 (and 1 more like it)"
    )
