"""Issue 38, acceptance 3, on the test cluster over real HTTP: nodes labelled through the API as
`nodes check --label` labels them (three good now, one bad, one good two days ago, one never
checked); `doctor` names the bad node (and the stale and the unchecked one), `deploy
--healthy-only` refuses a run the qualifying nodes cannot hold before creating anything, and
keeps the pods of one they can hold off every other node; a `nodes check --push-to` on it
pushes the verdicts of the nodes it tested, and only those, to a Pushgateway on loopback.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests._pushgateway import serving
from tests.cluster.cluster import Cluster
from tests.e2e_helpers import cli, labelled, wait_for

from nccl_k8s.k8s.rendering._nodepolicy import NODE_CHECKED_AT_KEY, NODE_LABEL_KEY

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("runs_dir")]

GOOD = ("node-0", "node-1", "node-2")
BAD, STALE, NEVER = "node-3", "node-4", "node-5"
SIZE = ["--gpus-per-node", "1"]
ENGINE = ["--", "--backend", "gloo", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(nodes=6, gpus_per_node=1) as c:
        now = int(time.time())
        env = {**os.environ, **c.kubectl_env()}
        verdicts = {**dict.fromkeys(GOOD, ("good", now)), BAD: ("bad", now)}
        verdicts[STALE] = ("good", now - 2 * 86400)
        for node, (verdict, at) in verdicts.items():
            subprocess.run(
                ["kubectl", "label", "node", node, "--overwrite",
                 f"{NODE_LABEL_KEY}={verdict}", f"{NODE_CHECKED_AT_KEY}={at}"],
                env=env, check=True, capture_output=True, timeout=60,
            )  # fmt: skip
        yield c


def _row(output: str, name: str) -> str:
    return next(line for line in output.splitlines() if line.startswith(name + " "))


def test_doctor_names_the_bad_node_and_deploy_healthy_only_keeps_off_it(
    cluster: Cluster, namespace: str
) -> None:
    warned = cli(cluster, "doctor", "-n", namespace, "--nodes", "3", *SIZE)
    assert warned.exit_code == 0, warned.output  # a warning, not a failure
    row = _row(warned.output, "node-health")
    assert row.split()[1] == "warn", row
    assert f"{BAD}: checked bad at " in row and f"{STALE}: checked good at " in row
    assert f"1 node never checked ({NEVER})" in row
    assert "(47.9h ago)" in row or "(48.0h ago)" in row
    assert row.index(BAD) < row.index(STALE)  # the bad node first
    assert "hint: --healthy-only keeps its pods off them" in warned.output

    qualified = cli(cluster, "doctor", "-n", namespace, "--nodes", "3", *SIZE, "--healthy-only")
    assert qualified.exit_code == 0, qualified.output
    row = _row(qualified.output, "node-health")
    assert row.split()[1] == "pass"
    assert "3 of 6 nodes the run may use were checked good within --healthy-within 1d" in row

    # Four pods and three good nodes: one line, exit 2, nothing made.
    refused = cli(cluster, "deploy", "-n", namespace, "--nodes", "4", *SIZE, "--healthy-only",
                  "--no-wait", *ENGINE)  # fmt: skip
    assert refused.exit_code == 2, refused.output
    assert refused.output.count("\n") == 1
    assert "deploy refused, nothing was created: --healthy-only: 3 of 6 nodes" in refused.output
    assert "the run needs 4 (kept off: node-3: checked bad at" in refused.output
    assert labelled(cluster, namespace) == []

    rid = "healthy-1"
    made = cli(cluster, "deploy", "-n", namespace, "--nodes", "3", *SIZE, "--healthy-only",
               "--run-id", rid, "--no-wait", *ENGINE)  # fmt: skip
    assert made.exit_code == 0, made.output

    def placed() -> list[str] | None:
        pods, _ = cluster.store.list(
            "pods", namespace, label_selector=f"app.kubernetes.io/instance={rid}"
        )
        nodes = [str((p.get("spec") or {}).get("nodeName") or "") for p in pods]
        return sorted(nodes) if len(nodes) == 3 and all(nodes) else None

    assert wait_for("the run's 3 pods bound to nodes", placed) == list(GOOD)
    job = cluster.store.get("jobs", namespace, rid)
    terms = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert [e["key"] for t in terms for e in t["matchExpressions"]] == [
        NODE_LABEL_KEY,
        NODE_CHECKED_AT_KEY,
    ]
    assert cli(cluster, "cleanup", "-n", namespace, "--run", rid).exit_code == 0


def test_deploy_lists_the_nodes_once_and_a_pinned_run_only_its_own(
    cluster: Cluster, namespace: str
) -> None:
    """`--platform auto`, the rank plan (`--topology`) and `--healthy-only` each read the nodes:
    one list between them (three before; at thousands of nodes a list is megabytes), and a run
    pinned to its nodes (`--node`, every pair test of `nodes check`) lists those alone by name.
    Both deploys are refused by --healthy-only, which reads the nodes last."""
    reads = ["--platform", "auto", "--topology", "example.com/block", "--healthy-only"]

    def node_lists(*args: str) -> list[str]:
        with cluster.record_requests() as seen:
            got = cli(cluster, "deploy", "-n", namespace, *SIZE, *reads, "--no-wait", *args,
                      *ENGINE)  # fmt: skip
        assert got.exit_code == 2, got.output
        assert "deploy refused, nothing was created: --healthy-only:" in got.output
        return [a.name for a in seen if a.resource == "nodes" and a.verb in ("list", "get")]

    assert node_lists("--nodes", "4") == [""]  # one list of every node
    pinned = node_lists("--nodes", "2", "--node", BAD, "--node", STALE)
    assert sorted(pinned) == [BAD, STALE]
    assert labelled(cluster, namespace) == []


def test_a_check_pushes_the_verdicts_of_the_nodes_it_tested(
    cluster: Cluster, namespace: str
) -> None:
    # Due: the bad node (always) and the never-checked one (--max-nodes 2 leaves the stale one
    # for the next run); the three fresh good nodes are left out by the window.
    with serving() as gw:
        res = cli(cluster, "nodes", "check", "-n", namespace, *SIZE, "--skip-checked-within",
                  "1h", "--max-nodes", "2", "--push-to", gw.url, *ENGINE)  # fmt: skip
    assert f"pushed the verdicts of 2 node(s) to {gw.url} (job nccl-k8s-node-check)" in res.output
    assert sorted(p for _, p, _ in gw.pushes) == [
        f"/metrics/job/nccl-k8s-node-check/node/{n}" for n in (BAD, NEVER)
    ]
    for _, path, body in gw.pushes:
        node = path.rsplit("/", 1)[1]
        said = [s for f in text_string_to_metric_families(body) for s in f.samples
                if s.name == "nccl_k8s_node_check_verdict" and s.value == 1]  # fmt: skip
        assert [s.labels["node"] for s in said] == [node]
