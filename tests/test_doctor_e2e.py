"""Issue 12, acceptance 1 and 3, on the test cluster over real HTTP: doctor names the specific
failure (an absent scheduler, too few GPUs, a namespace enforcing Pod Security baseline with the
rdma profile and no RDMA resource anywhere) with its hint and passes a deployable config;
deploy refuses what cannot be admitted with the same words before creating anything; a Pending
run's bundle holds its objects, events and pods' state and `doctor --run` says why; `deploy
--bundle-on-failure` keeps a failed run's evidence before its objects go.
"""

from __future__ import annotations

import json
import re
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.cluster.cluster import Cluster
from tests.e2e_helpers import cli, labelled, wait_for

pytestmark = pytest.mark.slow

BASELINE = {"pod-security.kubernetes.io/enforce": "baseline"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # volcano runs, hami-scheduler does not.
    with Cluster(nodes=4, gpus_per_node=2, schedulers=("default-scheduler", "volcano")) as c:
        yield c


def rows(output: str) -> dict[str, tuple[str, str, str]]:
    """check name -> (status, found, hint) from doctor's table."""
    out: dict[str, tuple[str, str, str]] = {}
    last = ""
    for line in output.splitlines():
        if line.startswith((" ", "CHECK", "doctor:")):
            if line.strip().startswith("hint: ") and last:
                status, found, _ = out[last]
                out[last] = (status, found, line.strip().removeprefix("hint: "))
            continue
        name, status, found = line.split(None, 2)
        out[name] = (status, found, "")
        last = name
    return out


def test_doctor_names_each_failure_with_its_hint_and_passes_a_deployable_run(
    cluster: Cluster, namespace: str
) -> None:
    size = ["--world-size", "4", "--gpus-per-node", "2"]
    ok = cli(cluster, "doctor", "-n", namespace, *size)
    assert ok.exit_code == 0, ok.output
    assert "doctor: 0 fail, 0 warn" in ok.output
    assert all(s == "pass" for s, _, _ in rows(ok.output).values())

    # A cluster without the named scheduler.
    absent = cli(cluster, "doctor", "-n", namespace, *size, "--scheduler", "hami-scheduler")
    assert absent.exit_code == 1, absent.output
    status, found, hint = rows(absent.output)["scheduler"]
    assert status == "fail"
    assert found == (
        "no sign of scheduler hami-scheduler: no leader-election Lease of it renewed in the last "
        "60s and no running pod placed by it"
    )
    assert hint.startswith("install hami-scheduler (its Helm chart) or deploy without --scheduler")
    assert [n for n, (s, _, _) in rows(absent.output).items() if s != "pass"] == ["scheduler"]
    running = cli(cluster, "doctor", "-n", namespace, *size, "--scheduler", "volcano")
    assert running.exit_code == 0, running.output
    assert rows(running.output)["scheduler"][1].startswith(
        "volcano runs: its Lease kube-system/volcano was renewed"
    )

    # Too few GPUs for the world asked.
    big = cli(cluster, "doctor", "-n", namespace, "--world-size", "16", "--gpus-per-node", "2")
    assert big.exit_code == 1, big.output
    status, found, hint = rows(big.output)["world"]
    assert status == "fail"
    assert found == (
        "world size 16 needs 8 pod(s) of 2 nvidia.com/gpu (one per node; cpu 4, memory 16Gi "
        "each); 4 can be placed"
    )
    assert hint.startswith("--world-size 8 fits these nodes; a cluster autoscaler may add nodes")

    # JSON: the same checks, ok false.
    doc = json.loads(
        cli(
            cluster,
            "doctor",
            "-n",
            namespace,
            "--world-size",
            "16",
            "--gpus-per-node",
            "2",
            "-o",
            "json",
        ).output
    )
    assert doc["ok"] is False and doc["namespace"] == namespace
    assert [c["name"] for c in doc["checks"] if c["status"] == "fail"] == ["world"]


def test_doctor_says_no_topology_domain_holds_the_world_naming_each_domains_free_gpus(
    cluster: Cluster, namespace: str
) -> None:
    """Issue 37: two blocks of two 2-GPU nodes; 8 ranks (4 pods) fit the cluster, not a block.
    doctor lists the live pods (over the API: none hold GPUs here) and names each block."""
    key = "example.com/block"

    def label(value: str | None) -> Any:
        def edit(obj: Any) -> None:
            labels = obj["metadata"].setdefault("labels", {})
            labels.pop(key, None)
            if value is not None:
                labels[key] = value

        return edit

    nodes = {"node-0": "block-a", "node-1": "block-a", "node-2": "block-b", "node-3": "block-b"}
    size = ["--world-size", "8", "--gpus-per-node", "2", "--topology", key]
    try:
        for name, block in nodes.items():
            cluster.store.mutate("nodes", None, name, label(block))
        required = cli(cluster, "doctor", "-n", namespace, *size, "--placement", "required")
        assert required.exit_code == 1, required.output
        status, found, hint = rows(required.output)["domain-fit"]
        assert (status, found) == (
            "fail",
            f"8 ranks need one {key} domain (--placement required), but no domain has 8 free "
            "nvidia.com/gpu (4 pods of 2): block-a 4, block-b 4",
        )
        assert hint.startswith("--world-size 4 fits block-a")
        assert rows(required.output)["world"][0] == "pass"  # the cluster holds it, no block does
        preferred = cli(cluster, "doctor", "-n", namespace, *size)
        assert preferred.exit_code == 0, preferred.output
        assert rows(preferred.output)["domain-fit"][0] == "warn"
    finally:
        for name in nodes:
            cluster.store.mutate("nodes", None, name, label(None))


def test_baseline_namespace_rdma_profile_and_no_rdma_resource_fail_both_and_deploy_refuses(
    cluster: Cluster, namespace: str
) -> None:
    cluster.store.mutate(
        "namespaces", None, namespace, lambda o: o["metadata"]["labels"].update(BASELINE)
    )
    ib = [
        "--world-size",
        "4",
        "--gpus-per-node",
        "2",
        "--network",
        "ib",
        "--rdma-resource",
        "rdma/ib=1",
    ]
    res = cli(cluster, "doctor", "-n", namespace, *ib)
    assert res.exit_code == 1, res.output
    found = rows(res.output)
    status, psa, hint = found["pod-security"]
    assert status == "fail"
    assert psa == (
        f"namespace {namespace} enforces Pod Security level 'baseline' (pod-security.kubernetes.io/enforce) "
        "and the pods of --security rdma need 'privileged' (the IPC_LOCK capability): "
        "PodSecurity admission refuses them"
    )
    assert "pod-security.kubernetes.io/enforce=privileged" in hint
    status, rdma, hint = found["rdma"]
    assert status == "fail"
    assert rdma == "no GPU node has rdma/ib=1 allocatable; the run needs 2 for --network ib"
    assert hint.startswith("install the device plugin that advertises the HCAs")

    # deploy runs the cheap part first: refused with the same words, nothing created.
    rid = f"r-{uuid.uuid4().hex[:6]}"
    # Any create in the namespace would meet this 500 first: it is still pending afterwards
    # only if deploy refused before creating anything.
    cluster.faults.fail_requests(rf"/namespaces/{namespace}/", 500, method="POST")
    try:
        refused = cli(cluster, "deploy", "-n", namespace, "--run-id", rid, *ib)
        assert cluster.faults.pending() == 1, "deploy tried to create something"
    finally:
        cluster.faults.clear()
    # Exit 1, as when admission itself refuses the pods: the flags are fine, the cluster says no.
    assert refused.exit_code == 1, refused.output
    lines = refused.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: deploy refused, nothing was created: pod-security: {psa}; hint: "
    )
    assert labelled(cluster, namespace) == []


def test_deploy_refuses_a_run_its_namespace_quota_cannot_hold(
    cluster: Cluster, namespace: str
) -> None:
    cluster.store.create(
        "resourcequotas",
        {
            "metadata": {"name": "gpus", "namespace": namespace},
            "spec": {"hard": {"requests.nvidia.com/gpu": "2"}},
            "status": {
                "hard": {"requests.nvidia.com/gpu": "2"},
                "used": {"requests.nvidia.com/gpu": "0"},
            },
        },
    )
    res = cli(cluster, "deploy", "-n", namespace, "--world-size", "4", "--gpus-per-node", "2")
    assert res.exit_code == 1, res.output
    assert (
        "error: deploy refused, nothing was created: quota: ResourceQuota gpus: the run needs "
        "requests.nvidia.com/gpu 4, 2 of 2 is left (0 used): the pods would be refused"
        in res.output
    )
    assert labelled(cluster, namespace) == []


def members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: f.read() for m in tar.getmembers() if (f := tar.extractfile(m)) is not None}


def test_a_pending_runs_bundle_and_doctor_run_say_why(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    rid = f"r-{uuid.uuid4().hex[:6]}"
    made = cli(
        cluster,
        "deploy",
        "-n",
        namespace,
        "--run-id",
        rid,
        "--no-wait",
        "--world-size",
        "8",
        "--gpus-per-node",
        "4",
        "--env",
        "HF_TOKEN=s3cr3t-value",
        "--",
        "--backend",
        "gloo",
    )
    assert made.exit_code == 0, made.output

    def unschedulable() -> bool:
        pods = cluster.store.list("pods", namespace)[0]
        return len(pods) == 2 and all(
            any(c.get("reason") == "Unschedulable" for c in p["status"].get("conditions") or [])
            for p in pods
        )

    wait_for("both pods Unschedulable", unschedulable)
    why = cli(cluster, "doctor", "-n", namespace, "--run", rid)
    assert why.exit_code == 1, why.output
    lines = why.output.splitlines()
    assert lines[0] == f"run {rid} in {namespace} (Job): Unschedulable"
    assert lines[1].split() == ["RANK", "POD", "NODE", "PHASE", "WHY"]
    for rank, line in enumerate(lines[2:4]):
        assert line.startswith(f"{rank}     {rid}-{rank}-"), line
        assert " -     Pending  Unschedulable for " in line
        assert line.endswith("0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")
    doc = json.loads(cli(cluster, "doctor", "-n", namespace, "--run", rid, "-o", "json").output)
    assert doc["phase"] == "Unschedulable" and doc["ok"] is False
    assert [r["rank"] for r in doc["rows"]] == [0, 1]
    # Not ok because no row only waits: each is Unschedulable. No verdict names a reason yet.
    assert [r["waiting"] for r in doc["rows"]] == [False, False] and doc["reason"] is None

    out = tmp_path / "pending.tar.gz"
    got = cli(cluster, "bundle", "-n", namespace, "--run", rid, "-o", str(out))
    assert got.exit_code == 0, got.output
    assert f"run {rid}: 6 objects (2 pods), " in got.output and str(out) in got.output
    files = members(out)
    names = sorted(files)
    assert f"{rid}/README.txt" in names and f"{rid}/doctor.txt" in names
    assert {n for n in names if "/objects/" in n} == {
        f"{rid}/objects/job-{rid}.yaml",
        f"{rid}/objects/service-{rid}.yaml",
        f"{rid}/objects/configmap-{rid}-engine.yaml",
        f"{rid}/objects/networkpolicy-{rid}.yaml",
        *(
            f"{rid}/objects/pod-{p['metadata']['name']}.yaml"
            for p in cluster.store.list("pods", namespace)[0]
        ),
    }
    cm = yaml.safe_load(files[f"{rid}/objects/configmap-{rid}-engine.yaml"])
    assert cm["binaryData"]["nccl_k8s.pyz"].startswith("<elided by nccl-k8s bundle: ")
    pod = yaml.safe_load(next(v for k, v in files.items() if "/objects/pod-" in k))
    assert pod["status"]["phase"] == "Pending"
    assert any(c["reason"] == "Unschedulable" for c in pod["status"]["conditions"])
    events = yaml.safe_load(files[f"{rid}/events.yaml"])
    assert {e["reason"] for e in events} >= {"FailedScheduling"}
    assert files[f"{rid}/doctor.txt"].decode().splitlines()[0] == lines[0]
    readme = files[f"{rid}/README.txt"].decode()
    assert "Not available:" in readme and "logs/" in readme  # the pods never started
    assert not [n for n in names if "/logs/" in n or "/nodes/" in n]
    # --env values are redacted (issue 36), the names kept; --show-env keeps them.
    assert not [n for n, data in files.items() if b"s3cr3t-value" in data]
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["HF_TOKEN"] == "<redacted by nccl-k8s bundle: --show-env keeps it>"
    assert "The values of --env are redacted" in readme
    shown = tmp_path / "shown.tar.gz"
    got = cli(cluster, "bundle", "-n", namespace, "--run", rid, "-o", str(shown), "--show-env")
    assert got.exit_code == 0, got.output
    assert [n for n, data in members(shown).items() if b"s3cr3t-value" in data]
    assert cli(cluster, "cleanup", "-n", namespace, "--run", rid).exit_code == 0


def test_bundle_on_failure_is_written_before_the_failed_run_is_deleted(
    cluster: Cluster, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    rid = f"r-{uuid.uuid4().hex[:6]}"
    for node in ("node-1", "node-2"):
        cluster.faults.node_crash(node)
    try:
        res = cli(
            cluster, "deploy", "-n", namespace, "--run-id", rid, "--bundle-on-failure",
            "--world-size", "2", "--gpus-per-node", "1", "--node", "node-1", "--node", "node-2",
            "--", "--backend", "gloo",
        )  # fmt: skip
    finally:
        for node in ("node-1", "node-2"):
            cluster.faults.node_crash(node, False)
    assert res.exit_code == 1, res.output
    path = tmp_path / f"{rid}.bundle.tar.gz"
    assert f"(debug bundle: {rid}.bundle.tar.gz)" in res.output
    assert "(deleted what this deploy created" in res.output
    assert labelled(cluster, namespace) == []  # deleted after the bundle was written
    files = members(path)
    # The rank that failed first, as the failure names it (both crash at start: which one is
    # first is the machine's doing); the other may be gone (the Job deletes it once failed).
    named = re.search(rf"rank \d \(pod ({rid}-\d-\w+), node (node-[12])\)", res.output)
    assert named, res.output
    pods = {k: yaml.safe_load(v) for k, v in files.items() if "/objects/pod-" in k}
    assert f"{rid}/objects/pod-{named.group(1)}.yaml" in pods, sorted(files)
    assert f"{rid}/logs/{named.group(1)}.log" in files, sorted(files)
    nodes = {p["spec"]["nodeName"] for p in pods.values()}
    assert nodes <= {"node-1", "node-2"}  # --node pinned them (matchFields metadata.name)
    assert {f"{rid}/nodes/{n}.yaml" for n in nodes} <= set(files)
    # The named pod had failed when the bundle was written; the other one crashes on its own
    # clock (on a busy machine it may not have started yet when the first failure ends the run).
    assert pods[f"{rid}/objects/pod-{named.group(1)}.yaml"]["status"]["phase"] == "Failed"
    assert {p["status"]["phase"] for p in pods.values()} <= {"Failed", "Pending", "Running"}
    logs = [v.decode() for k, v in files.items() if k.endswith(".log")]
    assert logs and all("crashes every container at start" in text for text in logs)
    table = files[f"{rid}/doctor.txt"].decode().splitlines()
    assert table[0].startswith(f"run {rid} in {namespace} (Job): Failed: rank 0 (pod {rid}-0-")
    assert table[2].startswith("0*") and table[2].endswith(
        "Failed  exit code 1; last log lines: test cluster: node "
        f"{table[2].split()[2]} crashes every container at start (node-crash fault)"
    )
