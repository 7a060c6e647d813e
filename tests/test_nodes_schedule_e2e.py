"""A scheduled check end to end (issue 38): `nodes schedule`'s ServiceAccount and RBAC applied as
an admin would, then the CronJob's own command run as that ServiceAccount on a 6-node test
cluster where two nodes run another GPU pod and one is slowed (acceptance 2): the Job checks only
the 4 idle nodes, labels them (verdict, time, busbw, run), flags and taints the slowed one,
sends nothing its Role lacks and uses what it is granted (acceptance 1's least privilege, as
`rbac` is checked); a second run within the window checks nothing; with the window passed it
checks again; `nodes history` shows both checks. (That a node labelled bad is always due, so
retested before it is cleared, is tests/test_nodes_due.py's.)

The test cluster serves no CronJob: the Job the CronJob would start runs its container's
command, which this test runs in-process as the ServiceAccount (as `kubectl create job
--from=cronjob/...` would start it).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.cluster import rbac as cluster_rbac
from tests.cluster.cluster import Cluster
from tests.conftest import fresh_namespace
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.k8s import ClientSettings
from nccl_k8s.k8s.api._sync import run_sync
from nccl_k8s.k8s.nodes._history import HISTORY_KEY, HISTORY_NAME, Check, append_check, load
from nccl_k8s.k8s.nodes._labels import (
    BUSBW_KEY,
    CHECKED_AT_KEY,
    LABEL_KEY,
    RUN_KEY,
    TAINT_KEY,
    busbw_value,
)

pytestmark = pytest.mark.slow

#: Verbs the Role grants that a check sends only on a failure path this run does not take: a
#: failed test's ranks are stopped (patch). (A taken run id is named from its ConfigMap, get:
#: with --label the history's get sends it on every run.)
FAILURE_PATHS = {("batch", "jobs", "patch", "namespace")}
#: Acceptance 2's pair tests and links, as tests/test_nodes_check_e2e.py slows a node: every
#: node's link FABRIC bytes a second, the slowed node's a fifth (held in wall time: a slow pair
#: measures about 0.2 of a healthy one however loaded the machine), judged at --threshold 0.4.
#: One 1M all_reduce timed twice after a warm-up: about 0.1 s an iteration on a healthy link,
#: 0.5 s on the slow one, so a test's time is mostly its pods' start.
ENGINE_1M = ["--", "--backend", "gloo", "--ops", "all_reduce", "-b", "1M", "-e", "1M",
             "-n", "2", "-w", "1", "-c", "0"]  # fmt: skip
FABRIC = 10e6


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(nodes=6, gpus_per_node=1) as c:
        yield c


def granted(docs: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    return {(g, r, v, "namespace" if d["kind"] == "Role" else "cluster")
            for d in docs if d["kind"] in ("Role", "ClusterRole")
            for rule in d["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}  # fmt: skip


def gpu_pod(ns: str, name: str, node: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns},
            "spec": {"nodeName": node, "restartPolicy": "Never",
                     "containers": [{"name": "train", "image": "x", "command": ["sleep", "600"],
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}  # fmt: skip


def _clean_nodes(cluster: Cluster) -> None:
    """No label or taint of ours on any node (an earlier test of the module wrote some)."""

    def strip(node: dict[str, Any]) -> None:
        labels = node["metadata"].get("labels") or {}
        node["metadata"]["labels"] = {k: v for k, v in labels.items()
                                      if not k.startswith("nccl-k8s/")}  # fmt: skip
        taints = [t for t in node["spec"].get("taints") or [] if t["key"] != TAINT_KEY]
        node["spec"]["taints"] = taints

    for i in range(6):
        cluster.store.mutate("nodes", None, f"node-{i}", strip)


def _tested(doc: dict[str, Any]) -> set[str]:
    return {n for t in doc["tests"] for n in (t["a"], t["b"])}


@pytest.mark.timeout(600)
def test_acceptance_2_idle_nodes_checked_labelled_skipped_in_the_window_and_recorded(
    cluster: Cluster, runs_dir: Path
) -> None:
    _clean_nodes(cluster)
    with fresh_namespace(cluster) as ns, fresh_namespace(cluster, "team") as team:
        res = CliRunner().invoke(app, [
            "nodes", "schedule", "-n", ns, "--image", "registry.example.com/nccl-k8s:0.1",
            "--", "--gpus-per-node", "1", "--idle-only", "--label", "--taint",
            "--skip-checked-within", "6h", "--threshold", "0.4", *ENGINE_1M])  # fmt: skip
        assert res.exit_code == 0, res.output
        docs = [d for d in yaml.safe_load_all(res.output) if d]
        cron = docs.pop()
        env = {**os.environ, **cluster.kubectl_env()}
        subprocess.run(["kubectl", "apply", "-f", "-"], input=yaml.safe_dump_all(docs),
                       text=True, env=env, check=True, capture_output=True, timeout=60)  # fmt: skip
        # The Job `kubectl create job --from=cronjob/...` makes: the CronJob's jobTemplate.
        pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        kc = cluster.add_user(*cluster_rbac.service_account(ns, pod["serviceAccountName"]))
        argv = [*pod["containers"][0]["command"][1:], *pod["containers"][0]["args"]]
        cut = argv.index("--")
        job = [*argv[:cut], "-o", "json", "--kubeconfig", str(kc), *argv[cut:]]
        for i, node in enumerate(("node-1", "node-2")):
            cluster.store.create("pods", gpu_pod(team, f"other-{i}", node))
        for i in range(6):
            cluster.faults.node_link(f"node-{i}", FABRIC / 5 if i == 3 else FABRIC)
        try:
            with cluster.record_requests() as seen:
                first = CliRunner().invoke(app, job)
            doc = json.loads(first.stdout)
            assert _tested(doc) == {"node-0", "node-3", "node-4", "node-5"}, first.output
            assert (
                doc["left_out"]["node-1"] == f"not idle: {team}/other-0 requests 1 nvidia.com/gpu"
            )
            # Least privilege: nothing it sent was refused, and it used every grant but the
            # verbs of failure paths it did not take.
            user = cluster_rbac.service_account(ns, pod["serviceAccountName"])[0]
            assert cluster.apiserver is not None
            mine = [a for a in seen if a.user.name == user and a.resource_request]
            assert [a for a in mine if not cluster.apiserver.authorizer.decide(a)[0]] == []
            sent = {(a.group, a.qualified, a.verb, "namespace" if a.namespace == ns else "cluster")
                    for a in mine}  # fmt: skip
            assert sent <= granted(docs)
            assert granted(docs) - sent <= FAILURE_PATHS, sorted(granted(docs) - sent)
            assert {v["node"]: v["verdict"] for v in doc["nodes"]} == {
                "node-0": "good", "node-3": "bad", "node-4": "good", "node-5": "good"
            }, first.output  # fmt: skip
            labels = {n: cluster.store.get("nodes", None, n)["metadata"]["labels"]
                      for n in ("node-0", "node-3", "node-4", "node-5")}  # fmt: skip
            runs = {lab[RUN_KEY] for lab in labels.values()}
            assert len(runs) == 1, labels
            for n, lab in labels.items():
                assert lab[LABEL_KEY] == ("bad" if n == "node-3" else "good")
                assert lab[CHECKED_AT_KEY].isdigit()
                score = next(v["score"] for v in doc["nodes"] if v["node"] == n)
                assert lab[BUSBW_KEY] == busbw_value(score), (n, lab)
            assert float(labels["node-3"][BUSBW_KEY]) < 0.5 * float(labels["node-0"][BUSBW_KEY]), (
                labels
            )
            taints = cluster.store.get("nodes", None, "node-3")["spec"].get("taints") or []
            assert [t["key"] for t in taints] == [TAINT_KEY]
            for busy in ("node-1", "node-2"):
                assert LABEL_KEY not in cluster.store.get("nodes", None, busy)["metadata"]["labels"]

            # Within the window: nothing is due (the bad node is tainted out of the pool).
            second = CliRunner().invoke(app, job)
            again = json.loads(second.stdout)
            assert second.exit_code == 0 and again["tests"] == [], second.output
            assert "--skip-checked-within" in again["left_out"]["node-0"], second.output

            # The window passed: the checks' time, as the API would show it hours later.
            old = str(int(labels["node-0"][CHECKED_AT_KEY]) - 7 * 3600)
            subprocess.run(["kubectl", "label", "--overwrite", "nodes", "node-0", "node-4",
                            "node-5", f"{CHECKED_AT_KEY}={old}"], env=env, check=True,
                           capture_output=True, timeout=60)  # fmt: skip
            third = CliRunner().invoke(app, job)
            later = json.loads(third.stdout)
            assert _tested(later) == {"node-0", "node-4", "node-5"}, third.output
        finally:
            for i in range(6):
                cluster.faults.node_link(f"node-{i}", None)
            _clean_nodes(cluster)

        # The history: both checks that tested something, newest first, read as the checker.
        hist = CliRunner().invoke(
            app, ["nodes", "history", "-n", ns, "-o", "json", "--kubeconfig", str(kc)]
        )
        assert hist.exit_code == 0, hist.output
        h = json.loads(hist.stdout)
        assert h["checks"] == 2, hist.output
        by_node = {t["node"]: t for t in h["nodes"]}
        assert set(by_node) == {"node-0", "node-3", "node-4", "node-5"}
        assert [e["verdict"] for e in by_node["node-3"]["history"]] == ["bad"]
        assert by_node["node-3"]["change"].startswith("bad since "), by_node["node-3"]
        assert "never good in the history" in by_node["node-3"]["change"]
        node0 = by_node["node-0"]["history"]
        assert [e["verdict"] for e in node0] == [v["verdict"] for v in later["nodes"]
                                                 if v["node"] == "node-0"] + ["good"]  # fmt: skip
        assert node0[1]["run_id"] == runs.pop() and node0[0]["at"] >= node0[1]["at"]
        text = CliRunner().invoke(app, ["nodes", "history", "-n", ns, "--node", "node-3",
                                        "--kubeconfig", str(kc)])  # fmt: skip
        assert text.exit_code == 0 and "node-3: bad since" in text.output, text.output
        # Not a run: cleanup --all leaves it.
        gone = CliRunner().invoke(app, ["cleanup", "-n", ns, "--all", "--kubeconfig", str(kc)])
        assert gone.exit_code == 0, gone.output
        assert cluster.store.get("configmaps", ns, HISTORY_NAME)["metadata"]["name"]


def test_a_check_whose_history_write_was_overtaken_reads_again_and_loses_nothing(
    cluster: Cluster,
) -> None:
    """Optimistic writes against the API server's own resourceVersion check: check A's patch
    is held while check B reads and writes; A's patch, on the version it read, meets a 409,
    reads again and appends to B's. (Written without the resourceVersion, A's patch would
    replace B's check.)"""
    a, b, c = (Check(r, 1_796_652_000 + i, {"node-0": ("good", 1.0)}) for i, r in
               enumerate(("first", "a", "b")))  # fmt: skip
    settings = ClientSettings(kubeconfig=str(cluster.kubeconfig))
    with fresh_namespace(cluster) as ns:
        assert run_sync(lambda kc: append_check(kc, ns, a), settings) == 1
        held = cluster.faults.hold_requests(f"/namespaces/{ns}/configmaps/{HISTORY_NAME}$", "PATCH")
        kept: list[int] = []
        writer = threading.Thread(
            target=lambda: kept.append(run_sync(lambda kc: append_check(kc, ns, b), settings))
        )
        writer.start()
        try:
            assert held.arrived.wait(60), "check A never patched"
            assert run_sync(lambda kc: append_check(kc, ns, c), settings) == 2  # B overtakes
        finally:
            held.release()
            writer.join(60)
        assert kept == [3]
        data = cluster.store.get("configmaps", ns, HISTORY_NAME)["data"][HISTORY_KEY]
        assert [x.run_id for x in load(data)] == ["b", "a", "first"]
