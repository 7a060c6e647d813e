"""Issue 39, item 3 (deploy): a failed `deploy --wait` keeps the rows its ranks measured in the
runs directory before its objects are deleted (marked failed for a verdict of the run's own,
partial when a rank failed mid-run), and a --min-busbw miss has one stderr line naming the
gate, the op, its sizes and what was measured against what, as `run` words it.

Both runs are one pod of two ranks (torchrun inside): a failed pod and its log stay until the
deploy deletes them, so what is kept does not race the Job controller."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cluster.cluster import Cluster
from tests.e2e_helpers import cli, engine_zipapp_with, labelled, wait_for

from nccl_k8s.results.schema import load

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("runs_dir")]

#: One pod, two ranks, two ops of two sizes each.
RUN = ["--world-size", "2", "--gpus-per-node", "2", "--timeout", "240s", "--", "--backend",
       "gloo", "--ops", "all_reduce,broadcast", "-b", "1K", "-e", "4K", "-f", "4", "-n", "2",
       "-w", "0"]  # fmt: skip
#: The gate's line as `run` prints it (tests/test_gate_says_why.py).
GATE = re.compile(
    r"^--min-busbw 1000 GB/s missed: all_reduce averaged \d+\.\d\d GB/s over 2 sizes, "
    r"1K to 4K \(\d+\.\d\d GB/s at 4K\); broadcast averaged \d+\.\d\d GB/s over 2 sizes, "
    r"1K to 4K \(\d+\.\d\d GB/s at 4K\)$"
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(nodes=2, gpus_per_node=2) as c:
        yield c


def _rid() -> str:
    return f"k-{uuid.uuid4().hex[:6]}"


def test_a_min_busbw_miss_keeps_its_rows_marked_failed_and_says_which_gate(
    cluster: Cluster, namespace: str, runs_dir: Path
) -> None:
    rid = _rid()
    res = cli(cluster, "deploy", "-n", namespace, "--run-id", rid, *RUN, "--min-busbw", "1000")
    assert res.exit_code == 1, res.output
    gate = [ln for ln in res.stderr.splitlines() if GATE.match(ln)]
    assert len(gate) == 1, res.stderr
    assert f"measured rows kept in {runs_dir / rid / 'results.json'}, marked failed" in " ".join(
        res.stderr.split()
    ), res.stderr
    kept = load(runs_dir / rid / "results.json")
    assert {(r.op, r.size_bytes) for r in kept.rows} >= {
        (op, size) for op in ("all_reduce", "broadcast") for size in (1024, 4096)
    }
    assert not kept.meta.partial and GATE.match(kept.meta.failure or ""), kept.meta.failure
    wait_for("nothing of the run left", lambda: labelled(cluster, namespace) == [], 60)


def test_a_rank_killed_after_its_first_op_keeps_that_op_marked_partial(
    cluster: Cluster,
    namespace: str,
    runs_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import nccl_k8s.k8s.rendering._manifests as manifests

    kill = (
        "import os, signal\n"
        'if os.environ.get("RANK") == "1":  # test: global rank 1 dies as its second op starts\n'
        "    from nccl_k8s.bench import engine as _engine\n"
        "    _run_op = _engine.Engine.run_op\n"
        "    def _dies(self, op, first):\n"
        "        if not first:\n"
        "            os.kill(os.getpid(), signal.SIGKILL)\n"
        "        return _run_op(self, op, first)\n"
        "    _engine.Engine.run_op = _dies\n"
    )
    zipapp = engine_zipapp_with(tmp_path, kill)
    monkeypatch.setattr(manifests, "engine_zipapp", lambda: zipapp)
    rid = _rid()
    res = cli(cluster, "deploy", "-n", namespace, "--run-id", rid, *RUN)
    assert res.exit_code == 1, res.output
    text = " ".join(res.stderr.split())
    assert f"measured rows kept in {runs_dir / rid / 'results.json'}, marked partial" in text, (
        res.stderr
    )
    kept = load(runs_dir / rid / "results.json")
    assert {(r.op, r.size_bytes) for r in kept.rows} >= {("all_reduce", 1024), ("all_reduce", 4096)}
    assert kept.meta.partial and f"run {rid} failed" in (kept.meta.failure or ""), kept.meta.failure
    wait_for("nothing of the run left", lambda: labelled(cluster, namespace) == [], 60)
