"""Issue 38, "use it": `--healthy-only`'s node affinity (rendered into every node selector term,
the window fixed when the spec is built), the one reading of a node's check labels that the
affinity, deploy's count and doctor share, and doctor's node-health check. Pure."""

from __future__ import annotations

import datetime
from typing import Any

import kubernetes_validate
import pytest

from nccl_k8s.errors import UsageError
from nccl_k8s.k8s import render
from nccl_k8s.k8s.preflight._fleet import check_fleet, healthy_shortfall
from nccl_k8s.k8s.preflight._preflight import Read
from nccl_k8s.k8s.rendering._health import apply_healthy_only, health
from nccl_k8s.spec import build_run_spec

NOW = datetime.datetime(2026, 12, 7, 12, 0, tzinfo=datetime.timezone.utc)
T = int(NOW.timestamp())
EXPR = [
    {"key": "nccl-k8s/node-check", "operator": "In", "values": ["good"]},
    {"key": "nccl-k8s/checked-at", "operator": "Gt", "values": [str(T - 86400)]},
]


def node(name: str, verdict: str | None = None, at: object = None, gpus: int = 1) -> Any:
    labels = {}
    if verdict is not None:
        labels["nccl-k8s/node-check"] = verdict
    if at is not None:
        labels["nccl-k8s/checked-at"] = str(at)
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _terms(objs: list[Any]) -> list[Any]:
    job = next(o for o in objs if o["kind"] == "Job")
    affinity = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    return list(affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"])


def test_the_affinity_is_one_term_alone_and_joins_the_node_term_and_passes_the_schema() -> None:
    alone = build_run_spec(nodes=2, gpus_per_node=1, run_id="h1", healthy_only=True, now=NOW)
    assert alone.healthy_since == T - 86400  # the 24h default, from the build's time
    assert _terms(render(alone)) == [{"matchExpressions": EXPR}]
    pinned = build_run_spec(
        nodes=2, gpus_per_node=1, run_id="h1", healthy_only=True, node=["a", "b"], now=NOW,
        healthy_within="30h",
    )  # fmt: skip
    (term,) = _terms(render(pinned))
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]
    assert term["matchExpressions"][1]["values"] == [str(T - 30 * 3600)]
    for obj in render(pinned):
        kubernetes_validate.validate(obj, "1.33", strict=True)
    plain = build_run_spec(nodes=2, gpus_per_node=1, run_id="h1", now=NOW)
    assert plain.healthy_since is None
    assert "nodeAffinity" not in str(render(plain))


def test_every_existing_term_gets_both_requirements() -> None:
    # Terms are ORed: a term left without them would let the pods onto any node it matches.
    spec = build_run_spec(nodes=2, gpus_per_node=1, run_id="h1", healthy_only=True, now=NOW)
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]},
             {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["x"]}]}]  # fmt: skip
    template: Any = {"spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}}  # fmt: skip
    apply_healthy_only(spec, template)
    assert [t.get("matchExpressions") for t in terms] == [
        EXPR,
        [{"key": "pool", "operator": "In", "values": ["x"]}, *EXPR],
    ]
    assert terms[0]["matchFields"][0]["values"] == ["a"]


@pytest.mark.parametrize(
    ("verdict", "at", "ok"),
    [
        ("good", T - 10, True),
        ("good", T - 86400, False),  # Gt: the window's first second is out
        ("good", T - 90000, False),
        ("bad", T - 10, False),
        ("suspect", T - 10, False),
        (None, None, False),
        ("good", None, False),
        ("good", "yesterday", False),  # no integer: Gt never matches it
    ],
)
def test_a_node_qualifies_as_the_affinity_decides(verdict: str, at: object, ok: bool) -> None:
    assert health(node("n", verdict, at), T - 86400).ok is ok


def test_healthy_within_is_a_duration() -> None:
    with pytest.raises(UsageError, match=r'--healthy-within "soon": expected a duration'):
        build_run_spec(nodes=2, healthy_only=True, healthy_within="soon")


def _fleet() -> list[Any]:
    now = int(datetime.datetime.now(datetime.timezone.utc).timestamp())
    return [node("n1", "good", now - 60), node("n2", "good", now - 60),
            node("n3", "bad", now - 7200), node("n4"), node("n5"),
            node("small", "bad", now, gpus=0)]  # fmt: skip


def test_doctor_warns_naming_the_bad_and_the_unchecked_nodes_the_run_may_use() -> None:
    spec = build_run_spec(nodes=2, gpus_per_node=1, run_id="h1")
    check = check_fleet(spec, Read(items=_fleet()))
    assert check is not None and check.status == "warn"
    assert "n3: checked bad at " in check.message and "(2.0h ago)" in check.message
    assert check.message.endswith("2 nodes never checked (n4, n5)")
    assert "small" not in check.message  # no GPU: the run cannot land there
    # Where no node was ever checked, nothing tells one node from another: no row.
    assert check_fleet(spec, Read(items=[node("a"), node("b")])) is None
    assert check_fleet(spec, Read(forbidden=True)) is None


def test_with_healthy_only_doctor_and_deploy_count_the_nodes_that_qualify() -> None:
    enough = build_run_spec(nodes=2, gpus_per_node=1, run_id="h1", healthy_only=True)
    check = check_fleet(enough, Read(items=_fleet()))
    assert check is not None and check.status == "pass"
    assert check.message.startswith("2 of 5 nodes the run may use were checked good within")
    assert healthy_shortfall(enough, _fleet()) is None
    more = build_run_spec(nodes=3, gpus_per_node=1, run_id="h1", healthy_only=True)
    check = check_fleet(more, Read(items=_fleet()))
    assert check is not None and check.status == "fail"
    short = healthy_shortfall(more, _fleet())
    assert short is not None and short.startswith(
        "--healthy-only: 2 of 5 nodes the run may use were checked good within --healthy-within "
        "1d, the run needs 3 (kept off: n3: checked bad at"
    )
    none = check_fleet(more, Read(items=[node("a"), node("b")]))
    assert none is not None and none.status == "fail"


def test_node_fit_leaves_out_the_nodes_healthy_only_keeps_off() -> None:
    from nccl_k8s.k8s.preflight._nodechecks import check_nodes

    more = build_run_spec(nodes=3, gpus_per_node=1, run_id="h1", healthy_only=True)
    world = next(c for c in check_nodes(more, Read(items=_fleet())) if c.name == "world")
    assert world.status == "fail"
    assert "3 not checked good within --healthy-within (never)" not in world.message
    assert "2 not checked good within --healthy-within (never)" in world.message
    assert "1 not checked good within --healthy-within (bad)" in world.message
    assert world.hint.startswith("--world-size 2 fits these nodes")
    plain = build_run_spec(nodes=3, gpus_per_node=1, run_id="h1")
    assert all(c.status == "pass" for c in check_nodes(plain, Read(items=_fleet())))


def test_without_one_pod_per_node_a_good_node_holds_as_many_pods_as_its_gpus() -> None:
    now = int(datetime.datetime.now(datetime.timezone.utc).timestamp())
    nodes = [node("big", "good", now - 60, gpus=2), node("n3", "bad", now, gpus=2)]
    packed = build_run_spec(nodes=2, gpus_per_node=1, run_id="h1", healthy_only=True,
                            spread="none")  # fmt: skip
    assert healthy_shortfall(packed, nodes) is None
    spread = build_run_spec(nodes=2, gpus_per_node=1, run_id="h1", healthy_only=True)
    assert healthy_shortfall(spread, nodes) is not None


def test_the_nodes_the_run_may_use_are_the_healthy_ones() -> None:
    # --platform auto detects, and deploy's rank plan orders, only the nodes the pods may use.
    from nccl_k8s.k8s.preflight._platforms import may_use

    spec = build_run_spec(nodes=2, gpus_per_node=1, run_id="h1", healthy_only=True)
    assert [n["metadata"]["name"] for n in may_use(spec, _fleet())] == ["n1", "n2"]
    plain = build_run_spec(nodes=2, gpus_per_node=1, run_id="h1")
    assert len(may_use(plain, _fleet())) == 6
