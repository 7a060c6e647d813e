"""What the in-process engine tests share: a free local port, a port something listens on, the
environment of a one-rank world, and a clock that only the test moves.

The `world_of_one` fixture (tests/conftest.py) builds on these: one gloo rank in this process.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def held_port() -> Iterator[int]:
    """A TCP port of 127.0.0.1 that a socket of this test listens on until the block ends: a
    server's bind of it fails "Address already in use"."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def one_rank_env(port: int) -> dict[str, str]:
    """The torchrun variables of a world of one rank whose store listens on `port`."""
    return {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}  # fmt: skip


class FakeClock:
    """A module's `time` in a test: perf_counter reads `now`, which only the test moves, so what
    the engine times is exact whatever else the machine is doing; all else is the real `time`."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)
