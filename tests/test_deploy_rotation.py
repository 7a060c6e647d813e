"""Issue 11, acceptance 4: `results` of a run whose logs rotated returns every row.

16 ranks (4 pods x 4 gloo ranks) run an alltoall sweep on a test cluster whose kubelet rotates
container logs at 1 MiB, as containerLogMaxSize does (the log API then serves only the newest
file). Every rank is noisy the way NCCL_DEBUG=INFO ranks are: NCCL-style INFO lines written
straight to the stdout descriptor (one write per line, as NCCL's fprintf), a steady trickle during
the run and a burst at exit (NCCL logs again when communicators are destroyed), loaded through a
sitecustomize module put on the pods' PYTHONPATH. The burst alone is more than 1 MiB per pod after
the last result line, so rank 0's result lines printed during the sweep are gone from its current
log file; only the block the pod wrapper prints last is left to read.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.cluster.cluster import Cluster
from tests.e2e_helpers import wait_for

from nccl_k8s.errors import ResultsError
from nccl_k8s.k8s import ClientSettings, collect, render
from nccl_k8s.k8s.api._client import KubeClient
from nccl_k8s.k8s.run._deploy import attach_owner
from nccl_k8s.results import parse_result_lines
from nccl_k8s.spec import build_run_spec

pytestmark = pytest.mark.slow

ROTATE_AT = 1 << 20

#: NCCL's INFO prefix is host:pid:tid [cudaDev]; ranks print while they run and when they end.
NOISE = """\
import atexit, os, socket, threading, time
if os.environ.get("LOCAL_RANK") is not None:
    _dev = int(os.environ["LOCAL_RANK"])
    _head = f"{socket.gethostname()}:{os.getpid()}:{os.getpid() + 7} [{_dev}] NCCL INFO "

    def _line(i):
        return (_head + f"Channel {i % 32:02d}/1 : {_dev}[{_dev}] -> {(_dev + 1) % 4}"
                f"[{(_dev + 1) % 4}] via P2P/IPC/read comm 0x7f3a2c000000 nRanks 16\\n").encode()

    def _trickle():
        for i in range(200_000):
            os.write(1, _line(i))
            time.sleep(0.002)

    threading.Thread(target=_trickle, daemon=True).start()
    # At exit (communicators destroyed): 3,200 lines, about 400 KB per rank, 1.6 MB per pod.
    atexit.register(lambda: [os.write(1, _line(i)) for i in range(3200)])
"""


@pytest.fixture(scope="module")
def rotating(cluster_factory: Callable[..., Cluster]) -> Cluster:
    return cluster_factory(nodes=4, gpus_per_node=4, log_max_bytes=ROTATE_AT)


def _with_noise(objs: list[dict[str, Any]], noise_dir: Path) -> list[dict[str, Any]]:
    objs = copy.deepcopy(objs)
    env = objs[-1]["spec"]["template"]["spec"]["containers"][0]["env"]
    for e in env:
        if e["name"] == "PYTHONPATH":
            e["value"] = f"{noise_dir}:{e['value']}"
    return objs


def test_results_of_a_rotated_noisy_16_rank_run_has_every_row(
    rotating: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NCCL_K8S_RUNS_DIR", str(tmp_path / "runs"))
    ns = "rotation"
    rotating.store.create("namespaces", {"metadata": {"name": ns}})
    noise_dir = tmp_path / "noise"
    noise_dir.mkdir()
    (noise_dir / "sitecustomize.py").write_text(NOISE)
    spec = build_run_spec(
        run_id="rotated",
        namespace=ns,
        world_size=16,
        gpus_per_node=4,
        cpu="1",
        memory="9Gi",
        rendezvous_timeout="5m",
        engine_args=["--backend", "gloo", "--ops", "alltoall", "-b", "1K", "-e", "64K", "-f", "2",
                     "-n", "2", "-w", "1", "-c", "1"],
    )  # fmt: skip
    objs = _with_noise(render(spec), noise_dir)
    settings = ClientSettings(kubeconfig=str(rotating.kubeconfig))

    async def apply() -> None:
        async with KubeClient.connect(settings) as kc:
            for obj in objs:
                applied = await kc.apply(obj)
            for obj in attach_owner(objs, applied)[:-1]:
                await kc.apply(obj, force=True)

    asyncio.run(apply())

    def ended() -> list[str]:
        job = rotating.store.get("jobs", ns, "rotated")
        conditions = [c["type"] for c in (job.get("status") or {}).get("conditions") or []]
        return conditions if {"Complete", "Failed"} & set(conditions) else []

    conditions = wait_for("the Job ended", ended, 240)
    job = rotating.store.get("jobs", ns, "rotated")
    assert "Complete" in conditions, (conditions, job.get("status"))

    # The logs did rotate, and rank 0's inline result lines are gone from what the API serves.
    rank0 = next(
        p for p in rotating.store.list("pods", ns)[0]
        if p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "0"
    )  # fmt: skip
    current = rotating.kubelet.log_path(ns, rank0["metadata"]["name"], "bench")
    assert any(f.name.startswith("0.log.") for f in current.parent.iterdir())
    text = current.read_text()
    assert len(text.encode()) <= ROTATE_AT + 64 * 1024
    inline = text[: text.index("NCCL_K8S_BEGIN results")]
    with pytest.raises(ResultsError, match="no result lines"):
        parse_result_lines(inline)  # what `results` had to go on without the block

    collected = collect("rotated", client=settings, namespace=ns)
    rows = collected.run.rows
    assert collected.pods == 4 and collected.run.meta.world_size == 16
    sizes = [1024 * 2**i for i in range(7)]  # 1K..64K
    # Every row: each size, out-of-place and in-place, as the engine printed them.
    assert sorted((r.size_bytes, r.placement) for r in rows) == sorted(
        (size, placement) for size in sizes for placement in ("out", "in")
    )
    assert {r.op for r in rows} == {"alltoall"}
    assert all(r.wrong == 0 for r in rows if r.placement == "out")  # checked, and right
