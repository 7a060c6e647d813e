"""Issue 22: lists in pages, tables and metadata alone (the server side in tests/cluster, the
client's api._lists), and a run's pods read from table rows (run._podlist) exactly as
`pod_info` reads them from whole pods."""

from __future__ import annotations

import copy
import json
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from tests.cluster import tables
from tests.cluster.cluster import Cluster

from nccl_k8s.k8s import ClientSettings
from nccl_k8s.k8s.api import _lists
from nccl_k8s.k8s.api._client import KubeClient, RetrySettings
from nccl_k8s.k8s.run import _podlist
from nccl_k8s.k8s.run._pods import pod_info

T = TypeVar("T")
FAST = RetrySettings(attempts=3, backoff_s=0.01, max_wait_s=0.05)
RUN = {
    "app.kubernetes.io/name": "nccl-k8s",
    "app.kubernetes.io/managed-by": "nccl-k8s",
    "app.kubernetes.io/instance": "r1",
}


def run(cluster: Cluster, fn: Callable[[KubeClient], Awaitable[T]]) -> T:
    import asyncio

    settings = ClientSettings(kubeconfig=str(cluster.kubeconfig), retry=FAST)

    async def main() -> T:
        async with KubeClient.connect(settings) as kc:
            return await fn(kc)

    return asyncio.run(main())


def get(cluster: Cluster, path: str, accept: str) -> Any:
    req = urllib.request.Request(cluster.url + path, headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=20) as resp:
        return json.loads(resp.read())


def make_configmaps(cluster: Cluster, ns: str, n: int) -> list[str]:
    names = [f"cm-{i}" for i in range(n)]
    for name in names:
        cluster.store.create(
            "configmaps",
            {"metadata": {"name": name, "namespace": ns, "labels": {"k": "v"}},
             "data": {"big": "x" * 1000}},
        )  # fmt: skip
    return names


def test_the_test_server_sends_metadata_alone_and_table_pages(
    cluster: Cluster, namespace: str
) -> None:
    names = make_configmaps(cluster, namespace, 5)
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    meta = get(cluster, base, _lists.METADATA)
    assert meta["kind"] == "PartialObjectMetadataList"
    assert [i["metadata"]["name"] for i in meta["items"]] == names
    assert all("data" not in i and i["kind"] == "PartialObjectMetadata" for i in meta["items"])
    assert meta["items"][0]["metadata"]["labels"] == {"k": "v"}
    one = get(
        cluster, f"{base}/cm-1", "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"
    )
    assert one["kind"] == "PartialObjectMetadata" and "data" not in one

    # A table in pages of 2: every row once, each with its metadata (includeObject's default).
    seen: list[str] = []
    token = ""
    while True:
        page = get(cluster, f"{base}?limit=2&continue={token}", _lists.TABLE)
        assert page["kind"] == "Table" and len(page["rows"]) <= 2
        seen += [r["object"]["metadata"]["name"] for r in page["rows"]]
        token = page["metadata"].get("continue", "")
        if not token:
            break
    assert seen == names
    bare = get(cluster, f"{base}?includeObject=None", _lists.TABLE)
    assert [r["cells"][0] for r in bare["rows"]] == names
    assert all("object" not in r for r in bare["rows"])
    whole = get(cluster, f"{base}?includeObject=Object", _lists.TABLE)
    assert whole["rows"][0]["object"]["data"] == {"big": "x" * 1000}


def test_lists_go_in_pages_and_an_expired_token_relists_whole(
    cluster: Cluster, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = make_configmaps(cluster, namespace, 5)
    monkeypatch.setattr(_lists, "PAGE_SIZE", 2)
    # The first page is served; the continue after it finds its snapshot compacted (410).
    path = f"/namespaces/{namespace}/configmaps$"
    cluster.faults.delay_requests(path, 0.0, 1, method="GET")
    cluster.faults.fail_requests(path, 410, 1, method="GET", message="continue too old")

    async def both(kc: KubeClient) -> tuple[list[str], list[str]]:
        items, _ = await kc.list("ConfigMap", namespace=namespace)
        meta, _ = await _lists.list_metadata(kc, "ConfigMap", namespace=namespace)
        return [i["metadata"]["name"] for i in items], [i["metadata"]["name"] for i in meta]

    listed, meta_names = run(cluster, both)
    assert cluster.faults.pending() == 0  # a second request came: the list went in pages
    assert listed == names and meta_names == names


def _pod(i: int, phase: str, state: dict[str, Any], **extra: Any) -> dict[str, Any]:
    labels = {**RUN, "batch.kubernetes.io/job-completion-index": str(i)}
    cs = {"name": "bench", "image": "x", "ready": "running" in state, "state": state,
          "restartCount": extra.pop("restarts", 0), "lastState": extra.pop("last", {})}  # fmt: skip
    pod: dict[str, Any] = {
        "metadata": {
            "name": f"r1-{i}-abcde",
            "labels": labels,
            "annotations": {"batch.kubernetes.io/job-completion-index": str(i)},
        },
        "spec": {
            "containers": [{"name": "bench", "image": "x"}],
            "schedulerName": extra.pop("scheduler", "default-scheduler"),
        },
        "status": {"phase": phase, "containerStatuses": [cs], **extra.pop("status", {})},
    }
    if extra.get("node", "n-1"):
        pod["spec"]["nodeName"] = extra.get("node", "n-1")
    return pod


T0 = "2026-12-04T06:58:16Z"
PODS = [
    _pod(0, "Running", {"running": {"startedAt": T0}}),  # fine
    _pod(1, "Succeeded", {"terminated": {"exitCode": 0, "reason": "Completed"}}),  # fine
    _pod(
        2,
        "Running",
        {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
        restarts=3,
        last={"terminated": {"exitCode": 1, "reason": "Error"}},
    ),
    _pod(3, "Running", {"running": {"startedAt": T0}}, restarts=2),
    _pod(4, "Pending", {"waiting": {"reason": "ContainerCreating"}}, node=""),
    _pod(5, "Failed", {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}),
    _pod(6, "Running", {"running": {"startedAt": T0}}, scheduler="volcano"),
    _pod(7, "Succeeded", {"terminated": {"exitCode": 0, "reason": "Completed"}}, node="n-2"),
]
NOT_FINE = {"r1-2-abcde", "r1-3-abcde", "r1-4-abcde", "r1-5-abcde", "r1-6-abcde"}


@pytest.fixture(scope="module")
def quiet(cluster_factory: Callable[..., Cluster]) -> Cluster:
    """A cluster without scheduler, controllers or kubelet: pods stay as the test makes them."""
    c = cluster_factory(nodes=1, components=False)
    c.store.create("namespaces", {"metadata": {"name": "pods"}})
    for pod in PODS:
        c.store.create("pods", {**copy.deepcopy(pod), "metadata": {
            **copy.deepcopy(pod["metadata"]), "namespace": "pods"}})  # fmt: skip
    other = copy.deepcopy(PODS[0])
    other["metadata"]["name"] = "r2-0-abcde"
    other["metadata"]["labels"]["app.kubernetes.io/instance"] = "r2"
    other["metadata"]["namespace"] = "pods"
    c.store.create("pods", other)
    return c


def _read(cluster: Cluster) -> tuple[_podlist.RunPods, list[dict[str, Any]]]:
    async def both(kc: KubeClient) -> tuple[_podlist.RunPods, list[dict[str, Any]]]:
        got = await _podlist.read_pods(kc, "pods", RUN, scheduler="default-scheduler")
        whole, _ = await kc.list("Pod", namespace="pods", labels=RUN)
        return got, whole

    return run(cluster, both)


def test_fine_pods_come_from_table_rows_exactly_as_pod_info_reads_them(quiet: Cluster) -> None:
    with quiet.record_requests() as seen:
        got, whole = _read(quiet)
    # Lists only: the Role `nccl-k8s rbac` prints grants pods list and watch, not get.
    assert {a.verb for a in seen if a.resource == "pods"} == {"list"}
    assert sorted(got.infos, key=lambda i: i.name) == sorted(
        (pod_info(p) for p in whole), key=lambda i: i.name
    )
    # Only the pods with something to say (and the one asking for another scheduler) whole.
    assert {p["metadata"]["name"] for p in got.whole} == NOT_FINE
    assert set(got.runs.values()) == {"r1"}
    by_name = {i.name: i for i in got.infos}
    assert by_name["r1-7-abcde"].node == "n-2" and by_name["r1-7-abcde"].rank == 7
    assert by_name["r1-2-abcde"].reason == "CrashLoopBackOff"
    assert by_name["r1-6-abcde"].scheduler == "volcano"


def test_many_rows_not_fine_are_listed_whole_and_a_server_without_tables_is_read_whole(
    quiet: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_podlist, "FETCH_EACH", 0)  # not one by one: their phase's list
    got, whole = _read(quiet)
    expected = sorted((pod_info(p) for p in whole), key=lambda i: i.name)
    assert sorted(got.infos, key=lambda i: i.name) == expected
    assert {p["metadata"]["name"] for p in got.whole} == NOT_FINE

    monkeypatch.setattr(tables, "wants_table", lambda accept: False)
    got, _ = _read(quiet)
    assert sorted(got.infos, key=lambda i: i.name) == expected
    assert len(got.whole) == len(PODS)
