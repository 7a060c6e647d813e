"""The test cluster's API side, checked the way its users see it: through kubectl and HTTP.

Each test asserts what a client would look at (the column kubectl prints, the object a GET
returns, the `Status` reason and code), in its own namespace of the session's cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.cluster.cluster import Cluster
from tests.conftest import Api
from tests.e2e_helpers import wait_for

Obj = dict[str, Any]
Kubectl = Callable[..., subprocess.CompletedProcess[str]]
ROOT = Path(__file__).resolve().parent.parent


def cm(name: str, labels: dict[str, str] | None = None, **data: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}},
        "data": data,
    }


def parked_pod(name: str) -> Obj:
    """A pod for a scheduler nobody runs: it stays Pending, so tests can edit it at leisure."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "parked"}},
        "spec": {
            "schedulerName": "nobody-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "python:3.11",
                    "command": ["python", "-c", "pass"],
                    "env": [{"name": "A", "value": "1"}],
                },
                {"name": "side", "image": "busybox"},
            ],
        },
    }


def names(listing: Obj) -> list[str]:
    return [i["metadata"]["name"] for i in listing["items"]]


def q(**params: str) -> str:
    return "?" + urllib.parse.urlencode(params)


# ---- kubectl ---------------------------------------------------------------------------------


def test_kubectl_get_nodes_shows_gpu_allocatable(kubectl: Kubectl) -> None:
    out = kubectl(
        "get",
        "nodes",
        "-o",
        r"custom-columns=NAME:.metadata.name,GPU:.status.allocatable.nvidia\.com/gpu",
        "--no-headers",
    ).stdout.split("\n")
    rows = [line.split() for line in out if line.strip()]
    assert rows == [[f"node-{i}", "8"] for i in range(4)]
    table = kubectl("get", "nodes").stdout
    assert table.split("\n")[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert table.count(" Ready ") == 4


def test_kubectl_apply_get_describe_and_delete(kubectl: Kubectl, namespace: str) -> None:
    manifest = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [cm("settings", {"app": "demo"}, size="8"), parked_pod("parked")],
        }
    )
    out = kubectl("apply", "--validate=false", "-n", namespace, "-f", "-", input=manifest).stdout
    assert "configmap/settings created" in out and "pod/parked created" in out
    again = kubectl("apply", "--validate=false", "-n", namespace, "-f", "-", input=manifest)
    assert "configmap/settings unchanged" in again.stdout
    # --dry-run=server shows the result and stores nothing, for new and existing objects.
    changed = json.dumps(cm("settings", {"app": "demo"}, size="16"))
    dry = kubectl(
        "apply", "--server-side", "--force-conflicts", "--validate=false", "--dry-run=server",
        "-n", namespace,
        "-f", "-", "-o", "jsonpath={.data.size}", input=changed,
    )  # fmt: skip
    assert dry.stdout == "16"
    kubectl("create", "configmap", "dry", "-n", namespace, "--dry-run=server", "--from-literal=a=1")
    stored = kubectl("get", "cm", "-n", namespace, "-o", "jsonpath={.items[*].data.size}").stdout
    assert stored == "8"
    assert kubectl("get", "cm", "dry", "-n", namespace, check=False).returncode == 1
    pods = kubectl("get", "pods", "-n", namespace).stdout
    assert "parked" in pods and "Pending" in pods and "0/2" in pods
    described = kubectl("describe", "pod", "parked", "-n", namespace).stdout
    status_line = next(line for line in described.splitlines() if line.startswith("Status:"))
    assert status_line.split() == ["Status:", "Pending"]
    kubectl("delete", "configmap", "settings", "-n", namespace)
    gone = kubectl("get", "configmap", "settings", "-n", namespace, check=False)
    assert gone.returncode == 1
    assert 'configmaps "settings" not found' in gone.stderr


#: Prints its host, then waits for the file named by its argument (pods see this machine's
#: files) before it prints its last line and ends: the test decides when that is.
JOB_SCRIPT = (
    "import os, socket, sys, time; "
    "print('host', socket.gethostname(), flush=True); "
    "exec('while not os.path.exists(sys.argv[1]): time.sleep(0.05)'); "
    "print('done', os.environ['JOB_COMPLETION_INDEX'], flush=True)"
)


def test_kubectl_job_logs_wait_and_cascading_delete(
    cluster: Cluster, kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    if cluster.kubelet is None or cluster.job_controller is None:
        pytest.skip("this checkout has no kubelet/Job controller yet")
    manifest = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "ranks"},
            "spec": {"clusterIP": "None", "selector": {"job-name": "bench"}},
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "bench"},
            "spec": {
                "completions": 2,
                "parallelism": 2,
                "completionMode": "Indexed",
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "subdomain": "ranks",
                        "containers": [
                            {
                                "name": "main",
                                "image": "python:3.11",
                                "command": ["python", "-c", JOB_SCRIPT],
                                "args": [str(tmp_path / "finish")],
                            }
                        ],
                    }
                },
            },
        },
    ]
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": manifest})
    kubectl("apply", "--server-side", "--validate=false", "-n", namespace, "-f", "-", input=text)
    pod0 = kubectl(
        "wait", "--for=condition=Ready", "pod", "-l", "batch.kubernetes.io/job-completion-index=0",
        "-n", namespace, "--timeout=30s", "-o", "name",
    ).stdout.strip()  # fmt: skip
    # logs -f streams while the container runs: it shows the first line while the pod waits,
    # then the line the pod prints once the test lets it finish, then ends with the container.
    follow = subprocess.Popen(
        [shutil.which("kubectl") or "kubectl", "logs", "-f", pod0, "-n", namespace],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cluster.kubectl_env(),
    )
    try:
        assert follow.stdout is not None
        assert follow.stdout.readline() == "host bench-0\n"
        (tmp_path / "finish").touch()
        rest, err = follow.communicate(timeout=120)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.communicate()
    assert follow.returncode == 0, err
    assert rest.splitlines() == ["done 0"]
    kubectl("wait", "--for=condition=complete", "job/bench", "-n", namespace, "--timeout=30s")
    pods = json.loads(
        kubectl("get", "pods", "-l", "job-name=bench", "-n", namespace, "-o", "json").stdout
    )
    assert len(pods["items"]) == 2
    for pod in pods["items"]:
        index = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        name = pod["metadata"]["name"]
        assert (
            kubectl("logs", name, "-n", namespace).stdout == f"host bench-{index}\ndone {index}\n"
        )
        assert kubectl("logs", name, "-n", namespace, "--tail=1").stdout == f"done {index}\n"
        stamped = kubectl("logs", name, "-n", namespace, "--timestamps").stdout.splitlines()
        assert [line.split(" ", 1)[1] for line in stamped] == [
            f"host bench-{index}",
            f"done {index}",
        ]
        assert stamped[0].split(" ", 1)[0].endswith("Z")
    previous = kubectl("logs", pod0, "-n", namespace, "--previous", check=False)
    assert previous.returncode == 1 and "previous terminated container" in previous.stderr
    described = kubectl("describe", "job", "bench", "-n", namespace).stdout
    assert "2 Succeeded" in described
    kubectl("delete", "job", "bench", "-n", namespace)
    left = kubectl("get", "pods", "-l", "job-name=bench", "-n", namespace, "-o", "name").stdout
    assert left == ""


def test_kubectl_apply_validates_fields_on_the_server(kubectl: Kubectl, namespace: str) -> None:
    """Without --validate=false kubectl asks the server for strict field validation, and a
    typo is refused as a real cluster refuses it."""
    good = json.dumps(cm("strict", size="8"))
    out = kubectl("apply", "-n", namespace, "-f", "-", input=good).stdout
    assert "configmap/strict created" in out
    typo = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "typo"},
        "spec": {
            "completion": 2,
            "template": {"spec": {"containers": [{"name": "c", "image": "i", "comand": ["x"]}]}},
        },
    }
    bad = kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(typo), check=False)
    assert bad.returncode == 1
    assert "Error from server (BadRequest)" in bad.stderr
    assert 'unknown field "spec.completion"' in bad.stderr
    assert 'unknown field "spec.template.spec.containers[0].comand"' in bad.stderr
    ssa = kubectl(
        "apply", "--server-side", "-n", namespace, "-f", "-", input=json.dumps(typo), check=False
    )  # fmt: skip
    assert ssa.returncode == 1 and ".spec.completion: field not declared in schema" in ssa.stderr


def test_kubectl_create_sends_protobuf_that_the_server_decodes(
    kubectl: Kubectl, namespace: str
) -> None:
    kubectl("create", "configmap", "c", "-n", namespace, "--from-literal=a=b")
    kubectl("create", "secret", "generic", "s", "-n", namespace, "--from-literal=pw=x")
    kubectl("create", "serviceaccount", "robot", "-n", namespace)
    got = json.loads(kubectl("get", "cm,secret,sa", "-n", namespace, "-o", "json").stdout)
    by_kind = {i["kind"]: i for i in got["items"]}
    assert by_kind["ConfigMap"]["data"] == {"a": "b"}
    assert by_kind["Secret"]["data"] == {"pw": "eA=="} and by_kind["Secret"]["type"] == "Opaque"
    assert by_kind["ServiceAccount"]["metadata"]["name"] == "robot"
    assert "generateName" not in by_kind["ConfigMap"]["metadata"]
    ns = f"{namespace}-x"
    kubectl("create", "namespace", ns)
    assert kubectl("get", "ns", ns, "-o", "name").stdout.strip() == f"namespace/{ns}"
    kubectl("delete", "namespace", ns)
    # Kinds without a decoder say what to do instead.
    job = kubectl("create", "job", "j", "--image=busybox", "-n", namespace, check=False)
    assert job.returncode == 1 and "kubectl apply" in job.stderr


@pytest.mark.timeout(60)  # readline() blocks if a row never comes
def test_kubectl_get_watch_prints_rows_as_changes_happen(
    cluster: Cluster, kubectl: Kubectl, namespace: str
) -> None:
    kubectl("create", "configmap", "first", "-n", namespace, "--from-literal=a=1")
    proc = subprocess.Popen(
        ["kubectl", "get", "configmaps", "-n", namespace, "--watch", "--no-headers"],
        env=cluster.kubectl_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().split()[:2] == ["first", "1"]
        kubectl("create", "configmap", "second", "-n", namespace, "--from-literal=a=1")
        assert proc.stdout.readline().split()[:2] == ["second", "1"]
        kubectl("patch", "configmap", "second", "-n", namespace, "-p", '{"data":{"b":"2"}}')
        assert proc.stdout.readline().split()[:2] == ["second", "2"]
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def test_pod_log_errors_say_what_to_do(api: Api, namespace: str) -> None:
    pods = f"/api/v1/namespaces/{namespace}/pods"
    api.post(pods, parked_pod("two"))
    code, body = api.get(f"{pods}/two/log")
    assert (code, body["reason"]) == (400, "BadRequest")
    assert (
        "a container name must be specified for pod two, choose one of: [main side]"
        in (body["message"])
    )
    code, body = api.get(f"{pods}/two/log?container=main")
    assert code == 400 and 'container "main" in pod "two" is waiting to start' in body["message"]
    code, body = api.get(f"{pods}/two/log?container=nope")
    assert code == 400 and "container nope is not valid for pod two" in body["message"]
    assert api.get(f"{pods}/missing/log")[0] == 404


# ---- create, get, list, selectors --------------------------------------------------------------


def test_create_get_and_list_with_label_and_field_selectors(
    api: Api, kubectl: Kubectl, namespace: str
) -> None:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    for name, labels in [
        ("a", {"tier": "web", "env": "prod"}),
        ("b", {"tier": "db", "env": "prod"}),
        ("c", {"tier": "web"}),
        ("d", {}),
    ]:
        code, created = api.post(base, cm(name, labels, k=name))
        assert code == 201, created
        assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    code, got = api.get(f"{base}/a")
    assert code == 200 and got["data"] == {"k": "a"} and got["kind"] == "ConfigMap"

    def selected(**params: str) -> list[str]:
        code, listing = api.get(base + q(**params))
        assert code == 200, listing
        assert listing["kind"] == "ConfigMapList"
        return names(listing)

    assert selected(labelSelector="tier=web") == ["a", "c"]
    assert selected(labelSelector="tier==web,env=prod") == ["a"]
    assert selected(labelSelector="tier!=web") == ["b", "d"]
    assert selected(labelSelector="tier in (db,cache)") == ["b"]
    assert selected(labelSelector="tier notin (db)") == ["a", "c", "d"]
    assert selected(labelSelector="env") == ["a", "b"]
    assert selected(labelSelector="!env") == ["c", "d"]
    assert selected(fieldSelector="metadata.name=b") == ["b"]
    assert selected(fieldSelector="metadata.name!=b", labelSelector="tier") == ["a", "c"]
    # Pagination: limit + continue walks every item exactly once.
    code, page = api.get(base + q(limit="3"))
    assert names(page) == ["a", "b", "c"] and page["metadata"]["continue"]
    code, rest = api.get(base + q(limit="3", **{"continue": page["metadata"]["continue"]}))
    assert names(rest) == ["d"] and not rest["metadata"].get("continue")
    # kubectl's own selector syntax goes through the same path.
    out = kubectl("get", "cm", "-n", namespace, "-l", "tier in (web),env", "-o", "name").stdout
    assert out.split() == ["configmap/a"]
    # Pods by a field selector the kubelet-side and kubectl use.
    api.post(f"/api/v1/namespaces/{namespace}/pods", parked_pod("p"))
    code, pending = api.get(
        f"/api/v1/pods{q(fieldSelector=f'status.phase=Pending,metadata.namespace={namespace}')}"
    )
    assert names(pending) == ["p"]


# ---- watch -------------------------------------------------------------------------------------


def test_watch_from_resource_version_then_410_when_compacted(
    api: Api, cluster: Cluster, namespace: str
) -> None:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    api.post(base, cm("before"))
    _, listing = api.get(base)
    rv = listing["metadata"]["resourceVersion"]
    api.post(base, cm("w", {"app": "x"}, v="1"))
    api.request(
        "PATCH", f"{base}/w", {"data": {"v": "2"}}, content_type="application/merge-patch+json"
    )
    api.request("DELETE", f"{base}/w")
    events = api.watch(f"{base}{q(watch='1', resourceVersion=rv, timeoutSeconds='1')}")
    seen = [(e["type"], e["object"]["metadata"]["name"], e["object"].get("data")) for e in events]
    assert seen == [
        ("ADDED", "w", {"v": "1"}),
        ("MODIFIED", "w", {"v": "2"}),
        ("DELETED", "w", {"v": "2"}),
    ]
    # resourceVersion unset: the current state first, as ADDED events.
    initial = api.watch(f"{base}{q(watch='true', timeoutSeconds='1')}")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in initial] == [("ADDED", "before")]
    # A label selector turns an object leaving the selection into DELETED for that watcher.
    _code, listing = api.get(base)
    rv = listing["metadata"]["resourceVersion"]
    api.request(
        "PATCH",
        f"{base}/before",
        {"metadata": {"labels": {"app": "x"}}},
        content_type="application/merge-patch+json",
    )
    api.request(
        "PATCH",
        f"{base}/before",
        {"metadata": {"labels": {"app": None}}},
        content_type="application/merge-patch+json",
    )
    selected = api.watch(
        f"{base}{q(watch='1', resourceVersion=rv, labelSelector='app=x', timeoutSeconds='1')}"
    )
    assert [e["type"] for e in selected] == ["ADDED", "DELETED"]
    # History older than the server keeps: one ERROR event carrying a 410 Expired Status.
    cluster.store.compact()
    expired = api.watch(f"{base}{q(watch='1', resourceVersion=rv)}")
    assert len(expired) == 1 and expired[0]["type"] == "ERROR"
    status = expired[0]["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")


def test_watch_streams_changes_as_they_happen(api: Api, namespace: str) -> None:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    got: list[Obj] = []
    opened = threading.Event()

    def follow() -> None:
        # The watch would end on its own only after an hour: an event within the test's wait
        # was delivered as it happened.
        url = api.url + base + q(watch="1", timeoutSeconds="3600")
        with urllib.request.urlopen(url, timeout=120) as resp:
            opened.set()
            for line in resp:
                got.append(json.loads(line))
                return

    t = threading.Thread(target=follow)
    t.start()
    assert opened.wait(120)
    api.post(base, cm("live"))
    t.join(120)
    assert not t.is_alive(), "the event was not delivered"
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in got] == [("ADDED", "live")]


# ---- patch and apply ---------------------------------------------------------------------------


def test_merge_strategic_and_json_patch(api: Api, kubectl: Kubectl, namespace: str) -> None:
    pods = f"/api/v1/namespaces/{namespace}/pods"
    assert api.post(pods, parked_pod("p"))[0] == 201
    # Merge patch: null deletes, objects merge, lists replace.
    code, p = api.request(
        "PATCH",
        f"{pods}/p",
        {"metadata": {"labels": {"app": None, "role": "x"}, "annotations": {"a": "1"}}},
        content_type="application/merge-patch+json",
    )
    assert code == 200, p
    assert p["metadata"]["labels"] == {"role": "x"} and p["metadata"]["annotations"] == {"a": "1"}
    # Strategic merge: containers merge by name; the untouched one and its fields survive.
    code, p = api.request(
        "PATCH",
        f"{pods}/p",
        {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "2"}]}]}},
        content_type="application/strategic-merge-patch+json",
    )
    assert code == 200, p
    by_name = {c["name"]: c for c in p["spec"]["containers"]}
    assert set(by_name) == {"main", "side"}
    assert by_name["main"]["image"] == "python:3.11"
    assert by_name["main"]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    # kubectl patch defaults to strategic merge too.
    kubectl("patch", "pod", "p", "-n", namespace, "-p", '{"metadata":{"labels":{"k":"v"}}}')
    # JSON patch: add, replace, remove; a failing test op is 422 and changes nothing.
    ops = [
        {"op": "add", "path": "/metadata/labels/added", "value": "yes"},
        {"op": "replace", "path": "/spec/containers/1/image", "value": "busybox:2"},
        {"op": "remove", "path": "/metadata/annotations/a"},
    ]
    code, p = api.request("PATCH", f"{pods}/p", ops, content_type="application/json-patch+json")
    assert code == 200, p
    assert p["metadata"]["labels"] == {"role": "x", "k": "v", "added": "yes"}
    assert p["spec"]["containers"][1]["image"] == "busybox:2"
    assert "a" not in p["metadata"].get("annotations", {})
    failing = [
        {"op": "test", "path": "/metadata/labels/role", "value": "other"},
        {"op": "add", "path": "/metadata/labels/never", "value": "1"},
    ]
    code, status = api.request(
        "PATCH", f"{pods}/p", failing, content_type="application/json-patch+json"
    )
    assert (code, status["reason"]) == (422, "Invalid")
    assert "never" not in api.get(f"{pods}/p")[1]["metadata"]["labels"]
    # Patching the main resource leaves .status alone; pods/status patches only status.
    code, p = api.request(
        "PATCH",
        f"{pods}/p",
        {"status": {"phase": "Running"}},
        content_type="application/merge-patch+json",
    )
    assert p["status"]["phase"] == "Pending"
    code, p = api.request(
        "PATCH",
        f"{pods}/p/status",
        {"status": {"phase": "Running"}, "metadata": {"labels": {"ignored": "1"}}},
        content_type="application/merge-patch+json",
    )
    assert (
        code == 200
        and p["status"]["phase"] == "Running"
        and "ignored" not in p["metadata"]["labels"]
    )


def test_server_side_apply_conflict_and_force(kubectl: Kubectl, namespace: str) -> None:
    def config(replicas: str, extra: dict[str, str] | None = None) -> str:
        return json.dumps(cm("ssa", {"app": "ssa"}, replicas=replicas, **(extra or {})))

    first = kubectl(
        "apply", "--server-side", "--validate=false", "--field-manager=deployer",
        "-n", namespace, "-f", "-", input=config("2", {"owned": "yes"}),
    )  # fmt: skip
    assert "configmap/ssa serverside-applied" in first.stdout
    # Another manager setting the same value co-owns it: no conflict.
    kubectl(
        "apply", "--server-side", "--validate=false", "--field-manager=ops",
        "-n", namespace, "-f", "-", input=config("2"),
    )  # fmt: skip
    # A different value is a conflict naming the owner and the field...
    clash = kubectl(
        "apply", "--server-side", "--validate=false", "--field-manager=ops",
        "-n", namespace, "-f", "-", input=config("4"), check=False,
    )  # fmt: skip
    assert clash.returncode == 1
    assert 'conflict with "deployer"' in clash.stderr and ".data.replicas" in clash.stderr
    # ...that --force-conflicts takes over.
    kubectl(
        "apply", "--server-side", "--validate=false", "--field-manager=ops", "--force-conflicts",
        "-n", namespace, "-f", "-", input=config("4"),
    )  # fmt: skip
    shown = kubectl("get", "cm", "ssa", "-n", namespace, "-o", "json", "--show-managed-fields")
    got = json.loads(shown.stdout)
    assert got["data"] == {"replicas": "4", "owned": "yes"}
    managers = {m["manager"]: m for m in got["metadata"]["managedFields"]}
    assert "f:replicas" in managers["ops"]["fieldsV1"]["f:data"]
    assert "f:replicas" not in managers["deployer"]["fieldsV1"]["f:data"]
    # A field its manager stops applying is removed (nobody else owns it).
    kubectl(
        "apply", "--server-side", "--validate=false", "--field-manager=deployer",
        "-n", namespace, "-f", "-", input=config("4"),
    )  # fmt: skip
    got = json.loads(kubectl("get", "cm", "ssa", "-n", namespace, "-o", "json").stdout)
    assert got["data"] == {"replicas": "4"}


def test_apply_patch_without_field_manager_is_bad_request(api: Api, namespace: str) -> None:
    code, status = api.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/configmaps/x",
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
        content_type="application/apply-patch+yaml",
    )
    assert (code, status["reason"]) == (400, "BadRequest")
    code, created = api.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/configmaps/x{q(fieldManager='me')}",
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {k: v}\n",
        content_type="application/apply-patch+yaml",
    )
    assert code == 201 and created["data"] == {"k": "v"}


# ---- delete and garbage collection -------------------------------------------------------------


def test_delete_cascades_through_owner_references(
    api: Api, kubectl: Kubectl, namespace: str
) -> None:
    base = f"/api/v1/namespaces/{namespace}/configmaps"

    def owned_by(name: str, owner: Obj) -> Obj:
        obj = cm(name)
        obj["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
            }
        ]
        return obj

    _, root = api.post(base, cm("root"))
    _, child = api.post(base, owned_by("child", root))
    api.post(base, owned_by("grandchild", child))
    kubectl("delete", "cm", "root", "-n", namespace)
    assert names(api.get(base)[1]) == []
    # Orphan keeps the dependents and drops the reference.
    _, root = api.post(base, cm("root"))
    api.post(base, owned_by("kept", root))
    code, _ = api.request("DELETE", f"{base}/root{q(propagationPolicy='Orphan')}")
    assert code == 200
    _, kept = api.get(f"{base}/kept")
    assert kept["metadata"].get("ownerReferences") is None
    # Foreground: the owner stays, marked, until its last dependent is gone (here a finalizer
    # holds the dependent until the test removes it).
    _, root = api.post(base, cm("fg-root"))
    held = owned_by("fg-child", root)
    held["metadata"]["finalizers"] = ["example.com/hold"]
    api.post(base, held)
    code, _ = api.request("DELETE", f"{base}/fg-root{q(propagationPolicy='Foreground')}")
    assert code == 200
    _, marked = api.get(f"{base}/fg-root")
    assert marked["metadata"]["deletionTimestamp"]
    assert marked["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert api.get(f"{base}/fg-child")[1]["metadata"]["deletionTimestamp"]
    api.request(
        "PATCH",
        f"{base}/fg-child",
        {"metadata": {"finalizers": None}},
        content_type="application/merge-patch+json",
    )
    assert api.get(f"{base}/fg-child")[0] == 404
    assert api.get(f"{base}/fg-root")[0] == 404
    # Delete by collection with a selector.
    api.post(base, cm("x1", {"sweep": "y"}))
    api.post(base, cm("x2", {"sweep": "y"}))
    code, deleted = api.request("DELETE", base + q(labelSelector="sweep=y"))
    assert code == 200 and sorted(names(deleted)) == ["x1", "x2"]
    assert names(api.get(base)[1]) == ["kept"]


def test_namespace_terminates_once_its_contents_are_gone(api: Api, namespace: str) -> None:
    ns = f"{namespace}-gone"
    api.post("/api/v1/namespaces", {"metadata": {"name": ns}})
    held = cm("held")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    api.post(f"/api/v1/namespaces/{ns}/configmaps", held)
    assert api.request("DELETE", f"/api/v1/namespaces/{ns}")[0] == 200
    _, terminating = api.get(f"/api/v1/namespaces/{ns}")
    assert terminating["status"]["phase"] == "Terminating"
    code, body = api.post(f"/api/v1/namespaces/{ns}/configmaps", cm("late"))
    assert (code, body["reason"]) == (403, "Forbidden") and "being terminated" in body["message"]
    api.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/held",
        {"metadata": {"finalizers": None}},
        content_type="application/merge-patch+json",
    )
    assert api.get(f"/api/v1/namespaces/{ns}")[0] == 404


# ---- errors ------------------------------------------------------------------------------------


def test_errors_are_status_objects_with_real_codes(api: Api, namespace: str) -> None:
    base = f"/api/v1/namespaces/{namespace}/configmaps"

    def status(code: int, body: Any) -> tuple[int, str, str]:
        assert body["kind"] == "Status" and body["status"] == "Failure", body
        return code, body["reason"], body["message"]

    assert status(*api.get(f"{base}/missing")) == (
        404,
        "NotFound",
        'configmaps "missing" not found',
    )
    api.post(base, cm("dup"))
    assert status(*api.post(base, cm("dup")))[:2] == (409, "AlreadyExists")
    _, current = api.get(f"{base}/dup")
    stale = dict(current, data={"x": "1"})
    stale["metadata"] = dict(current["metadata"], resourceVersion="1")
    code, reason, message = status(*api.request("PUT", f"{base}/dup", stale))
    assert (code, reason) == (409, "Conflict") and "has been modified" in message
    fresh = dict(current, data={"x": "1"})
    assert api.request("PUT", f"{base}/dup", fresh)[0] == 200
    code, reason, message = status(*api.post(base, {"metadata": {"labels": {}}}))
    assert (code, reason) == (422, "Invalid") and "metadata.name" in message
    no_containers = {"metadata": {"name": "empty"}, "spec": {}}
    code, reason, message = status(*api.post(f"/api/v1/namespaces/{namespace}/pods", no_containers))
    assert (code, reason) == (422, "Invalid") and "spec.containers" in message
    too_big = cm("big", blob="x" * (1024 * 1024 + 1))
    code, reason, message = status(*api.post(base, too_big))
    assert (code, reason) == (422, "Invalid") and "must have at most 1048576 bytes" in message
    assert status(*api.get(base + q(labelSelector="a in (b")))[:2] == (400, "BadRequest")
    assert status(*api.request("POST", base, b"{not json"))[:2] == (400, "BadRequest")
    wrong_ns = cm("elsewhere")
    wrong_ns["metadata"]["namespace"] = "default"
    assert status(*api.post(base, wrong_ns))[:2] == (400, "BadRequest")
    assert status(*api.get("/api/v1/namespaces/nope-ns/configmaps/x"))[:2] == (404, "NotFound")
    assert status(*api.post("/api/v1/namespaces/nope-ns/configmaps", cm("x")))[:2] == (
        404,
        "NotFound",
    )
    assert status(*api.get("/apis/batch/v1/namespaces/default/jobs/none")) == (
        404,
        "NotFound",
        'jobs.batch "none" not found',
    )


def test_discovery_answers_what_kubectl_needs(api: Api) -> None:
    assert api.get("/version")[1]["major"] == "1"
    assert api.get("/api")[1]["versions"] == ["v1"]
    groups = {g["name"] for g in api.get("/apis")[1]["groups"]}
    assert {"batch", "apps"} <= groups
    core = {r["name"] for r in api.get("/api/v1")[1]["resources"]}
    assert {"pods", "pods/log", "pods/status", "nodes", "events", "configmaps"} <= core
    assert "jobs/status" in {r["name"] for r in api.get("/apis/batch/v1")[1]["resources"]}
    assert "statefulsets" in {r["name"] for r in api.get("/apis/apps/v1")[1]["resources"]}
    assert api.get("/openapi/v2")[0] == 404


# ---- request faults ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "reason", "kubectl_says"),
    [
        (500, "InternalError", "Error from server (InternalError)"),
        (403, "Forbidden", "Error from server (Forbidden)"),
        (409, "Conflict", "Error from server (Conflict)"),
    ],
)
def test_fail_requests_answers_the_next_n_matching_requests(
    api: Api,
    cluster: Cluster,
    kubectl: Kubectl,
    namespace: str,
    status: int,
    reason: str,
    kubectl_says: str,
) -> None:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    api.post(base, cm("target"))
    cluster.faults.fail_requests(rf"/namespaces/{namespace}/configmaps/target$", status, count=2)
    for _ in range(2):
        code, body = api.get(f"{base}/target")
        assert (code, body["kind"], body["reason"]) == (status, "Status", reason)
    code, body = api.get(f"{base}/target")
    assert code == 200 and body["metadata"]["name"] == "target"
    # kubectl shows the injected error as it would a real one.
    cluster.faults.fail_requests(rf"/namespaces/{namespace}/configmaps/target$", status, count=1)
    failed = kubectl("get", "cm", "target", "-n", namespace, check=False)
    assert failed.returncode == 1 and kubectl_says in failed.stderr
    assert cluster.faults.pending() == 0


def test_fail_requests_can_target_one_method(api: Api, cluster: Cluster, namespace: str) -> None:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    cluster.faults.fail_requests(
        rf"/namespaces/{namespace}/configmaps", 500, count=1, method="POST"
    )
    assert api.get(base)[0] == 200  # a GET on the same path is untouched
    code, body = api.post(base, cm("first"))
    assert (code, body["reason"]) == (500, "InternalError")
    assert api.get(f"{base}/first")[0] == 404  # the failed request changed nothing
    assert api.post(base, cm("first"))[0] == 201


def test_fault_control_endpoint_for_clusters_run_by_hand(api: Api, namespace: str) -> None:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    rule = {"pathRegex": f"/namespaces/{namespace}/", "status": 403, "count": 1}
    assert api.post("/_test/faults/requests", rule) == (200, {"pending": 1})
    code, body = api.get(base)
    assert (code, body["reason"]) == (403, "Forbidden")
    assert api.get(base)[0] == 200
    assert api.post("/_test/faults/requests", {"status": 500})[0] == 400  # no pathRegex
    api.post("/_test/faults/requests", rule)
    assert api.request("DELETE", "/_test/faults/requests") == (200, {"pending": 0})
    assert api.get(base)[0] == 200


# ---- the store under concurrent writers -------------------------------------------------------


def test_store_serialises_concurrent_writers_and_keeps_event_order() -> None:
    """Controllers write with mutate from several threads: no lost update, and every watcher and
    subscriber sees one change per write, in resourceVersion order."""
    from tests.cluster.store import Store

    store = Store()
    store.create("configmaps", {"metadata": {"name": "counter"}, "data": {"n": "0"}})
    seen: list[int] = []
    store.subscribe(lambda etype, res, obj: seen.append(int(obj["metadata"]["resourceVersion"])))
    watch = store.watch("configmaps", since_rv=store.resource_version)

    def bump(obj: Obj) -> None:
        obj["data"]["n"] = str(int(obj["data"]["n"]) + 1)

    def writer() -> None:
        for _ in range(50):
            store.mutate("configmaps", "default", "counter", bump)

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert store.get("configmaps", "default", "counter")["data"]["n"] == "200"
    events = [watch.next(timeout=5) for _ in range(200)]
    watch.close()
    rvs = [int(e[1]["metadata"]["resourceVersion"]) for e in events if e]
    assert len(rvs) == 200 and rvs == sorted(rvs) and len(set(rvs)) == 200
    assert [int(e[1]["data"]["n"]) for e in events if e] == list(range(1, 201))
    assert seen == sorted(seen) and len(seen) == 200


# ---- several clusters, standalone --------------------------------------------------------------


def test_two_clusters_do_not_collide(
    cluster: Cluster, cluster_factory: Callable[..., Cluster]
) -> None:
    other = cluster_factory(nodes=1, gpus_per_node=2, components=False)
    assert other.url != cluster.url and other.number != cluster.number
    assert other.workdir != cluster.workdir
    assert other.node_address(0) != cluster.node_address(0)
    nodes = Api(other.url).get("/api/v1/nodes")[1]
    assert names(nodes) == ["node-0"]
    assert nodes["items"][0]["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    assert nodes["items"][0]["status"]["addresses"][0]["address"] == other.node_address(0)
    other.stop()
    assert other.workdir is None


def test_python_m_tests_cluster_runs_until_sigterm_and_cleans_up(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.cluster", "--nodes", "2", "--gpus-per-node", "4",
         "--kubeconfig", str(kubeconfig)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "ready" in line, line + proc.stderr.read() if proc.stderr else line
        env = dict(os.environ, KUBECONFIG=str(kubeconfig), KUBECACHEDIR=str(tmp_path / "cache"))
        got = subprocess.run(
            ["kubectl", "get", "nodes", "-o", "name"],
            env=env, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert got.stdout.split() == ["node/node-0", "node/node-1"], got.stderr
        workdir = Path(line.split("workdir=")[1].split()[0])
        assert workdir.is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()
    assert rc == 0
    assert not workdir.exists()


# ---- pod, node and scheduling faults, forwarded to the kubelet and scheduler -------------------


def sleeper(name: str, node: str | None = None) -> Obj:
    spec: Obj = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "main",
                "image": "python:3.11",
                "command": ["python", "-c", "import time; time.sleep(3600)"],
            }
        ],
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def test_pod_node_and_scheduling_faults_show_through_the_api(
    api: Api, cluster: Cluster, kubectl: Kubectl, namespace: str
) -> None:
    if cluster.kubelet is None or cluster.scheduler is None:
        pytest.skip("this checkout has no kubelet/scheduler yet")
    pods = f"/api/v1/namespaces/{namespace}/pods"

    def pod(name: str) -> Obj:
        return api.get(f"{pods}/{name}")[1]  # type: ignore[no-any-return]

    # delay_scheduling: the pod stays unbound for the delay, then lands on a node. An hour's
    # delay while the test looks, then 1.5 s counted from the pod's creation.
    cluster.faults.delay_scheduling(3600)
    try:
        created = time.monotonic()
        api.post(pods, sleeper("late"))
        assert not pod("late")["spec"].get("nodeName")
        cluster.faults.delay_scheduling(1.5)
        wait_for("late is bound", lambda: pod("late")["spec"].get("nodeName"))
        assert time.monotonic() - created >= 1.5
    finally:
        cluster.faults.delay_scheduling(0)
    # kill_pod: the process dies and a Never pod fails, with the container's exit shown.
    wait_for("late runs", lambda: pod("late")["status"].get("phase") == "Running")
    cluster.faults.kill_pod(namespace, "late")
    wait_for("late fails", lambda: pod("late")["status"].get("phase") == "Failed")
    term = pod("late")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 137
    # set_node_ready: kubectl shows the node NotReady and its pods fail; ready again heals it.
    api.post(pods, sleeper("on-3", node="node-3"))
    wait_for("on-3 runs", lambda: pod("on-3")["status"].get("phase") == "Running")
    cluster.faults.set_node_ready("node-3", False)
    try:
        row = kubectl("get", "node", "node-3", "--no-headers").stdout.split()
        assert row[:2] == ["node-3", "NotReady"]
        wait_for("on-3 fails", lambda: pod("on-3")["status"].get("phase") == "Failed")
    finally:
        cluster.faults.set_node_ready("node-3", True)
    assert kubectl("get", "node", "node-3", "--no-headers").stdout.split()[1] == "Ready"


# ---- the product's client ----------------------------------------------------------------------


def test_lightkube_decodes_what_the_server_sends(cluster: Cluster, namespace: str) -> None:
    """lightkube (the deployer's client) validates objects strictly against the API schemas."""
    lightkube = pytest.importorskip("lightkube")
    from lightkube.core.exceptions import ApiError as LightkubeApiError
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import ConfigMap, Event, Node

    client = lightkube.Client(lightkube.KubeConfig.from_file(str(cluster.kubeconfig)))
    try:
        nodes = list(client.list(Node))
        assert [n.status.allocatable["nvidia.com/gpu"] for n in nodes] == ["8"] * 4
        cm_obj = ConfigMap(
            apiVersion="v1",
            kind="ConfigMap",
            metadata=ObjectMeta(name="lk", namespace=namespace, labels={"app": "lk"}),
            data={"k": "v"},
        )
        applied = client.apply(cm_obj, field_manager="nccl-k8s", force=True)
        assert applied.data == {"k": "v"}
        with pytest.raises(LightkubeApiError) as err:
            client.create(cm_obj)
        assert (err.value.status.code, err.value.status.reason) == (409, "AlreadyExists")
        listed = list(client.list(ConfigMap, namespace=namespace, labels={"app": "lk"}))
        assert [c.metadata.name for c in listed] == ["lk"]
        client.delete(ConfigMap, "lk", namespace=namespace)
        since = applied.metadata.resourceVersion
        for op, obj in client.watch(ConfigMap, namespace=namespace, resource_version=since):
            if op == "DELETED":
                assert obj.metadata.name == "lk"
                break
        cluster.store.record_event(applied.to_dict(), "Checked", "decoded by lightkube")
        events = list(client.list(Event, namespace=namespace))
        assert [e.reason for e in events] == ["Checked"]
    finally:
        client.close()


def test_a_client_that_hangs_up_mid_request_prints_nothing(
    cluster: Cluster, namespace: str, capfd: pytest.CaptureFixture[str]
) -> None:
    # A CLI test runs the CLI in this process: anything the server prints lands in its output.
    url = urllib.parse.urlsplit(cluster.url)
    body = json.dumps(cm("half-sent")).encode()
    head = (
        f"POST /api/v1/namespaces/{namespace}/configmaps HTTP/1.1\r\nHost: {url.netloc}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    assert cluster.apiserver is not None
    httpd = cluster.apiserver._httpd
    assert httpd is not None

    def held(me: tuple[str, int]) -> bool:
        """The server holds this client's connection (others of the shared cluster come and go,
        so a count would not tell)."""
        with httpd._conns_lock:
            conns = list(httpd._conns)
        return any(_peer(c) == me for c in conns)

    with socket.create_connection((url.hostname, url.port), timeout=5) as s:
        me = s.getsockname()[:2]
        s.sendall(head + body[: len(body) // 2])
        wait_for("the server took the connection", lambda: held(me))
        # SO_LINGER 0: close() sends a reset, as a killed client or a dropped NAT entry does.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    wait_for("the server noticed the reset", lambda: not held(me))
    out, err = capfd.readouterr()
    assert "Exception" not in out + err, out + err
    assert api_get_names(cluster, namespace) == []


def _peer(conn: socket.socket) -> tuple[str, int] | None:
    try:
        return tuple(conn.getpeername()[:2])  # type: ignore[return-value]
    except OSError:  # reset already: not the one being waited for
        return None


def api_get_names(cluster: Cluster, namespace: str) -> list[str]:
    url = f"{cluster.url}/api/v1/namespaces/{namespace}/configmaps"
    with urllib.request.urlopen(url, timeout=5) as resp:
        return [i["metadata"]["name"] for i in json.load(resp)["items"]]
