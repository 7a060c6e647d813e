"""A Prometheus Pushgateway stand-in on loopback: a real HTTP server that records each push
(method, path, body) as the Pushgateway would receive it (tests of `nodes check --push-to`)."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from typing import Any


class Gateway(http.server.ThreadingHTTPServer):
    """Records (method, path, body); answers 500 for a path holding `fail`."""

    def __init__(self) -> None:
        self.pushes: list[tuple[str, str, str]] = []
        self.fail = "\0"
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Gateway

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        self.server.pushes.append(("PUT", self.path, body))
        self.send_response(500 if self.server.fail in self.path else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serving() -> Iterator[Gateway]:
    """A Gateway serving in a thread until the block ends."""
    gw = Gateway()
    thread = threading.Thread(target=gw.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield gw
    finally:
        gw.shutdown()
        gw.server_close()
        thread.join(timeout=10)
