"""Pod logs over plain HTTP/1.1 keep-alive connections: what lets `results` read thousands.

Through httpx, each request costs the client ~0.8 ms of CPU (its pool scans every connection
per request, anyio wraps every socket call), so fetching 4,096 pods' logs took ~3.5 s before a
line was read; a request here costs ~0.07 ms. It is one GET of `pods/<name>/log` with the
kubeconfig's TLS context (lightkube's `verify_cluster`: CA, client certificate) and its
Authorization header (the same httpx auth lightkube uses: token, token file, exec plugin,
basic), the body read as it arrives (Content-Length or chunked).

It handles the answer it expects, 200 with a body, and nothing else: any other status, a
proxy in the environment, a dropped connection or a malformed answer raises `Unsupported`, and
the caller asks again through the client's ordinary path, which owns retries and turns every
failure into our error.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import sys
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import httpx2 as httpx
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.kubeconfig import SingleConfig

T = TypeVar("T")

#: Bytes read from the socket at a time.
_CHUNK = 1 << 16


if sys.version_info >= (3, 11):

    async def _within(aw: Awaitable[T], timeout_s: float) -> T:
        """`aw`, or TimeoutError after `timeout_s`: asyncio.timeout schedules one timer, where
        wait_for (3.11) wraps every read in a task of its own (~20 us, thousands per results)."""
        async with asyncio.timeout(timeout_s):
            return await aw

else:  # pragma: no cover - Python 3.10
    _within = asyncio.wait_for


class Unsupported(Exception):
    """This request is not one the raw path handles: send it the ordinary way."""


class RawLogs:
    """GETs of pod logs over connections of its own (kept alive, reused)."""

    def __init__(
        self,
        config: SingleConfig,
        auth: httpx.Auth | None,
        timeout_s: float,
        *,
        usable: bool = True,
    ) -> None:
        """`usable=False`: never used (the client sends through an injected transport)."""
        url = urllib.parse.urlsplit(config.cluster.server)
        self._config, self._auth, self._timeout = config, auth, timeout_s
        self._https = url.scheme == "https"
        self._host = url.hostname or ""
        self._port = url.port or (443 if self._https else 80)
        self._netloc = url.netloc
        self._base = url.path.rstrip("/")
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._head: bytes | None = None
        self._ssl: ssl.SSLContext | None = None
        self._lock = asyncio.Lock()
        proxies = urllib.request.getproxies()
        self.usable = (
            usable
            and url.scheme in ("http", "https")
            and not (
                any(k in proxies for k in ("http", "https", "all"))
                and not urllib.request.proxy_bypass(self._host)
            )
        )

    async def _prepare(self) -> bytes:
        """The headers of every request: host, and the Authorization the auth flow sets."""
        async with self._lock:
            if self._head is None:
                headers = [f"Host: {self._netloc}", "Accept: */*", "User-Agent: nccl-k8s"]
                if self._auth is not None:
                    request = httpx.Request("GET", self._config.cluster.server)
                    flow = self._auth.async_auth_flow(request)
                    request = await flow.__anext__()
                    await flow.aclose()
                    if "Authorization" in request.headers:
                        headers.append(f"Authorization: {request.headers['Authorization']}")
                if self._https:
                    c = self._config
                    if c.user is None:  # lightkube's own client refuses it too
                        raise Unsupported("the kubeconfig context names no user")
                    self._ssl = verify_cluster(c.cluster, c.user, c.abs_file)
                    self._ssl.set_alpn_protocols(["http/1.1"])
                self._head = ("\r\n".join(headers) + "\r\n\r\n").encode()
            return self._head

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._idle:
            return self._idle.pop()
        return await _within(
            asyncio.open_connection(self._host, self._port, ssl=self._ssl, limit=_CHUNK * 4),
            self._timeout,
        )

    async def get(self, path: str, params: dict[str, Any]) -> AsyncIterator[bytes]:
        """The body of GET `path`, in chunks as they arrive; Unsupported for anything but 200."""
        try:
            head = await self._prepare()
        except Exception as e:  # an auth plugin or a TLS file the ordinary path will report
            raise Unsupported(str(e)) from e
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        target = f"{self._base}/{path}" + (f"?{query}" if query else "")
        request = f"GET {target} HTTP/1.1\r\n".encode() + head
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            conn = await self._connection()
            reader, writer = conn
            writer.write(request)
            status, length, chunked, close = await self._headers(reader)
            if status != 200:
                raise Unsupported(f"status {status}")
            body = self._chunked(reader) if chunked else self._sized(reader, length)
            async for data in body:
                yield data
            if not close:
                self._idle.append(conn)
                conn = None
        except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
            raise Unsupported(f"{type(e).__name__}: {e}") from e
        except ValueError as e:  # a malformed answer
            raise Unsupported(str(e)) from e
        finally:
            if conn is not None:
                await _close(conn[1])

    async def _headers(self, reader: asyncio.StreamReader) -> tuple[int, int | None, bool, bool]:
        raw = await _within(reader.readuntil(b"\r\n\r\n"), self._timeout)
        lines = raw.decode("latin-1").split("\r\n")
        version, status = lines[0].split(" ", 2)[:2]
        fields = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                fields[k.strip().lower()] = v.strip().lower()
        length = int(fields["content-length"]) if "content-length" in fields else None
        chunked = "chunked" in fields.get("transfer-encoding", "")
        close = fields.get("connection") == "close" or version == "HTTP/1.0"
        if "content-encoding" in fields and fields["content-encoding"] != "identity":
            raise ValueError(f"content-encoding {fields['content-encoding']}")
        if length is None and not chunked:
            close = True  # the body ends with the connection
        return int(status), length, chunked, close

    async def _sized(
        self, reader: asyncio.StreamReader, length: int | None
    ) -> AsyncIterator[bytes]:
        left = length
        while left is None or left > 0:
            data = await _within(
                reader.read(_CHUNK if left is None else min(_CHUNK, left)), self._timeout
            )
            if not data:
                if left is None:
                    return
                raise EOFError(f"connection closed with {left} bytes of the body unread")
            if left is not None:
                left -= len(data)
            yield data

    async def _chunked(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        while True:
            line = await _within(reader.readuntil(b"\r\n"), self._timeout)
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while (await _within(reader.readuntil(b"\r\n"), self._timeout)) != b"\r\n":
                    pass  # trailers
                return
            yield await _within(reader.readexactly(size), self._timeout)
            await reader.readexactly(2)

    async def aclose(self) -> None:
        for _, writer in self._idle:
            await _close(writer)
        self._idle.clear()


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


__all__ = ["RawLogs", "Unsupported"]
