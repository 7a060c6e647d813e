"""Issue 22: `nodes check` runs each round's disjoint pairs all at once by default, however many
they are: the tests the check's one API client carries at once come from the round (its pool is
widened for it), no longer from a fixed 16 (what a pool of 100 connections held at 6 a test).

34 one-GPU nodes, so pass 1 is 17 pairs. Every pod runs a fake in-pod launcher (the run's zipapp
swapped; the deploys, watches, collects and cleanups are real) that holds until a file exists,
then rank 0 prints the engine's result lines. The file is created only once all 17 tests' Jobs
and their 34 pods run at the same time, read from the API: a check that ran the round in waves
of 16 would never get there (its 17th test starts only after one of the first 16 ends).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cluster.cluster import Cluster
from tests.e2e_helpers import cli, labelled, wait_for

from nccl_k8s.k8s.nodes._nodecheck import CHECK_LABEL

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("runs_dir")]

NODES = 34
PAIRS = NODES // 2

FAKE_POD = '''
"""A fake in-pod launcher: hold until NODES_TEST_HOLD exists, then rank 0 prints results."""
import json, os, time

def line(kind, **payload):
    print("NCCL_K8S_RESULT " + json.dumps({"v": 1, "kind": kind, **payload}), flush=True)

hold = os.environ["NODES_TEST_HOLD"]
while not os.path.exists(hold):
    time.sleep(0.1)
if os.environ.get("JOB_COMPLETION_INDEX") == "0":
    line("meta", run_id=os.environ["NCCL_K8S_RUN_ID"], time="2026-12-05T00:00:00Z",
         nccl_k8s="0.1.0", torch=None, nccl=None, cuda=None, backend="gloo", world_size=2,
         nodes=2, local_world_size=1, gpu_model=None, devices=[], env={},
         config={"minbytes": 1024, "maxbytes": 2048, "ops": ["all_reduce"]})
    for size in (1024, 2048):
        line("row", op="all_reduce", dtype="float", redop="sum", root=-1, size=size,
             count=size // 4, placement="out", time_us=100.0, algbw=size / 1e5,
             busbw=size / 1e5, wrong=0, time_us_min=99.0, time_us_max=101.0)
    line("summary", op="all_reduce", out_of_bounds=0, avg_busbw=0.015, ok=True)
'''


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(nodes=NODES, gpus_per_node=1) as c:
        yield c


@pytest.fixture(autouse=True)
def fake_launcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nccl_k8s.k8s.rendering._manifests as manifests
    from nccl_k8s.k8s.rendering._zipapp import build_zipapp

    root = tmp_path / "fake" / "nccl_k8s"
    (root / "launch").mkdir(parents=True)
    (root / "bench").mkdir()
    for name in ("__init__.py", "errors.py", "bench/__init__.py", "launch/__init__.py"):
        (root / name).write_text("")
    (root / "launch" / "_pod.py").write_text(FAKE_POD)
    zipapp = build_zipapp(root)
    monkeypatch.setattr(manifests, "engine_zipapp", lambda: zipapp)


def _in_flight(cluster: Cluster, namespace: str) -> dict[str, Any]:
    """The check's Jobs and its running pods, as the API has them now."""
    jobs, _ = cluster.store.list("jobs", namespace, label_selector=CHECK_LABEL)
    pods, _ = cluster.store.list("pods", namespace, label_selector=CHECK_LABEL)
    running = [
        p
        for p in pods
        if any(
            "running" in (c.get("state") or {}) for c in p["status"].get("containerStatuses", [])
        )
    ]
    return {
        "jobs": sorted(j["metadata"]["name"] for j in jobs),
        "running_nodes": sorted(p["spec"].get("nodeName") or "" for p in running),
    }


@pytest.mark.timeout(600)
def test_a_round_of_17_pairs_runs_all_at_once(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    hold = tmp_path / "go"
    seen: list[dict[str, Any]] = []
    failed: list[BaseException] = []

    def release_when_all_run() -> None:
        try:
            seen.append(
                wait_for(
                    f"all {PAIRS} tests running at once",
                    lambda: (
                        (now := _in_flight(cluster, namespace))
                        and len(now["running_nodes"]) == NODES
                        and now
                    ),
                    240,
                )
            )
        except BaseException as e:  # pytest.fail's exception: reported below, after the check
            failed.append(e)
        finally:
            hold.touch()  # either way the check can end

    watcher = threading.Thread(target=release_when_all_run, daemon=True)
    watcher.start()
    res = cli(
        cluster, "nodes", "check", "-n", namespace, "--gpus-per-node", "1", "--launcher",
        "direct", "--env", f"NODES_TEST_HOLD={hold}", "-o", "json",
        "--", "--backend", "gloo", "--ops", "all_reduce", "-b", "1K", "-e", "2K",
    )  # fmt: skip
    watcher.join(60)
    assert not failed, f"{failed[0]}\n{res.output}"
    assert res.exit_code == 0, res.output
    # All 17 Jobs and all 34 nodes' pods were running at the same moment.
    assert len(seen[0]["jobs"]) == PAIRS, seen
    assert seen[0]["running_nodes"] == sorted(f"node-{i}" for i in range(NODES)), seen
    doc = json.loads(res.output[res.output.index("{") :])
    assert [t["pass_no"] for t in doc["tests"]] == [1] * PAIRS  # one round, nothing retested
    assert {v["verdict"] for v in doc["nodes"]} == {"good"}, doc["nodes"]
    assert "waves" not in res.output
    assert labelled(cluster, namespace) == []
