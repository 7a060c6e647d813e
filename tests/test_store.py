"""bench.store: the torch-free rendezvous store and the control plane the direct ranks use."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from nccl_k8s.bench.store import StoreClient, StoreGroup, StoreServer, StoreTimeout


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
