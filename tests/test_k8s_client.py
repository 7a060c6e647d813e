"""k8s.api._client against the test cluster over real HTTP: transient failures retried within a bound,
creates never repeated where the server may have acted, uid preconditions on delete, and a
kubeconfig that is not one (or points nowhere) told in one line with the right exit code."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx2 as httpx
import pytest
from tests.cluster.cluster import Cluster
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.errors import ClusterError, Conflict, Unreachable, UsageError
from nccl_k8s.k8s import ClientSettings
from nccl_k8s.k8s.api._client import KubeClient, RetrySettings, load_config

T = TypeVar("T")
FAST = RetrySettings(attempts=4, backoff_s=0.05, max_wait_s=2.0)


def run(cluster: Cluster, fn: Callable[[KubeClient], Awaitable[T]], **kw: Any) -> T:
    settings = ClientSettings(kubeconfig=str(cluster.kubeconfig), retry=kw.pop("retry", FAST))

    async def main() -> T:
        async with KubeClient.connect(settings) as kc:
            return await fn(kc)

    return asyncio.run(main())


def cm(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": {"k": "v"},
    }


def test_reads_ride_out_three_500s_and_a_429_with_retry_after(
    cluster: Cluster, namespace: str
) -> None:
    cluster.store.create("configmaps", cm(namespace, "a"))
    cluster.faults.fail_requests(rf"/namespaces/{namespace}/configmaps$", 500, count=3)
    items, rv = run(cluster, lambda kc: kc.list("ConfigMap", namespace=namespace))
    assert [o["metadata"]["name"] for o in items] == ["a"] and rv
    assert items[0]["kind"] == "ConfigMap" and items[0]["apiVersion"] == "v1"
    assert cluster.faults.pending() == 0

    cluster.faults.fail_requests(r"/configmaps/a$", 429, retry_after_s=1)
    start = time.monotonic()
    got = run(cluster, lambda kc: kc.get("ConfigMap", "a", namespace=namespace))
    assert got is not None and got["data"] == {"k": "v"}
    assert time.monotonic() - start >= 1.0  # the server's Retry-After was honoured

    # The bound: five 500s outlast four attempts, and the message says it asked that often.
    cluster.faults.fail_requests(rf"/namespaces/{namespace}/configmaps$", 500, count=5)
    with pytest.raises(ClusterError, match=r"answered 500 to list configmaps .*asked 4 times"):
        run(cluster, lambda kc: kc.list("ConfigMap", namespace=namespace))
    cluster.faults.clear()


def test_a_500_on_opening_a_watch_or_a_log_is_retried(cluster: Cluster, namespace: str) -> None:
    async def watch_one(kc: KubeClient) -> str:
        _, rv = await kc.list("ConfigMap", namespace=namespace)
        cluster.store.create("configmaps", cm(namespace, "w"))
        async for etype, obj in kc.watch("ConfigMap", namespace=namespace, resource_version=rv):
            return f"{etype} {obj['metadata']['name']}"
        return "ended"

    cluster.faults.fail_requests(rf"/namespaces/{namespace}/configmaps$", 500, count=2)
    # The list takes the first 500 (and retries); the watch's opening takes the second.
    assert run(cluster, watch_one) == "ADDED w"
    assert cluster.faults.pending() == 0


def test_a_create_is_not_repeated_after_a_500_and_409_says_already_exists(
    cluster: Cluster, namespace: str
) -> None:
    assert cluster.apiserver is not None
    cluster.faults.fail_requests(rf"/namespaces/{namespace}/configmaps$", 500, method="POST")
    before = cluster.apiserver.requests
    with pytest.raises(ClusterError, match="answered 500 to create configmaps 'c'") as info:
        run(cluster, lambda kc: kc.create(cm(namespace, "c")))
    assert info.value.status == 500
    assert cluster.apiserver.requests == before + 1  # sent once: the server may have acted

    made = run(cluster, lambda kc: kc.create(cm(namespace, "c")))
    assert made["metadata"]["uid"]
    managers = [m["manager"] for m in made["metadata"]["managedFields"]]
    assert managers == ["nccl-k8s"]
    with pytest.raises(Conflict) as again:
        run(cluster, lambda kc: kc.create(cm(namespace, "c")))
    assert again.value.reason == "AlreadyExists"
    assert str(again.value) == f"ConfigMap c already exists in namespace {namespace}"


def test_delete_with_a_uid_deletes_only_that_object(cluster: Cluster, namespace: str) -> None:
    first = cluster.store.create("configmaps", cm(namespace, "d"))
    cluster.store.delete("configmaps", namespace, "d")
    second = cluster.store.create("configmaps", cm(namespace, "d"))
    # The uid of the object that went: the new one of that name is not touched.
    with pytest.raises(Conflict, match="Precondition failed: UID in precondition"):
        run(
            cluster,
            lambda kc: kc.delete(
                "ConfigMap", "d", namespace=namespace, uid=first["metadata"]["uid"]
            ),
        )
    assert (
        cluster.store.get("configmaps", namespace, "d")["metadata"]["uid"]
        == (second["metadata"]["uid"])
    )
    cluster.faults.fail_requests(r"/configmaps/d$", 503, method="DELETE", count=2)
    gone = run(
        cluster,
        lambda kc: kc.delete("ConfigMap", "d", namespace=namespace, uid=second["metadata"]["uid"]),
    )
    assert gone is True
    assert cluster.store.list("configmaps", namespace)[0] == []


# ---- configuration: one line, exit 2 -----------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (bytes(range(256)) * 2, "not a kubeconfig (not UTF-8 text: a binary file?)"),
        (b"apiVersion: v1\nclusters: [\n", "not valid YAML (line 3, column 1:"),
        (b"- a\n- b\n", "expected a kubeconfig (a mapping with clusters, contexts and users"),
        (b"", "got an empty file"),
        (b"just words\n", "got a str"),
        (b"current-context: x\n", "a mapping without a `clusters` list"),
        (
            b"clusters:\n- name: c\n  cluster: 5\ncontexts:\n- name: x\n  context: "
            b"{cluster: c, user: u}\ncurrent-context: x\nusers: []\n",
            "not a valid kubeconfig: Expected `object`, got `int`",
        ),
        (
            b"clusters:\n- name: c\n  cluster: {server: 'ht!tp://x'}\ncontexts:\n- name: x\n"
            b"  context: {cluster: c, user: u}\ncurrent-context: x\nusers:\n- name: u\n"
            b"  user: {}\n",
            "server 'ht!tp://x' is not an http:// or https:// URL",
        ),
    ],
)
def test_a_kubeconfig_that_is_not_one_is_one_line_exit_2(
    tmp_path: Path, content: bytes, words: str
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_bytes(content)
    with pytest.raises(UsageError, match="kubeconfig"):
        load_config(ClientSettings(kubeconfig=str(path)))
    res = CliRunner().invoke(app, ["status", "--kubeconfig", str(path)])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], lines
    assert "Traceback" not in res.output


def test_a_server_never_reached_is_configuration_one_that_went_away_is_a_failure(
    cluster: Cluster, tmp_path: Path
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = cluster.kubeconfig
    assert kubeconfig is not None
    dead = tmp_path / "kubeconfig"
    dead.write_text(kubeconfig.read_text().replace(cluster.url, f"http://127.0.0.1:{port}"))
    res = CliRunner().invoke(app, ["list", "--kubeconfig", str(dead)])
    assert res.exit_code == 2, res.output
    assert f"cannot reach the API server at http://127.0.0.1:{port} (" in res.output

    # The client's transport, injected through its public seam, counts what is sent: to the
    # cluster, then (once `gone`) to the dead port.
    class Moving(httpx.AsyncHTTPTransport):
        gone = False
        sent = 0

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            self.sent += 1
            if self.gone:
                request.url = request.url.copy_with(port=port)
            return await super().handle_async_request(request)

    def client(moving: Moving, kubeconfig: Path) -> KubeClient:
        config = load_config(ClientSettings(kubeconfig=str(kubeconfig)))
        return KubeClient(config, retry=FAST, transport=moving)

    # Never reached: one request, not retried (the kubeconfig points nowhere), exit 2.
    never = Moving()

    async def unreached() -> None:
        async with client(never, dead) as kc:
            await kc.list("Namespace")

    with pytest.raises(Unreachable) as first:
        asyncio.run(unreached())
    assert first.value.exit_code == 2 and not first.value.reached and never.sent == 1

    # Reached once, then gone: exit 1, after the retries.
    moving = Moving()

    async def reached_then_lost() -> None:
        async with client(moving, kubeconfig) as kc:
            await kc.list("Namespace")
            moving.gone = True  # the same client, now talking to nothing
            await kc.list("Namespace")

    with pytest.raises(Unreachable) as info:
        asyncio.run(reached_then_lost())
    assert info.value.exit_code == 1 and info.value.reached
    assert "asked 4 times" in str(info.value)
    assert moving.sent == 1 + 4  # the first list, then the lost one and its 3 retries
