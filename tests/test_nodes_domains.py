"""`nodes check --pairing` (issue 37), pure: the pairing planner by topology domain and the
verdict on the links between domains, from given measurements (nodes._domains)."""

from __future__ import annotations

import pytest

from nccl_k8s.k8s.nodes._badnodes import verdicts
from nccl_k8s.k8s.nodes._domains import (
    ALONE,
    UNLABELLED,
    cross_rounds,
    domains_of,
    groups,
    inter_order,
    intra_plan,
    link_verdicts,
    matrix,
)
from nccl_k8s.k8s.nodes._level import PairResult

BLOCK = "cloud.google.com/gce-topology-block"
A = [f"a{i}" for i in range(4)]
B = [f"b{i}" for i in range(4)]
DOMAIN = {**dict.fromkeys(A, "block-a"), **dict.fromkeys(B, "block-b")}


def node(name: str, **labels: str) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": labels}}


def test_a_node_s_domain_is_its_topology_labels_coarse_to_fine() -> None:
    nodes = [
        node("n0", **{"zone": "z1", BLOCK: "blk"}),
        node("n1", zone="z1"),
        node("n2"),
    ]
    assert domains_of(nodes, ["zone", BLOCK]) == {"n0": "z1/blk", "n1": "z1", "n2": UNLABELLED}


def test_pass_one_pairs_nodes_inside_their_domain_and_a_retest_stays_there() -> None:
    nodes = [x for pair in zip(A, B, strict=True) for x in pair]  # interleaved, as names sort
    first = intra_plan(nodes, [], 0.9, 1, DOMAIN)
    assert len(first) == 4
    assert all(DOMAIN[a] == DOMAIN[b] for a, b in first), first
    # a0 is slow: its pass-1 partner is a suspect too, and both are retested with cleared
    # nodes of block a, never of block b (a slow link would taint them).
    results = [PairResult(a, b, 1.0 if "a0" in (a, b) else 10.0) for a, b in first]
    second = intra_plan(nodes, results, 0.9, 2, DOMAIN)
    assert second and all(DOMAIN[a] == DOMAIN[b] for a, b in second), second
    assert {"a0"} <= {n for p in second for n in p}


def test_nodes_alone_in_their_domain_are_tested_with_each_other() -> None:
    domain = {"x": "d1", "y": "d1", "p": "d2", "q": "d3"}
    assert groups(["x", "y", "p", "q"], domain) == {"d1": ["x", "y"], ALONE: ["p", "q"]}


def test_inter_order_makes_pass_one_pair_across_domains() -> None:
    from nccl_k8s.k8s.nodes._badnodes import first_pass

    order = inter_order([x for pair in zip(A, B, strict=True) for x in pair], DOMAIN)
    assert all(DOMAIN[a] != DOMAIN[b] for a, b in first_pass(order)[0])


def test_cross_rounds_test_every_two_domains_between_distinct_good_nodes() -> None:
    domain = {**DOMAIN, "c0": "block-c", "c1": "block-c"}
    rounds = cross_rounds([*A, *B, "c0", "c1"], domain)
    seen = {frozenset((domain[a], domain[b])) for rnd in rounds for a, b in rnd}
    assert seen == {
        frozenset(p)
        for p in [("block-a", "block-b"), ("block-a", "block-c"), ("block-b", "block-c")]
    }
    for rnd in rounds:
        used = [n for p in rnd for n in p]
        assert len(used) == len(set(used))  # a round's tests share no node
    per = [
        sum(1 for a, b in rnd if {domain[a], domain[b]} == {"block-a", "block-b"}) for rnd in rounds
    ]
    assert sum(per) == 2


def _intra(slow_node: str | None = None) -> list[PairResult]:
    pairs = [(A[0], A[1]), (A[2], A[3]), (B[0], B[1]), (B[2], B[3])]
    out = [PairResult(a, b, 2.0 if slow_node in (a, b) else 10.0) for a, b in pairs]
    if slow_node:  # its retest with a cleared node of its own domain (pass 2)
        other = A[2] if slow_node != A[2] else A[0]
        out.append(PairResult(slow_node, other, 2.1, pass_no=2))
        partner = next(r.other(slow_node) for r in out[:4] if slow_node in (r.a, r.b))
        out.append(PairResult(partner, A[3], 10.1, pass_no=2))
    return out


def test_every_test_across_two_domains_slow_names_the_link_and_no_node() -> None:
    intra = _intra()
    cross = [PairResult(A[0], B[0], 3.0, pass_no=2), PairResult(B[1], A[1], 3.2, pass_no=2)]
    findings = verdicts([*A, *B], intra, 0.9)
    links, odd = link_verdicts(intra, cross, findings, DOMAIN, 0.9)
    assert not findings.bad and not odd
    assert [(lk.a, lk.b) for lk in links] == [("block-a", "block-b")]
    why = links[0].why
    assert why.startswith("slow between block-a and block-b"), why
    assert "a0 + b0: 3 GB/s, a1 + b1: 3.2 GB/s" in why and "the 10 GB/s" in why, why
    assert links[0].busbw == 3.1 and links[0].tests == [("a0", "b0", 3.0), ("a1", "b1", 3.2)]


def test_a_slow_node_is_still_named_bad_beside_the_slow_link() -> None:
    intra = _intra(slow_node="a1")
    findings = verdicts([*A, *B], intra, 0.9)
    assert findings.bad == ["a1"], findings.nodes
    cross = [PairResult(A[0], B[0], 3.0, pass_no=3), PairResult(A[2], B[1], 3.1, pass_no=3)]
    links, _ = link_verdicts(intra, cross, findings, DOMAIN, 0.9)
    assert [(lk.a, lk.b) for lk in links] == [("block-a", "block-b")]


def test_one_slow_test_across_among_fine_ones_is_a_link_between_two_nodes() -> None:
    intra = _intra()
    cross = [PairResult(A[0], B[0], 3.0), PairResult(A[1], B[1], 10.0)]
    links, odd = link_verdicts(intra, cross, verdicts([*A, *B], intra, 0.9), DOMAIN, 0.9)
    assert links == [] and [(r.a, r.b) for r in odd] == [("a0", "b0")]


def test_tests_across_that_hold_the_level_name_no_link() -> None:
    intra = _intra()
    cross = [PairResult(A[0], B[0], 9.8), PairResult(A[1], B[1], 10.0)]
    assert link_verdicts(intra, cross, verdicts([*A, *B], intra, 0.9), DOMAIN, 0.9) == ([], [])


def test_a_test_across_with_a_bad_node_says_nothing_about_the_link() -> None:
    intra = _intra(slow_node="a1")
    findings = verdicts([*A, *B], intra, 0.9)
    cross = [PairResult(A[1], B[0], 1.0), PairResult(A[0], B[1], 10.0)]
    assert link_verdicts(intra, cross, findings, DOMAIN, 0.9) == ([], [])


def test_matrix_holds_the_best_busbw_inside_and_between_domains() -> None:
    results = [*_intra(), PairResult(A[0], B[0], 3.0), PairResult(A[1], B[1], 3.5)]
    names, best = matrix(results, DOMAIN)
    assert names == ["block-a", "block-b"]
    assert best[("block-a", "block-a")] == 10.0
    assert best[("block-a", "block-b")] == best[("block-b", "block-a")] == 3.5


def test_an_unknown_pairing_is_one_line_and_exit_2_before_any_request(tmp_path) -> None:
    from typer.testing import CliRunner

    from nccl_k8s.cli.main import app

    res = CliRunner().invoke(
        app,
        ["nodes", "check", "--pairing", "rack"],
        env={"KUBECONFIG": str(tmp_path / "missing"), "NCCL_K8S_RUNS_DIR": str(tmp_path)},
    )
    assert res.exit_code == 2, res.output
    assert res.stderr.splitlines() == ["error: --pairing 'rack': expected intra, inter or auto"], (
        res.stderr
    )


def test_the_report_names_the_link_and_shows_the_domain_matrix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from nccl_k8s.cli._doctor import _print_checked
    from nccl_k8s.k8s.nodes._badnodes import SlowLink
    from nccl_k8s.k8s.nodes._checked import NodesChecked, PairTest, Topology

    intra = _intra()
    cross = [PairResult(A[0], B[0], 3.0, pass_no=2), PairResult(A[1], B[1], 3.2, pass_no=2)]
    findings = verdicts([*A, *B], intra, 0.9)
    links, _ = link_verdicts(intra, cross, findings, DOMAIN, 0.9)
    topology = Topology((BLOCK,), "auto", DOMAIN, links, list[SlowLink]())
    tests = [PairTest(r, f"t{i}", 1.0) for i, r in enumerate([*intra, *cross])]
    checked = NodesChecked([*A, *B], {}, tests, findings, [], False, topology=topology)
    _print_checked(checked)
    text = capsys.readouterr().out
    assert "slow link: slow between block-a and block-b: all 2 tests across" in text, text
    assert [line.split() for line in text.splitlines()[-3:]] == [
        ["BEST", "BUSBW", "(GB/s)", "block-a", "block-b"],
        ["block-a", "10", "3.2"],
        ["block-b", "3.2", "10"],
    ], text
    assert checked.to_dict()["topology"]["slow_domain_links"][0]["a"] == "block-a"
