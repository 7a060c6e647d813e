"""Issue 37, acceptance 3 on the test cluster: rank order = topology order.

Eight nodes of one GPU in two blocks of four, the blocks interleaved with the nodes' names
(node-0, -2, -4, -6 in block b, the odd ones in block a), so that the order in which the
scheduler fills the nodes (it takes them by name) is not the blocks' order. A deploy of eight
ranks (gloo, tiny sizes) across both, with each launcher: the deployer plans the node order
from the labels, each pod takes its node rank from the node it landed on (the direct launcher's
rendezvous; before torchrun, the default, the placement step launch._place), and ranks 0-3 run
in one block and 4-7 in the other; `results` names each rank's block.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.cluster.cluster import Cluster
from tests.e2e_helpers import cli

from nccl_k8s.bench.config import RANK_PLAN_ENV
from nccl_k8s.results.schema import load

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("runs_dir")]

#: Topograph's tier-1 label (the generic platform's; NVIDIA/topograph v1.0.0
#: docs/reference/node-labels.md), as its labeler would set it on two blocks of four.
BLOCK = "fabric.topograph.run/tier-1"
NODES = 8


@pytest.fixture(scope="module")
def cluster(cluster_factory: Callable[..., Cluster]) -> Cluster:
    c = cluster_factory(nodes=NODES, gpus_per_node=1)
    for i in range(NODES):
        block = "block-b" if i % 2 == 0 else "block-a"

        def edit(n: dict[str, object], block: str = block) -> None:
            n["metadata"]["labels"][BLOCK] = block  # type: ignore[index]

        c.store.mutate("nodes", None, f"node-{i}", edit)
    return c


@pytest.mark.parametrize("launcher", ["direct", "torchrun"])
def test_eight_ranks_over_two_blocks_are_numbered_block_by_block(
    cluster: Cluster, namespace: str, runs_dir: Path, launcher: str
) -> None:
    rid = f"r-{uuid.uuid4().hex[:6]}"
    dep = cli(
        cluster, "deploy", "-n", namespace, "--run-id", rid, "--launcher", launcher,
        "--world-size", str(NODES), "--gpus-per-node", "1",
        "--", "--backend", "gloo", "--ops", "all_reduce", "-b", "1K", "-e", "1K",
        "-n", "1", "-w", "0",
    )  # fmt: skip
    assert dep.exit_code == 0, dep.output
    assert f"run {rid} succeeded" in dep.output

    pods, _ = cluster.store.list(
        "pods", namespace, label_selector=f"app.kubernetes.io/instance={rid}"
    )
    bench = pods[0]["spec"]["containers"][0]
    # torchrun starts behind the placement step only where there is a plan (deploy read nodes)
    assert ("nccl_k8s.launch._place" in bench["args"]) == (launcher == "torchrun")
    env = {e["name"]: e.get("value") for e in bench["env"]}
    plan = json.loads(env[RANK_PLAN_ENV])
    assert plan["levels"] == [BLOCK]
    assert [v for _, (v,) in plan["nodes"]] == ["block-a"] * 4 + ["block-b"] * 4

    res = cli(cluster, "results", "-n", namespace, "--run", rid)
    assert res.exit_code == 0, res.output
    run = load(runs_dir / rid / "results.json")
    blocks = [d.domain.get(BLOCK) for d in sorted(run.meta.devices, key=lambda d: d.rank)]
    assert len(blocks) == NODES
    assert len(set(blocks[:4])) == 1 and len(set(blocks[4:])) == 1
    assert set(blocks) == {"block-a", "block-b"}
    # Each rank really ran on a node of its block (the node the engine itself reported).
    labels = {f"node-{i}": "block-b" if i % 2 == 0 else "block-a" for i in range(NODES)}
    assert all(labels[d.node or ""] == d.domain[BLOCK] for d in run.meta.devices)
    # The pods were placed as the scheduler chose (by name), not in the blocks' order: the
    # pod of completion index 0 is not necessarily rank 0, the ranks follow the nodes.
    assert f"# ranks by topology domain ({BLOCK}):" in res.output
    first = blocks[0]
    assert f"#   {first}: ranks 0-3 on " in res.output
