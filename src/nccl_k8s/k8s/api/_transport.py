"""The client's HTTP connection, built through public seams only.

lightkube's `ConnectionParams` turns a kubeconfig context into httpx's arguments (the server, the
TLS context of its CA and client certificate, its auth: token, token file, exec plugin, basic)
and takes a `transport=`: the seam lightkube's own AsyncClient offers, through which tests put
a transport of their own (httpx.MockTransport, a recorder, a server that goes away) under the
client. httpx's AsyncClient takes those arguments with the pool's bound (`httpx.Limits`).
Nothing here reads or writes another library's private state.

One connection pool holds at most POOL_CONNECTIONS connections at once (httpx's default), which
bounds how many streams (watches, followed logs) run together. A caller that knows it will hold
more widens it (`widen`: `nodes check` sizes it for a round of its tests): requests sent from then
on go through a pool of the wider bound, made with the same TLS context and auth object (an exec
plugin's token is fetched once); streams already open finish on the pool they use, and every
pool is closed with the connection.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx2 as httpx
import msgspec
from lightkube.config.client_adapter import ConnectionParams
from lightkube.config.kubeconfig import SingleConfig

#: Connections one pool holds at once unless widened (httpx's default).
POOL_CONNECTIONS = 100
#: Idle connections a pool keeps open for the next request (httpx's default).
KEEPALIVE_CONNECTIONS = 20


@dataclasses.dataclass
class Call:
    """One request as the client sends it (again on a retry): method, path under the server,
    query, JSON body, headers, and a timeout other than the client's."""

    method: str
    url: str
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    body: Any = None
    headers: dict[str, str] | None = None
    timeout: httpx.Timeout | None = None


class Connection:
    """The httpx client the API client sends through, and what the raw log path shares."""

    def __init__(
        self,
        config: SingleConfig,
        *,
        timeout_s: float,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        params = ConnectionParams(
            timeout=httpx.Timeout(timeout_s),
            transport=transport,  # type: ignore[arg-type]  # lightkube's AsyncClient passes async ones too
        )
        self._params: dict[str, Any] = params.httpx_params(config)
        self.auth: httpx.Auth | None = self._params["auth"]
        """The kubeconfig user's auth, the one every request of this connection carries."""
        self.watch_timeout = httpx.Timeout(timeout_s, read=None)
        """For watches and followed logs: no read timeout, a stream may be quiet for long."""
        self.injected = transport is not None
        self.connections = POOL_CONNECTIONS
        self.http = self._client()
        self._retired: list[httpx.AsyncClient] = []

    def _client(self) -> httpx.AsyncClient:
        limits = httpx.Limits(
            max_connections=self.connections, max_keepalive_connections=KEEPALIVE_CONNECTIONS
        )
        return httpx.AsyncClient(**self._params, limits=limits)

    async def send(self, call: Call, *, stream: bool = False) -> httpx.Response:
        """Send `call` once (httpx's errors and any status are the caller's to judge)."""
        headers = dict(call.headers or {})
        content = None
        if call.body is not None:
            content = msgspec.json.encode(call.body)
            headers.setdefault("Content-Type", "application/json")
        timeout = call.timeout if call.timeout is not None else httpx.USE_CLIENT_DEFAULT
        request = self.http.build_request(
            call.method,
            call.url,
            params=call.params,
            content=content,
            headers=headers or None,
            timeout=timeout,
        )
        return await self.http.send(request, stream=stream)

    def widen(self, connections: int) -> int:
        """Let requests from now on hold up to `connections` at once (never fewer than now);
        the bound now. An injected transport pools as it likes: POOL_CONNECTIONS, as httpx's."""
        if self.injected:
            return POOL_CONNECTIONS
        if connections > self.connections:
            self._retired.append(self.http)
            self.connections = connections
            self.http = self._client()
        return self.connections

    async def aclose(self) -> None:
        for client in (*self._retired, self.http):
            await client.aclose()


__all__ = ["KEEPALIVE_CONNECTIONS", "POOL_CONNECTIONS", "Call", "Connection"]
