"""Issue 39 item 5: `results` of a Job still running says so, marks what it wrote partial, and
fails unless a snapshot was asked for; a continuous run's complete sweeps and an ended Job's
results are whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from nccl_k8s.k8s.run._collect import _still_running
from nccl_k8s.k8s.run._outcomes import Collected
from nccl_k8s.results import heading
from nccl_k8s.results.schema import Run, RunMeta


def _run() -> Run:
    return Run(meta=RunMeta(run_id="r1", backend="gloo", world_size=2), rows=[])


@pytest.mark.parametrize("phase", ["Pending", "Running", "Failing", "Unschedulable", "Suspended"])
def test_a_job_that_has_not_ended_is_partial_and_says_its_phase(phase: str) -> None:
    run = _run()
    assert _still_running(run, phase, continuous=False) == phase
    assert (
        run.meta.partial and run.meta.failure == f"run r1 is still {phase}: 0 rows measured so far"
    )
    assert heading(run.meta)[1] == f"# PARTIAL: run r1 is still {phase}: 0 rows measured so far"
    got = Collected("r1", "ns", run, Path("runs/r1/results.json"), Path("logs"), 2, None, 0.1,
                    still_running=phase)  # fmt: skip
    assert got.snapshot_failure(snapshot=True) is None
    assert got.snapshot_failure(snapshot=False) == (
        f"run r1 is still {phase}: the 0 rows written to runs/r1/results.json are a partial "
        "snapshot (marked partial); wait for it (`nccl-k8s wait --run r1`) or pass --snapshot"
    )


@pytest.mark.parametrize(("phase", "continuous"), [("Succeeded", False), ("Failed", False),
                                                   ("Orphaned", False), ("Running", True)])  # fmt: skip
def test_an_ended_job_and_a_continuous_runs_sweeps_are_whole(phase: str, continuous: bool) -> None:
    run = _run()
    assert _still_running(run, phase, continuous=continuous) is None
    assert not run.meta.partial and run.meta.failure is None
    assert len(heading(run.meta)) == 1
