"""The test cluster's node faults for the bad-node finder (issue 12), through the documented
control endpoint: `node-slow` gives a node's pod processes about 1/F of the CPU (its pods'
children in sessions of their own included), `node-crash` makes its containers exit 1 at start.
Also the Leases by which its schedulers show they run, and the resources doctor reads.

Each test asserts what a pod would see: the CPU time its processes got, its exit code and log.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from typing import Any

import pytest
from tests.cluster.cluster import Cluster
from tests.conftest import Api
from tests.e2e_helpers import wait_for

pytestmark = pytest.mark.slow

Obj = dict[str, Any]

#: Busy for `wall` seconds in a child of its own session (as torchrun's workers are), then print
#: the CPU seconds the child got.
BUSY = """
import subprocess, sys
child = '''
import time
t, c = time.monotonic(), time.process_time()
while time.monotonic() - t < 3:
    pass
print(round(time.process_time() - c, 3), flush=True)
'''
out = subprocess.run([sys.executable, "-c", child], start_new_session=True, capture_output=True, text=True)
print("cpu", out.stdout.strip(), flush=True)
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(nodes=2, gpus_per_node=1, schedulers=("default-scheduler", "hami-scheduler")) as c:
        yield c


def pod(name: str, namespace: str, node: str, script: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [
                {"name": "main", "image": "python", "command": ["python", "-c", script]}
            ],
        },
    }


def ended(cluster: Cluster, namespace: str, name: str) -> Obj | None:
    p = cluster.store.get("pods", namespace, name)
    return p if p["status"].get("phase") in ("Succeeded", "Failed") else None


def log(cluster: Cluster, namespace: str, name: str) -> str:
    path = cluster.kubelet.log_path(namespace, name, "main")
    return path.read_text() if path else ""


def test_node_slow_gives_its_pods_processes_a_fraction_of_the_cpu(
    cluster: Cluster, namespace: str
) -> None:
    api = Api(cluster.url)
    assert api.post("/_test/faults/node-slow", {"node": "node-0", "factor": 4})[0] == 200
    try:
        cluster.store.create("pods", pod("slow", namespace, "node-0", BUSY))
        cluster.store.create("pods", pod("free", namespace, "node-1", BUSY))
        wait_for("pod slow ended", lambda: ended(cluster, namespace, "slow"), 30)
        wait_for("pod free ended", lambda: ended(cluster, namespace, "free"), 30)
    finally:
        api.post("/_test/faults/node-slow", {"node": "node-0", "factor": None})
    cpu = {n: float(log(cluster, namespace, n).split("cpu ")[1]) for n in ("slow", "free")}
    # Over 3 s of wall time the child on node-0 ran about a quarter of the time; the one on
    # node-1 had a core to itself most of it (two busy pods, two cores).
    assert cpu["slow"] < 0.45 * cpu["free"], cpu
    assert cpu["slow"] > 0.1, cpu  # slowed, not frozen
    assert cluster.store.get("pods", namespace, "slow")["status"]["phase"] == "Succeeded"
    # Cleared: a pod on node-0 runs at full speed again.
    cluster.store.create("pods", pod("again", namespace, "node-0", BUSY))
    wait_for("pod again ended", lambda: ended(cluster, namespace, "again"), 30)
    assert float(log(cluster, namespace, "again").split("cpu ")[1]) > 2 * cpu["slow"]


def test_node_crash_fails_every_container_that_starts_there_until_healed(
    cluster: Cluster, namespace: str
) -> None:
    api = Api(cluster.url)
    assert api.post("/_test/faults/node-crash", {"node": "node-1"})[0] == 200
    try:
        cluster.store.create("pods", pod("crash", namespace, "node-1", "print('ran')"))
        cluster.store.create("pods", pod("fine", namespace, "node-0", "print('ran')"))
        crashed = wait_for("pod crash ended", lambda: ended(cluster, namespace, "crash"), 30)
        fine = wait_for("pod fine ended", lambda: ended(cluster, namespace, "fine"), 30)
    finally:
        api.post("/_test/faults/node-crash", {"node": "node-1", "crash": False})
    term = crashed["status"]["containerStatuses"][0]["state"]["terminated"]
    assert crashed["status"]["phase"] == "Failed" and term["exitCode"] == 1
    assert "ran" not in log(cluster, namespace, "crash")
    assert "node node-1 crashes every container at start" in log(cluster, namespace, "crash")
    assert fine["status"]["phase"] == "Succeeded" and log(cluster, namespace, "fine") == "ran\n"
    cluster.store.create("pods", pod("healed", namespace, "node-1", "print('ran')"))
    healed = wait_for("pod healed ended", lambda: ended(cluster, namespace, "healed"), 30)
    assert healed["status"]["phase"] == "Succeeded"


def test_node_faults_refuse_a_node_that_is_not_there(cluster: Cluster) -> None:
    api = Api(cluster.url)
    code, body = api.post("/_test/faults/node-slow", {"node": "node-9", "factor": 4})
    assert code == 404 and body["reason"] == "NotFound", body
    code, body = api.post("/_test/faults/node-crash", {})
    assert code == 400 and "KeyError" in body["message"], body


def test_each_scheduler_holds_a_renewed_lease_and_quota_objects_are_served(
    cluster: Cluster, namespace: str
) -> None:
    api = Api(cluster.url)
    code, body = api.get("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases")
    assert code == 200, body
    leases = {item["metadata"]["name"]: item["spec"] for item in body["items"]}
    assert set(leases) >= {"kube-scheduler", "hami-scheduler"}
    renewed = datetime.datetime.fromisoformat(
        leases["hami-scheduler"]["renewTime"].replace("Z", "+00:00")
    )
    age = datetime.datetime.now(datetime.timezone.utc) - renewed
    assert age.total_seconds() < 15, leases["hami-scheduler"]
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus"},
        "spec": {"hard": {"requests.nvidia.com/gpu": "4"}},
    }
    code, body = api.post(f"/api/v1/namespaces/{namespace}/resourcequotas", quota)
    assert code == 201, json.dumps(body)
    code, body = api.get(f"/api/v1/namespaces/{namespace}/limitranges")
    assert code == 200 and body["items"] == []
