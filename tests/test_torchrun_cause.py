"""Issue 39 item 4: under torchrun a pod's container says only "exit code 1" whatever ended its
worker; the culprit line carries the rank's own cause (torchrun's root cause: the signal that
killed the worker, or the worker's own error), the pod's status where that is more specific
(OOMKilled, exit 137). The logs are made by torch's own ChildFailedError, as torchrun prints it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nccl_k8s.errors import FailureReason
from nccl_k8s.k8s.run._culprit import attribute, parse_faults
from nccl_k8s.k8s.run._torchrun import parse_root_cause

errors = pytest.importorskip("torch.distributed.elastic.multiprocessing.errors")


def torchrun_log(
    rank: int, local_rank: int, exitcode: int, error_file: str = "/nonexistent"
) -> str:
    """The end of a pod's log when its torchrun agent gave up: ChildFailedError's text."""
    failure = errors.ProcessFailure(
        local_rank=local_rank, pid=4242, exitcode=exitcode, error_file=error_file
    )
    message = errors.ChildFailedError("nccl_k8s.bench", {rank: failure}).format_msg()
    return "rank output\n[W socket] a warning\nTraceback (most recent call last):\n  ...\n" + (
        f"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: {message}\n"
    )


def engine_error_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc: Exception) -> str:
    """The error file our engine writes when it raises (bench.__main__, torch's layout)."""
    from nccl_k8s.bench.__main__ import ERROR_FILE_ENV, write_error_file

    path = tmp_path / "error.json"
    monkeypatch.setenv(ERROR_FILE_ENV, str(path))
    try:
        raise exc
    except Exception as e:
        write_error_file(e)
    return str(path)


def test_a_sigkilled_worker_is_read_as_killed_with_its_global_rank() -> None:
    cause = parse_root_cause(torchrun_log(3, 1, -9))
    assert cause is not None
    assert (cause.rank, cause.local_rank, cause.exitcode, cause.pid) == (3, 1, -9, 4242)
    assert cause.failure is FailureReason.KILLED and cause.error == ""
    assert cause.text() == (
        "its worker (global rank 3, local rank 1, pid 4242) was killed by SIGKILL "
        "(the OOM killer or a user; torchrun's root cause)"
    )
    crashed = parse_root_cause(torchrun_log(0, 0, -11))
    assert crashed is not None and crashed.failure is FailureReason.CRASHED


def test_the_engines_own_error_is_its_tracebacks_last_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = engine_error_file(
        tmp_path, monkeypatch, RuntimeError("CUDA error: no CUDA-capable device is detected")
    )
    cause = parse_root_cause(torchrun_log(2, 0, 1, path))
    assert cause is not None and cause.failure is FailureReason.EXITED
    assert cause.error == "RuntimeError: CUDA error: no CUDA-capable device is detected"
    assert cause.says_more
    # A worker that exited 1 without an error file says no more than the container.
    bare = parse_root_cause(torchrun_log(2, 0, 1))
    assert bare is not None and not bare.says_more
    assert parse_root_cause("no summary here\n") is None


def _pod(name: str, rank: int, code: int, reason: str = "Error", at: str = "10") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {"batch.kubernetes.io/job-completion-index": str(rank)},
        },
        "spec": {"nodeName": f"n{rank}", "containers": [{"name": "bench", "args": ["--nproc-per-node=2"]}]},
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "bench", "state": {"terminated": {
                "exitCode": code, "reason": reason, "startedAt": "2026-01-01T00:00:00Z",
                "finishedAt": f"2026-01-01T00:00:{at}Z"}}}],
        },
    }  # fmt: skip


def test_the_culprit_line_says_the_worker_was_sigkilled_not_exit_code_1() -> None:
    pods = [_pod("r-0-a", 0, 1, at="20"), _pod("r-1-b", 1, 1, at="10")]
    causes = {"r-1-b": parse_root_cause(torchrun_log(3, 1, -9))}
    v = attribute(pods, causes={k: c for k, c in causes.items() if c})
    assert v is not None
    c = v.culprit
    assert (c.pod, c.node, c.reason, c.global_rank) == ("r-1-b", "n1", FailureReason.KILLED, 3)
    assert v.text().startswith(
        "rank 1 (pod r-1-b, node n1; global rank 3): its worker (global rank 3, local rank 1, "
        "pid 4242) was killed by SIGKILL (the OOM killer or a user; torchrun's root cause); "
        "its container: exit code 1"
    )


def test_the_pods_own_status_stays_where_it_is_more_specific() -> None:
    # OOMKilled and exit 137 on the container are the pod's own words: they stay.
    for pod in (_pod("r-1-b", 1, 137, reason="OOMKilled"), _pod("r-1-b", 1, 137)):
        cause = parse_root_cause(torchrun_log(3, 1, 1))
        v = attribute([pod], causes={"r-1-b": cause} if cause else {})
        assert v is not None and v.culprit.reason is FailureReason.KILLED
        assert "torchrun" not in v.text()


def test_peers_name_the_rank_and_torchrun_says_how_it_ended() -> None:
    # Rank 0's watchdog saw global rank 3's heartbeats stop; pod 1's torchrun saw worker 3 die.
    line = (
        'NCCL_K8S_FAULT {"v":1,"rank":0,"culprit":3,"host":"r-1","pid":4242,'
        '"reason":"no heartbeat for 3s","kind":"no_heartbeat","where":"all_reduce 1M"}'
    )
    pods = [_pod("r-0-a", 0, 1, at="20"), _pod("r-1-b", 1, 1, at="10")]
    cause = parse_root_cause(torchrun_log(3, 1, -9))
    assert cause is not None
    v = attribute(pods, faults=parse_faults(line, "r-0-a"), causes={"r-1-b": cause})
    assert v is not None and v.culprit.reason is FailureReason.KILLED
    assert v.text().startswith(
        "rank 1 (pod r-1-b, node n1; global rank 3): stopped: no heartbeat for 3s "
        "(all_reduce 1M); its worker (global rank 3, local rank 1, pid 4242) was killed by "
        "SIGKILL"
    )
