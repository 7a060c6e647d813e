"""The test cluster's users and RBAC (issue 24): a user with a token is authorized by Roles,
RoleBindings, ClusterRoles and ClusterRoleBindings as kube-apiserver does, is told 403 in
upstream's words, and may ask SelfSubjectAccessReview; the admin (no token) is unaffected.
Checked with unmodified kubectl where a user would meet it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from tests.cluster import rbac
from tests.cluster.cluster import Cluster
from tests.conftest import Api

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


class _User(Api):
    """Plain HTTP as a user of the cluster (its bearer token). kubectl would not do: it sends
    credentials only over TLS (clientcmd reads a user's auth info only for an https server)."""

    def __init__(self, cluster: Cluster, name: str, groups: tuple[str, ...] = ()) -> None:
        super().__init__(cluster.url)
        doc = yaml.safe_load(cluster.add_user(name, groups).read_text())
        self.token = doc["users"][0]["user"]["token"]

    def request(self, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        import urllib.error
        import urllib.request

        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=20) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            with e:
                return e.code, json.loads(e.read())

    def can_i(self, verb: str, resource: str, namespace: str = "", **attrs: str) -> bool:
        """`kubectl auth can-i`: a SelfSubjectAccessReview."""
        spec = {"verb": verb, "resource": resource, "namespace": namespace, **attrs}
        code, review = self.post(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
             "spec": {"resourceAttributes": spec}},
        )  # fmt: skip
        assert code == 201, review
        return bool(review["status"]["allowed"])


def _grant(
    kubectl: Kubectl, ns: str, name: str, rules: list[dict[str, Any]], subject: dict[str, Any]
) -> None:
    docs = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": name, "namespace": ns}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": name, "namespace": ns},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [subject]},
    ]  # fmt: skip
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))


def test_a_user_without_a_binding_gets_upstreams_403(
    cluster: Cluster, namespace: str, api: Api
) -> None:
    alice = _User(cluster, "alice")
    code, status = alice.get(f"/api/v1/namespaces/{namespace}/pods")
    assert code == 403
    assert status == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'pods is forbidden: User "alice" cannot list resource "pods" in API group "" '
        f'in the namespace "{namespace}"',
        "reason": "Forbidden", "details": {"kind": "pods"}, "code": 403,
    }  # fmt: skip
    code, status = alice.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/x")
    assert status["message"] == (
        'jobs.batch "x" is forbidden: User "alice" cannot get resource "jobs" in API group '
        f'"batch" in the namespace "{namespace}"'
    )
    assert status["details"] == {"kind": "jobs", "name": "x", "group": "batch"}
    code, status = alice.get("/api/v1/nodes")
    assert status["message"].endswith(
        'cannot list resource "nodes" in API group "" at the cluster scope'
    )
    # Discovery and /version are every authenticated user's (the bootstrap policy).
    assert alice.get("/version")[0] == 200 and alice.get("/apis")[0] == 200
    # The admin (no token) still may do anything.
    assert api.get(f"/api/v1/namespaces/{namespace}/pods")[0] == 200


def test_an_unknown_token_is_401(cluster: Cluster) -> None:
    bob = _User(cluster, "bob")
    bob.token = "not-a-token"
    code, status = bob.get("/api/v1/pods")
    assert code == 401 and status["reason"] == "Unauthorized"


def test_kubectl_applies_rbac_objects_and_lists_the_bootstrap_roles(
    cluster: Cluster, namespace: str, kubectl: Kubectl
) -> None:
    _grant(
        kubectl, namespace, "r", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        {"kind": "User", "name": "erin", "apiGroup": "rbac.authorization.k8s.io"},
    )  # fmt: skip
    got = kubectl("get", "roles,rolebindings", "-n", namespace, "-o", "name").stdout.split()
    assert got == ["role.rbac.authorization.k8s.io/r", "rolebinding.rbac.authorization.k8s.io/r"]
    roles = kubectl("get", "clusterroles", "-o", "name").stdout.split()
    assert "clusterrole.rbac.authorization.k8s.io/system:basic-user" in roles
    assert kubectl("auth", "can-i", "delete", "nodes").stdout.strip() == "yes"  # the admin


def test_role_rules_verbs_subresources_resource_names_and_wildcards(
    cluster: Cluster, namespace: str, kubectl: Kubectl
) -> None:
    carol = _User(cluster, "carol", ("team-a",))
    _grant(
        kubectl,
        namespace,
        "reader",
        [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"],
             "resourceNames": ["allowed"]},
            {"apiGroups": ["batch"], "resources": ["*"], "verbs": ["*"]},
        ],
        {"kind": "Group", "name": "team-a", "apiGroup": "rbac.authorization.k8s.io"},
    )  # fmt: skip
    for name in ("allowed", "other"):
        cluster.store.create("configmaps", {"metadata": {"name": name, "namespace": namespace}})
    base = f"/api/v1/namespaces/{namespace}"
    assert carol.get(f"{base}/pods")[0] == 200
    assert carol.get(f"{base}/configmaps/allowed")[0] == 200
    # resourceNames: only that object, and never a list.
    assert carol.get(f"{base}/configmaps/other")[0] == 403
    assert carol.get(f"{base}/configmaps")[0] == 403
    # A verb not granted; a subresource is not its resource; another namespace is not this one.
    code, status = carol.request("DELETE", f"{base}/pods/p")
    assert code == 403 and 'cannot delete resource "pods"' in status["message"]
    code, status = carol.get(f"{base}/pods/p/log")
    assert code == 403 and 'cannot get resource "pods/log"' in status["message"]
    assert not carol.can_i("get", "pods", namespace, subresource="log")
    assert carol.can_i("create", "jobs", namespace, group="batch")
    assert carol.can_i("deletecollection", "jobs", namespace, group="batch")
    assert not carol.can_i("get", "pods", "default")
    assert carol.get(f"{base}/pods?watch=true&timeoutSeconds=1")[0] == 403  # watch not granted


def test_cluster_roles_and_service_accounts(cluster: Cluster, namespace: str) -> None:
    sa = _User(cluster, *rbac.service_account(namespace, "runner"))
    cluster.store.create(
        "clusterroles",
        {"metadata": {"name": f"logs-{namespace}"},
         "rules": [{"apiGroups": [""], "resources": ["*/log"], "verbs": ["get"]},
                   {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]},
    )  # fmt: skip
    # A RoleBinding to a ClusterRole grants it in that namespace only; the SA subject's namespace
    # defaults to the binding's.
    cluster.store.create(
        "rolebindings",
        {"metadata": {"name": "logs", "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": f"logs-{namespace}"},
         "subjects": [{"kind": "ServiceAccount", "name": "runner"}]},
    )  # fmt: skip
    assert sa.can_i("get", "pods", namespace, subresource="log")
    assert not sa.can_i("get", "pods", "default", subresource="log")
    assert not sa.can_i("list", "nodes")
    cluster.store.create(
        "clusterrolebindings",
        {"metadata": {"name": f"nodes-{namespace}"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": f"logs-{namespace}"},
         "subjects": [{"kind": "ServiceAccount", "name": "runner", "namespace": namespace}]},
    )  # fmt: skip
    try:
        assert sa.can_i("list", "nodes")
        code, nodes = sa.get("/api/v1/nodes")
        assert code == 200 and len(nodes["items"]) == cluster.nodes
        assert not sa.can_i("delete", "nodes")
    finally:
        cluster.store.delete("clusterrolebindings", None, f"nodes-{namespace}")
        cluster.store.delete("clusterroles", None, f"logs-{namespace}")


def test_the_recorder_sees_each_request_as_the_authorizer_does(
    cluster: Cluster, namespace: str
) -> None:
    dave = _User(cluster, "dave")
    with cluster.record_requests() as seen:
        assert not dave.can_i("create", "jobs", namespace, group="batch")
        dave.get(f"/api/v1/namespaces/{namespace}/pods/p/log")
    assert [
        (a.user.name, a.verb, a.group, a.resource, a.subresource, a.namespace) for a in seen
    ] == [
        ("dave", "create", "authorization.k8s.io", "selfsubjectaccessreviews", "", ""),
        ("dave", "get", "", "pods", "log", namespace),
    ]


@pytest.mark.parametrize(
    ("method", "path", "query", "want"),
    [
        ("GET", "/api/v1/namespaces/n/pods", {}, ("list", "", "pods", "", "n", "")),
        ("GET", "/api/v1/namespaces/n/pods", {"watch": "true"}, ("watch", "", "pods", "", "n", "")),
        ("GET", "/api/v1/namespaces/n/pods/p/log", {}, ("get", "", "pods", "log", "n", "p")),
        ("GET", "/api/v1/namespaces/n", {}, ("get", "", "namespaces", "", "n", "n")),
        ("POST", "/api/v1/namespaces", {}, ("create", "", "namespaces", "", "", "")),
        ("DELETE", "/apis/batch/v1/namespaces/n/jobs", {}, ("deletecollection", "batch", "jobs", "", "n", "")),
        ("PATCH", "/api/v1/nodes/x", {}, ("patch", "", "nodes", "", "", "x")),
        ("GET", "/api/v1/pods", {}, ("list", "", "pods", "", "", "")),
    ],
)  # fmt: skip
def test_request_attributes_as_upstreams_request_info(
    method: str, path: str, query: dict[str, str], want: tuple[str, ...]
) -> None:
    a = rbac.request_attributes(rbac.ADMIN, method, path, query)
    assert a.resource_request
    assert (a.verb, a.group, a.resource, a.subresource, a.namespace, a.name) == want
    assert not rbac.request_attributes(rbac.ADMIN, "GET", "/version", {}).resource_request
