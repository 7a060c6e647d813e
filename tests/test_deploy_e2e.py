"""Issue 4 end to end: `nccl-k8s deploy|status|logs|results|cleanup|list` against the local test
cluster over real HTTP, with the gloo backend and "GPUs" as the nodes' fake resource.

The pods run the real engine: the zipapp travels in the run's ConfigMap, is mounted at
/opt/nccl-k8s and put on PYTHONPATH, and `torchrun` is the test venv's (the kubelet puts the test
interpreter's directory first on PATH). Each test asserts what a user would look at: the exit
code, the one line that names the rank, pod, node and reason, the objects left in the store.

One cluster (4 nodes x 4 GPUs) serves the module; every test works in its own namespace.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cluster.cluster import Cluster
from tests.e2e_helpers import cli, cli_process, engine_zipapp_with, labelled, wait_for
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.results.schema import load

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("runs_dir")]

GPUS_PER_NODE = 4
PULL_FAIL = "no-such-registry"
#: The acceptance run: 2 pods x 2 ranks, every op, 1K..64K.
ACCEPTANCE = [
    "--world-size",
    "4",
    "--gpus-per-node",
    "2",
    "--",
    "--backend",
    "gloo",
    "--ops",
    "all",
    "-b",
    "1K",
    "-e",
    "64K",
    "-c",
    "1",
    "-w",
    "1",
    "-n",
    "2",
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(nodes=4, gpus_per_node=GPUS_PER_NODE, image_pull_fail_pattern=PULL_FAIL) as c:
        yield c


@pytest.fixture
def ns(namespace: str) -> str:
    return namespace


def run_id() -> str:
    return f"r-{uuid.uuid4().hex[:6]}"


class Writes:
    """Every create/update/delete the store commits in a namespace, seen by subscription."""

    def __init__(self, cluster: Cluster, ns: str) -> None:
        self.ns = ns
        self.seen: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()
        cluster.store.subscribe(self._on)

    def _on(self, etype: str, resource: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata", {})
        if meta.get("namespace") == self.ns or (
            resource == "namespaces" and meta.get("name") == self.ns
        ):
            with self._lock:
                self.seen.append((etype, resource, meta.get("name", "")))


# ---- acceptance 1 ------------------------------------------------------------------------------


def test_two_runs_at_once_then_results_status_logs_cleanup(
    cluster: Cluster, ns: str, runs_dir: Path
) -> None:
    # A ConfigMap the user made beforehand must survive everything below.
    cluster.store.create(
        "configmaps", {"metadata": {"name": "users-own", "namespace": ns}, "data": {"k": "v"}}
    )
    a, b = run_id(), run_id()
    kubeconfig = ["--kubeconfig", str(cluster.kubeconfig)]
    outs = {}
    with contextlib.ExitStack() as running:  # both deploys at once, each its own process
        procs = {
            rid: running.enter_context(
                cli_process("deploy", "-n", ns, "--run-id", rid, *kubeconfig, *ACCEPTANCE)
            )
            for rid in (a, b)
        }
        for rid, proc in procs.items():
            stdout, stderr = proc.communicate(timeout=240)
            outs[rid] = (proc.returncode, stdout, stderr)
    for rid, (rc, stdout, stderr) in outs.items():
        assert rc == 0, stderr
        assert stdout.strip() == rid
        assert f"deployed run {rid} in namespace {ns}" in stderr
        # Not a terminal: no live line drawn (issue 13), but one plain line per change (issue 24)
        assert "\x1b[" not in stderr
        assert re.search(rf"^run {rid}: .*\b2 running of 2 pods \(\d+s\)", stderr, re.M), stderr
        # The end is the Job's Complete condition, which may arrive before the pods' watch
        # shows the last pod Succeeded (a clean run at stop 44: "1 running, 1 succeeded of 2
        # pods", then "run ... succeeded"): the last line says it, whatever line came before.
        assert stderr.rstrip().splitlines()[-1].startswith(f"run {rid} succeeded after "), stderr

    # results: both pods' logs collected concurrently, merged into one results file.
    res = cli(cluster, "results", "-n", ns, "--run", a)
    assert res.exit_code == 0, res.output
    path = runs_dir / a / "results.json"
    run = load(path)
    assert run.meta.run_id == a and run.meta.world_size == 4 and run.meta.backend == "gloo"
    ops = set(run.ops())
    assert ops == {
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "broadcast",
        "reduce",
        "alltoall",
        "sendrecv",
        "gather",
        "scatter",
        "hypercube",  # 4 ranks: a power of two, so --ops all runs it
    }
    assert all(r.wrong in (0, None) for r in run.rows)
    assert any(r.wrong == 0 for r in run.rows)
    logs = sorted(p.name for p in (runs_dir / a / "logs").iterdir())
    assert len(logs) == 2 and logs[0].startswith("rank-0-") and logs[1].startswith("rank-1-")
    # The nccl-tests table: a header per op and rows with #wrong 0.
    assert "#wrong" in res.output and "# all_reduce" in res.output
    assert re.search(r"^\s+1024\s+256\s+float\s+sum\s+-1\s.*\s0$", res.output, re.M)

    js = cli(cluster, "results", "-n", ns, "--run", b, "-o", "json")
    assert js.exit_code == 0, js.output
    doc = json.loads(js.output[: js.output.rindex("}") + 1])
    assert doc["meta"]["run_id"] == b and len(doc["rows"]) == len(run.rows)

    # status: the run and both pods, Succeeded, each on its own node.
    st = cli(cluster, "status", "-n", ns, "--run", a, "-o", "json")
    assert st.exit_code == 0, st.output
    status = json.loads(st.output)
    assert status["phase"] == "Succeeded"
    assert [p["rank"] for p in status["pods"]] == [0, 1]
    assert all(p["phase"] == "Succeeded" for p in status["pods"])
    assert len({p["node"] for p in status["pods"]}) == 2
    text = cli(cluster, "status", "-n", ns, "--run", a)
    assert f"run {a} in {ns}: Succeeded" in text.output
    assert re.search(r"^1\s+" + a + r"-1-\S+\s+node-\d\s+Succeeded\s+0\s+\d+s", text.output, re.M)

    # list: both runs; the default run is the latest.
    listed = cli(cluster, "list", "-n", ns, "-o", "json")
    assert {r["run_id"] for r in json.loads(listed.output)} == {a, b}

    # logs: every line prefixed by its rank; --rank and --tail narrow it.
    lg = cli(cluster, "logs", "-n", ns, "--run", a)
    assert lg.exit_code == 0, lg.output
    lines = lg.output.splitlines()
    assert lines and all(re.match(r"\[rank [01]\] ", line) for line in lines)
    assert any(line.startswith("[rank 0] NCCL_K8S_RESULT ") for line in lines)
    assert any(line.startswith("[rank 1] ") for line in lines)
    followed = cli(cluster, "logs", "-n", ns, "--run", a, "-f", "--rank", "0")
    assert followed.exit_code == 0, followed.output  # the container has ended: so does -f
    assert [x for x in lines if x.startswith("[rank 0] ")] == followed.output.splitlines()
    one = cli(cluster, "logs", "-n", ns, "--run", a, "--rank", "1", "--tail", "2")
    assert one.exit_code == 0 and len(one.output.splitlines()) == 2
    assert all(line.startswith("[rank 1] ") for line in one.output.splitlines())

    # cleanup: one run at a time, nothing labelled left, the user's ConfigMap untouched.
    before = cluster.store.get("configmaps", ns, "users-own")
    c1 = cli(cluster, "cleanup", "-n", ns, "--run", a)
    assert c1.exit_code == 0, c1.output
    assert labelled(cluster, ns, f"app.kubernetes.io/instance={a}") == []
    assert labelled(cluster, ns, f"app.kubernetes.io/instance={b}") != []
    c2 = cli(cluster, "cleanup", "-n", ns, "--all")
    assert c2.exit_code == 0, c2.output
    assert labelled(cluster, ns) == []
    after = cluster.store.get("configmaps", ns, "users-own")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["data"] == {"k": "v"}
    gone = cli(cluster, "status", "-n", ns)
    assert gone.exit_code == 1 and f"no nccl-k8s runs in namespace {ns}" in gone.output


def test_statefulset_mode_waits_until_every_rank_runs_then_cleans_up(
    cluster: Cluster, ns: str
) -> None:
    rid = run_id()
    res = cli(
        cluster,
        "deploy",
        "-n",
        ns,
        "--run-id",
        rid,
        "--workload",
        "statefulset",
        "--interval",
        "1h",
        "--world-size",
        "2",
        "--gpus-per-node",
        "1",
        "--",
        "--backend",
        "gloo",
        "-b",
        "1K",
        "-e",
        "1K",
    )
    assert res.exit_code == 0, res.output
    assert f"run {rid} is running after" in res.output
    st = json.loads(cli(cluster, "status", "-n", ns, "-o", "json").output)
    assert st["workload"] == "StatefulSet" and st["phase"] == "Running"
    assert [p["rank"] for p in st["pods"]] == [0, 1]
    done = cli(cluster, "cleanup", "-n", ns, "--run", rid)
    assert done.exit_code == 0, done.output
    assert labelled(cluster, ns) == []


# ---- acceptance 2: failures are named ------------------------------------------------------------


def marked_zipapp(tmp_path: Path) -> bytes:
    """The engine zipapp with one line added to its entry point, printing where it runs from:
    proof that the pods run the ConfigMap's engine, not the package installed in the venv."""
    # One write: the pod's local ranks share its log, and print's pieces (a write each, with
    # unbuffered output) interleaved there once, the path printed apart from its marker.
    marker = 'import os; os.write(1, f"engine-from {__file__}\\n".encode())  # test marker\n'
    return engine_zipapp_with(tmp_path, marker)


def test_pod_killed_mid_run_fails_the_run_naming_rank_pod_node(
    cluster: Cluster, ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nccl_k8s.k8s.rendering._manifests as manifests

    marked = marked_zipapp(tmp_path)
    monkeypatch.setattr(manifests, "engine_zipapp", lambda: marked)
    rid = run_id()
    killed: dict[str, Any] = {}

    def log_of(rank: int) -> str:
        for pod in cluster.store.list(
            "pods", ns, label_selector=f"app.kubernetes.io/instance={rid}"
        )[0]:
            if pod["metadata"]["annotations"].get(
                "batch.kubernetes.io/job-completion-index"
            ) == str(rank):
                path = cluster.kubelet.log_path(ns, pod["metadata"]["name"], "bench")
                if path is None:
                    return ""  # not started yet (the copy read may predate its scheduling)
                killed[f"pod{rank}"] = pod  # the latest copy: scheduled, with its node
                return path.read_text()
        return ""

    def killer() -> None:
        # Mid-run: both ranks run the engine and rank 0 has started measuring (its table header).
        with contextlib.suppress(BaseException):
            # The log as it was when it showed the engine starting (kept for the assertion below).
            def started() -> str:
                text = log_of(1)  # the marker's whole line, not a read mid-write
                return text if re.search(r"engine-from \S+\n", text) else ""

            killed["log1"] = wait_for("rank 1 engine started", started, 120)
            wait_for("rank 0 measuring", lambda: "# Using devices" in log_of(0), 120)
            pod = killed["pod1"]
            cluster.faults.kill_pod(ns, pod["metadata"]["name"])
            killed["done"] = True

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    res = cli(
        cluster,
        "deploy",
        "-n",
        ns,
        "--run-id",
        rid,
        "--world-size",
        "4",
        "--gpus-per-node",
        "2",
        "--timeout",
        "240s",  # a guard: the kill, not this, ends the run
        "--",
        "--backend",
        "gloo",
        "-b",
        "1K",
        "-e",
        "1K",
        "--duration",
        "60",
    )
    thread.join(120)
    assert "done" in killed, res.output
    assert res.exit_code == 1, res.output
    pod = killed["pod1"]
    node = pod["spec"]["nodeName"]
    assert (
        f"rank 1 (pod {pod['metadata']['name']}, node {node}): exit code 137 (SIGKILL)"
        in res.output
    )
    # The rank's last log lines follow, and show the engine came from the ConfigMap's zipapp.
    assert "last 20 log lines of rank 1:" in res.output
    assert "engine-from /opt/nccl-k8s/nccl_k8s.pyz/nccl_k8s/bench/__main__.py" in killed["log1"]
    # The failed run is ended: what the deploy made is deleted and its pods are gone.
    assert (
        f"(deleted what this deploy created: Job/{rid}, Service/{rid}, NetworkPolicy/{rid}, "
        f"ConfigMap/{rid}-engine; "
        "its pods are gone." in res.output
    )
    assert labelled(cluster, ns) == []


def test_gpus_asked_for_and_none_seen_fail_at_start_naming_pod_node_and_causes(
    cluster: Cluster, ns: str
) -> None:
    # Issue 39: the test cluster has no GPUs; with no engine flags `--backend auto` used to
    # measure the CPU and exit 0. Each rank now fails at start, and the culprit line is its own.
    rid = run_id()
    shape = ["--world-size", "2", "--gpus-per-node", "1", "--timeout", "120s"]
    res = cli(cluster, "deploy", "-n", ns, "--run-id", rid, *shape, "--", "-b", "1K", "-e", "1K")
    assert res.exit_code == 1, res.output
    text = " ".join(res.output.split())
    m = re.search(
        rf"run {rid} failed: rank (\d) \(pod ({rid}-\d-\w+), node (node-\d); global rank \d\): "
        r"its pod asked for 1 GPU \(--gpus-per-node\) but the CUDA driver sees none \(",
        text,
    )
    assert m is not None, res.output
    for cause in (
        "runtimeClass",
        "device plugin",
        "CUDA_VISIBLE_DEVICES=",
        "NVIDIA_VISIBLE_DEVICES=",
    ):
        assert cause in text.split("failed:", 1)[1].split("\n")[0], cause
    assert "rendezvous" not in text and "no progress" not in text  # at start, before any wait
    assert labelled(cluster, ns) == []
    # The CPU on purpose runs as before.
    gloo = run_id()
    ok = cli(cluster, "deploy", "-n", ns, "--run-id", gloo, *shape,
             "--", "--backend", "gloo", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0")  # fmt: skip
    assert ok.exit_code == 0, ok.output
    # What ran is said above the tables and in the JSON: backend, devices, fabric.
    shown = cli(cluster, "results", "-n", ns, "--run", gloo)
    assert shown.exit_code == 0, shown.output
    assert re.match(r"# backend gloo, 2 CPU processes \(.+\), fabric TCP \(gloo, no NCCL\)\n",
                    shown.stdout), shown.stdout  # fmt: skip
    got = cli(cluster, "results", "-n", ns, "--run", gloo, "-o", "json")
    meta = json.loads(got.stdout)["meta"]
    assert meta["backend"] == "gloo" and len(meta["devices"]) == 2
    assert all(d["name"] and d["node"] for d in meta["devices"]) and "fabric" in meta


def test_results_of_a_running_job_say_so_mark_partial_and_exit_1_unless_snapshot(
    cluster: Cluster, ns: str, runs_dir: Path
) -> None:
    # Issue 39 item 5: `results` mid-run wrote 0 rows, not marked partial, exit 0.
    rid = run_id()
    res = cli(cluster, "deploy", "-n", ns, "--run-id", rid, "--world-size", "2", "--gpus-per-node",
              "1", "--no-wait", "--", "--backend", "gloo", "-b", "1K", "-e", "1K",
              "--duration", "600")  # fmt: skip
    assert res.exit_code == 0, res.output

    def rank0_measuring() -> bool:
        for pod in cluster.store.list(
            "pods", ns, label_selector=f"app.kubernetes.io/instance={rid}"
        )[0]:
            if (
                pod["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index")
                == "0"
            ):
                path = cluster.kubelet.log_path(ns, pod["metadata"]["name"], "bench")
                return path is not None and '"kind":"meta"' in path.read_text()
        return False

    wait_for("rank 0's meta line", rank0_measuring, 120)
    got = cli(cluster, "results", "-n", ns, "--run", rid)
    assert got.exit_code == 1, got.output
    text = " ".join(got.output.split())
    assert re.search(
        rf"error: run {rid} is still Running: the \d+ rows written to \S+results.json are a "
        rf"partial snapshot \(marked partial\); wait for it \(`nccl-k8s wait --run {rid}`\) or "
        r"pass --snapshot",
        text,
    ), got.output
    assert f"# PARTIAL: run {rid} is still Running: " in got.stdout
    saved = load(runs_dir / rid / "results.json")
    assert saved.meta.partial and f"run {rid} is still Running" in (saved.meta.failure or "")
    snap = cli(cluster, "results", "-n", ns, "--run", rid, "--snapshot", "-o", "json")
    assert snap.exit_code == 0, snap.output
    assert json.loads(snap.stdout)["meta"]["partial"] is True
    assert cli(cluster, "cleanup", "-n", ns, "--run", rid).exit_code == 0


def test_a_worker_sigkilled_under_torchrun_is_named_killed_not_exit_code_1(
    cluster: Cluster, ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 39 item 4: torchrun's agent exits 1 whatever ended its worker; the culprit line
    # carries the worker's own cause from torchrun's root cause.
    import nccl_k8s.k8s.rendering._manifests as manifests

    kill = (
        'import os, signal\nif os.environ.get("RANK") == "1":  # test: SIGKILL global rank 1\n'
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    zipapp = engine_zipapp_with(tmp_path, kill)
    monkeypatch.setattr(manifests, "engine_zipapp", lambda: zipapp)
    rid = run_id()
    res = cli(cluster, "deploy", "-n", ns, "--run-id", rid, "--world-size", "2", "--gpus-per-node",
              "1", "--timeout", "240s", "--", "--backend", "gloo", "-b", "1K", "-e", "1K")  # fmt: skip
    assert res.exit_code == 1, res.output
    text = " ".join(res.output.split())
    assert re.search(
        rf"run {rid} failed: rank 1 \(pod {rid}-1-\w+, node node-\d; global rank 1\): its worker "
        r"\(global rank 1, local rank 0, pid \d+\) was killed by SIGKILL \(the OOM killer or a "
        r"user; torchrun's root cause\); its container: exit code 1",
        text,
    ), res.output
    wait_for("nothing of the run left", lambda: labelled(cluster, ns) == [], 60)


def test_z2_deploy_is_collected_and_its_results_say_blocking_2(
    cluster: Cluster, ns: str, runs_dir: Path
) -> None:
    # Issue 34: the engine's meta line says -z as its mode 0-3; results read it as such.
    rid = run_id()
    engine = ["--backend", "gloo", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0", "-z", "2"]
    res = cli(cluster, "deploy", "-n", ns, "--run-id", rid, "--world-size", "2",
              "--gpus-per-node", "2", "--", *engine)  # fmt: skip
    assert res.exit_code == 0, res.output
    got = cli(cluster, "results", "-n", ns, "--run", rid, "-o", "json")
    assert got.exit_code == 0, got.output
    doc = json.loads(got.output[: got.output.rindex("}") + 1])
    assert doc["meta"]["config"]["blocking"] == 2
    assert load(runs_dir / rid / "results.json").meta.config.blocking == 2


def test_more_gpus_than_any_node_waits_the_schedule_timeout_then_leaves_nothing(
    cluster: Cluster, ns: str
) -> None:
    # Issue 11, acceptance 2: Unschedulable is waiting (an autoscaler may add a node) until
    # --schedule-timeout; then the scheduler's message, and nothing of the run is left.
    rid = run_id()
    start = time.monotonic()
    res = cli(
        cluster,
        "deploy",
        "-n",
        ns,
        "--run-id",
        rid,
        "--schedule-timeout",
        "5s",
        "--world-size",
        "16",
        "--gpus-per-node",
        "8",
        "--",
        "--backend",
        "gloo",
    )
    took = time.monotonic() - start
    assert res.exit_code == 1, res.output
    assert took >= 5, took  # it waited the whole --schedule-timeout (the message says so)
    error = res.output[res.output.index("error:") :]
    assert f"run {rid} cannot be scheduled: rank 0 (pod {rid}-0-" in error
    assert f"rank 1 (pod {rid}-1-" in error
    assert "Unschedulable for 5s (--schedule-timeout)" in error
    # The scheduler's FailedScheduling message, word for word.
    events = [
        e for e in cluster.store.list("events", ns)[0] if e.get("reason") == "FailedScheduling"
    ]
    assert events and events[0]["message"] in error
    assert "Insufficient nvidia.com/gpu" in error
    assert (
        f"(deleted what this deploy created: Job/{rid}, Service/{rid}, NetworkPolicy/{rid}, "
        f"ConfigMap/{rid}-engine; "
        "its pods are gone." in error
    )
    assert labelled(cluster, ns) == []  # no Job, pod, Service or ConfigMap of the run


def test_absent_scheduler_is_named_and_keep_on_failure_stops_the_ranks_keeps_the_objects(
    cluster: Cluster, ns: str
) -> None:
    rid = run_id()
    start = time.monotonic()
    res = cli(
        cluster,
        "deploy",
        "-n",
        ns,
        "--run-id",
        rid,
        "--scheduler",
        "hami-scheduler",
        "--schedule-timeout",
        "3s",
        "--keep-on-failure",
        "--world-size",
        "4",
        "--gpus-per-node",
        "2",
        "--",
        "--backend",
        "gloo",
    )
    took = time.monotonic() - start
    assert res.exit_code == 1, res.output
    assert took >= 3, took  # it waited the whole --schedule-timeout before naming the cause
    assert "no scheduler has picked up its 2 pod(s)" in res.output
    assert "schedulerName hami-scheduler" in res.output
    assert f"(stopped its ranks: Job {rid} is failed and deletes its pods;" in res.output
    # Kept: the Job (failed, its pods gone), Service and ConfigMap; status says why.
    wait_for("the stopped Job's pods gone", lambda: labelled(cluster, ns, f"job-name={rid}") == [])
    assert sorted(labelled(cluster, ns)) == [
        f"configmaps/{rid}-engine",
        f"jobs/{rid}",
        f"services/{rid}",
    ]
    st = cli(cluster, "status", "-n", ns, "--run", rid)
    assert f"run {rid} in {ns}: Failed (stopped by nccl-k8s: run {rid}: no scheduler" in st.output
    assert cli(cluster, "cleanup", "-n", ns, "--run", rid).exit_code == 0
    assert labelled(cluster, ns) == []


def test_an_image_that_cannot_be_pulled_is_named_and_create_namespace_works(
    cluster: Cluster,
) -> None:
    fresh = f"new-{uuid.uuid4().hex[:6]}"
    rid = run_id()
    res = cli(
        cluster,
        "deploy",
        "-n",
        fresh,
        "--create-namespace",
        "--run-id",
        rid,
        "--image",
        f"{PULL_FAIL}.example/pytorch:1",
        "--world-size",
        "2",
        "--gpus-per-node",
        "1",
        "--pull-timeout",
        "3s",
    )
    assert res.exit_code == 1, res.output
    assert f"deployed run {rid} in namespace {fresh} (namespace created)" in res.output
    assert re.search(
        rf"rank \d \(pod {rid}-\d-\w+, node node-\d\) could not pull its image for 3s "
        r"\(--pull-timeout\): (ErrImagePull|ImagePullBackOff): ",
        res.output,
    )
    # What the deploy created goes, the namespace it made included.
    assert f"Namespace/{fresh}; its pods are gone." in res.output
    assert labelled(cluster, fresh) == []
    wait_for(
        "the namespace gone",
        lambda: (
            not any(n["metadata"]["name"] == fresh for n in cluster.store.list("namespaces")[0])
        ),
    )


# ---- acceptance 3: invalid input creates nothing -------------------------------------------------


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--world-size", "6", "--gpus-per-node", "4"], "--world-size 6 --gpus-per-node 4"),
        (["--world-size", "4", "--namespace", "Bad_Name"], '--namespace "Bad_Name"'),
        (["--world-size", "4", "--env", "NOEQUALS"], '--env "NOEQUALS"'),
        (["--world-size", "4", "--", "-b", "1Q"], "engine arguments"),
        (["--world-size", "4", "--timeout", "soon"], '--timeout "soon"'),
    ],
)
def test_invalid_input_is_one_line_exit_2_and_sends_nothing(
    cluster: Cluster, ns: str, args: list[str], named: str
) -> None:
    assert cluster.apiserver is not None
    writes = Writes(cluster, ns)
    before = cluster.apiserver.requests
    res = cli(cluster, "deploy", "-n", ns, "--gpus-per-node", "2", *args)
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], lines
    assert cluster.apiserver.requests == before  # not one request, let alone a create
    assert writes.seen == []


def test_missing_namespace_and_taken_run_id_are_refused_before_any_write(
    cluster: Cluster, ns: str
) -> None:
    missing = f"nope-{uuid.uuid4().hex[:6]}"
    res = cli(cluster, "deploy", "-n", missing, "--world-size", "2", "--gpus-per-node", "1")
    assert res.exit_code == 2, res.output
    assert (
        f"namespace {missing} does not exist" in res.output and "--create-namespace" in res.output
    )
    with pytest.raises(Exception, match="not found"):
        cluster.store.get("namespaces", None, missing)

    # A run id in use: refused, and the existing run is not touched.
    rid = run_id()
    base = ["deploy", "-n", ns, "--run-id", rid, "--no-wait", "--scheduler", "nobody"]
    first = cli(cluster, *base, "--world-size", "2", "--gpus-per-node", "1")
    assert first.exit_code == 0, first.output
    job = cluster.store.get("jobs", ns, rid)
    writes = Writes(cluster, ns)
    again = cli(cluster, *base, "--world-size", "4", "--gpus-per-node", "2")
    assert again.exit_code == 1, again.output
    assert f"run {rid} already exists in namespace {ns}: use --run-id or cleanup" in again.output
    assert [w for w in writes.seen if w[1] != "events"] == []
    assert (
        cluster.store.get("jobs", ns, rid)["metadata"]["resourceVersion"]
        == job["metadata"]["resourceVersion"]
    )
    # The ConfigMap and Service are owned by the Job, so deleting it cascades.
    cm = cluster.store.get("configmaps", ns, f"{rid}-engine")
    assert [r["uid"] for r in cm["metadata"]["ownerReferences"]] == [job["metadata"]["uid"]]
    assert cli(cluster, "cleanup", "-n", ns, "--all").exit_code == 0
    assert labelled(cluster, ns) == []


# ---- the client's error translation ----------------------------------------------------------------


def test_a_500_half_way_removes_what_the_deploy_created(cluster: Cluster, ns: str) -> None:
    # A create is not repeated (the server may have acted): the deploy fails and rolls back.
    cluster.faults.fail_requests(rf"/namespaces/{ns}/jobs$", 500, method="POST")
    rid = run_id()
    res = cli(
        cluster, "deploy", "-n", ns, "--run-id", rid, "--world-size", "2", "--gpus-per-node", "1"
    )
    assert res.exit_code == 1, res.output
    assert f"{cluster.url} answered 500 to create jobs '{rid}' in namespace {ns}" in res.output
    assert "injected fault" in res.output
    # The ConfigMap and Service it had applied are gone again.
    assert labelled(cluster, ns) == []


def test_403_409_and_a_dead_server_are_one_actionable_line(
    cluster: Cluster, ns: str, tmp_path: Path
) -> None:
    cluster.faults.fail_requests(rf"/namespaces/{ns}/configmaps$", 403, method="GET")
    res = cli(cluster, "list", "-n", ns)
    assert res.exit_code == 1, res.output
    assert (
        f"forbidden: user 'nccl-k8s-test-{cluster.number}' may not list configmaps in "
        f"namespace {ns} on {cluster.url}"
    ) in res.output
    assert len(res.output.strip().splitlines()) == 1
    cluster.faults.clear()

    # A 409 that is not AlreadyExists does not say "run already exists": no run does.
    cluster.faults.fail_requests(rf"/namespaces/{ns}/configmaps$", 409, method="POST")
    rid = run_id()
    res = cli(
        cluster, "deploy", "-n", ns, "--run-id", rid, "--world-size", "2", "--gpus-per-node", "1"
    )
    assert res.exit_code == 1, res.output
    assert "already exists" not in res.output
    assert (
        f"error: conflict on create configmaps '{rid}-engine' in namespace {ns}: injected fault"
        in res.output
    )
    assert labelled(cluster, ns) == []
    cluster.faults.clear()

    # Nobody listening: the server's URL is named.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = tmp_path / "kubeconfig"
    assert cluster.kubeconfig is not None
    dead.write_text(cluster.kubeconfig.read_text().replace(cluster.url, f"http://127.0.0.1:{port}"))
    res = CliRunner().invoke(app, ["status", "-n", ns, "--kubeconfig", str(dead)])
    assert res.exit_code == 2, res.output  # never answered: the kubeconfig points nowhere
    assert f"cannot reach the API server at http://127.0.0.1:{port} (" in res.output
    # An unknown context is a usage error naming the ones there are.
    res = cli(cluster, "status", "-n", ns, "--context", "nope")
    assert res.exit_code == 2, res.output
    assert (
        "Context 'nope' not found" in res.output and f"nccl-k8s-test-{cluster.number}" in res.output
    )
    # A kubeconfig that is not there is a usage error.
    res = CliRunner().invoke(app, ["status", "--kubeconfig", str(tmp_path / "none")])
    assert res.exit_code == 2 and "no such file" in res.output


def test_410_over_http_is_expired_and_a_namespace_we_may_not_read_is_no_obstacle(
    cluster: Cluster, ns: str
) -> None:
    import asyncio

    from nccl_k8s.errors import Expired
    from nccl_k8s.k8s import ClientSettings
    from nccl_k8s.k8s.api._client import KubeClient

    async def watch_from_compacted() -> None:
        async with KubeClient.connect(ClientSettings(kubeconfig=str(cluster.kubeconfig))) as kc:
            _, rv = await kc.list("ConfigMap", namespace=ns)
            cluster.store.create("configmaps", {"metadata": {"name": "x", "namespace": ns}})
            cluster.store.compact()
            async for _ in kc.watch("ConfigMap", namespace=ns, resource_version=rv):
                pass

    with pytest.raises(Expired, match="expired"):
        asyncio.run(watch_from_compacted())

    # Users often may not get namespaces: deploy then goes on and lets the apply speak.
    cluster.faults.fail_requests(rf"^/api/v1/namespaces/{ns}$", 403, method="GET")
    rid = run_id()
    res = cli(
        cluster,
        "deploy",
        "-n",
        ns,
        "--run-id",
        rid,
        "--no-wait",
        "--scheduler",
        "nobody",
        "--world-size",
        "2",
        "--gpus-per-node",
        "1",
    )
    assert cluster.faults.pending() == 0  # the namespace GET was refused
    assert res.exit_code == 0, res.output
    assert (
        cluster.store.get("jobs", ns, rid)["metadata"]["labels"]["app.kubernetes.io/instance"]
        == rid
    )
    assert cli(cluster, "cleanup", "-n", ns, "--all").exit_code == 0
