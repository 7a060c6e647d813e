"""Issue 37, rank order = topology order, its fast parts: the deployer's plan (the nodes in
topology order), the launcher's assignment of node ranks from where the pods landed (and its
fall back to completion-index order), the rendezvous that hands each pod its rank, and the lines
`results` prints of each rank's domain. The end-to-end run is tests/test_rank_order_e2e.py."""

from __future__ import annotations

import concurrent.futures
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from nccl_k8s.bench.config import RANK_PLAN_ENV
from nccl_k8s.bench.store import StoreServer
from nccl_k8s.cli.main import app
from nccl_k8s.k8s.rendering._manifests import render
from nccl_k8s.k8s.rendering._topology import (
    plan_order,
    rank_order_levels,
    rank_plan_of,
    with_rank_plan,
)
from nccl_k8s.launch._pod import Launchers, assign, plan_from_env
from nccl_k8s.results import import_file, store_run
from nccl_k8s.results.comparable import differences, domain_layout
from nccl_k8s.results.schema import Device, RunMeta
from nccl_k8s.results.tables import domain_lines
from nccl_k8s.spec import build_run_spec

BLOCK, HOST = "cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-host"


def _node(name: str, **labels: str) -> dict[str, Any]:
    keys = {"block": BLOCK, "host": HOST}
    return {"metadata": {"name": name, "labels": {keys[k]: v for k, v in labels.items()}}}


def test_plan_groups_nodes_by_their_labels_coarse_to_fine_then_by_name() -> None:
    nodes = [
        _node("n1", block="b", host="h2"),
        _node("n2", block="a", host="h9"),
        _node("n3", block="b", host="h1"),
        _node("n4", block="a", host="h1"),
        _node("n5"),  # no labels: after every node that has them
        _node("n0", block="a", host="h1"),
    ]
    planned = plan_order(nodes, (BLOCK, HOST))
    assert [n for n, _ in planned] == ["n0", "n4", "n2", "n3", "n1", "n5"]
    assert planned[0] == ("n0", ("a", "h1")) and planned[-1] == ("n5", ("", ""))


def test_the_launcher_numbers_pods_by_the_plans_order_of_their_nodes() -> None:
    plan = ["a1", "a2", "b1", "b2"]
    # pod i landed on landed[i]: the scheduler's choice, in any order
    ranks, note = assign(plan, ["b2", "a1", "b1", "a2"])
    assert ranks == [3, 0, 2, 1]
    assert note == "rank order: topology (the deployer's plan)"
    # fewer pods than planned nodes: ranks stay dense
    assert assign(plan, ["b1", "a2"])[0] == [1, 0]


@pytest.mark.parametrize(
    ("landed", "why"),
    [
        (["a1", "x9", "b1"], "node x9 is not in the deployer's topology plan"),
        (["a1", "a1", "b1"], "two pods on one node"),
    ],
)
def test_a_pod_off_the_plan_puts_the_whole_run_in_completion_index_order(
    landed: list[str], why: str
) -> None:
    ranks, note = assign(["a1", "a2", "b1"], landed)
    assert ranks == [0, 1, 2]
    assert note == f"rank order: completion index ({why})"


def test_no_plan_keeps_the_completion_index_and_says_nothing() -> None:
    assert assign([], ["b", "a"]) == ([0, 1], "")
    assert plan_from_env({}) == []
    assert plan_from_env({RANK_PLAN_ENV: "not json"}) == []
    value = json.dumps({"levels": [BLOCK], "nodes": [["a1", ["a"]], ["b1", ["b"]]]})
    assert plan_from_env({RANK_PLAN_ENV: value}) == ["a1", "b1"]


def test_the_rendezvous_hands_each_pod_its_rank_from_pod_0() -> None:
    """Three launchers on one store, pod 0 (the host) on the plan's last node: each gets the
    rank of its node's place in the plan, whatever its completion index."""
    plan = ["n-a", "n-b", "n-c"]
    landed = ["n-c", "n-a", "n-b"]
    server = StoreServer()
    try:

        def join(index: int) -> tuple[int, str]:
            launchers = Launchers(False, "127.0.0.1", server.port, 10)
            try:
                placed = launchers.rendezvous(index, 3, 10, landed[index], plan)
            finally:
                launchers.store.sock.close()
            return placed.rank, placed.note

        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            got = list(pool.map(join, range(3)))
    finally:
        server.close()
    assert [rank for rank, _ in got] == [2, 0, 1]
    assert {note for _, note in got} == {"rank order: topology (the deployer's plan)"}


def test_only_a_job_without_kueue_is_ordered_by_topology() -> None:
    def levels(**options: object) -> tuple[tuple[str, ...], str]:
        opts: dict[str, Any] = {"world_size": 16, "gpus_per_node": 8, "topology": BLOCK}
        spec = build_run_spec(run_id="plan", **{**opts, **options})
        return rank_order_levels(spec)

    assert levels(launcher="direct") == ((BLOCK,), "")
    assert levels(launcher="direct", topology="none") == ((), "")
    assert levels(launcher="direct", world_size=8) == ((), "")  # one pod
    assert levels() == ((BLOCK,), "")  # torchrun too: launch._place (test_rank_placement.py)
    assert levels(workload="statefulset")[1].startswith("rank order: pod ordinal")
    kueue = levels(launcher="direct", queue="q")
    assert "the order in which Kueue assigns domains" in kueue[1]


def test_the_plan_travels_in_the_jobs_container_env_and_back() -> None:
    spec = build_run_spec(run_id="plan", world_size=16, gpus_per_node=8, launcher="direct")
    objs = render(spec)
    planned = [("n1", ("a",)), ("n2", ("b",))]
    planned_objs = with_rank_plan(spec, objs, (BLOCK,), planned)
    assert objs == render(spec)  # the rendered objects themselves are left alone
    job = next(o for o in planned_objs if o["kind"] == "Job")
    assert rank_plan_of(job) == ((BLOCK,), {"n1": ("a",), "n2": ("b",)})
    assert rank_plan_of(next(o for o in objs if o["kind"] == "Job")) == ((), {})
    assert with_rank_plan(spec, objs, (BLOCK,), []) is objs


def test_results_say_which_ranks_ran_in_each_domain() -> None:
    def dev(rank: int, node: str, block: str) -> Device:
        return Device(rank=rank, node=node, domain={BLOCK: block, HOST: node[-1]})

    meta = RunMeta(
        devices=[dev(0, "n0", "a"), dev(1, "n1", "a"), dev(2, "n2", "b"), dev(3, "n3", "b")]
    )
    assert domain_lines(meta) == [
        f"# ranks by topology domain ({BLOCK}/{HOST}):",
        "#   a/0: ranks 0 on n0",
        "#   a/1: ranks 1 on n1",
        "#   b/2: ranks 2 on n2",
        "#   b/3: ranks 3 on n3",
    ]
    one = RunMeta(devices=[Device(rank=r, node="n", domain={BLOCK: "a"}) for r in range(4)])
    assert domain_lines(one) == []  # one domain: nothing to say
    spread = RunMeta(devices=[Device(rank=r, domain={BLOCK: "ab"[r % 2]}) for r in range(4)])
    assert domain_lines(spread)[1:] == ["#   a: ranks 0,2 on ", "#   b: ranks 1,3 on "]


def _placed(blocks: str) -> RunMeta:
    """A run's meta whose rank r ran on node n<r> in block blocks[r]."""
    return RunMeta(
        devices=[Device(rank=r, node=f"n{r}", domain={BLOCK: b}) for r, b in enumerate(blocks)]
    )


def test_compare_warns_when_the_ranks_sat_in_domains_differently() -> None:
    grouped, interleaved = _placed("aabb"), _placed("abab")
    assert domain_layout(grouped) == "2 domains: ranks 0-1 | 2-3"
    assert domain_layout(RunMeta()) is None
    (diff,) = differences(interleaved, grouped)
    assert not diff.fact.refuses
    assert diff.text() == (
        "topology domains differs: current 2 domains: ranks 0,2 | 1,3, "
        "baseline 2 domains: ranks 0-1 | 2-3"
    )
    assert differences(grouped, _placed("bbaa")) == []  # the layout, whatever the names


def test_report_shows_which_ranks_ran_in_which_domain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("NCCL_K8S_RUNS_DIR", str(tmp_path / "runs"))
    run = import_file(
        Path(__file__).parent / "data/nccl-tests/handmade-old/v100x8_2nodes_error_column.txt"
    )
    run.meta.devices = _placed("aaaabbbb").devices
    store_run(run, run_id="blocks")
    out = tmp_path / "report.html"
    res = CliRunner().invoke(app, ["report", "blocks", "-o", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text(encoding="utf-8")
    assert "<th>topology domains</th>" in page
    assert "<code>a</code>: ranks 0-3 (n0, n1, n2, n3)" in page
