"""Issue 38, "use it": `nodes check --push-to URL` pushes each node's verdict, busbw and time to a
Prometheus Pushgateway, one group per node. Tested against a real HTTP server on loopback that
records each push as the Pushgateway would receive it, read back with prometheus_client's own
parser."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests._pushgateway import Gateway, serving
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.k8s import push_verdicts
from nccl_k8s.k8s.nodes._badnodes import Findings, NodeVerdict
from nccl_k8s.k8s.nodes._checked import NodesChecked
from nccl_k8s.k8s.nodes._metrics import JOB, METRICS

AT = 1765000000.0


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    with serving() as gw:
        yield gw


def checked() -> NodesChecked:
    nodes = [NodeVerdict("node-a", "good", 21.5, ""), NodeVerdict("node-b", "bad", 4.0, "slow"),
             NodeVerdict("node-c", "unknown", None, "every test failed")]  # fmt: skip
    findings = Findings(reference=20.0, threshold=0.9, nodes=nodes, links=[])
    return NodesChecked(["node-a", "node-b", "node-c"], {}, [], findings, [], False)


def samples(body: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }


def test_each_node_is_its_own_group_with_its_verdict_busbw_and_time(gateway: Gateway) -> None:
    pushed = push_verdicts(gateway.url, checked(), at=AT)
    assert pushed.failed == []
    assert pushed.said == f"pushed the verdicts of 3 node(s) to {gateway.url} (job {JOB})"
    paths = [p for _, p, _ in gateway.pushes]
    # PUT replaces a group only: a node this run did not test keeps its last verdict.
    assert {m for m, _, _ in gateway.pushes} == {"PUT"}
    assert sorted(paths) == [f"/metrics/job/{JOB}/node/node-{n}" for n in "abc"]
    got = {p.rsplit("/", 1)[1]: samples(b) for _, p, b in gateway.pushes}
    b = got["node-b"]
    verdicts = {dict(k[1])["verdict"]: v for k, v in b.items() if k[0] == METRICS[0]}
    assert verdicts == {"good": 0.0, "bad": 1.0, "suspect": 0.0, "unknown": 0.0}
    assert b[(METRICS[1], (("node", "node-b"),))] == 4.0e9  # bytes/s
    assert b[(METRICS[2], (("node", "node-b"),))] == 20.0e9
    assert b[(METRICS[3], (("node", "node-b"),))] == AT
    c = got["node-c"]  # no busbw where every test failed: no sample, not a zero
    assert not any(k[0] == METRICS[1] for k in c)
    assert {k[0] for k in c} == {METRICS[0], METRICS[2], METRICS[3]}


def test_a_failed_push_is_named_and_the_others_still_go(gateway: Gateway) -> None:
    gateway.fail = "node-b"
    pushed = push_verdicts(gateway.url, checked(), at=AT)
    assert len(gateway.pushes) == 3
    assert pushed.said.startswith("pushed the verdicts of 2 node(s)")
    (line,) = pushed.failed
    assert line.startswith(f"could not push node node-b's verdict to {gateway.url}: ")


def test_nothing_listens_is_a_failure_line_not_a_traceback() -> None:
    with Gateway() as gw:
        url = gw.url  # bound, then closed: connection refused
    pushed = push_verdicts(url, checked(), at=AT)
    assert len(pushed.failed) == 3


@pytest.mark.parametrize("url", ["ftp://gw:9091", "http://", "gw:port", "http://gw:0"])
def test_a_bad_url_is_one_line_and_exit_2_before_any_test(url: str) -> None:
    res = CliRunner().invoke(
        app, ["nodes", "check", "--push-to", url, "--kubeconfig", "/nonexistent"]
    )
    assert res.exit_code == 2, res.output
    assert res.output.strip().endswith(
        f'--push-to "{url}": expected a Pushgateway URL such as http://pushgateway.monitoring.svc:9091'
    )
    assert res.output.count("\n") == 1


def test_a_schedule_checks_its_push_url_when_printed() -> None:
    args = ["nodes", "schedule", "-n", "bench", "--image", "registry.example.com/nccl-k8s:0.1",
            "--", "--gpus-per-node", "1", "--push-to"]  # fmt: skip
    bad = CliRunner().invoke(app, [*args, "ftp://gw"])
    assert bad.exit_code == 2, bad.output
    assert '--push-to "ftp://gw": expected a Pushgateway URL' in bad.output
    good = CliRunner().invoke(app, [*args, "http://pushgateway.monitoring.svc:9091"])
    assert good.exit_code == 0, good.output
    assert (
        "- --push-to\n" in good.output
        and "- http://pushgateway.monitoring.svc:9091\n" in good.output
    )
