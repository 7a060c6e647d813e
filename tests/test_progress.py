"""Issue 13: the live summary's pure parts (pods per stage, what rank 0's log says it measures,
the line itself, the deploy phase); where stderr is not a terminal, one plain line per change
(issue 24), with why Pending pods wait, also end to end against the test cluster."""

from __future__ import annotations

import io
import itertools
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from nccl_k8s.cli import _deploy as cli_deploy
from nccl_k8s.k8s import Progress, progress_line
from nccl_k8s.k8s.run._pods import pod_info
from nccl_k8s.k8s.run._progress import RankZeroLog, phase_of, stages

DATA = Path(__file__).parent / "data" / "nccl-tests"


def pod(name: str, phase: str, node: str | None = None, rank: int = 0) -> Any:
    status: dict[str, Any] = {"phase": phase}
    if phase == "Pending" and node is None:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}
        ]  # fmt: skip
    if phase == "Pending" and node is not None:
        status["containerStatuses"] = [
            {"name": "nccl", "state": {"waiting": {"reason": "ContainerCreating"}},
             "restartCount": 0}
        ]  # fmt: skip
    spec = {"nodeName": node} if node else {}
    labels = {"batch.kubernetes.io/job-completion-index": str(rank)}
    return pod_info({"metadata": {"name": name, "labels": labels}, "spec": spec, "status": status})


def test_pending_is_split_into_unscheduled_and_pulling() -> None:
    pods = [
        pod("r-0", "Pending", rank=0),
        pod("r-1", "Pending", node="node-1", rank=1),
        pod("r-2", "Pending", node="node-2", rank=2),
        pod("r-3", "Running", node="node-3", rank=3),
    ]
    assert stages(pods) == {
        "unscheduled": 1,
        "pulling/creating": 2,
        "running": 1,
        "succeeded": 0,
        "failed": 0,
    }


def test_the_line_names_only_stages_with_pods_and_what_rank_0_measures() -> None:
    p = Progress(
        "r1", "ns", 12.4, {"Pending": 3, "Running": 1, "Succeeded": 0, "Failed": 0}, 4,
        stages={"unscheduled": 1, "pulling/creating": 2, "running": 1, "succeeded": 0,
                "failed": 0},
        rank0="all_reduce up to 64 KiB",
    )  # fmt: skip
    assert progress_line(p) == (
        "run r1: 1 unscheduled, 2 pulling/creating, 1 running of 4 pods (12s); "
        "rank 0: all_reduce up to 64 KiB"
    )
    none_yet = Progress("r1", "ns", 0.2, dict.fromkeys(("Pending", "Running"), 0), 4)
    assert progress_line(none_yet) == "run r1: 0 of 4 pods (0s)"
    queued = Progress(
        "r1", "ns", 3.0, {}, 2, "suspended (waiting for admission, e.g. a Kueue queue)"
    )
    assert progress_line(queued) == (
        "run r1: 0 of 2 pods (3s); suspended (waiting for admission, e.g. a Kueue queue)"
    )


def test_rank_0_log_of_a_real_nccl_tests_run() -> None:
    # all_gather_perf on one H200, -b 8 -e 1G -f 4: its last row is 536870912 B (512 MiB).
    log = RankZeroLog()
    assert log.text() is None
    lines = (DATA / "h200x1-a" / "all_gather_perf.txt").read_text().splitlines()
    changed = [line for line in lines if log.feed(line)]
    assert changed[0] == "# Collective test starting: all_gather_perf"
    assert log.text() == "all_gather up to 512 MiB"
    assert log.joined


def test_rank_0_log_of_the_engine_header_soak_and_sweeps() -> None:
    log = RankZeroLog()
    log.feed("[rank0]: warming up")  # not the engine's: nothing yet
    assert log.text() is None
    assert log.feed("# nccl-k8s version 0.1.0 nccl=2.21.5 torch=2.13.0 world_size=4")
    assert log.text() == "starting"
    log.feed("# nccl-k8s sweep 7 starting")
    log.feed("# Collective test starting: all_reduce_perf")
    assert log.text() == "sweep 7: all_reduce"
    log.feed(
        "        1024           256     float     sum      -1    12.50    0.08    0.12       0"
    )
    assert log.text() == "sweep 7: all_reduce up to 1 KiB"
    log.feed("# nccl-k8s sweep 8 starting")
    assert log.text() == "sweep 8: starting"
    soak = RankZeroLog()
    soak.feed("# soak all_reduce 1048576 B  t=   10.0s  iters      500")
    assert soak.text() == "all_reduce up to 1 MiB"


def test_phases_of_a_run() -> None:
    unbound = [pod("r-0", "Pending", rank=0), pod("r-1", "Running", node="n1", rank=1)]
    assert phase_of(unbound, 2, joined=False) == "schedule"
    assert phase_of(unbound[1:], 2, joined=False) == "schedule"  # a pod not even created
    bound = [pod("r-0", "Pending", node="n0", rank=0), pod("r-1", "Running", node="n1", rank=1)]
    assert phase_of(bound, 2, joined=False) == "rendezvous"
    assert phase_of(bound, 2, joined=True) == "run"
    ended = [pod("r-0", "Succeeded", node="n0", rank=0), pod("r-1", "Running", node="n1", rank=1)]
    assert phase_of(ended, 2, joined=False) == "run"


@pytest.mark.parametrize("terminal", [False, True])
def test_live_summary_is_drawn_on_a_terminal_and_plain_lines_elsewhere(
    terminal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(cli_deploy, "err", Console(file=buf, force_terminal=terminal, width=120))
    live = cli_deploy._LiveSummary()
    p = Progress("r1", "ns", 1.0, {}, 2, stages={"unscheduled": 2}, rank0=None)
    live(p)
    live(Progress("r1", "ns", 1.5, {}, 2, stages={"unscheduled": 2}, rank0=None))  # no change
    live(Progress("r1", "ns", 2.0, {}, 2, stages={"running": 2}, rank0="all_reduce"))
    live.close()
    if terminal:
        assert "run r1: 2 running of 2 pods (2s); rank 0: all_reduce" in buf.getvalue()
    else:  # one plain line per change, none because time passed
        assert buf.getvalue().splitlines() == [
            "run r1: 2 unscheduled of 2 pods (1s)",
            "run r1: 2 running of 2 pods (2s); rank 0: all_reduce",
        ]


def test_plain_lines_say_why_pending_pods_wait() -> None:
    from nccl_k8s.k8s.run._progress import PlainProgress, pending_reasons

    pods = [pod("a", "Pending", rank=0), pod("b", "Pending", rank=1), pod("c", "Pending", "n1", 2)]
    reasons = pending_reasons(pods)
    assert reasons == (
        "2 Unschedulable: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
        "1 ContainerCreating",
    )
    plain = PlainProgress()
    p = Progress("r1", "ns", 3.0, {}, 3, stages=stages(pods), pending=reasons)
    assert plain(p) == (
        "run r1: 2 unscheduled, 1 pulling/creating of 3 pods (3s); pending: 2 Unschedulable: "
        "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.; 1 ContainerCreating"
    )
    assert plain(p) is None


@pytest.mark.slow
def test_deploy_with_stderr_to_a_file_logs_each_change_and_the_pending_reason(
    cluster: Any, namespace: str, tmp_path: Path
) -> None:
    """Acceptance 3 of issue 24: `deploy ... 2>log` on the test cluster. Pods asking for more
    GPUs than a node holds stay Unschedulable; the log says so, with the scheduler's message,
    within 5 s of the pods being created (the run waits --schedule-timeout 8s, then fails)."""
    import subprocess
    import sys
    import time

    log = tmp_path / "log"
    rid = "prog-" + tmp_path.name[-6:].lower().replace("_", "-")
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nccl_k8s.cli.main", "deploy", "-n", namespace,
             "--kubeconfig", str(cluster.kubeconfig), "--run-id", rid, "--world-size", "32",
             "--gpus-per-node", "16", "--schedule-timeout", "8s", "--", "--backend", "gloo"],
            stdout=subprocess.DEVNULL, stderr=stderr, text=True,
        )  # fmt: skip
        try:
            created = None
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None:
                pods, _ = cluster.store.list("pods", namespace)
                if created is None and pods:
                    created = time.monotonic()
                if created is not None and "pending: 2 Unschedulable" in log.read_text():
                    break
                time.sleep(0.05)
            seen = time.monotonic()
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log.read_text()
    assert created is not None, text
    assert seen - created <= 5, text
    assert proc.returncode == 1, text
    lines = text.splitlines()
    pending = [
        line
        for line in lines
        if line.startswith(f"run {rid}: 2 unscheduled of 2 pods")
        and "; pending: 2 Unschedulable: 0/4 nodes are available" in line
    ]
    assert len(pending) == 1, text  # one line per change, not one per second of waiting
    # Each line says something the one before did not (the pods' phases or why they wait); the
    # seconds alone never make a line.
    said = [re.sub(r" \(\d+s\)", "", line) for line in lines if line.startswith(f"run {rid}:")]
    assert all(a != b for a, b in itertools.pairwise(said)), text
    assert "\x1b[" not in text
