"""Issue 13, acceptance 2: continuous mode on the test cluster. A StatefulSet whose engine sweeps
until stopped: each pod's /metrics, scraped at the pod's address on port 8080 as Prometheus
would, shows the sweep counter growing; a sweep whose data is sabotaged fails, and `status`,
`results` and the metrics all say so, naming the rank, pod and node.

The sabotage travels in the engine zipapp (its entry point wraps torch.distributed.all_reduce,
the data plane only): while a flag file exists, rank 3 (pod 1) adds 1 to the first element of
what every all_reduce gives it, as a faulty link or library would; while a hold file exists,
every rank's first all_reduce waits, so the first sweep has certainly not ended when `results`
is first asked.
"""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.cluster.cluster import Cluster
from tests.e2e_helpers import cli, engine_zipapp_with, labelled, wait_for

from nccl_k8s.results.schema import load

pytestmark = pytest.mark.slow

HOOK = """
import os as _os
import time as _time

import torch.distributed as _dist

_orig_all_reduce = _dist.all_reduce


def _all_reduce(tensor, *args, group=None, **kwargs):
    data_plane = group is None or group == _dist.group.WORLD
    while data_plane and _os.path.exists(_os.environ["TEST_HOLD"]):
        _time.sleep(0.1)
    out = _orig_all_reduce(tensor, *args, group=group, **kwargs)
    if data_plane and _os.environ.get("RANK") == "3" and _os.path.exists(_os.environ["TEST_BREAK"]):
        tensor.view(-1)[:1].add_(1)
    return out


_dist.all_reduce = _all_reduce
"""


def scrape(ip: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://{ip}:8080/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


def value(metrics: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    return metrics[name][0][1]


def test_statefulset_sweeps_scraped_and_a_sabotaged_sweep_fails_visibly(
    cluster: Cluster, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nccl_k8s.k8s.rendering._manifests as manifests

    ns = namespace

    monkeypatch.setenv("NCCL_K8S_RUNS_DIR", str(tmp_path / "runs"))
    zipapp = engine_zipapp_with(tmp_path, HOOK)
    monkeypatch.setattr(manifests, "engine_zipapp", lambda: zipapp)
    hold, broken = tmp_path / "hold", tmp_path / "break"
    hold.touch()
    rid = f"c-{uuid.uuid4().hex[:6]}"
    deployed = cli(
        cluster, "deploy", "-n", ns, "--run-id", rid, "--workload", "statefulset",
        "--interval", "1s", "--world-size", "4", "--gpus-per-node", "2",
        "--env", f"TEST_HOLD={hold}", "--env", f"TEST_BREAK={broken}",
        "--", "--backend", "gloo", "-b", "1K", "-e", "4K", "-f", "4", "-n", "2", "-w", "0",
    )  # fmt: skip
    assert deployed.exit_code == 0, deployed.output
    assert f"run {rid} is running after" in deployed.output

    # No sweep has ended yet: an explicit message and exit 1, and no results file.
    early = cli(cluster, "results", "-n", ns, "--run", rid)
    assert early.exit_code == 1, early.output
    assert f"run {rid} (Running): no sweep has ended yet" in early.output
    assert not (tmp_path / "runs" / rid / "results.json").exists()
    st = json.loads(cli(cluster, "status", "-n", ns, "--run", rid, "-o", "json").output)
    assert st["last_sweep"] is None
    hold.unlink()

    # Each pod serves /metrics at its own address, port 8080 (the pods' named port).
    pods = {
        p["metadata"]["name"]: p for p in cluster.store.list("pods", ns)[0]
    }  # fmt: skip
    ip = {name: p["status"]["podIP"] for name, p in pods.items()}
    assert set(ip) == {f"{rid}-0", f"{rid}-1"}
    port = pods[f"{rid}-0"]["spec"]["containers"][0]["ports"]
    assert port == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    first = wait_for(
        "the first sweeps on pod 0's /metrics",
        lambda: (m := scrape(ip[f"{rid}-0"])) and value(m, "nccl_k8s_sweeps_total") >= 2 and m,
    )
    later = wait_for(
        "the sweep counter to grow",
        lambda: (
            (m := scrape(ip[f"{rid}-0"]))
            and value(m, "nccl_k8s_sweeps_total") > value(first, "nccl_k8s_sweeps_total")
            and m
        ),
    )
    assert value(later, "nccl_k8s_last_sweep_success") == 1.0
    assert value(later, "nccl_k8s_sweep_failures_total") == 0.0
    busbw = later["nccl_k8s_bus_bandwidth_bytes_per_second"]  # run-level: rank 0's pod
    assert {(lb["op"], lb["size"]) for lb, _ in busbw} == {
        ("all_reduce", "1024"),
        ("all_reduce", "4096"),
    }
    pod1 = scrape(ip[f"{rid}-1"])  # its own ranks, 2 and 3, and the same sweeps
    assert {lb["rank"] for lb, _ in pod1["nccl_k8s_rank_bus_bandwidth_bytes_per_second"]} == {
        "2",
        "3",
    }
    assert "nccl_k8s_bus_bandwidth_bytes_per_second" not in pod1  # rank 0's pod speaks for the run
    node1 = pods[f"{rid}-1"]["spec"]["nodeName"]  # the node, not the pod's host name
    assert {lb["node"] for lb, _ in pod1["nccl_k8s_rank_bus_bandwidth_bytes_per_second"]} == {node1}
    assert value(pod1, "nccl_k8s_sweeps_total") >= 1

    ok = cli(cluster, "status", "-n", ns, "--run", rid)
    assert ok.exit_code == 0, ok.output
    assert re.search(r"^last sweep: \d+ passed", ok.output, re.M)

    # Sabotage: rank 3's all_reduce results are wrong from now on.
    broken.touch()
    failed = wait_for(
        "status to show a failed sweep",
        lambda: (
            (s := json.loads(cli(cluster, "status", "-n", ns, "--run", rid, "-o", "json").output))
            and s["last_sweep"]
            and s["last_sweep"]["ok"] is False
            and s
        ),
    )
    sweep = failed["last_sweep"]
    assert sweep["failed_ops"] == ["all_reduce"]
    assert [(r["rank"], r["host"]) for r in sweep["wrong_ranks"]] == [(3, f"{rid}-1")]
    assert failed["phase"] == "Running"  # the pods go on sweeping: the failure is in the sweeps
    by_pod = {p["name"]: p["last_sweep"] for p in failed["pods"]}
    assert re.fullmatch(r"sweep \d+: FAILED, \d+ wrong elements on rank 3", by_pod[f"{rid}-1"])
    assert by_pod[f"{rid}-0"].endswith("failed elsewhere, its ranks were right")
    text = cli(cluster, "status", "-n", ns, "--run", rid).output
    assert re.search(
        rf"^last sweep: \d+ FAILED at \S+ after \d+s: all_reduce failed; \d+ wrong elements on "
        rf"rank 3 \(pod {rid}-1, node {node1}\)$",
        text,
        re.M,
    ), text
    assert re.search(
        rf"^1\s+{rid}-1\s+node-\d\s+Running\s+0\s+\S+\s+last sweep \d+: FAILED", text, re.M
    )

    # The metrics: the failure counted on every pod, the wrong elements on rank 3's pod.
    m0 = scrape(ip[f"{rid}-0"])
    assert value(m0, "nccl_k8s_sweep_failures_total") >= 1
    m1 = wait_for(
        "pod 1 to count the failure",
        lambda: (
            (m := scrape(ip[f"{rid}-1"])) and value(m, "nccl_k8s_last_sweep_success") == 0.0 and m
        ),
    )
    wrong = {lb["rank"]: v for lb, v in m1["nccl_k8s_wrong_elements_total"] if v}
    assert set(wrong) == {"3"}

    # results: the latest sweep (failed: exit 1), any sweep still in the log, all of them.
    latest = cli(cluster, "results", "-n", ns, "--run", rid)
    assert latest.exit_code == 1, latest.output
    # One line says why (issue 39: the same line `run` prints), the wrong elements named.
    assert "error: data check failed: 4 wrong elements in 4 rows" in latest.output
    assert re.search(rf"run {rid}: sweep \d+: 4 rows from 2 pods", latest.output)
    run = load(tmp_path / "runs" / rid / "results.json")
    assert run.meta.sweep is not None and any(r.wrong for r in run.rows)
    series = cli(cluster, "results", "-n", ns, "--run", rid, "--all-sweeps", "-o", "json")
    doc = json.loads(series.output[: series.output.rindex("}") + 1])
    sweeps = doc["sweeps"]
    assert [s["sweep"] for s in sweeps] == list(range(sweeps[0]["sweep"], sweeps[-1]["sweep"] + 1))
    assert sweeps[0]["ok"] is True and sweeps[-1]["ok"] is False
    assert all(Path(s["path"]).is_file() for s in sweeps)
    one = cli(cluster, "results", "-n", ns, "--run", rid, "--sweep", str(sweeps[0]["sweep"]))
    assert one.exit_code == 0, one.output
    assert (
        load(tmp_path / "runs" / rid / f"sweep-{sweeps[0]['sweep']}.json").meta.sweep
        == sweeps[0]["sweep"]
    )
    gone = cli(cluster, "results", "-n", ns, "--run", rid, "--sweep", "100000")
    assert gone.exit_code == 2
    assert f"--sweep 100000: run {rid} has no complete sweep 100000 in its log" in gone.output

    done = cli(cluster, "cleanup", "-n", ns, "--run", rid)
    assert done.exit_code == 0, done.output
    assert labelled(cluster, ns) == []
