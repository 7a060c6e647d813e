"""The rendezvous store the torch-free ranks speak, and the control plane built on it.

The direct NCCL path needs a store for three things: rank 0's ncclUniqueId, the heartbeats
(bench.watch), and the control plane (barriers and the per-cell exchange of times and error
counts). torch's TCPStore would do, but importing torch costs seconds per process (issue 23), so
this is a small TCP key-value server of our own: the local launcher hosts it (launch._procs), or
rank 0 does when a rank is started alone. Under torchrun, whose agent hosts a torch TCPStore, the
ranks speak to that one through `TorchStore` (torch is there anyway).

One request, one reply, each a 4-byte length and a body: an op letter and length-prefixed
fields. Waits happen in the server (a get waits for its key, a gather for every rank's value),
so a control-plane exchange is one round trip per rank. Gathers free their keys once every rank
has read them: a soak that runs for days does not grow the store.
"""

from __future__ import annotations

import contextlib
import os
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

#: Environment: the launcher hosts a store of this protocol at MASTER_ADDR:MASTER_PORT.
STORE_ENV = "NCCL_K8S_STORE"
STORE_OURS = "nccl-k8s"
_LEN = struct.Struct("!I")
_OK, _TIMEOUT, _ERROR = b"K", b"T", b"E"
#: The longest request the server reads: the ranks send keys, a 128-byte ncclUniqueId and a few
#: floats, so a length prefix over 1 MiB is not one of ours (a port scanner, an HTTP client, or
#: a 4 GiB prefix that would otherwise be buffered); it is answered with an error and the
#: connection closed before any of its body is read.
MAX_REQUEST_BYTES = 1 << 20
#: The longest reply a client reads: a gather's is every rank's value (a few floats each), far
#: below this at any world size; more is not a store of ours.
MAX_REPLY_BYTES = 256 << 20


class FrameTooLarge(ConnectionError):
    """A length prefix over the limit: the connection is dropped, nothing of it buffered."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"a store frame of {length} bytes, over the {limit} accepted")
        self.length, self.limit = length, limit


class StoreTimeout(TimeoutError):
    """A key, or a gather's last rank, did not come within the timeout."""


class Store(Protocol):
    """What the ranks use of a store: torch's TCPStore has the same names (but gather)."""

    def set(self, key: str, value: str | bytes) -> None: ...
    def get(self, key: str) -> bytes: ...
    def check(self, keys: list[str]) -> bool: ...
    def add(self, key: str, amount: int) -> int: ...
    def gather(self, key: str, rank: int, world: int, value: bytes) -> list[bytes]: ...


def _pack(*fields: bytes) -> bytes:
    return b"".join(_LEN.pack(len(f)) + f for f in fields)


def _unpack(body: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(body):
        (n,) = _LEN.unpack_from(body, pos)
        out.append(body[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return out


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the store closed the connection")
        buf += chunk
    return bytes(buf)


def _recv_msg(sock: socket.socket, limit: int) -> bytes:
    """One frame's body; FrameTooLarge (before reading it) when its prefix is over `limit`."""
    (n,) = _LEN.unpack(_recv_exact(sock, 4))
    if n > limit:
        raise FrameTooLarge(n, limit)
    return _recv_exact(sock, n)


def _send_msg(sock: socket.socket, body: bytes) -> None:
    sock.sendall(_LEN.pack(len(body)) + body)


# -- the server ---------------------------------------------------------------------------------


class _State:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.data: dict[bytes, bytes] = {}
        self.gathers: dict[bytes, dict[str, Any]] = {}

    def wait_for(self, pred: Any, timeout_s: float) -> bool:
        return bool(self.cond.wait_for(pred, timeout=timeout_s))

    def gather(self, key: bytes, rank: int, world: int, value: bytes, timeout_s: float) -> list[bytes] | None:  # fmt: skip
        with self.cond:
            g = self.gathers.setdefault(key, {"values": {}, "done": None, "read": 0})
            g["values"][rank] = value
            if len(g["values"]) >= world:
                g["done"] = [g["values"].get(r, b"") for r in range(world)]
                self.cond.notify_all()
            if not self.wait_for(lambda: g["done"] is not None, timeout_s):
                return None
            g["read"] += 1
            if g["read"] >= world:
                self.gathers.pop(key, None)
            return list(g["done"])


class _Handler(socketserver.BaseRequestHandler):
    server: StoreServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with contextlib.suppress(ConnectionError, OSError):
            while True:
                try:
                    body = _recv_msg(sock, MAX_REQUEST_BYTES)
                except FrameTooLarge as e:  # say why, then drop the connection unread
                    _send_msg(sock, _ERROR + str(e).encode())
                    return
                _send_msg(sock, self._serve(body[:1], _unpack(body[1:])))

    def _serve(self, op: bytes, f: list[bytes]) -> bytes:
        st = self.server.state
        if op == b"S":
            with st.cond:
                st.data[f[0]] = f[1]
                st.cond.notify_all()
            return _OK
        if op == b"G":
            with st.cond:
                if not st.wait_for(lambda: f[0] in st.data, float(f[1])):
                    return _TIMEOUT
                return _OK + _pack(st.data[f[0]])
        if op == b"C":
            with st.cond:
                return _OK + (b"1" if all(k in st.data for k in f) else b"0")
        if op == b"A":
            with st.cond:
                value = int(st.data.get(f[0], b"0")) + int(f[1])
                st.data[f[0]] = str(value).encode()
                st.cond.notify_all()
            return _OK + str(value).encode()
        if op == b"D":
            with st.cond:
                st.data.pop(f[0], None)
            return _OK
        if op == b"X":
            got = st.gather(f[0], int(f[1]), int(f[2]), f[3], float(f[4]))
            return _TIMEOUT if got is None else _OK + _pack(*got)
        return _ERROR + b"unknown op " + op


class StoreServer(socketserver.ThreadingTCPServer):
    """The store, served from daemon threads of this process until `close`."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__((host, port), _Handler)
        self.state = _State()
        # A short poll: close() waits for the loop to see the request (0.5 s by default, a
        # fifth of a one-op run's start-to-exit on the H200).
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.02}, name="nccl-k8s-store",
            daemon=True,
        )  # fmt: skip
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def close(self) -> None:
        self.shutdown()
        self.server_close()


# -- the client ---------------------------------------------------------------------------------


class StoreClient:
    """One connection to a StoreServer (one per thread: calls are not interleaved)."""

    def __init__(self, host: str, port: int, *, timeout_s: float = 300.0, connect_s: float = 60.0) -> None:  # fmt: skip
        self.timeout_s = timeout_s
        deadline = time.monotonic() + connect_s
        while True:  # the host may still be starting (rank 0 hosting its own store)
            try:
                self.sock = socket.create_connection((host, port), timeout=min(connect_s, 10.0))
                break
            except OSError as exc:
                if time.monotonic() >= deadline:
                    raise StoreTimeout(f"cannot reach the store at {host}:{port}: {exc}") from None
                time.sleep(0.05)
        self.sock.settimeout(None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.where = f"{host}:{port}"

    def _call(self, op: bytes, *fields: bytes) -> list[bytes] | bytes:
        _send_msg(self.sock, op + _pack(*fields))
        reply = _recv_msg(self.sock, MAX_REPLY_BYTES)
        if reply[:1] == _TIMEOUT:
            raise StoreTimeout(f"store {self.where}: no answer within {self.timeout_s:g} s")
        if reply[:1] != _OK:
            raise RuntimeError(f"store {self.where}: {reply[1:].decode(errors='replace')}")
        return reply[1:]

    def set(self, key: str, value: str | bytes) -> None:
        self._call(b"S", key.encode(), value if isinstance(value, bytes) else value.encode())

    def get(self, key: str) -> bytes:
        raw = self._call(b"G", key.encode(), str(self.timeout_s).encode())
        assert isinstance(raw, bytes)
        return _unpack(raw)[0]

    def check(self, keys: list[str]) -> bool:
        return self._call(b"C", *(k.encode() for k in keys)) == b"1"

    def add(self, key: str, amount: int) -> int:
        raw = self._call(b"A", key.encode(), str(amount).encode())
        assert isinstance(raw, bytes)
        return int(raw)

    def delete_key(self, key: str) -> None:
        self._call(b"D", key.encode())

    def gather(self, key: str, rank: int, world: int, value: bytes) -> list[bytes]:
        raw = self._call(
            b"X", key.encode(), str(rank).encode(), str(world).encode(), value,
            str(self.timeout_s).encode(),
        )  # fmt: skip
        assert isinstance(raw, bytes)
        return _unpack(raw)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> StoreClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TorchStore:
    """torch's TCPStore (torchrun's agent hosts one) with the gather the control plane uses:
    each rank sets its key, then reads every rank's; a rank deletes its key of two gathers ago,
    which every rank has read once it got past the last one."""

    def __init__(self, host: str, port: int, *, timeout_s: float) -> None:
        import datetime

        from torch.distributed import TCPStore  # type: ignore[attr-defined]

        self.store: Any = TCPStore(
            host, port, is_master=False, timeout=datetime.timedelta(seconds=timeout_s)
        )
        self._mine: list[str] = []

    def set(self, key: str, value: str | bytes) -> None:
        self.store.set(key, value)

    def get(self, key: str) -> bytes:
        return bytes(self.store.get(key))

    def check(self, keys: list[str]) -> bool:
        return bool(self.store.check(keys))

    def add(self, key: str, amount: int) -> int:
        return int(self.store.add(key, amount))

    def gather(self, key: str, rank: int, world: int, value: bytes) -> list[bytes]:
        mine = f"{key}/{rank}"
        self.store.set(mine, value)
        self._mine.append(mine)
        if len(self._mine) > 2:
            self.store.delete_key(self._mine.pop(0))
        return [bytes(v) for v in self.store.multi_get([f"{key}/{r}" for r in range(world)])]

    def close(self) -> None:
        self.store = None


def connect(*, rank: int, timeout_s: float, host_if_rank0: bool = True) -> tuple[Any, StoreServer | None]:  # fmt: skip
    """This rank's store client, and the server when this rank hosts it.

    NCCL_K8S_STORE=nccl-k8s: the launcher hosts ours at MASTER_ADDR:MASTER_PORT. Else under
    torchrun (TORCHELASTIC_USE_AGENT_STORE=True) the agent hosts torch's. Else rank 0 hosts ours
    on MASTER_PORT (`host_if_rank0`) and the others connect to it.
    """
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if os.environ.get(STORE_ENV) == STORE_OURS:
        return StoreClient(host, port, timeout_s=timeout_s), None
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return TorchStore(host, port, timeout_s=timeout_s), None
    server = None
    if rank == 0 and host_if_rank0:
        server = StoreServer("0.0.0.0" if host not in ("127.0.0.1", "localhost") else host, port)
    os.environ[STORE_ENV] = STORE_OURS  # what this process's later clients speak (the watchdog's)
    return StoreClient(host, port, timeout_s=timeout_s), server


class StoreGroup:
    """The control plane over a store: barrier and gather, one server round trip each."""

    def __init__(self, store: Store, rank: int, world: int) -> None:
        self.store, self.rank, self.world = store, rank, world
        self._seq = 0

    def gather(self, value: bytes) -> list[bytes]:
        if self.world == 1:
            return [value]
        self._seq += 1
        return self.store.gather(f"nccl_k8s/ctrl/{self._seq}", self.rank, self.world, value)

    def barrier(self) -> None:
        self.gather(b"")

    def gather_floats(self, values: Sequence[float]) -> list[list[float]]:
        fmt = f"!{len(values)}d"
        return [list(struct.unpack(fmt, v)) for v in self.gather(struct.pack(fmt, *values))]


__all__ = [
    "MAX_REPLY_BYTES",
    "MAX_REQUEST_BYTES",
    "STORE_ENV",
    "STORE_OURS",
    "FrameTooLarge",
    "Store",
    "StoreClient",
    "StoreGroup",
    "StoreServer",
    "StoreTimeout",
    "TorchStore",
    "connect",
]
