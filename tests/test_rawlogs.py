"""The raw log path (`k8s.api._rawlogs`) against a server that answers as kube-apiserver does:
logs streamed chunked (Go's net/http without a Content-Length), kept-alive connections reused,
and anything but 200 left to the ordinary path."""

from __future__ import annotations

import asyncio

from lightkube.config.kubeconfig import KubeConfig

from nccl_k8s.k8s.api._rawlogs import RawLogs, Unsupported


class _Server:
    """An HTTP/1.1 server that answers pods/<name>/log: chunked for `chunky`, sized for
    `plain`, 400 for `pending`; it counts connections and requests."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[str] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            target = head.split(b" ")[1].decode()
            self.requests.append(target)
            if "/chunky/" in target:
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                for part in (b"line one\nline ", b"two\n"):
                    writer.write(b"%x\r\n%s\r\n" % (len(part), part))
                writer.write(b"0\r\n\r\n")
            elif "/plain/" in target:
                body = b"a\nb\n"
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            else:
                body = b'{"kind":"Status","code":400}'
                writer.write(
                    b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                )
            await writer.drain()
        writer.close()
        await writer.wait_closed()


def _raw(port: int) -> RawLogs:
    config = KubeConfig.from_dict(
        {
            "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "u", "user": {"token": "secret-token"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    ).get()
    assert config is not None and config.user is not None
    from lightkube.config.client_adapter import user_auth

    return RawLogs(config, user_auth(config.user), 5.0)


async def _read(raw: RawLogs, pod: str) -> bytes:
    return b"".join(
        [c async for c in raw.get(f"api/v1/namespaces/ns/pods/{pod}/log", {"container": "bench"})]
    )


def test_chunked_and_sized_bodies_over_one_kept_alive_connection() -> None:
    async def main() -> None:
        s = _Server()
        server = await asyncio.start_server(s.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        raw = _raw(port)
        try:
            assert await _read(raw, "chunky") == b"line one\nline two\n"
            assert await _read(raw, "plain") == b"a\nb\n"
            assert await _read(raw, "chunky") == b"line one\nline two\n"
        finally:
            await raw.aclose()
            server.close()
            await server.wait_closed()
        assert s.connections == 1  # kept alive, reused
        assert s.requests == [
            "/api/v1/namespaces/ns/pods/chunky/log?container=bench",
            "/api/v1/namespaces/ns/pods/plain/log?container=bench",
            "/api/v1/namespaces/ns/pods/chunky/log?container=bench",
        ]

    asyncio.run(main())


def test_any_other_answer_is_left_to_the_ordinary_path() -> None:
    async def main() -> None:
        s = _Server()
        server = await asyncio.start_server(s.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        raw = _raw(port)
        try:
            try:
                await _read(raw, "pending")
            except Unsupported as e:
                assert "400" in str(e)
            else:
                raise AssertionError("a 400 was read as a log")
        finally:
            await raw.aclose()
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_the_token_of_the_kubeconfig_is_sent() -> None:
    async def main() -> bytes:
        got: list[bytes] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            got.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx")
            await writer.drain()
            writer.close()
            await writer.wait_closed()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        raw = _raw(server.sockets[0].getsockname()[1])
        try:
            assert await _read(raw, "plain") == b"x"
        finally:
            await raw.aclose()
            server.close()
            await server.wait_closed()
        return got[0]

    head = asyncio.run(main())
    assert b"\r\nAuthorization: Bearer secret-token\r\n" in head
