"""The test cluster's node side: scheduler, Job/StatefulSet controllers and the process kubelet.

Each test asserts what a user of a real cluster would look at: the pod's phase and conditions,
the FailedScheduling message word for word, a Job's condition and reason, what the pod's process
printed (its hostname, the address it resolved), and that nothing is left running or mounted.

One cluster serves the module (starting one costs a second on a busy 2-core machine); every test
works in its own namespace, and tests that change nodes (taints, NotReady) put them back.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cluster.cluster import Cluster
from tests.e2e_helpers import wait_for

pytestmark = pytest.mark.slow

KUBECTL = shutil.which("kubectl")
PULL_FAIL = "does-not-exist"
Obj = dict[str, Any]


# ---- helpers -----------------------------------------------------------------------------------


def pod_manifest(name: str, ns: str, script: str, **spec: Any) -> Obj:
    container = {"name": "main", "image": "python:3.11", "command": ["python", "-c", script]}
    container.update(spec.pop("container", {}))
    body: Obj = {"restartPolicy": "Never", "containers": [container]}
    body.update(spec)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": body,
    }


def phase(c: Cluster, ns: str, name: str) -> str:
    return str(c.store.get("pods", ns, name).get("status", {}).get("phase", ""))


def container_state(c: Cluster, ns: str, name: str) -> Obj:
    st = c.store.get("pods", ns, name).get("status", {})
    return dict((st.get("containerStatuses") or [{}])[0])


def events_for(c: Cluster, ns: str, name: str) -> list[Obj]:
    return [e for e in c.store.list("events", ns)[0] if e["involvedObject"]["name"] == name]


def log_text(c: Cluster, ns: str, pod: str, container: str = "main", **kw: Any) -> str:
    path = c.kubelet.log_path(ns, pod, container, **kw)
    return path.read_text() if path else ""


def processes_with(marker: str) -> list[int]:
    """PIDs whose command line contains marker (what `ps` would show)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry))
    return found


def in_namespace(inode: int) -> list[int]:
    """PIDs living in the mount namespace with this inode."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}/ns/mnt").st_ino == inode:
                    found.append(int(entry))
    return found


def kubectl(c: Cluster, *args: str, input_: str | None = None, timeout_s: float = 60) -> str:
    assert KUBECTL, "kubectl is not installed"
    proc = subprocess.run(
        [KUBECTL, *args],
        input=input_,
        capture_output=True,
        text=True,
        env=c.kubectl_env(),
        timeout=timeout_s,
    )
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(nodes=4, gpus_per_node=8, image_pull_fail_pattern=PULL_FAIL) as c:
        yield c


@pytest.fixture
def ns(namespace: str) -> str:
    return namespace


# ---- acceptance 1: Indexed Job + headless Service ------------------------------------------------

RANK_SCRIPT = """
import os, socket, sys, time
idx = int(os.environ["JOB_COMPLETION_INDEX"])
print("hostname", socket.gethostname(), flush=True)
if idx == 0:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((os.environ["POD_IP"], 29500))
    s.listen(1)
    s.settimeout(300)  # a guard: rank 1 comes when its pod starts, however late
    conn, peer = s.accept()
    conn.sendall(b"hello from rank 0")
    conn.close()
    print("served", peer[0], flush=True)
else:
    target = os.environ["JOB"] + "-0." + os.environ["SVC"]
    for _ in range(3000):
        try:
            addr = socket.gethostbyname(target)
            # Pods share the host's network stack: bind the source to our pod IP, or the
            # kernel picks 127.0.0.1.
            conn = socket.create_connection((addr, 29500), 5, (os.environ["POD_IP"], 0))
            break
        except OSError:
            time.sleep(0.1)
    else:
        sys.exit("could not reach " + target)
    print("resolved", target, addr, flush=True)
    print("got", conn.recv(100).decode(), flush=True)
"""


def test_indexed_job_pods_resolve_and_connect_through_headless_service(
    cluster: Cluster, ns: str
) -> None:
    job, svc = "ranks", "ranks-svc"
    manifests = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": svc, "namespace": ns},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": {"job-name": job},
                "ports": [{"name": "rdzv", "port": 29500}],
            },
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": job, "namespace": ns},
            "spec": {
                "completionMode": "Indexed",
                "completions": 2,
                "parallelism": 2,
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "subdomain": svc,
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "main",
                                "image": "python:3.11",
                                "command": ["python", "-c", RANK_SCRIPT],
                                "env": [
                                    {"name": "JOB", "value": job},
                                    {"name": "SVC", "value": svc},
                                    {
                                        "name": "POD_IP",
                                        "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                                    },
                                ],
                                "resources": {"limits": {"nvidia.com/gpu": "8"}},
                            }
                        ],
                    }
                },
            },
        },
    ]
    kubectl(
        cluster,
        "apply",
        "--validate=false",
        "-f",
        "-",
        input_=json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests}),
    )
    kubectl(cluster, "wait", "-n", ns, "--for=condition=complete", f"job/{job}", "--timeout=60s")

    pods = {
        p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: p
        for p in cluster.store.list("pods", ns)[0]
    }
    assert sorted(pods) == ["0", "1"]
    p0, p1 = pods["0"], pods["1"]
    assert p0["spec"]["hostname"] == f"{job}-0" and p0["spec"]["subdomain"] == svc
    assert p0["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "0"
    assert p0["metadata"]["ownerReferences"][0]["controller"] is True
    # One pod per node: each holds all 8 GPUs of its node.
    assert p0["spec"]["nodeName"] != p1["spec"]["nodeName"]
    out0 = kubectl(cluster, "logs", "-n", ns, p0["metadata"]["name"])
    out1 = kubectl(cluster, "logs", "-n", ns, p1["metadata"]["name"])
    assert f"hostname {job}-0" in out0
    assert f"hostname {job}-1" in out1
    assert f"resolved {job}-0.{svc} {p0['status']['podIP']}" in out1
    assert "got hello from rank 0" in out1
    assert f"served {p1['status']['podIP']}" in out0

    status = cluster.store.get("jobs", ns, job)["status"]
    assert status["succeeded"] == 2 and status.get("active", 0) == 0
    assert status["completedIndexes"] == "0-1"
    assert {c["type"] for c in status["conditions"]} >= {"Complete", "SuccessCriteriaMet"}
    assert status["completionTime"] and status["startTime"]


def test_cascade_delete_kills_the_pod_processes(cluster: Cluster, ns: str) -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    cluster.store.create(
        "jobs",
        {
            "metadata": {"name": "sleeper", "namespace": ns},
            "spec": {
                "parallelism": 2,
                "completions": 2,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": 5,
                        "containers": [
                            {
                                "name": "main",
                                "image": "python:3.11",
                                "command": ["python", "-c", "import time; time.sleep(300)", marker],
                            }
                        ],
                    }
                },
            },
        },
    )
    wait_for("2 running processes", lambda: len(processes_with(marker)) == 2)
    wait_for(
        "job active=2",
        lambda: cluster.store.get("jobs", ns, "sleeper")["status"].get("active") == 2,
    )
    kubectl(cluster, "delete", "-n", ns, "job/sleeper", "--wait=true", "--timeout=30s")
    wait_for("pods gone", lambda: not cluster.store.list("pods", ns)[0])
    wait_for("processes gone", lambda: not processes_with(marker))


# ---- acceptance 2: unschedulable and absent-scheduler pods ---------------------------------------


def _failed_scheduling(c: Cluster, ns: str, name: str) -> str:
    msgs = [e["message"] for e in events_for(c, ns, name) if e["reason"] == "FailedScheduling"]
    return msgs[-1] if msgs else ""


def test_unschedulable_pod_gets_kubernetes_worded_failed_scheduling(
    cluster: Cluster, ns: str
) -> None:
    gpus = {"container": {"resources": {"limits": {"nvidia.com/gpu": "9"}}}}
    cluster.store.create("pods", pod_manifest("too-big", ns, "pass", **gpus))
    want = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    assert wait_for("event", lambda: _failed_scheduling(cluster, ns, "too-big")) == want
    pod = cluster.store.get("pods", ns, "too-big")
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
    cond = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", want)
    event = next(e for e in events_for(cluster, ns, "too-big") if e["reason"] == "FailedScheduling")
    assert event["type"] == "Warning" and event["source"]["component"] == "default-scheduler"

    # Two reasons, counted and sorted as kube-scheduler's FitError does.
    for i in (0, 1):
        _label(cluster, f"node-{i}", "pool", "a")
    try:
        spec = {"nodeSelector": {"pool": "a"}, **gpus}
        cluster.store.create("pods", pod_manifest("mixed", ns, "pass", **spec))
        assert wait_for("event", lambda: _failed_scheduling(cluster, ns, "mixed")) == (
            "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, "
            "2 node(s) didn't match Pod's node affinity/selector."
        )
        # Required node affinity NotIn + Gt, and `kubectl get events` shows the same words.
        affinity = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "pool", "operator": "NotIn", "values": ["a"]},
                                {"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["8"]},
                            ]
                        }
                    ]
                }
            }
        }
        cluster.store.create("pods", pod_manifest("affinity", ns, "pass", affinity=affinity))
        want = "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."
        assert wait_for("event", lambda: _failed_scheduling(cluster, ns, "affinity")) == want
        out = kubectl(
            cluster,
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            "involvedObject.name=affinity",
            "-o",
            "json",
        )
        assert want in {e["message"] for e in json.loads(out)["items"]}
    finally:
        for i in (0, 1):
            _label(cluster, f"node-{i}", "pool", None)


def _label(c: Cluster, node: str, key: str, value: str | None) -> None:
    def edit(n: Obj) -> None:
        labels = n["metadata"].setdefault("labels", {})
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value

    c.store.mutate("nodes", None, node, edit)


def _taint(c: Cluster, node: str, taint: Obj | None) -> None:
    def edit(n: Obj) -> None:
        taints = [t for t in n["spec"].get("taints") or [] if t["key"] != "dedicated"]
        if taint:
            taints.append(taint)
        n["spec"]["taints"] = taints

    c.store.mutate("nodes", None, node, edit)


def test_taints_and_anti_affinity_are_worded_and_retried_when_nodes_change(
    cluster: Cluster, ns: str
) -> None:
    on_node3 = {"nodeSelector": {"kubernetes.io/hostname": "node-3"}}
    _taint(cluster, "node-3", {"key": "dedicated", "value": "x", "effect": "NoSchedule"})
    try:
        cluster.store.create("pods", pod_manifest("tainted", ns, "pass", **on_node3))
        assert wait_for("event", lambda: _failed_scheduling(cluster, ns, "tainted")) == (
            "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: x}, "
            "3 node(s) didn't match Pod's node affinity/selector."
        )
        tolerating = {"tolerations": [{"key": "dedicated", "operator": "Exists"}], **on_node3}
        script = "import time; time.sleep(3600)"
        spec = {**tolerating, "container": {"name": "main"}}
        pod = pod_manifest("holder", ns, script, **spec)
        pod["metadata"]["labels"] = {"app": "exclusive"}
        cluster.store.create("pods", pod)
        wait_for("holder running", lambda: phase(cluster, ns, "holder") == "Running")
        anti = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": "exclusive"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }
        pod = pod_manifest("second", ns, "pass", affinity=anti, **tolerating)
        cluster.store.create("pods", pod)
        assert wait_for("event", lambda: _failed_scheduling(cluster, ns, "second")) == (
            "0/4 nodes are available: 1 node(s) didn't match pod anti-affinity rules, "
            "3 node(s) didn't match Pod's node affinity/selector."
        )
    finally:
        _taint(cluster, "node-3", None)
    # Event-driven retry: removing the taint lets "tainted" schedule without any new pod event.
    wait_for("tainted scheduled", lambda: phase(cluster, ns, "tainted") == "Succeeded")
    cluster.store.delete("pods", ns, "holder", grace_period_s=0)
    wait_for(
        "second scheduled after holder left", lambda: phase(cluster, ns, "second") == "Succeeded"
    )


def test_pod_for_an_absent_scheduler_stays_pending_silently(cluster: Cluster, ns: str) -> None:
    cluster.store.create("pods", pod_manifest("hami", ns, "pass", schedulerName="hami-scheduler"))
    cluster.store.create("pods", pod_manifest("ours", ns, "pass"))
    # The scheduler sees the store's changes in order, so by the time it bound "ours" it had
    # seen "hami" (created first) and left it alone: nothing later would look at it again.
    wait_for("our pod ran", lambda: phase(cluster, ns, "ours") == "Succeeded")
    pod = cluster.store.get("pods", ns, "hami")
    assert pod["status"]["phase"] == "Pending"
    assert not pod["spec"].get("nodeName")
    assert not pod["status"].get("conditions")
    assert events_for(cluster, ns, "hami") == []


# ---- acceptance 3: each fault knob -------------------------------------------------------------


def test_kill_pod_fails_a_never_pod_and_restarts_an_always_pod(cluster: Cluster, ns: str) -> None:
    script = "import time; print('up', flush=True); time.sleep(3600)"
    cluster.store.create("pods", pod_manifest("never", ns, script))
    cluster.store.create("pods", pod_manifest("always", ns, script, restartPolicy="Always"))
    for name in ("never", "always"):
        wait_for(f"{name} running", lambda n=name: phase(cluster, ns, n) == "Running")  # type: ignore[misc]
        wait_for(f"{name} printed", lambda n=name: "up" in log_text(cluster, ns, n))  # type: ignore[misc]
    cluster.faults.kill_pod(ns, "never")
    wait_for("never failed", lambda: phase(cluster, ns, "never") == "Failed")
    term = container_state(cluster, ns, "never")["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (137, "Error")

    cluster.faults.kill_pod(ns, "always")
    status = wait_for(
        "always restarted",
        lambda: (
            (s := container_state(cluster, ns, "always"))["restartCount"] == 1
            and "running" in s["state"]
            and s
        ),
    )
    assert status["lastState"]["terminated"]["exitCode"] == 137
    assert phase(cluster, ns, "always") == "Running"
    assert "up" in log_text(cluster, ns, "always", previous=True)
    wait_for("new run printed", lambda: "up" in log_text(cluster, ns, "always"))
    out = kubectl(cluster, "logs", "-n", ns, "always", "--previous")
    assert "up" in out
    started = [e for e in events_for(cluster, ns, "always") if e["reason"] == "Started"]
    assert [(e["message"], e["count"]) for e in started] == [("Started container main", 2)]


def test_node_not_ready_fails_its_pods_and_taints_the_node(cluster: Cluster, ns: str) -> None:
    on_node2 = {"nodeSelector": {"kubernetes.io/hostname": "node-2"}}
    marker = f"marker-{uuid.uuid4().hex}"
    script = "import time; time.sleep(3600)"
    pod = pod_manifest("victim", ns, script, **on_node2)
    pod["spec"]["containers"][0]["command"].append(marker)
    cluster.store.create("pods", pod)
    wait_for("victim running", lambda: phase(cluster, ns, "victim") == "Running")
    cluster.faults.set_node_ready("node-2", False)
    try:
        pod = wait_for(
            "victim failed",
            lambda: (
                (p := cluster.store.get("pods", ns, "victim"))["status"]["phase"] == "Failed" and p
            ),
        )
        assert pod["status"]["reason"] == "NodeLost"
        dt = next(c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget")
        assert dt["status"] == "True"
        assert not processes_with(marker)
        node = cluster.store.get("nodes", None, "node-2")
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "False"
        assert "NotReady" in kubectl(cluster, "get", "node", "node-2")
        cluster.store.create("pods", pod_manifest("later", ns, "pass", **on_node2))
        assert wait_for("event", lambda: _failed_scheduling(cluster, ns, "later")) == (
            "0/4 nodes are available: 1 node(s) had untolerated taint "
            "{node.kubernetes.io/not-ready: }, 3 node(s) didn't match Pod's node affinity/selector."
        )
    finally:
        cluster.faults.set_node_ready("node-2", True)
    wait_for("later ran once the node healed", lambda: phase(cluster, ns, "later") == "Succeeded")


def test_scheduling_delay_holds_pods_pending(cluster: Cluster, ns: str) -> None:
    # An hour's delay: the pod is certainly unbound while kubectl looks, however slow kubectl is.
    cluster.faults.delay_scheduling(3600)
    try:
        t0 = time.monotonic()
        cluster.store.create("pods", pod_manifest("slow", ns, "pass"))
        out = kubectl(cluster, "get", "pod", "-n", ns, "slow", "-o", "jsonpath={.spec.nodeName}")
        assert out == "", "still unbound while the scheduler is delayed"
        # A new delay counts from when the pod entered the queue: bound 3 s after its creation
        # (at once if that is already past), never before.
        cluster.faults.delay_scheduling(3.0)
        wait_for("bound", lambda: cluster.store.get("pods", ns, "slow")["spec"].get("nodeName"))
        assert time.monotonic() - t0 >= 3.0
    finally:
        cluster.faults.delay_scheduling(0)


def test_image_pull_failure_never_runs(cluster: Cluster, ns: str) -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    pod = pod_manifest(
        "pull",
        ns,
        "import time; time.sleep(60)",
        container={"image": f"registry.invalid/{PULL_FAIL}:1"},
    )
    pod["spec"]["containers"][0]["command"].append(marker)
    cluster.store.create("pods", pod)
    wait_for(
        "ErrImagePull",
        lambda: (
            container_state(cluster, ns, "pull")["state"]["waiting"]["reason"] == "ErrImagePull"
        ),
    )
    wait_for(
        "ImagePullBackOff",
        lambda: (
            container_state(cluster, ns, "pull")["state"]["waiting"]["reason"] == "ImagePullBackOff"
        ),
    )
    assert phase(cluster, ns, "pull") == "Pending"
    assert not processes_with(marker)
    reasons = {(e["reason"], e["type"]) for e in events_for(cluster, ns, "pull")}
    assert ("Failed", "Warning") in reasons and ("BackOff", "Normal") in reasons
    out = kubectl(cluster, "get", "pod", "-n", ns, "pull", "-o", "wide")
    assert "ImagePullBackOff" in out or "ErrImagePull" in out


# ---- what a pod sees --------------------------------------------------------------------------

ENV_SCRIPT = """
import os, pathlib
for k in ("POD", "NS", "NODE", "POD_IP", "HOST_IP", "TEAM", "NOTE", "CM_VAL", "SECRET_VAL",
          "FROM_CM", "NVIDIA_VISIBLE_DEVICES", "EXPANDED"):
    print(k, "=", os.environ.get(k), flush=True)
print("cfg", sorted(os.listdir("/etc/app")), pathlib.Path("/etc/app/renamed.txt").read_text())
print("bin", pathlib.Path("/etc/app/blob").read_bytes().hex())
print("secret", pathlib.Path("/secret/token").read_text())
st = os.statvfs("/dev/shm")
print("shm bytes", st.f_blocks * st.f_frsize)
pathlib.Path("/scratch/hello").write_text("x")
pathlib.Path("/host/dir-file").write_text("h")
pathlib.Path("/claim/data").write_text("c")
print("python", os.path.realpath(os.popen("command -v python").read().strip()))
"""


def test_env_volumes_and_gpus_as_a_pod_sees_them(cluster: Cluster, ns: str) -> None:
    import base64

    cluster.store.create(
        "configmaps",
        {
            "metadata": {"name": "app", "namespace": ns},
            "data": {"greeting.txt": "hi there", "value": "from-cm", "FROM_CM": "envfrom"},
            "binaryData": {"blob": base64.b64encode(b"\x00\x01\xff").decode()},
        },
    )
    cluster.store.create(
        "secrets",
        {
            "metadata": {"name": "s", "namespace": ns},
            "data": {"token": base64.b64encode(b"s3cret").decode()},
        },
    )
    cluster.store.create(
        "persistentvolumeclaims",
        {
            "metadata": {"name": "results", "namespace": ns},
            "spec": {"accessModes": ["ReadWriteOnce"]},
        },
    )
    mount_root = f"/nccl-k8s-test-{uuid.uuid4().hex[:8]}"
    volumes = [
        {
            "name": "cfg",
            "configMap": {
                "name": "app",
                "items": [
                    {"key": "greeting.txt", "path": "renamed.txt"},
                    {"key": "blob", "path": "blob"},
                ],
            },
        },
        {"name": "sec", "secret": {"secretName": "s"}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
        {"name": "scratch", "emptyDir": {}},
        {"name": "host", "hostPath": {"path": "/var/lib/thing", "type": "DirectoryOrCreate"}},
        {"name": "claim", "persistentVolumeClaim": {"claimName": "results"}},
    ]
    mounts = [
        {"name": "cfg", "mountPath": "/etc/app"},
        {"name": "sec", "mountPath": "/secret", "readOnly": True},
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "host", "mountPath": "/host"},
        {"name": "claim", "mountPath": f"{mount_root}/claim"},
    ]
    env = [
        {"name": n, "valueFrom": {"fieldRef": {"fieldPath": p}}}
        for n, p in [
            ("POD", "metadata.name"),
            ("NS", "metadata.namespace"),
            ("NODE", "spec.nodeName"),
            ("POD_IP", "status.podIP"),
            ("HOST_IP", "status.hostIP"),
            ("TEAM", "metadata.labels['team']"),
            ("NOTE", "metadata.annotations['note']"),
        ]
    ]
    env += [
        {"name": "CM_VAL", "valueFrom": {"configMapKeyRef": {"name": "app", "key": "value"}}},
        {"name": "SECRET_VAL", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}},
        {"name": "EXPANDED", "value": "$(POD)@$(NODE)"},
    ]
    script = ENV_SCRIPT.replace("/claim/", f"{mount_root}/claim/")
    pod = pod_manifest(
        "env",
        ns,
        script,
        volumes=volumes,
        container={
            "env": env,
            "envFrom": [{"configMapRef": {"name": "app"}}],
            "volumeMounts": mounts,
            "resources": {"limits": {"nvidia.com/gpu": "2"}},
        },
    )
    pod["metadata"]["labels"] = {"team": "hpc"}
    pod["metadata"]["annotations"] = {"note": "n1"}
    cluster.store.create("pods", pod)
    wait_for("env pod done", lambda: phase(cluster, ns, "env") in ("Succeeded", "Failed"))
    out = log_text(cluster, ns, "env")
    assert phase(cluster, ns, "env") == "Succeeded", out
    got = cluster.store.get("pods", ns, "env")
    node, ip, host_ip = got["spec"]["nodeName"], got["status"]["podIP"], got["status"]["hostIP"]
    assert f"POD = env\nNS = {ns}\nNODE = {node}\nPOD_IP = {ip}\nHOST_IP = {host_ip}\n" in out
    assert (
        "TEAM = hpc\nNOTE = n1\nCM_VAL = from-cm\nSECRET_VAL = s3cret\nFROM_CM = envfrom\n" in out
    )
    assert "NVIDIA_VISIBLE_DEVICES = 0,1\n" in out
    assert f"EXPANDED = env@{node}\n" in out
    assert "cfg ['blob', 'renamed.txt'] hi there" in out
    assert "bin 0001ff" in out and "secret s3cret" in out
    assert f"shm bytes {64 * 2**20}" in out  # emptyDir medium Memory: a tmpfs of sizeLimit
    # The image is not pulled: `python` is this test environment's interpreter.
    assert f"python {os.path.realpath(Path(sys.executable).parent / 'python')}" in out
    # Node and pod addresses: 127.<k>.<i//250>.<i%250+1> and 127.<k>.<16+i>.x.
    i = int(node.split("-")[1])
    assert host_ip == cluster.node_address(i)
    assert ip.startswith(f"127.{cluster.number}.{16 + i}.")
    # The mount point the kubelet had to create on the host is gone with the pod's sandbox.
    wait_for("mount point removed", lambda: not Path(mount_root).exists())


# ---- Job failure handling -------------------------------------------------------------------------


def _job(name: str, ns: str, script: str, **spec: Any) -> Obj:
    template = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "main", "image": "python:3.11", "command": ["python", "-c", script]}
            ],
        }
    }
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"template": template, **spec}}


def _job_condition(c: Cluster, ns: str, name: str, type_: str) -> Obj | None:
    for cond in c.store.get("jobs", ns, name).get("status", {}).get("conditions") or []:
        if cond["type"] == type_ and cond["status"] == "True":
            return dict(cond)
    return None


def test_job_failure_reasons(cluster: Cluster, ns: str) -> None:
    cluster.store.create("jobs", _job("backoff", ns, "raise SystemExit(3)", backoffLimit=1))
    policy = {
        "rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
        ]
    }
    cluster.store.create(
        "jobs", _job("policy", ns, "raise SystemExit(42)", backoffLimit=5, podFailurePolicy=policy)
    )
    cluster.store.create(
        "jobs", _job("deadline", ns, "import time; time.sleep(60)", activeDeadlineSeconds=1)
    )
    cluster.store.create("jobs", _job("ttl", ns, "pass", ttlSecondsAfterFinished=0))

    cond = wait_for("backoff failed", lambda: _job_condition(cluster, ns, "backoff", "Failed"))
    assert cond["reason"] == "BackoffLimitExceeded"
    assert cond["message"] == "Job has reached the specified backoff limit"
    assert cluster.store.get("jobs", ns, "backoff")["status"]["failed"] == 2

    cond = wait_for("policy failed", lambda: _job_condition(cluster, ns, "policy", "Failed"))
    assert cond["reason"] == "PodFailurePolicy"
    assert "failed with exit code 42 matching FailJob rule at index 1" in cond["message"]
    assert _job_condition(cluster, ns, "policy", "FailureTarget")

    cond = wait_for("deadline", lambda: _job_condition(cluster, ns, "deadline", "Failed"))
    assert cond["reason"] == "DeadlineExceeded"
    wait_for(
        "deadline job's pod gone",
        lambda: (
            not [
                p
                for p in cluster.store.list("pods", ns)[0]
                if p["metadata"]["labels"].get("job-name") == "deadline"
            ]
        ),
    )

    wait_for(
        "ttl job deleted",
        lambda: (
            not [j for j in cluster.store.list("jobs", ns)[0] if j["metadata"]["name"] == "ttl"]
        ),
    )


def test_suspended_job_creates_no_pods_until_resumed(cluster: Cluster, ns: str) -> None:
    cluster.store.create("jobs", _job("later", ns, "pass", suspend=True))
    wait_for("suspended", lambda: _job_condition(cluster, ns, "later", "Suspended"))
    assert not cluster.store.list("pods", ns)[0]

    def resume(j: Obj) -> None:
        j["spec"]["suspend"] = False

    cluster.store.mutate("jobs", ns, "later", resume)
    wait_for("complete", lambda: _job_condition(cluster, ns, "later", "Complete"))


# ---- StatefulSet ---------------------------------------------------------------------------------


def test_statefulset_ordered_pods_scaling_and_in_place_restart(cluster: Cluster, ns: str) -> None:
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "serviceName": "web-svc",
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "python:3.11",
                            "command": [
                                "python",
                                "-c",
                                "import socket, time; "
                                "print(socket.gethostname(), flush=True); "
                                "time.sleep(300)",
                            ],
                        }
                    ]
                },
            },
        },
    }
    cluster.store.create("statefulsets", sts)

    def ready_replicas() -> int:
        return int(cluster.store.get("statefulsets", ns, "web")["status"].get("readyReplicas", 0))

    wait_for("2 ready", lambda: ready_replicas() == 2)
    p0 = cluster.store.get("pods", ns, "web-0")
    assert p0["spec"]["hostname"] == "web-0" and p0["spec"]["subdomain"] == "web-svc"
    wait_for("hostname printed", lambda: "web-1" in log_text(cluster, ns, "web-1"))

    cluster.faults.kill_pod(ns, "web-0", sig=signal.SIGKILL)
    wait_for(
        "web-0 restarted in place",
        lambda: container_state(cluster, ns, "web-0")["restartCount"] == 1,
    )
    assert cluster.store.get("pods", ns, "web-0")["metadata"]["uid"] == p0["metadata"]["uid"]

    def scale(obj: Obj) -> None:
        obj["spec"]["replicas"] = 1

    cluster.store.mutate("statefulsets", ns, "web", scale)
    wait_for(
        "web-1 gone",
        lambda: [p["metadata"]["name"] for p in cluster.store.list("pods", ns)[0]] == ["web-0"],
    )
    status = wait_for(
        "status 1",
        lambda: (
            (s := cluster.store.get("statefulsets", ns, "web")["status"])["replicas"] == 1 and s
        ),
    )
    assert status["currentReplicas"] == 1


# ---- acceptance 4: nothing left behind ------------------------------------------------------------


def test_stop_leaves_no_process_mount_or_file() -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    mount_root = Path(f"/nccl-k8s-test-{uuid.uuid4().hex[:8]}")
    c = Cluster(nodes=2, gpus_per_node=1)
    try:
        c.start()
        workdir = c.workdir
        assert workdir is not None
        script = "import time; time.sleep(300)"
        pod = pod_manifest(
            "lingers",
            "default",
            script,
            volumes=[
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
                {"name": "d", "emptyDir": {}},
            ],
            container={
                "volumeMounts": [
                    {"name": "shm", "mountPath": "/dev/shm"},
                    {"name": "d", "mountPath": str(mount_root / "d")},
                ]
            },
        )
        pod["spec"]["containers"][0]["command"].append(marker)
        c.store.create("pods", pod)
        wait_for("running", lambda: phase(c, "default", "lingers") == "Running")
        pids = wait_for("process", lambda: processes_with(marker))
        assert mount_root.exists()
        # Everything in the pod's mount namespace: the container and the sandbox holding it.
        ns_inode = os.stat(f"/proc/{pids[0]}/ns/mnt").st_ino
        in_pod = in_namespace(ns_inode)
        assert len(in_pod) >= 2
    finally:
        c.stop()
    assert not processes_with(marker)
    assert not in_namespace(ns_inode)
    assert not mount_root.exists()
    assert not workdir.exists()
    mounts = Path("/proc/self/mounts").read_text()
    assert str(workdir) not in mounts and str(mount_root) not in mounts


# ---- termination and restarts -------------------------------------------------------------------


def test_delete_sends_sigterm_then_sigkill_after_the_grace_period(
    cluster: Cluster, ns: str
) -> None:
    script = (
        "import signal, sys, time\n"
        "mode = sys.argv[1]\n"
        "def on_term(*_):\n"
        "    print('TERM', mode, flush=True)\n"
        "    if mode == 'polite': sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, on_term)\n"
        "print('up', flush=True)\n"
        "while True: time.sleep(0.1)\n"
    )
    # polite's grace period is an hour: gone within the test means its own exit ended it.
    # stubborn ignores SIGTERM; 5 s leave it time to print that it got one, even when the
    # machine is busy, before SIGKILL comes.
    grace = {"polite": 3600, "stubborn": 5}
    for mode in ("polite", "stubborn"):
        pod = pod_manifest(mode, ns, script, terminationGracePeriodSeconds=grace[mode])
        pod["spec"]["containers"][0]["command"].append(mode)
        cluster.store.create("pods", pod)
    for mode in ("polite", "stubborn"):
        wait_for(f"{mode} up", lambda m=mode: "up" in log_text(cluster, ns, m))  # type: ignore[misc]
    polite = cluster.store.delete("pods", ns, "polite")
    t0 = time.monotonic()
    stubborn = cluster.store.delete("pods", ns, "stubborn")
    # Both linger (Terminating) with the grace period their spec asked for.
    assert polite["metadata"]["deletionGracePeriodSeconds"] == 3600
    assert stubborn["metadata"]["deletionGracePeriodSeconds"] == 5

    def gone(name: str) -> bool:
        return name not in {p["metadata"]["name"] for p in cluster.store.list("pods", ns)[0]}

    wait_for("polite gone", lambda: gone("polite"))  # finalized when it exited, not in an hour
    wait_for("stubborn got TERM", lambda: "TERM stubborn" in log_text(cluster, ns, "stubborn"))
    wait_for("stubborn gone", lambda: gone("stubborn"))  # only SIGKILL ends its loop
    assert time.monotonic() - t0 >= 5, "SIGKILL waits for the end of the grace period"


def test_init_container_then_onfailure_restart(cluster: Cluster, ns: str) -> None:
    main = (
        "import pathlib, sys\n"
        "seen = pathlib.Path('/pod-work/seen')\n"
        "print('init said', pathlib.Path('/pod-work/init').read_text(), flush=True)\n"
        "if not seen.exists():\n"
        "    seen.write_text('1')\n"
        "    sys.exit(7)\n"
    )
    pod = pod_manifest(
        "init",
        ns,
        main,
        restartPolicy="OnFailure",
        volumes=[{"name": "work", "emptyDir": {}}],
        container={"volumeMounts": [{"name": "work", "mountPath": "/pod-work"}]},
        initContainers=[
            {
                "name": "prepare",
                "image": "busybox",
                "command": ["sh", "-c", "printf ready > /pod-work/init"],
                "volumeMounts": [{"name": "work", "mountPath": "/pod-work"}],
            }
        ],
    )
    cluster.store.create("pods", pod)
    wait_for("succeeded", lambda: phase(cluster, ns, "init") == "Succeeded")
    st = cluster.store.get("pods", ns, "init")["status"]
    init = st["initContainerStatuses"][0]
    assert init["state"]["terminated"]["reason"] == "Completed"
    main_status = st["containerStatuses"][0]
    assert main_status["restartCount"] == 1
    assert main_status["lastState"]["terminated"]["exitCode"] == 7
    assert "init said ready" in log_text(cluster, ns, "init", previous=True)
    assert "init said ready" in log_text(cluster, ns, "init")
    assert {c["type"]: c["status"] for c in st["conditions"]}["Initialized"] == "True"


def test_parallel_statefulset_creates_all_pods_at_once(cluster: Cluster, ns: str) -> None:
    cluster.store.create(
        "statefulsets",
        {
            "metadata": {"name": "par", "namespace": ns},
            "spec": {
                "serviceName": "par",
                "replicas": 3,
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": {"app": "par"}},
                "template": {
                    "metadata": {"labels": {"app": "par"}},
                    "spec": {
                        "containers": [
                            {"name": "main", "image": "busybox", "command": ["sleep", "300"]}
                        ]
                    },
                },
            },
        },
    )
    names = wait_for(
        "3 pods",
        lambda: (
            len(n := sorted(p["metadata"]["name"] for p in cluster.store.list("pods", ns)[0])) == 3
            and n
        ),
    )
    assert names == ["par-0", "par-1", "par-2"]
    wait_for(
        "3 ready",
        lambda: cluster.store.get("statefulsets", ns, "par")["status"].get("readyReplicas") == 3,
    )


def test_hosts_file_follows_pods_and_host_network_uses_the_node(cluster: Cluster, ns: str) -> None:
    cluster.store.create(
        "services",
        {
            "metadata": {"name": "grp", "namespace": ns},
            "spec": {"clusterIP": "None", "selector": {"app": "grp"}},
        },
    )
    # a says when its first lookup failed, so the test adds b only after that.
    waiter = (
        "import socket, time\n"
        "said = False\n"
        "while True:\n"
        "    try:\n"
        "        print('b.grp ->', socket.gethostbyname('b.grp'), flush=True); break\n"
        "    except OSError:\n"
        "        if not said:\n"
        "            print('b.grp unknown', flush=True); said = True\n"
        "        time.sleep(0.05)\n"
    )
    a = pod_manifest("a", ns, waiter, hostname="a", subdomain="grp")
    a["metadata"]["labels"] = {"app": "grp"}
    cluster.store.create("pods", a)
    wait_for("a failed to resolve b.grp", lambda: "b.grp unknown" in log_text(cluster, ns, "a"))
    b = pod_manifest("b", ns, "import time; time.sleep(300)", hostname="b", subdomain="grp")
    b["metadata"]["labels"] = {"app": "grp"}
    cluster.store.create("pods", b)
    wait_for("a resolved b", lambda: phase(cluster, ns, "a") == "Succeeded")
    b_ip = cluster.store.get("pods", ns, "b")["status"]["podIP"]
    assert f"b.grp -> {b_ip}" in log_text(cluster, ns, "a")

    show = "import os, socket; print(socket.gethostname(), os.environ['IP'], flush=True)"
    ip_env = {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    cluster.store.create(
        "pods", pod_manifest("hn", ns, show, hostNetwork=True, container={"env": [ip_env]})
    )
    wait_for("hn done", lambda: phase(cluster, ns, "hn") == "Succeeded")
    pod = cluster.store.get("pods", ns, "hn")
    assert pod["status"]["podIP"] == pod["status"]["hostIP"]
    node = pod["spec"]["nodeName"]
    assert f"{node} {pod['status']['hostIP']}" in log_text(cluster, ns, "hn")


def test_pod_failure_policy_ignores_pods_lost_with_their_node(
    cluster: Cluster, ns: str, tmp_path: Path
) -> None:
    policy = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    # Each pod runs until the test creates `release` (pods see this machine's files): the first
    # one is certainly still running when its node is lost.
    release = tmp_path / "release"
    script = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)"
    job = _job("survivor", ns, script, backoffLimit=0, podFailurePolicy=policy)
    job["spec"]["template"]["spec"]["containers"][0]["args"] = [str(release)]
    cluster.store.create("jobs", job)
    first = wait_for(
        "first pod running",
        lambda: [p for p in cluster.store.list("pods", ns)[0] if p["status"]["phase"] == "Running"],
    )[0]
    node = first["spec"]["nodeName"]
    cluster.faults.set_node_ready(node, False)
    try:
        wait_for(
            "first pod lost", lambda: phase(cluster, ns, first["metadata"]["name"]) == "Failed"
        )
        release.touch()
        wait_for("complete", lambda: _job_condition(cluster, ns, "survivor", "Complete"))
    finally:
        cluster.faults.set_node_ready(node, True)
    status = cluster.store.get("jobs", ns, "survivor")["status"]
    assert status["succeeded"] == 1 and not status.get("failed"), "the lost pod is not counted"
    phases = sorted(p["status"]["phase"] for p in cluster.store.list("pods", ns)[0])
    assert phases == ["Failed", "Succeeded"]


def test_host_port_conflicts_and_missing_claims_are_worded(cluster: Cluster, ns: str) -> None:
    on_node0 = {"nodeSelector": {"kubernetes.io/hostname": "node-0"}}
    port = {"ports": [{"containerPort": 29400, "hostPort": 29400}]}
    sleeper = "import time; time.sleep(3600)"
    cluster.store.create("pods", pod_manifest("first", ns, sleeper, container=port, **on_node0))
    wait_for("first bound", lambda: cluster.store.get("pods", ns, "first")["spec"].get("nodeName"))
    cluster.store.create("pods", pod_manifest("second", ns, "pass", container=port, **on_node0))
    assert wait_for("event", lambda: _failed_scheduling(cluster, ns, "second")) == (
        "0/4 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, "
        "3 node(s) didn't match Pod's node affinity/selector."
    )

    claim = {"volumes": [{"name": "r", "persistentVolumeClaim": {"claimName": "results"}}]}
    cluster.store.create("pods", pod_manifest("needs-claim", ns, "pass", **claim))
    assert wait_for("event", lambda: _failed_scheduling(cluster, ns, "needs-claim")) == (
        '0/4 nodes are available: persistentvolumeclaim "results" not found.'
    )
    cluster.store.create(
        "persistentvolumeclaims",
        {
            "metadata": {"name": "results", "namespace": ns},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    wait_for("ran once the claim exists", lambda: phase(cluster, ns, "needs-claim") == "Succeeded")


def test_cordoned_node_and_statefulset_pod_replaced_after_its_node_is_lost(
    cluster: Cluster, ns: str
) -> None:
    def cordon(on: bool) -> None:
        def edit(n: Obj) -> None:
            n["spec"]["unschedulable"] = on

        cluster.store.mutate("nodes", None, "node-1", edit)

    cordon(True)
    try:
        on_node1 = {"nodeSelector": {"kubernetes.io/hostname": "node-1"}}
        cluster.store.create("pods", pod_manifest("cordoned", ns, "pass", **on_node1))
        assert wait_for("event", lambda: _failed_scheduling(cluster, ns, "cordoned")) == (
            "0/4 nodes are available: 1 node(s) were unschedulable, "
            "3 node(s) didn't match Pod's node affinity/selector."
        )
    finally:
        cordon(False)
    wait_for("cordoned ran once uncordoned", lambda: phase(cluster, ns, "cordoned") == "Succeeded")

    sleeper = {"name": "main", "image": "busybox", "command": ["sleep", "300"]}
    cluster.store.create(
        "statefulsets",
        {
            "metadata": {"name": "db", "namespace": ns},
            "spec": {
                "serviceName": "db",
                "replicas": 1,
                "selector": {"matchLabels": {"app": "db"}},
                "template": {
                    "metadata": {"labels": {"app": "db"}},
                    "spec": {"containers": [sleeper]},
                },
            },
        },
    )
    wait_for("db-0 running", lambda: phase(cluster, ns, "db-0") == "Running")
    old = cluster.store.get("pods", ns, "db-0")
    lost_node = old["spec"]["nodeName"]
    cluster.faults.set_node_ready(lost_node, False)
    try:
        new = wait_for(
            "db-0 recreated elsewhere",
            lambda: (
                (p := cluster.store.get("pods", ns, "db-0"))["metadata"]["uid"]
                != old["metadata"]["uid"]
                and p["status"].get("phase") == "Running"
                and p
            ),
        )
    finally:
        cluster.faults.set_node_ready(lost_node, True)
    assert new["spec"]["nodeName"] != lost_node
    assert new["spec"]["hostname"] == "db-0" and new["spec"]["subdomain"] == "db"


def test_pod_active_deadline_fails_the_pod(cluster: Cluster, ns: str) -> None:
    pod = pod_manifest("late", ns, "import time; time.sleep(60)", activeDeadlineSeconds=1)
    cluster.store.create("pods", pod)
    status = wait_for(
        "failed",
        lambda: (s := cluster.store.get("pods", ns, "late")["status"])["phase"] == "Failed" and s,
    )
    assert status["reason"] == "DeadlineExceeded"
    assert status["message"] == "Pod was active on the node longer than the specified deadline"


def test_processes_that_left_the_container_session_die_with_it(cluster: Cluster, ns: str) -> None:
    """torchrun starts its workers in sessions of their own: killing the container's process
    group misses them, yet on a real node they die with the container's cgroup."""
    marker = f"orphan-{uuid.uuid4().hex}"
    spawn = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', sys.argv[1]],\n"
        "                 start_new_session=True)\n"
        "print('spawned', flush=True)\n"
        "if sys.argv[2] == 'wait': time.sleep(300)\n"
    )
    done = pod_manifest("done", ns, spawn, container={"args": [marker + "-done", "exit"]})
    cluster.store.create("pods", done)
    wait_for("done succeeded", lambda: phase(cluster, ns, "done") == "Succeeded")
    wait_for("its orphan killed", lambda: not processes_with(marker + "-done"))

    again = pod_manifest(
        "again", ns, spawn, restartPolicy="Always", container={"args": [marker + "-again", "wait"]}
    )
    cluster.store.create("pods", again)
    first = wait_for("first orphan", lambda: processes_with(marker + "-again"))
    cluster.faults.kill_pod(ns, "again")
    wait_for("restarted", lambda: container_state(cluster, ns, "again")["restartCount"] == 1)
    second = wait_for("second run's orphan", lambda: processes_with(marker + "-again"))
    assert not set(first) & set(second), "the first run's orphan died with its container"
