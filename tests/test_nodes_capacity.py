"""How many 2-node tests `nodes check` runs at once (issue 22): every pair of the round, or
--parallel, with the API client's pool widened to carry them (6 connections a test); fewer only
where the process may not open the sockets, and then it says so. The 34-node end-to-end test
(tests/test_nodes_parallel_e2e.py) shows a round of 17 in flight on the test cluster."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lightkube.config.kubeconfig import KubeConfig

from nccl_k8s.k8s.api._client import POOL_CONNECTIONS, KubeClient
from nccl_k8s.k8s.nodes import _capacity as capacity_mod
from nccl_k8s.k8s.nodes._capacity import RESERVED_FILES, STREAMS_PER_TEST
from nccl_k8s.k8s.nodes._capacity import capacity as _capacity

PER_TEST = STREAMS_PER_TEST + capacity_mod.RAW_PER_TEST


def _client() -> KubeClient:
    config = KubeConfig.from_dict(
        {
            "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    ).get()
    assert config is not None
    return KubeClient(config)


def _pool_bound(kc: KubeClient) -> Any:
    return kc.widen_pool(0)  # never narrows: the bound it holds


def test_the_pool_widens_and_never_narrows() -> None:
    kc = _client()
    try:
        assert _pool_bound(kc) == POOL_CONNECTIONS == 100
        assert kc.widen_pool(17 * STREAMS_PER_TEST) == 102
        assert _pool_bound(kc) == 102
        assert kc.widen_pool(30) == 102  # never narrowed under streams already open
    finally:
        asyncio.run(kc.aclose())


def test_a_widened_pool_opens_that_many_connections_at_once() -> None:
    """102 requests held open at once by a server that never answers: the widened pool opens
    102 connections (httpx's default pool would stop at 100 and queue the rest)."""
    want = 102

    async def main() -> int:
        opened: list[asyncio.StreamWriter] = []
        all_in = asyncio.Event()

        async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            opened.append(writer)
            if len(opened) == want:
                all_in.set()
            await reader.read()  # until the client goes

        server = await asyncio.start_server(hold, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        config = KubeConfig.from_dict(
            {
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        ).get()
        assert config is not None
        kc = KubeClient(config, timeout_s=60.0)
        kc.widen_pool(want)
        asks = [asyncio.ensure_future(kc.version()) for _ in range(want)]
        await all_in.wait()
        for ask in asks:
            ask.cancel()
        await asyncio.gather(*asks, return_exceptions=True)
        await kc.aclose()
        for w in opened:
            w.close()
        server.close()
        return len(opened)

    assert asyncio.run(main()) == want


def test_every_pair_of_the_round_at_once_by_default() -> None:
    kc, said = _client(), list[str]()
    try:
        assert _capacity(kc, 40, None, said.append) == 40
        assert _pool_bound(kc) == 40 * STREAMS_PER_TEST  # past httpx's 100
        assert said == []
        assert _capacity(kc, 40, 4, said.append) == 4
        assert said == [
            "--parallel 4: 4 tests at once (as asked); pass 1's 40 pairs run in 10 waves"
        ]
        assert _capacity(kc, 3, 8, said.append) == 3  # never more than the round
    finally:
        asyncio.run(kc.aclose())


def test_the_open_file_limit_bounds_it_and_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capacity_mod, "open_files", lambda want: RESERVED_FILES + 5 * PER_TEST)
    kc, said = _client(), list[str]()
    try:
        assert _capacity(kc, 17, None, said.append) == 5
        assert said == [
            f"the default (every pair at once): 5 tests at once (this process may open "
            f"{RESERVED_FILES + 5 * PER_TEST} files, {PER_TEST} sockets a test); pass 1's 17 "
            "pairs run in 4 waves"
        ]
    finally:
        asyncio.run(kc.aclose())


def test_the_soft_open_file_limit_is_raised_towards_what_the_round_needs() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        want = 256 + 100 if hard == resource.RLIM_INFINITY else min(256 + 100, hard)
        assert capacity_mod.open_files(256 + 100) == want
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == want
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
