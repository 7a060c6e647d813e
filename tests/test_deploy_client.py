"""The API client's seams to lightkube and httpx are public (issue 34).

`KubeClient` builds its connection with lightkube's public `ConnectionParams` (kubeconfig auth,
TLS, the `transport=` seam lightkube's AsyncClient offers) and httpx's AsyncClient, takes each
URL from lightkube's public resource info (`api_info`), and sends and decodes the requests
itself, so that one place retries transient errors with a bound and translates errors once
(issue 15), and so that `logs` fetches a whole log as one body (lightkube's public `log()`
yields one line per async step, which cost 4 of the 5 s of collecting 1,024 pods). Tests put a
transport of their own under it through the same `transport=`; no module of k8s.api touches
another library's (or another module's) private names, which a test here checks.
"""

from __future__ import annotations

import ast
import asyncio
import json
from pathlib import Path

import httpx2 as httpx
import pytest
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from tests.cluster.cluster import Cluster
from tests.e2e_helpers import wait_for

import nccl_k8s.k8s.api
from nccl_k8s.errors import Forbidden
from nccl_k8s.k8s import ClientSettings
from nccl_k8s.k8s.api._client import FIELD_MANAGER, POOL_CONNECTIONS, KubeClient, load_config

API = Path(nccl_k8s.k8s.api.__file__).parent


def _config() -> SingleConfig:
    config = KubeConfig.from_dict(
        {
            "clusters": [{"name": "c", "cluster": {"server": "https://k8s.example:6443"}}],
            "users": [{"name": "u", "user": {"token": "s3cret"}}],
            "contexts": [
                {"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "ns"}}
            ],
            "current-context": "x",
        }
    ).get()
    assert config is not None
    return config


def test_a_transport_injected_through_the_public_seam_carries_every_request() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/pods/gone"):
            return httpx.Response(404, json={"kind": "Status", "reason": "NotFound"})
        if request.method == "DELETE":
            return httpx.Response(403, json={"kind": "Status", "reason": "Forbidden",
                                             "message": "no"})  # fmt: skip
        if request.url.path.endswith("/log"):
            return httpx.Response(200, text="a\nb\n")
        body = json.loads(request.content) if request.content else {}
        return httpx.Response(200, json={"kind": "PodGroupList", "items": [],
                                         "metadata": {"resourceVersion": "7"}, **body})  # fmt: skip

    async def talk() -> tuple[object, ...]:
        async with KubeClient(_config(), transport=httpx.MockTransport(answer)) as kc:
            got = await kc.get("Pod", "gone")
            groups = await kc.list("PodGroup", api_version="scheduling.volcano.sh/v1beta1")
            made = await kc.create({"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": "c", "namespace": "ns"}})  # fmt: skip
            log = await kc.logs("p", container="c", tail_lines=2)
            chunks = b"".join([c async for c in kc.log_chunks("p", container="c")])
            assert chunks == b"a\nb\n"  # not the raw path: the requests are the transport's
            with pytest.raises(Forbidden):
                await kc.delete("Job", "j")
            return got, groups, made["metadata"], log, kc.widen_pool(500)

    got, groups, made, log, pool = asyncio.run(talk())
    assert got is None and groups == ([], "7") and made == {"name": "c", "namespace": "ns"}
    assert log == "a\nb\n" and pool == POOL_CONNECTIONS  # an injected transport pools itself
    assert [(r.method, r.url.path) for r in seen] == [
        ("GET", "/api/v1/namespaces/ns/pods/gone"),
        ("GET", "/apis/scheduling.volcano.sh/v1beta1/namespaces/ns/podgroups"),
        ("POST", "/api/v1/namespaces/ns/configmaps"),
        ("GET", "/api/v1/namespaces/ns/pods/p/log"),
        ("GET", "/api/v1/namespaces/ns/pods/p/log"),
        ("DELETE", "/apis/batch/v1/namespaces/ns/jobs/j"),
    ]
    assert {r.headers["Authorization"] for r in seen} == {"Bearer s3cret"}  # kubeconfig's auth
    assert seen[1].url.params["limit"] == "500"
    assert seen[2].url.params["fieldManager"] == FIELD_MANAGER
    assert seen[2].headers["Content-Type"] == "application/json"
    assert dict(seen[3].url.params) == {"container": "c", "tailLines": "2"}
    assert json.loads(seen[5].content)["propagationPolicy"] == "Background"
    assert len([r for r in seen if r.method == "DELETE"]) == 1  # a 403 is final


def _foreign_privates(path: Path) -> list[str]:
    """`x._name` where x is not self or cls (dunders and namedtuple's `_replace` aside)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__") or node.attr in ("_replace", "_asdict", "_fields"):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        out.append(f"{path.name}:{node.lineno}: .{node.attr}")
    return out


def test_no_module_of_the_api_client_touches_private_names_of_others() -> None:
    found = [hit for p in sorted(API.glob("*.py")) for hit in _foreign_privates(p)]
    assert found == []
    imports = [
        f"{p.name}: {n.module}"
        for p in sorted(API.glob("*.py"))
        for n in ast.walk(ast.parse(p.read_text()))
        if isinstance(n, ast.ImportFrom) and n.module and not n.module.startswith("nccl_k8s")
        and n.module != "__future__" and any(part.startswith("_") for part in n.module.split("."))
    ]  # fmt: skip
    assert imports == []


def test_logs_returns_the_whole_log_as_one_body(cluster: Cluster, namespace: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "talker", "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "command": ["python3", "-c", "for i in range(3000): print(f'line {i}')"],
                }
            ],
        },
    }
    cluster.store.create("pods", pod)
    wait_for(
        "talker ended",
        lambda: (
            cluster.store.get("pods", namespace, "talker").get("status", {}).get("phase")
            in ("Succeeded", "Failed")
        ),
    )
    settings = ClientSettings(kubeconfig=str(cluster.kubeconfig))
    assert load_config(settings).cluster.server == cluster.url

    async def fetch() -> tuple[str, str]:
        async with KubeClient.connect(settings) as kc:
            whole = await kc.logs("talker", namespace=namespace, container="c")
            tail = await kc.logs("talker", namespace=namespace, container="c", tail_lines=2)
            return whole, tail

    whole, tail = asyncio.run(fetch())
    assert whole.splitlines() == [f"line {i}" for i in range(3000)]
    assert tail == "line 2998\nline 2999\n"
