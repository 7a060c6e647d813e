"""The test cluster's Dynamic Resource Allocation (resource.k8s.io/v1, Kubernetes 1.34;
tests/cluster/dra.py): a pod's claim made from its template by the resourceclaim controller, the
pod kept Pending with the scheduler's words until the claim exists and is allocated (the test
allocates, as the DRA driver's allocation would), then placed where the allocation says, run,
and its claim reserved for it and gone with it."""

from __future__ import annotations

import json
from typing import Any

from tests.cluster import dra
from tests.cluster.cluster import Cluster
from tests.cluster.errors import ApiError
from tests.e2e_helpers import wait_for

Obj = dict[str, Any]


def _template(name: str, ns: str) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "metadata": {"labels": {"made-from": name}},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "channel", "exactly": {"deviceClassName": "example.com-channel"}}
                    ]
                }
            },
        },
    }


def _pod(name: str, ns: str, template: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "python:3.11",
                    "command": ["python", "-c", "print('claimed')"],
                    "resources": {"claims": [{"name": "chan"}]},
                }
            ],
            "resourceClaims": [{"name": "chan", "resourceClaimTemplateName": template}],
        },
    }


def _scheduled(c: Cluster, ns: str, name: str) -> Obj:
    pod = c.store.get("pods", ns, name)
    conds = (pod.get("status") or {}).get("conditions") or []
    return next((x for x in conds if x["type"] == "PodScheduled"), {})


def _events(c: Cluster, ns: str, name: str, reason: str) -> list[str]:
    return [
        e["message"]
        for e in c.store.list("events", ns)[0]
        if e["involvedObject"]["name"] == name and e["reason"] == reason
    ]


def test_a_claimed_pod_waits_for_its_claim_then_its_allocation_then_runs_where_allocated(
    cluster: Cluster, namespace: str
) -> None:
    ns, store = namespace, cluster.store
    store.create("pods", _pod("p", ns, "chan-tmpl"))
    # No template yet: the controller says so on the pod; the scheduler waits for the claim.
    wait_for(
        "FailedResourceClaimCreation",
        lambda: _events(cluster, ns, "p", "FailedResourceClaimCreation"),
    )
    assert _events(cluster, ns, "p", "FailedResourceClaimCreation")[0] == (
        'PodResourceClaim chan: resource claim template "chan-tmpl": '
        'resourceclaimtemplate.resource.k8s.io "chan-tmpl" not found'
    )
    cond = wait_for("PodScheduled=False", lambda: _scheduled(cluster, ns, "p").get("message"))
    assert cond == f'pod "{ns}/p": ResourceClaim not created yet'
    assert _scheduled(cluster, ns, "p")["reason"] == "Unschedulable"

    store.create("resourceclaimtemplates", _template("chan-tmpl", ns))
    statuses = wait_for(
        "resourceClaimStatuses",
        lambda: store.get("pods", ns, "p").get("status", {}).get("resourceClaimStatuses"),
    )
    assert [s["name"] for s in statuses] == ["chan"]
    claim_name = statuses[0]["resourceClaimName"]
    assert claim_name.startswith("p-chan-")
    claim = store.get("resourceclaims", ns, claim_name)
    pod = store.get("pods", ns, "p")
    assert claim["spec"] == _template("chan-tmpl", ns)["spec"]["spec"]
    assert claim["metadata"]["labels"] == {"made-from": "chan-tmpl"}
    assert claim["metadata"]["annotations"][dra.POD_CLAIM_NAME] == "chan"
    (owner,) = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "Pod",
        pod["metadata"]["uid"],
        True,
    )
    # Made, not allocated: no node will do.
    wait_for(
        "cannot allocate",
        lambda: (
            _scheduled(cluster, ns, "p").get("message")
            == "0/4 nodes are available: 4 cannot allocate all claims."
        ),
    )
    assert phase(cluster, ns, "p") == "Pending"

    dra.allocate(store, ns, claim_name, node="node-2", driver="example.com", device="channel-0")
    wait_for("Succeeded", lambda: phase(cluster, ns, "p") == "Succeeded")
    pod = store.get("pods", ns, "p")
    assert pod["spec"]["nodeName"] == "node-2"
    claim = store.get("resourceclaims", ns, claim_name)
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "p", "uid": pod["metadata"]["uid"]}
    ]
    assert claim["status"]["allocation"]["devices"]["results"] == [
        {"request": "channel", "driver": "example.com", "pool": "node-2", "device": "channel-0"}
    ]

    store.delete("pods", ns, "p", grace_period_s=0)
    wait_for("claim gone with its pod", lambda: _gone(store, ns, claim_name))


def phase(c: Cluster, ns: str, name: str) -> str:
    return str(c.store.get("pods", ns, name).get("status", {}).get("phase", ""))


def _gone(store: Any, ns: str, name: str) -> bool:
    try:
        store.get("resourceclaims", ns, name)
    except ApiError as e:
        return e.code == 404
    return False


def test_a_claim_allocated_to_one_node_keeps_its_pod_off_the_others(
    cluster: Cluster, namespace: str
) -> None:
    """Each node fails on its first rejecting filter, as upstream: the claim's node on its GPUs
    (taken by another pod), the others on the claim; the pod goes once its node has room."""
    ns, store = namespace, cluster.store
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "shared", "namespace": ns},
        "spec": _template("x", ns)["spec"]["spec"],
    }
    store.create("resourceclaims", claim)
    dra.allocate(store, ns, "shared", node="node-1", driver="example.com", device="d0")
    blocker = _pod("blocker", ns, "unused")
    blocker["spec"].pop("resourceClaims")
    blocker["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "node-1"}
    blocker["spec"]["containers"][0].update(
        command=["python", "-c", "import time; time.sleep(600)"],
        resources={"limits": {"nvidia.com/gpu": "1"}},
    )
    store.create("pods", blocker)
    wait_for("blocker running", lambda: phase(cluster, ns, "blocker") == "Running")
    pod = _pod("q", ns, "unused")
    pod["spec"]["resourceClaims"] = [{"name": "chan", "resourceClaimName": "shared"}]
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "8"}
    store.create("pods", pod)
    msg = wait_for("FailedScheduling", lambda: _scheduled(cluster, ns, "q").get("message"))
    assert msg == (
        "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "3 resourceclaim not available on the node."
    )
    store.delete("pods", ns, "blocker", grace_period_s=0)
    wait_for("q on node-1", lambda: store.get("pods", ns, "q")["spec"].get("nodeName"))
    assert store.get("pods", ns, "q")["spec"]["nodeName"] == "node-1"


def test_the_dra_kinds_are_served_and_checked_against_the_1_34_schemas(
    cluster: Cluster, namespace: str, kubectl: Any
) -> None:
    device_class: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": f"{namespace}.example.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'example.com'"}}]},
    }
    slice_: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{namespace}-node-0"},
        "spec": {
            "driver": "example.com",
            "nodeName": "node-0",
            "pool": {"name": "node-0", "generation": 0, "resourceSliceCount": 1},
            "devices": [{"name": "channel-0", "attributes": {"type": {"string": "channel"}}}],
        },
    }
    for obj in (device_class, slice_, _template("t", namespace)):
        kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj))
    got = kubectl("get", "resourceslices", f"{namespace}-node-0", "-o", "json")
    assert json.loads(got.stdout)["spec"]["driver"] == "example.com"
    # Strict field validation against the 1.34 schema: a misspelt field is refused.
    bad = _template("t2", namespace)
    bad["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClass"] = "x"
    out = kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(bad), check=False)
    assert out.returncode != 0
    assert 'unknown field "spec.spec.devices.requests[0].exactly.deviceClass"' in out.stderr
    made: list[tuple[str, Obj]] = [("deviceclass", device_class), ("resourceslice", slice_)]
    for kind, obj in made:
        kubectl("delete", kind, obj["metadata"]["name"])
