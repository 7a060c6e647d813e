"""The sync entry points' one bridge to the async client: one event loop and one client per
call. Every function the facade exports as sync (deploy, status, doctor...) runs through it,
over its async core (deploy_async, collect_async...); code that composes several of them (the
bad-node finder) composes the cores inside one call instead, on that call's loop and client."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nccl_k8s.k8s.api._client import ClientSettings, KubeClient

T = TypeVar("T")


def run_sync(factory: Callable[[KubeClient], Awaitable[T]], settings: ClientSettings) -> T:
    """Connect (reading the kubeconfig sends nothing), run `factory(client)`, close."""
    client = KubeClient.connect(settings)

    async def main() -> T:
        async with client:
            return await factory(client)

    return asyncio.run(main())
