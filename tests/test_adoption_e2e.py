"""Issue 24, acceptance 5: a run applied with `render | kubectl apply -f -` leaves nothing behind,
whether its workload is deleted with kubectl (garbage collection, once the run's pod of index 0
has adopted the other objects: rendering._adopt) or the run is removed with `cleanup --run`
(the only way without `render --adopt`, the default).

On the test cluster, pods reach the API server over https with their ServiceAccount's token, and
RBAC is enforced for that ServiceAccount (tests/cluster/incluster.py): the adoption succeeds
only as far as the rendered Role allows it, which the sabotage test shows.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from tests.cluster.cluster import Cluster
from tests.cluster.errors import ApiError
from tests.conftest import fresh_namespace
from tests.e2e_helpers import cli, wait_for
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.k8s.api._kinds import plural as client_plural
from nccl_k8s.k8s.rendering._adopt import ADOPTER_NAME, TOKEN_VOLUME, plural
from nccl_k8s.k8s.rendering._manifests import render
from nccl_k8s.spec import build_run_spec

CRDS = Path(__file__).parent / "data" / "crds"
ENGINE = ["--", "--backend", "gloo", "--ops", "all_reduce", "-b", "1K", "-e", "4K",
          "-c", "1", "-w", "1", "-n", "2"]  # fmt: skip
SHAPE = ["--world-size", "2", "--gpus-per-node", "1", "--pod-monitor"]
#: Every resource a run's objects can be (store names), and its own objects by kind.
RESOURCES = ("jobs", "statefulsets", "pods", "configmaps", "services", "serviceaccounts",
             "roles", "rolebindings", "podmonitors.monitoring.coreos.com",
             "networkpolicies")  # fmt: skip
KIND_TO_RESOURCE = {"Job": "jobs", "ConfigMap": "configmaps", "Service": "services",
                    "ServiceAccount": "serviceaccounts", "Role": "roles",
                    "RoleBinding": "rolebindings",
                    "PodMonitor": "podmonitors.monitoring.coreos.com",
                    "NetworkPolicy": "networkpolicies"}  # fmt: skip


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A cluster of this module's own that serves PodMonitors (the Prometheus Operator's CRD)."""
    with Cluster(nodes=2, gpus_per_node=1) as c:
        for doc in yaml.safe_load_all((CRDS / "monitoring-podmonitors.yaml").read_text()):
            if doc:
                c.store.create("customresourcedefinitions", doc)
        yield c


@pytest.fixture
def restricted(cluster: Cluster) -> Iterator[str]:
    """A namespace enforcing the restricted Pod Security level: the token mount is allowed."""
    with fresh_namespace(cluster, "adopt") as ns:
        cluster.store.mutate(
            "namespaces",
            None,
            ns,
            lambda o: (
                o["metadata"]
                .setdefault("labels", {})
                .update({"pod-security.kubernetes.io/enforce": "restricted"})
            ),
        )
        yield ns


def rendered(ns: str, rid: str, *flags: str) -> list[dict[str, Any]]:
    res = CliRunner().invoke(app, ["render", "-n", ns, "--run-id", rid, *flags, *SHAPE, *ENGINE])
    assert res.exit_code == 0, res.output
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def apply(kubectl: Callable[..., Any], ns: str, docs: list[dict[str, Any]]) -> None:
    kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs), timeout_s=60)


def left_of(cluster: Cluster, ns: str, rid: str, names: list[tuple[str, str]]) -> list[str]:
    """Everything of the run still in the API: by its run label, and by each object's name."""
    found = set()
    for res in RESOURCES:
        items, _ = cluster.store.list(res, ns, label_selector=f"app.kubernetes.io/instance={rid}")
        found |= {f"{res}/{o['metadata']['name']}" for o in items}
    for res, name in names:
        try:
            cluster.store.get(res, ns, name)
            found.add(f"{res}/{name}")
        except ApiError:
            pass
    return sorted(found)


def names_of(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(KIND_TO_RESOURCE[d["kind"]], d["metadata"]["name"]) for d in docs]


def job_done(cluster: Cluster, ns: str, rid: str) -> bool:
    conds = cluster.store.get("jobs", ns, rid).get("status", {}).get("conditions") or []
    return any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conds)


def adoption_line(cluster: Cluster, ns: str, rid: str) -> str:
    """The one line the adopter of the pod of index 0 printed."""
    pods, _ = cluster.store.list("pods", ns, label_selector=f"job-name={rid}")
    pod = next(p for p in pods if p["metadata"]["labels"].get(
        "batch.kubernetes.io/job-completion-index") == "0")  # fmt: skip
    assert cluster.kubelet is not None
    path = cluster.kubelet.log_path(ns, pod["metadata"]["name"], ADOPTER_NAME)
    if path is None:  # no adopter in the pod
        return ""
    lines = [x for x in path.read_text().splitlines() if x.startswith("nccl-k8s: ")]
    assert len(lines) <= 1, lines
    return lines[0] if lines else ""


# ---- what render prints ------------------------------------------------------------------------


def test_render_adds_a_service_account_role_and_binding_limited_to_the_run() -> None:
    docs = rendered("team-a", "r1", "--adopt")
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("ServiceAccount", "r1"), ("Role", "r1"), ("RoleBinding", "r1"), ("ConfigMap", "r1-engine"),
        ("NetworkPolicy", "r1"), ("Service", "r1"), ("PodMonitor", "r1"), ("Job", "r1"),
    ]  # fmt: skip
    role = docs[1]
    assert role["rules"] == [
        {"apiGroups": ["batch"], "resources": ["jobs"], "resourceNames": ["r1"], "verbs": ["get"]},
        *(
            {"apiGroups": [group], "resources": [res], "resourceNames": [name],
             "verbs": ["get", "patch"]}
            for group, res, name in [
                ("", "serviceaccounts", "r1"), ("rbac.authorization.k8s.io", "roles", "r1"),
                ("rbac.authorization.k8s.io", "rolebindings", "r1"), ("", "configmaps", "r1-engine"),
                ("networking.k8s.io", "networkpolicies", "r1"), ("", "services", "r1"), ("monitoring.coreos.com", "podmonitors", "r1"),
            ]
        ),
    ]  # fmt: skip
    assert docs[2]["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "r1"}  # fmt: skip
    assert docs[2]["subjects"] == [{"kind": "ServiceAccount", "name": "r1", "namespace": "team-a"}]
    assert docs[0]["automountServiceAccountToken"] is False
    pod = docs[-1]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "r1" and pod["automountServiceAccountToken"] is False
    # The token is in the adopter's projected volume, mounted there alone.
    adopter = pod["initContainers"][0]
    assert adopter["name"] == ADOPTER_NAME
    assert [m["name"] for m in adopter["volumeMounts"]] == [TOKEN_VOLUME]
    for c in pod["containers"]:
        assert TOKEN_VOLUME not in [m["name"] for m in c.get("volumeMounts", [])]
        assert "NCCL_K8S_ADOPT" not in [e["name"] for e in c.get("env", [])]
    env = {e["name"]: e.get("value") for e in adopter["env"]}
    plan = json.loads(env["NCCL_K8S_ADOPT"])
    assert plan["owner"] == {"apiVersion": "batch/v1", "kind": "Job", "plural": "jobs",
                             "name": "r1"}  # fmt: skip
    assert [(o["kind"], o["name"]) for o in plan["objects"]] == [
        (d["kind"], d["metadata"]["name"]) for d in docs[:-1]
    ]
    for doc in docs:
        if doc["kind"] != "PodMonitor":
            kubernetes_validate.validate(doc, "1.33", strict=True)
    # The Pod Security level of the pods is the same with the token: restricted.
    assert docs[-1]["metadata"]["annotations"]["nccl-k8s/pod-security"] == "restricted"


def test_no_adopt_and_deploy_render_no_rbac_and_no_token() -> None:
    docs = rendered("team-a", "r1")
    spec = build_run_spec(world_size=2, gpus_per_node=1, run_id="r1", namespace="team-a",
                          pod_monitor=True)  # fmt: skip
    for objs in (docs, render(spec)):
        assert [d["kind"] for d in objs] == [
            "ConfigMap",
            "NetworkPolicy",
            "Service",
            "PodMonitor",
            "Job",
        ]
        pod = objs[-1]["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    assert docs == rendered("team-a", "r1", "--no-adopt")  # the default, said
    help_text = CliRunner().invoke(app, ["render", "--help"]).output
    assert "--adopt" in help_text


def test_the_plural_of_every_rendered_kind_is_the_clients() -> None:
    spec = build_run_spec(world_size=2, gpus_per_node=1, run_id="r", pod_monitor=True,
                          gang="volcano", compute_domain=True)  # fmt: skip
    for obj in render(spec, adopt=True):
        assert plural(obj["kind"]) == client_plural(obj["kind"]), obj["kind"]


# ---- on the test cluster -----------------------------------------------------------------------


@pytest.mark.slow
def test_deleting_the_job_of_an_applied_render_deletes_every_object(
    cluster: Cluster, restricted: str, kubectl: Callable[..., Any]
) -> None:
    ns, rid = restricted, f"gc-{uuid.uuid4().hex[:6]}"
    docs = rendered(ns, rid, "--adopt")
    apply(kubectl, ns, docs)
    wait_for("the run to end", lambda: job_done(cluster, ns, rid))
    line = wait_for("the adoption line", lambda: adoption_line(cluster, ns, rid))
    assert line == (
        f"nccl-k8s: Job/{rid} owns ServiceAccount/{rid}, Role/{rid}, RoleBinding/{rid}, "
        f"ConfigMap/{rid}-engine, NetworkPolicy/{rid}, Service/{rid}, PodMonitor/{rid} (deleting it "
        "deletes them)"
    )
    job = cluster.store.get("jobs", ns, rid)
    assert "Complete" in [c["type"] for c in job["status"]["conditions"]]
    for res, name in names_of(docs[:-1]):
        refs = cluster.store.get(res, ns, name)["metadata"]["ownerReferences"]
        assert refs == [{"apiVersion": "batch/v1", "kind": "Job", "name": rid,
                         "uid": job["metadata"]["uid"], "controller": False,
                         "blockOwnerDeletion": False}], (res, name)  # fmt: skip
    kubectl("delete", "-n", ns, "job", rid, timeout_s=60)
    wait_for("nothing of the run left", lambda: left_of(cluster, ns, rid, names_of(docs)) == [])


@pytest.mark.slow
def test_with_no_adopt_cleanup_removes_everything(
    cluster: Cluster, restricted: str, kubectl: Callable[..., Any]
) -> None:
    ns, rid = restricted, f"na-{uuid.uuid4().hex[:6]}"
    docs = rendered(ns, rid, "--no-adopt")
    apply(kubectl, ns, docs)
    wait_for("the run to end", lambda: job_done(cluster, ns, rid))
    assert adoption_line(cluster, ns, rid) == ""
    assert left_of(cluster, ns, rid, names_of(docs)) != []
    res = cli(cluster, "cleanup", "-n", ns, "--run", rid)
    assert res.exit_code == 0, res.output
    assert f"deleted {rid} in {ns}" in res.output and "skipped" not in res.output
    wait_for("nothing of the run left", lambda: left_of(cluster, ns, rid, names_of(docs)) == [])


@pytest.mark.slow
def test_a_role_without_patch_on_services_leaves_the_service_and_the_log_says_403(
    cluster: Cluster, restricted: str, kubectl: Callable[..., Any]
) -> None:
    ns, rid = restricted, f"sb-{uuid.uuid4().hex[:6]}"
    docs = rendered(ns, rid, "--adopt")
    role = next(d for d in docs if d["kind"] == "Role")
    rule = next(r for r in role["rules"] if r["resources"] == ["services"])
    rule["verbs"].remove("patch")
    apply(kubectl, ns, docs)
    wait_for("the run to end", lambda: job_done(cluster, ns, rid))
    line = wait_for("the adoption line", lambda: adoption_line(cluster, ns, rid))
    assert line.startswith(f"nccl-k8s: Job/{rid} could not adopt Service/{rid}: 403 "), line
    assert (
        f'services "{rid}" is forbidden: User "system:serviceaccount:{ns}:{rid}" cannot patch '
        f'resource "services" in API group "" in the namespace "{ns}"'
    ) in line
    assert f"nccl-k8s cleanup --run {rid} removes them" in line
    assert job_done(cluster, ns, rid)
    kubectl("delete", "-n", ns, "job", rid, timeout_s=60)
    wait_for(
        "all but the Service gone",
        lambda: left_of(cluster, ns, rid, names_of(docs)) == [f"services/{rid}"],
    )
    res = cli(cluster, "cleanup", "-n", ns, "--run", rid)
    assert res.exit_code == 0 and f"deleted {rid} in {ns} (1 object" in res.output, res.output
    assert left_of(cluster, ns, rid, names_of(docs)) == []
