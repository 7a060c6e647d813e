"""Which nodes a scheduled `nodes check` tests (issue 38): --idle-only, --skip-checked-within,
--max-nodes, on given Node and Pod objects (nodes._due, pure), and their bad input."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.k8s.api._access import ACCESS, nodes_check_access
from nccl_k8s.k8s.nodes._due import LIVE_PODS, busy_nodes, due_nodes, last_check
from nccl_k8s.k8s.nodes._nodecheck import CHECKED_AT_KEY, LABEL_KEY

NOW = 1_765_000_000.0
GPU = "nvidia.com/gpu"
H = 3600


def node(name: str, verdict: str | None = None, age_s: float | None = None) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name}
    if verdict is not None:
        labels[LABEL_KEY] = verdict
    if age_s is not None:
        labels[CHECKED_AT_KEY] = str(int(NOW - age_s))
    return {"metadata": {"name": name, "labels": labels}}


def pod(name: str, on: str | None, gpus: int, phase: str = "Running", *, init: bool = False,
        limits_only: bool = False) -> dict[str, Any]:  # fmt: skip
    res = {"limits": {GPU: str(gpus)}} if limits_only else {"requests": {GPU: str(gpus)}}
    c = {"name": "c", "resources": res if gpus else {}}
    spec: dict[str, Any] = {"containers": [{"name": "main"}], "nodeName": on}
    spec["initContainers" if init else "containers"] = [c]
    return {"metadata": {"name": name, "namespace": "team"}, "spec": spec,
            "status": {"phase": phase}}  # fmt: skip


def test_idle_only_leaves_out_the_nodes_where_another_pod_requests_gpus() -> None:
    pods = [
        pod("train-0", "n2", 8),
        pod("infer", "n4", 1, limits_only=True),  # an extended resource may be set in limits only
        pod("prep", "n5", 1, init=True),
        pod("done", "n1", 8, phase="Succeeded"),  # ended: holds nothing
        pod("cpu", "n3", 0),  # no GPU
        pod("pending", None, 8, phase="Pending"),  # not placed: no node
    ]
    busy = busy_nodes(pods, GPU)
    assert busy == {"n2": f"team/train-0 requests 8 {GPU}",
                    "n4": f"team/infer requests 1 {GPU}",
                    "n5": f"team/prep requests 1 {GPU}"}  # fmt: skip
    names = ["n1", "n2", "n3", "n4", "n5", "n6"]
    due = due_nodes(names, [node(n) for n in names], now=NOW, busy=busy)
    assert due.nodes == ["n1", "n3", "n6"]
    assert due.skipped["n2"] == f"not idle: team/train-0 requests 8 {GPU}"
    assert set(due.skipped) == {"n2", "n4", "n5"}
    # The server is asked for the live pods only.
    assert LIVE_PODS == "status.phase!=Succeeded,status.phase!=Failed"


def test_the_window_skips_fresh_verdicts_but_never_a_bad_node() -> None:
    nodes = [node("fresh", "good", 1 * H), node("old", "good", 7 * H),
             node("bad", "bad", 10), node("never"), node("garbled", "good")]  # fmt: skip
    nodes[4]["metadata"]["labels"][CHECKED_AT_KEY] = "yesterday"
    names = [str(n["metadata"]["name"]) for n in nodes]
    due = due_nodes(names, nodes, now=NOW, within_s=6 * H)
    # Bad first (only a test clears it), then never checked (or unreadable), then oldest.
    assert due.nodes == ["bad", "never", "garbled", "old"]
    assert due.skipped == {"fresh": "checked good 1.0h ago (--skip-checked-within)"}
    # Past the window, everything is due again.
    assert set(due_nodes(names, nodes, now=NOW + 6 * H, within_s=6 * H).nodes) == set(names)
    assert last_check(nodes[0]) == ("good", int(NOW - H))


def test_max_nodes_keeps_those_that_most_need_a_test() -> None:
    nodes = [node("a", "good", 9 * H), node("b", "good", 20 * H), node("c"), node("d", "bad", H)]
    names = ["a", "b", "c", "d"]
    due = due_nodes(names, nodes, now=NOW, within_s=6 * H, max_nodes=3)
    assert due.nodes == ["d", "c", "b"]
    assert due.skipped == {"a": "over --max-nodes 3 (due: next run)"}


def test_one_due_node_is_paired_with_the_freshest_good_idle_one_and_none_due_is_empty() -> None:
    nodes = [node("x", "good", H), node("y", "good", 2 * H), node("new")]
    due = due_nodes(["x", "y", "new"], nodes, now=NOW, within_s=6 * H)
    assert due.nodes == ["new", "x"]
    assert set(due.skipped) == {"y"}
    nothing = due_nodes(["x", "y"], nodes[:2], now=NOW, within_s=6 * H)
    assert nothing.nodes == [] and set(nothing.skipped) == {"x", "y"}
    # A due node whose only partners are busy waits, said.
    alone = due_nodes(["new", "x"], [nodes[2], nodes[0]], now=NOW, busy={"x": "team/p"})
    assert alone.nodes == [] and alone.skipped["new"] == "due, but no idle node to pair it with"


def test_idle_only_alone_adds_the_one_read_to_the_check_and_the_table() -> None:
    plain = nodes_check_access(label=False, idle_only=False)
    idle = nodes_check_access(label=False, idle_only=True)
    extra = {(a.group, a.resource, v, a.scope) for a in idle for v in a.verbs} - {
        (a.group, a.resource, v, a.scope) for a in plain for v in a.verbs
    }
    assert extra == {("", "pods", "list", "cluster")}
    assert [a.optional for a in idle if a.scope == "cluster" and a.resource == "pods"] == [
        "--idle-only"
    ]
    assert any(a.optional == "--idle-only" for a in ACCESS)
    # The schedule's ClusterRole carries it only when the scheduled check asks.
    res = CliRunner().invoke(app, ["nodes", "schedule", "-n", "f", "--image", "r/x:1", "--",
                                   "--idle-only"])  # fmt: skip
    assert res.exit_code == 0 and "--idle-only" in res.output
    assert res.output.count("- pods\n") == 2  # the Role's namespaced pods, the ClusterRole's


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--skip-checked-within", "six hours"], '--skip-checked-within "six hours": expected'),
        (["--skip-checked-within", "6x"], '--skip-checked-within "6x": expected'),
        (["--max-nodes", "1"], "--max-nodes 1: expected >= 2 (a test is a pair of nodes)"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["nodes", "check", "-n", "x", *args])
    assert res.exit_code == 2, res.output
    assert message in res.output and len(res.output.strip().splitlines()) == 1, res.output
