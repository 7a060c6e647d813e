"""Issue 37, acceptance 4: `nodes check` on 8 one-GPU nodes of the test cluster in two blocks of
4 (a topology label), with the link between the blocks slowed (the link-slow fault) and no slow
node, names the link ("slow between block-a and block-b", with the numbers) and calls no node
bad; with node-2 of block a slowed as well (its node-link fault), it names both, each for what
it is.

As in tests/test_nodes_check_e2e.py, every node's link carries FABRIC bytes a second, so a pair
test measures its link, not the machine's load; the link between the blocks carries a fifth of
that, and node-2's own link a fifth too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from tests.cluster.cluster import Cluster
from tests.conftest import Api
from tests.e2e_helpers import cli, labelled

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("runs_dir")]

#: tests/test_nodes_check_e2e.py's sweep: one 4M all_reduce timed twice after a warm-up, 0.1 s
#: an iteration on a healthy link, 0.5 s across the slow one or with the slowed node.
ENGINE = ["--", "--backend", "gloo", "--ops", "all_reduce", "-b", "4M", "-e", "4M"]
ENGINE += ["-n", "2", "-w", "1", "-c", "0"]
#: A bound on one check, for the test's timeout (a hang guard, not a speed claim).
CHECK_S = 240
BLOCK = "cloud.google.com/gce-topology-block"
NODES = [f"node-{i}" for i in range(8)]
BLOCK_OF = {n: "block-a" if i < 4 else "block-b" for i, n in enumerate(NODES)}
FABRIC = 40e6
#: The link between the blocks: a fifth of a node's link.
SPINE_FACTOR = 5
#: node-2's degraded link: a fifth of FABRIC.
LINK = FABRIC / 5


def label_node(cluster: Cluster, node: str, key: str, value: str) -> None:
    """Label a node as an admin would (the kubelet reads the labels as each container starts)."""

    def edit(obj: Any) -> None:
        obj["metadata"].setdefault("labels", {})[key] = value

    cluster.store.mutate("nodes", None, node, edit)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(nodes=8, gpus_per_node=1) as c:
        for node in NODES:
            c.faults.node_link(node, FABRIC)
            label_node(c, node, BLOCK, BLOCK_OF[node])
        api = Api(c.url)
        spine = {"label": BLOCK, "a": "block-a", "b": "block-b", "factor": SPINE_FACTOR}
        assert api.post("/_test/faults/link-slow", spine)[0] == 200
        yield c


def check(cluster: Cluster, namespace: str, *args: str):
    return cli(
        cluster, "nodes", "check", "-n", namespace, "--gpus-per-node", "1", "--threshold", "0.4",
        "--topology", BLOCK, "-o", "json", *args, *ENGINE,
    )  # fmt: skip


def _doc(output: str) -> Any:
    return json.loads(output[output.index("{") :])


def _links(doc: Any) -> Any:
    return doc["topology"]["slow_domain_links"]


@pytest.mark.timeout(CHECK_S + 60)
def test_a_slow_link_between_two_blocks_is_named_and_no_node_is_called_bad(
    cluster: Cluster, namespace: str
) -> None:
    res = check(cluster, namespace)
    assert res.exit_code == 1, res.output  # the slow link is a finding
    doc = _doc(res.output)
    assert {v["node"]: v["verdict"] for v in doc["nodes"]} == dict.fromkeys(NODES, "good")
    # Pass 1 paired the nodes inside their blocks; the tests across came after.
    first = [t for t in doc["tests"] if t["pass_no"] == 1]
    assert first and all(BLOCK_OF[t["a"]] == BLOCK_OF[t["b"]] for t in first), first
    (link,) = _links(doc)
    assert (link["a"], link["b"]) == ("block-a", "block-b")
    assert re.match(r"slow between block-a and block-b: all 2 tests across \(", link["why"])
    assert all(b is not None and b < 0.4 * link["reference"] for _, _, b in link["tests"])
    matrix = {(m["a"], m["b"]): m["busbw"] for m in doc["topology"]["matrix"]}
    assert matrix[("block-a", "block-b")] < 0.4 * matrix[("block-a", "block-a")], matrix
    assert labelled(cluster, namespace) == []


@pytest.mark.timeout(CHECK_S + 60)
def test_a_slow_node_inside_block_a_is_named_bad_beside_the_slow_link(
    cluster: Cluster, namespace: str
) -> None:
    api = Api(cluster.url)
    assert api.post("/_test/faults/node-link", {"node": "node-2", "bytesPerSecond": LINK})[0] == 200
    try:
        res = check(cluster, namespace)
    finally:
        api.post("/_test/faults/node-link", {"node": "node-2", "bytesPerSecond": FABRIC})
    assert res.exit_code == 1, res.output
    doc = _doc(res.output)
    verdicts = {v["node"]: v["verdict"] for v in doc["nodes"]}
    assert verdicts == {**dict.fromkeys(NODES, "good"), "node-2": "bad"}, res.output
    why = next(v["why"] for v in doc["nodes"] if v["node"] == "node-2")
    assert "good node node-" in why, why
    # node-2 was judged by tests inside block a only.
    mine = [t for t in doc["tests"] if "node-2" in (t["a"], t["b"])]
    assert all(BLOCK_OF[t["a"]] == BLOCK_OF[t["b"]] == "block-a" for t in mine), mine
    (link,) = _links(doc)
    assert link["why"].startswith("slow between block-a and block-b"), link
    assert not any("node-2" in (a, b) for a, b, _ in link["tests"])
