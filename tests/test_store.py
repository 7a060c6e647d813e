"""bench.store: the torch-free rendezvous store and the control plane the direct ranks use."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from nccl_k8s.bench.store import (
    MAX_REPLY_BYTES,
    MAX_REQUEST_BYTES,
    FrameTooLarge,
    StoreClient,
    StoreGroup,
    StoreServer,
    StoreTimeout,
)


@pytest.fixture
def server() -> Iterator[StoreServer]:
    s = StoreServer("127.0.0.1", 0)
    yield s
    s.close()


def test_set_get_check_add_delete(server: StoreServer) -> None:
    with StoreClient("127.0.0.1", server.port, timeout_s=5) as c:
        assert not c.check(["a"])
        c.set("a", b"\x00\xffbytes")
        assert c.check(["a"]) and c.get("a") == b"\x00\xffbytes"
        assert c.add("n", 2) == 2 and c.add("n", 3) == 5
        c.delete_key("a")
        assert not c.check(["a"])


def test_get_waits_for_the_key_and_times_out(server: StoreServer) -> None:
    got: list[bytes] = []
    with StoreClient("127.0.0.1", server.port, timeout_s=30) as waiter:
        t = threading.Thread(target=lambda: got.append(waiter.get("late")))
        t.start()
        with StoreClient("127.0.0.1", server.port) as setter:
            setter.set("late", "here")
        t.join(10)
    assert got == [b"here"]
    with (
        StoreClient("127.0.0.1", server.port, timeout_s=0.2) as c,
        pytest.raises(StoreTimeout, match=r"no answer within 0\.2 s"),
    ):
        c.get("never")


def test_gather_and_barrier_across_ranks_and_keys_are_freed(server: StoreServer) -> None:
    world = 5
    out: dict[int, list[list[float]]] = {}

    def rank(r: int) -> None:
        with StoreClient("127.0.0.1", server.port, timeout_s=30) as c:
            g = StoreGroup(c, r, world)
            for i in range(20):
                g.barrier()
                out.setdefault(r, []).append(g.gather_floats([float(r), float(i)])[world - 1])

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert all(out[r] == [[float(world - 1), float(i)] for i in range(20)] for r in range(world))
    assert server.state.gathers == {}  # every gather's values were dropped once all had read


def test_gather_times_out_when_a_rank_never_comes(server: StoreServer) -> None:
    with StoreClient("127.0.0.1", server.port, timeout_s=0.3) as c, pytest.raises(StoreTimeout):
        StoreGroup(c, 0, 2).barrier()


def test_a_world_of_one_needs_no_server() -> None:
    g = StoreGroup(None, 0, 1)  # type: ignore[arg-type]
    g.barrier()
    assert g.gather_floats([1.5, 2.0]) == [[1.5, 2.0]]


def _frame(sock: socket.socket) -> bytes:
    """One frame's body as the server sends it (b"" when it closed the connection)."""
    head = sock.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        return b""
    return sock.recv(struct.unpack("!I", head)[0], socket.MSG_WAITALL)


@pytest.mark.parametrize("length", [MAX_REQUEST_BYTES + 1, 0xFFFFFFFF])
def test_a_length_prefix_over_the_limit_is_refused_unread(server: StoreServer, length: int) -> None:
    """Issue 36: the store buffered whatever a 4-byte length announced (4 GiB for 0xFFFFFFFF);
    now it answers with an error frame naming the length and closes the connection."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as raw:
        raw.sendall(struct.pack("!I", length) + b"S")
        reply = _frame(raw)
        assert (
            reply
            == f"Ea store frame of {length} bytes, over the {MAX_REQUEST_BYTES} accepted".encode()
        )
        assert raw.recv(1) == b""  # closed, nothing more read
    # The store still serves, and a request of exactly the limit is one of ours.
    with StoreClient("127.0.0.1", server.port, timeout_s=5) as c:
        value = b"v" * (
            MAX_REQUEST_BYTES - 1 - 4 - 1 - 4
        )  # op, key's prefix and "k", value's prefix
        c.set("k", value)
        assert c.get("k") == value


def test_a_client_refuses_a_reply_over_its_limit() -> None:
    """A peer that is not our store (or a hostile one) announcing a huge reply: the client
    raises FrameTooLarge at once instead of waiting to buffer it."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            _frame(conn)
            conn.sendall(struct.pack("!I", MAX_REPLY_BYTES + 1))
            conn.recv(1)  # until the client hangs up

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    with listener, StoreClient("127.0.0.1", port, timeout_s=5) as c:
        with pytest.raises(FrameTooLarge) as got:
            c.get("k")
        assert (got.value.length, got.value.limit) == (MAX_REPLY_BYTES + 1, MAX_REPLY_BYTES)
    t.join(10)
