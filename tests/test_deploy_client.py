"""The piece of lightkube that is not public API, guarded (issue 11).

`KubeClient` sends every request through lightkube's generic client (`AsyncClient._client`:
prepare_request, build_adapter_request, send, and the watch timeout), so that one place retries
transient errors with a bound and translates errors once (issue 15), and so that `logs` fetches a
whole log as one body (lightkube's public `log()` yields one line per async step, which cost 4 of
the 5 s of collecting 1,024 pods). URLs, auth and TLS stay lightkube's. lightkube is pinned to 1.x
(pyproject); these tests fail, naming what moved, the day a lightkube release renames or reshapes
those internals, instead of every command breaking for users. The rest is public:
generic_resource.create_namespaced_resource, KubeConfig and SingleConfig.
"""

from __future__ import annotations

import asyncio
import inspect

from lightkube import AsyncClient
from lightkube.core.generic_client import GenericAsyncClient
from tests.cluster.cluster import Cluster
from tests.e2e_helpers import wait_for

from nccl_k8s.k8s import ClientSettings
from nccl_k8s.k8s.api._client import KubeClient, load_config


def test_the_private_generic_client_still_has_the_shape_logs_relies_on(cluster: Cluster) -> None:
    kc = KubeClient.connect(ClientSettings(kubeconfig=str(cluster.kubeconfig)))
    assert isinstance(kc._client, AsyncClient)
    assert isinstance(kc._client._client, GenericAsyncClient), "AsyncClient._client moved"
    asyncio.run(kc.aclose())
    params = inspect.signature(GenericAsyncClient.prepare_request).parameters
    assert {"method", "res", "name", "namespace", "params"} <= params.keys()
    assert list(inspect.signature(GenericAsyncClient.build_adapter_request).parameters) == [
        "self",
        "br",
    ]
    assert "req" in inspect.signature(GenericAsyncClient.send).parameters
    assert "resp" in inspect.signature(GenericAsyncClient.raise_for_status).parameters
    kc = KubeClient.connect(ClientSettings(kubeconfig=str(cluster.kubeconfig)))
    assert hasattr(kc._client._client, "_watch_timeout"), "the watch timeout moved"
    asyncio.run(kc.aclose())


def test_logs_through_the_private_path_returns_the_whole_log(
    cluster: Cluster, namespace: str
) -> None:
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
