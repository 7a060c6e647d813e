"""`deploy --launcher direct` end to end on the local test cluster: the pods start their ranks
with the engine's own launcher (nccl_k8s.launch._pod, from the run's ConfigMap), not torchrun.

Two pods of two gloo ranks each (the test cluster has no GPU; the launcher hosts torch's store
for gloo ranks, as it hosts bench.store's for the direct NCCL path): the run succeeds, `results`
collects rank 0's rows from the pods' logs, and the pods' command was the direct launcher.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from tests.cluster.cluster import Cluster
from tests.e2e_helpers import cli

from nccl_k8s.results.schema import load

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("runs_dir")]


def test_two_pods_with_the_direct_launcher_complete_and_their_results_are_collected(
    cluster: Cluster, namespace: str, runs_dir: Path
) -> None:
    rid = f"r-{uuid.uuid4().hex[:6]}"
    dep = cli(
        cluster, "deploy", "-n", namespace, "--run-id", rid, "--launcher", "direct",
        "--world-size", "4", "--gpus-per-node", "2",
        "--", "--backend", "gloo", "--ops", "all_reduce,broadcast", "-b", "1K", "-e", "16K",
        "-f", "4", "-n", "2", "-w", "1",
    )  # fmt: skip
    assert dep.exit_code == 0, dep.output
    assert f"run {rid} succeeded" in dep.output

    pods, _ = cluster.store.list(
        "pods", namespace, label_selector=f"app.kubernetes.io/instance={rid}"
    )
    assert len(pods) == 2
    for pod in pods:
        args = pod["spec"]["containers"][0]["args"]
        assert "torchrun" not in args
        assert args[:3] == ["python3", "-m", "nccl_k8s.launch._pod"]
        assert pod["status"]["phase"] == "Succeeded"

    res = cli(cluster, "results", "-n", namespace, "--run", rid)
    assert res.exit_code == 0, res.output
    run = load(runs_dir / rid / "results.json")
    assert run.meta.world_size == 4 and run.meta.backend == "gloo"
    assert set(run.ops()) == {"all_reduce", "broadcast"}
    sizes = {r.size_bytes for r in run.rows if r.op == "all_reduce"}
    assert sizes == {1024, 4096, 16384}
    assert all(r.wrong == 0 for r in run.rows)
