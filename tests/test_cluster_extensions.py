"""The test cluster's additions for issue 11: Pod Security Admission, the Job controller's
FailedCreate events, CustomResourceDefinitions and kubelet log rotation, each checked the way a
user of a real cluster meets it (kubectl's output, the API's answer, the events)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.cluster import admission, crds
from tests.cluster.cluster import Cluster
from tests.conftest import Api
from tests.e2e_helpers import wait_for


def _pod(name: str, **container_extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", **container_extra}],
        },
    }


def _label(cluster: Cluster, ns: str, level: str) -> None:
    cluster.store.mutate(
        "namespaces",
        None,
        ns,
        lambda o: o["metadata"].setdefault("labels", {}).update({admission.ENFORCE: level}),
    )


# ---- Pod Security Admission --------------------------------------------------------------


def test_psa_messages_match_what_real_clusters_print() -> None:
    # Messages quoted from real clusters' output (found with the search tool): a privileged
    # container and an added NET_RAW, both refused at baseline.
    assert admission.violations(
        _pod("danger", securityContext={"privileged": True})["spec"], "baseline"
    ) == ['privileged (container "c" must not set securityContext.privileged=true)']
    assert admission.violations(
        _pod("client", securityContext={"capabilities": {"add": ["NET_RAW"]}})["spec"],
        "baseline",
    ) == [
        'non-default capabilities (container "c" must not include "NET_RAW" in securityContext.capabilities.add)'
    ]


def test_restricted_lists_each_missing_hardening_in_check_order() -> None:
    assert admission.violations(_pod("p")["spec"], "restricted") == [
        'allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false)',
        'unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"])',
        'runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true)',
        'seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")',
    ]  # fmt: skip
    assert admission.violations(_pod("p")["spec"], "baseline") == []


def test_namespace_label_enforces_the_level_for_pods_from_kubectl(
    cluster: Cluster, namespace: str, kubectl: Callable[..., Any]
) -> None:
    _label(cluster, namespace, "baseline")
    pod = _pod("hostly")
    pod["spec"]["hostNetwork"] = True
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 8080}]
    out = kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod), check=False)
    assert out.returncode == 1
    assert (
        'pods "hostly" is forbidden: violates PodSecurity "baseline:latest": host namespaces '
        '(hostNetwork=true), hostPort (container "c" uses hostPort 8080)'
    ) in out.stderr
    # Nothing was created; a pod baseline allows is.
    assert cluster.store.list("pods", namespace)[0] == []
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(_pod("plain")))


def test_job_controller_reports_refused_pods_as_failed_create(
    cluster: Cluster, namespace: str, api: Api
) -> None:
    _label(cluster, namespace, "restricted")
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "rooty"},
        "spec": {"backoffLimit": 0, "template": _pod("x")},
    }
    code, _ = api.post(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
    assert code == 201
    events = wait_for(
        "a FailedCreate event",
        lambda: [
            e
            for e in cluster.store.list("events", namespace)[0]
            if e.get("reason") == "FailedCreate"
        ],
    )
    event = events[0]
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "Job"
    message = event["message"]
    assert message.startswith('Error creating: pods "rooty-')
    assert (
        'is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation'
        in message
    )
    assert cluster.store.list("pods", namespace)[0] == []


# ---- CustomResourceDefinitions -----------------------------------------------------------


@pytest.fixture(scope="module")
def crd_cluster(cluster_factory: Callable[..., Cluster]) -> Cluster:
    c = cluster_factory(nodes=1, gpus_per_node=1, components=False)
    crds.install_published(c.store)
    return c


def test_a_crd_makes_its_kind_discoverable_to_kubectl(crd_cluster: Cluster, tmp_path: Path) -> None:
    exe = shutil.which("kubectl")
    if exe is None:
        pytest.skip("kubectl is not installed")
    env = crd_cluster.kubectl_env()
    out = subprocess.run(
        [exe, "api-resources", "--api-group=scheduling.x-k8s.io"],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "podgroups" in out.stdout and "PodGroup" in out.stdout
    crd = crd_cluster.store.get("customresourcedefinitions", None, "podgroups.scheduling.x-k8s.io")
    assert {c["type"] for c in crd["status"]["conditions"]} == {"NamesAccepted", "Established"}


def test_custom_objects_are_pruned_defaulted_and_validated(crd_cluster: Cluster) -> None:
    api = Api(crd_cluster.url)
    base = "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups"
    body = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg-ok"},
        "spec": {"minMember": 2, "notAField": True},
    }
    code, created = api.post(base, body)
    assert code == 201
    assert created["spec"] == {"minMember": 2, "queue": "default"}  # pruned, defaulted
    bad = {**body, "metadata": {"name": "pg-bad"}, "spec": {"minMember": "two"}}
    code, status = api.post(base, bad)
    assert (code, status["reason"]) == (422, "Invalid")
    assert status["message"] == (
        'PodGroup.scheduling.volcano.sh "pg-bad" is invalid: spec.minMember: Invalid value: '
        '"string": spec.minMember in body must be of type integer: "string"'
    )
    strict = {**body, "metadata": {"name": "pg-strict"}}
    code, status = api.post(base + "?fieldValidation=Strict", strict)
    assert code == 400 and 'unknown field "spec.notAField"' in status["message"]
    # The same plural in another group is another resource.
    assert (
        api.get("/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups/pg-ok")[0] == 404
    )
    code, _ = api.request(
        "DELETE",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/podgroups.scheduling.volcano.sh",
    )
    assert code == 200
    assert api.get(base + "/pg-ok")[0] == 404  # its objects went with it, and the resource
    (volcano,) = crds.published("volcano-podgroups.yaml")
    crd_cluster.store.create("customresourcedefinitions", volcano)


@pytest.mark.parametrize(
    "group_version", ["scheduling.volcano.sh/v1beta1", "scheduling.x-k8s.io/v1alpha1"]
)
def test_a_malformed_pod_group_is_refused_by_its_projects_own_schema(
    crd_cluster: Cluster, group_version: str
) -> None:
    api = Api(crd_cluster.url)
    base = f"/apis/{group_version}/namespaces/default/podgroups"

    def group(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": group_version, "kind": "PodGroup", "metadata": {"name": name},
                "spec": spec}  # fmt: skip

    kind = f"PodGroup.{group_version.split('/')[0]}"
    code, status = api.post(base, group("count", {"minMember": "two"}))
    assert (code, status["reason"]) == (422, "Invalid"), status
    assert status["message"] == (
        f'{kind} "count" is invalid: spec.minMember: Invalid value: "string": spec.minMember in '
        'body must be of type integer: "string"'
    )
    code, status = api.post(base, group("quantity", {"minResources": {"cpu": "lots"}}))
    assert (code, status["reason"]) == (422, "Invalid"), status
    assert status["message"].startswith(
        f'{kind} "quantity" is invalid: spec.minResources.cpu: Invalid value: "lots": '
    ), status["message"]
    code, made = api.post(base, group("fine", {"minMember": 2, "minResources": {"cpu": "4"}}))
    assert code == 201, made
    assert made["spec"]["minMember"] == 2
    assert api.request("DELETE", base + "/fine")[0] == 200


# ---- log rotation ------------------------------------------------------------------------


def test_logs_rotate_and_the_api_serves_only_the_current_file(
    cluster_factory: Callable[..., Cluster],
) -> None:
    c = cluster_factory(nodes=1, gpus_per_node=1, log_max_bytes=64 * 1024, log_max_files=3)
    api = Api(c.url)
    # 400 KB of numbered lines, then a last line: six rotations of 64 KiB.
    script = (
        "import sys\n"
        "for i in range(4000):\n"
        "    sys.stdout.write(f'line {i:05d} ' + 'x' * 88 + '\\n')\n"
        "print('the end', flush=True)\n"
    )
    pod = _pod("chatty", command=["python3", "-c", script])
    assert api.post("/api/v1/namespaces/default/pods", pod)[0] == 201

    def ended() -> str | None:
        phase = c.store.get("pods", "default", "chatty").get("status", {}).get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    assert wait_for("chatty ended", ended) == "Succeeded"
    code, text = api.get("/api/v1/namespaces/default/pods/chatty/log")
    assert code == 200
    assert text.endswith("the end\n")
    assert len(text.encode()) < 64 * 1024  # the current file only
    assert not text.startswith("line 00000")  # the first lines rotated away
    first = int(text.split()[1])
    assert text.count("\n") == 4000 - first + 1  # whole lines, none lost at the cut
    log = c.kubelet.log_path("default", "chatty", "c")
    kept = sorted(p.name for p in log.parent.iterdir())
    assert len(kept) == 3 and "0.log" in kept  # containerLogMaxFiles, the current one included
