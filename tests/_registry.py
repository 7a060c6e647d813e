"""A container registry on loopback speaking what `deploy --pin-images` asks
(k8s.api._registry): the OCI Distribution API's manifest HEAD and GET, behind Docker's token
authentication (a 401 with a Bearer challenge naming a realm, an anonymous token from it), as
Docker Hub, nvcr.io and public.ecr.aws answer. It holds manifests by repository and tag; each
request is recorded so a test can tell what was asked."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "anonymous-pull-token"
INDEX = "application/vnd.oci.image.index.v1+json"


class Registry:
    def __init__(self, server: ThreadingHTTPServer) -> None:
        self.server = server
        self.manifests: dict[tuple[str, str], bytes] = {}
        self.requests: list[tuple[str, str, str]] = []  # method, path, Authorization
        self.digest_header = True
        """False: the HEAD carries no Docker-Content-Digest (it is optional): GET and hash."""
        self.challenge = "Bearer"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def push(self, repository: str, tag: str, content: dict[str, Any]) -> str:
        """Store a manifest; its digest (`sha256:<hex>` of its bytes)."""
        body = json.dumps(content, sort_keys=True).encode()
        self.manifests[(repository, tag)] = body
        return "sha256:" + hashlib.sha256(body).hexdigest()


def _handler(reg: Registry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, head: bool) -> None:
            reg.requests.append((self.command, self.path, self.headers.get("Authorization", "")))
            if self.path.startswith("/token?"):
                token = json.dumps({"token": TOKEN}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(token)))
                self.end_headers()
                self.wfile.write(token)
                return
            path = self.path.removeprefix("/v2/")
            repository, _, tag = path.rpartition("/manifests/")
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                realm = f"http://{reg.host}/token"
                self.send_response(401)
                self.send_header(
                    "WWW-Authenticate",
                    f'{reg.challenge} realm="{realm}",service="test-registry",'
                    f'scope="repository:{repository}:pull"',
                )
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = reg.manifests.get((repository, tag))
            if body is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", INDEX)
            self.send_header("Content-Length", str(len(body)))
            if reg.digest_header:
                self.send_header(
                    "Docker-Content-Digest", "sha256:" + hashlib.sha256(body).hexdigest()
                )
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def do_GET(self) -> None:
            self._answer(head=False)

    return Handler


@contextmanager
def registry() -> Iterator[Registry]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    reg = Registry(server)
    server.RequestHandlerClass = _handler(reg)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield reg
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
