"""The engine's own launcher in a pod: what torchrun does there, without importing torch where
the ranks need none (issue 23; `deploy --launcher direct`, the slim image's only way to start).

    python3 -m nccl_k8s.launch._pod --nnodes=N --nproc-per-node=G --node-rank=I \\
        --master-addr=HOST --master-port=PORT --rdzv-timeout=SECONDS -- [engine flags]

The flags are torchrun's names for the same things (k8s.run's culprit reads G from
`--nproc-per-node` either way). Each pod's launcher:

1. node 0 hosts the run's store on MASTER_PORT: bench.store's server for the direct NCCL path,
   torch's TCPStore for gloo and `--driver torch` (their process groups rendezvous through it,
   and torch is there anyway), as torchrun's agent hosts one;
2. joins the rendezvous on it: node 0 waits up to --rdzv-timeout for every node, then tells them
   to go. When some never come, node 0 says so in the words of torch's TCPStore (`Timed out
   after N seconds waiting for clients. J/N clients joined.`), which k8s.run's culprit reads to
   name the pods that never started, and exits 1;
   With the deployer's rank plan (bench.config.RANK_PLAN_ENV: the run's nodes in topology
   order), `--node-rank` is the pod's place in the Job (its completion index: index 0 hosts the
   store, at the master address) and the node rank comes from where the pod landed: each
   launcher joins with its node's name (NCCL_K8S_NODE_NAME, the downward API's spec.nodeName),
   and node 0, once all have joined, numbers the pods in the plan's order of their nodes and
   hands each its node rank with the go (`assign`). One decision for all pods, so no two ever
   take one rank: a pod on a node the plan lacks (or two on one node) puts the whole run back
   in completion-index order, and every launcher says so in one line. No API token is needed.
   The placement step before torchrun (launch._place) runs this same rendezvous;
3. starts its G ranks as plain processes with torchrun's worker environment (RANK =
   I*G + local rank, LOCAL_RANK, WORLD_SIZE = N*G, MASTER_ADDR/PORT, ...) and watches them
   (launch._procs: the first failure, the culprit from the ranks' exits and fault records);
4. exits with the run's code: 0, the engine's verdict (1, 2), or, when a rank failed, that
   rank's exit code (128 + signal for a signal) after one line naming it on stderr; SIGTERM (the
   Job failing, a deletion) stops every rank first and exits 128 + 15;
5. node 0 keeps the store up until every node's ranks have ended (the exit barrier torchrun's
   agents keep), so no rank loses it in its last exchange.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import errno
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from nccl_k8s.bench.config import NODE_NAME_ENV, RANK_PLAN_ENV, ConfigError, parse_args
from nccl_k8s.bench.store import StoreClient, StoreServer, StoreTimeout
from nccl_k8s.errors import Interrupted, RunFailed
from nccl_k8s.launch._procs import Node, interruptible, run_ranks, workdir

#: How long node 0 keeps the store for the other nodes' ranks once its own have ended well
#: (torchrun's exit barrier waits as long).
EXIT_BARRIER_S = 300
#: The launchers' keys on the run's store.
_JOIN, _GO, _DONE = "nccl_k8s/launch/join", "nccl_k8s/launch/go", "nccl_k8s/launch/done"
PREFIX = "nccl-k8s launcher:"
_S = TypeVar("_S")


@dataclasses.dataclass(frozen=True)
class Placed:
    """This pod's node rank, the line saying how the ranks were ordered (empty without a
    plan), and the address the pod of node rank 0 joined with (empty when it gave none)."""

    rank: int
    note: str
    master: str = ""


def assign(plan: Sequence[str], landed: Sequence[str]) -> tuple[list[int], str]:
    """Each pod's node rank (`landed[i]`: the node pod i runs on) and one line on the order:
    the plan's order of the nodes (consecutive ranks in one domain), else the pods' own order
    (completion index) when there is no plan, a pod's node is not in it or two pods share one."""
    index_order = list(range(len(landed)))
    if not plan:
        return index_order, ""
    place = {name: i for i, name in enumerate(plan)}
    outside = sorted({n or "?" for n in landed if n not in place})  # "?": the pod has no name
    if outside:
        return index_order, (
            f"rank order: completion index (node {', '.join(outside)} is not in the deployer's "
            "topology plan)"
        )
    if len(set(landed)) != len(landed):
        return index_order, "rank order: completion index (two pods on one node)"
    by_place = sorted(index_order, key=lambda i: place[landed[i]])
    ranks = [0] * len(landed)
    for rank, i in enumerate(by_place):
        ranks[i] = rank
    return ranks, "rank order: topology (the deployer's plan)"


def plan_from_env(environ: Mapping[str, str]) -> list[str]:
    """The planned node order from RANK_PLAN_ENV; empty when unset or unreadable (then the
    pods keep their completion-index order)."""
    raw = environ.get(RANK_PLAN_ENV)
    if not raw:
        return []
    try:
        return [str(entry[0]) for entry in json.loads(raw)["nodes"]]
    except (ValueError, KeyError, IndexError, TypeError):
        return []


class RendezvousFailed(RuntimeError):
    """Not every node joined in time (node 0), or node 0 never said go (the others)."""


@dataclasses.dataclass(frozen=True)
class PodArgs:
    nnodes: int
    nproc: int
    node_rank: int
    master_addr: str
    master_port: int
    rdzv_timeout_s: int
    engine_argv: tuple[str, ...]


def parse(argv: Sequence[str]) -> PodArgs:
    """The launcher's flags before `--`, the engine's after it."""
    argv = list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser(prog="python -m nccl_k8s.launch._pod", allow_abbrev=False)
    p.add_argument("--nnodes", type=int, required=True)
    p.add_argument("--nproc-per-node", dest="nproc", type=int, required=True)
    p.add_argument("--node-rank", type=int, required=True)
    p.add_argument("--master-addr", required=True)
    p.add_argument("--master-port", type=int, required=True)
    p.add_argument("--rdzv-timeout", dest="rdzv_timeout_s", type=int, default=900)
    ns = p.parse_args(argv[:cut])
    if not 0 <= ns.node_rank < ns.nnodes or ns.nproc < 1:
        p.error(f"--node-rank {ns.node_rank} --nnodes {ns.nnodes} --nproc-per-node {ns.nproc}")
    return PodArgs(
        ns.nnodes, ns.nproc, ns.node_rank, ns.master_addr, ns.master_port, ns.rdzv_timeout_s,
        tuple(argv[cut + 1 :]),
    )  # fmt: skip


def store_kind(engine_argv: Sequence[str]) -> tuple[bool, list[str]]:
    """Whether the ranks speak torch's store (gloo, `--driver torch`), and their argv with the
    backend `auto` resolved here, so that the store and the ranks agree on it."""
    cfg = parse_args(engine_argv)
    argv = list(engine_argv)
    backend = cfg.backend
    if backend == "auto":
        from nccl_k8s.bench.cuda import gpu_count

        backend = "nccl" if gpu_count() else "gloo"
        argv += ["--backend", backend]
    return backend != "nccl" or cfg.driver == "torch", argv


class Launchers:
    """The launchers' own use of the run's store: the rendezvous and the exit barrier."""

    def __init__(self, torch_store: bool, host: str, port: int, timeout_s: float) -> None:
        self.torch = torch_store
        try:
            if torch_store:
                from torch.distributed import TCPStore  # type: ignore[attr-defined]

                delta = datetime.timedelta(seconds=timeout_s)
                self.store: Any = TCPStore(host, port, is_master=False, timeout=delta)
            else:
                self.store = StoreClient(host, port, timeout_s=timeout_s, connect_s=timeout_s)
        except (StoreTimeout, RuntimeError, OSError) as exc:  # torch: DistStoreError
            raise RendezvousFailed(
                f"cannot reach node 0's store at {host}:{port} within {timeout_s:g} s ({exc})"
            ) from None

    def _wait(self, key: str, timeout_s: float) -> bytes | None:
        """Wait for `key`: its value, or None when it did not come within `timeout_s`."""
        if self.torch:
            self.store.set_timeout(datetime.timedelta(seconds=max(timeout_s, 0.001)))
        else:
            self.store.timeout_s = max(timeout_s, 0.001)
        try:
            return bytes(self.store.get(key))
        except (StoreTimeout, RuntimeError):  # torch's DistStoreError is a RuntimeError
            return None

    def rendezvous(
        self,
        node: int,
        count: int,
        timeout_s: float,
        where: str = "",
        plan: Sequence[str] = (),
        addr: str = "",
    ) -> Placed:
        """Node 0 (the pod of index `node` 0) waits for every node, then says go with each
        pod's node rank (`assign` over the nodes they joined from) and the address the pod of
        node rank 0 joined with (`addr`: torchrun's master, launch._place); the others wait
        for that (RendezvousFailed, also when node 0 gave up and its store went with it)."""
        self.store.set(f"{_JOIN}/{node}", json.dumps({"node": where, "addr": addr}).encode())
        if node != 0:
            try:
                go = self._wait(_GO, timeout_s)
            except OSError as exc:  # the connection closed: node 0 ended (it gave up waiting)
                raise RendezvousFailed(f"node 0 ended before starting the run ({exc})") from None
            if go is None:
                raise RendezvousFailed(f"node 0 did not start the run within {timeout_s:g} s")
            said = json.loads(go.decode())
            return Placed(said["ranks"][node], said["note"], said["master"])
        deadline = time.monotonic() + timeout_s
        joins = [{"node": where, "addr": addr}]
        for other in range(1, count):
            got = self._wait(f"{_JOIN}/{other}", deadline - time.monotonic())
            if got is None:
                joined = sum(self.store.check([f"{_JOIN}/{n}"]) for n in range(count))
                raise RendezvousFailed(
                    f"Timed out after {timeout_s:g} seconds waiting for clients. "
                    f"{joined}/{count} clients joined."
                )
            joins.append(json.loads(got.decode()))
        ranks, note = assign(plan, [j["node"] for j in joins])
        master = joins[ranks.index(0)]["addr"]
        self.store.set(_GO, json.dumps({"ranks": ranks, "note": note, "master": master}).encode())
        return Placed(ranks[0], note, master)

    def done(self, node: int) -> None:
        self.store.set(f"{_DONE}/{node}", b"1")

    def exit_barrier(self, count: int, timeout_s: float) -> None:
        """Node 0: until every node's ranks have ended (at most `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        for other in range(1, count):
            if not self._wait(f"{_DONE}/{other}", deadline - time.monotonic()):
                return


def _host(torch_store: bool, port: int, timeout_s: float) -> Any:
    """Node 0's store, on every address of the pod; RendezvousFailed when the port is taken."""
    if not torch_store:
        return listen(lambda: StoreServer("0.0.0.0", port), port, "rendezvous port")
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    delta = datetime.timedelta(seconds=timeout_s)
    return listen(
        lambda: TCPStore("0.0.0.0", port, is_master=True, wait_for_workers=False, timeout=delta),
        port, "rendezvous port",
    )  # fmt: skip


def listen(make: Callable[[], _S], port: int, what: str) -> _S:
    """`make()`, a store that listens on `port` (this run's `what`); RendezvousFailed in one
    line (_port_taken) when something else holds the port, instead of a bind traceback."""
    try:
        return make()
    except (OSError, RuntimeError) as exc:  # torch's DistNetworkError is a RuntimeError
        if _port_in_use(exc, port):
            raise RendezvousFailed(_port_taken(port, what)) from None
        raise


def _port_in_use(exc: BaseException, port: int) -> bool:
    """Whether a store failed to listen because something else holds the port: its errno
    EADDRINUSE, or (torch's TCPStore says it in words only) a bind of the port tried again
    here that fails so."""
    if isinstance(exc, OSError):
        return exc.errno == errno.EADDRINUSE
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the stores bind
        try:
            probe.bind(("0.0.0.0", port))
        except OSError as bind:
            return bind.errno == errno.EADDRINUSE
    return False


def _port_taken(port: int, what: str) -> str:
    """The one line a pod says when its store cannot listen: what holds the port and what to
    do, instead of a bind traceback."""
    return (
        f"port {port}, this run's {what}, is already in use where this pod listens: on the "
        "node under host networking (a node daemon, another process or an outgoing "
        "connection), else by another container of the pod; the port is derived from the "
        "run id, so a deploy with another --run-id draws another"
    )


def launch(args: PodArgs) -> int:
    """One pod's part of the run; the pod's exit code."""
    try:
        torch_store, engine_argv = store_kind(args.engine_argv)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    index = args.node_rank  # the pod's completion index: index 0 hosts the store
    try:
        server = _host(torch_store, args.master_port, args.rdzv_timeout_s) if index == 0 else None
    except RendezvousFailed as exc:
        print(f"{PREFIX} rendezvous: {exc}", file=sys.stderr, flush=True)
        return 1
    try:
        return _run(args, index, torch_store, engine_argv)
    finally:
        close = getattr(server, "close", None)
        if close is not None:
            close()


def _run(args: PodArgs, index: int, torch_store: bool, engine_argv: list[str]) -> int:
    # Node 0 speaks to its own store over loopback: its service name may not resolve to itself
    # (host networking), and there is nothing to wait for.
    host = "127.0.0.1" if index == 0 else args.master_addr
    where = os.environ.get(NODE_NAME_ENV, "")
    try:
        launchers = Launchers(torch_store, host, args.master_port, args.rdzv_timeout_s)
        placed = launchers.rendezvous(
            index, args.nnodes, args.rdzv_timeout_s, where, plan_from_env(os.environ)
        )
    except RendezvousFailed as exc:
        print(f"{PREFIX} rendezvous: {exc}", file=sys.stderr, flush=True)
        return 1
    say(placed, where)
    node = Node(placed.rank, args.nnodes, args.master_addr, args.master_port)
    with interruptible(), workdir() as work:
        try:
            code = run_ranks(args.nproc, engine_argv, work=work, torch_store=torch_store, node=node)
        except RunFailed as exc:
            print(f"{PREFIX} {exc}", file=sys.stderr, flush=True)
            return _exit_code(exc.exit_status)
        except Interrupted as exc:
            print(f"{PREFIX} {exc}", file=sys.stderr, flush=True)
            return exc.exit_code
        finally:
            if index != 0:
                # Node 0 may be gone already (its ranks failed): nothing then waits for this.
                with contextlib.suppress(OSError, RuntimeError):
                    launchers.done(index)
        if index == 0:
            launchers.exit_barrier(node.count, EXIT_BARRIER_S)
    return code


def say(placed: Placed, where: str) -> None:
    """The pod's one line on how the ranks were ordered, when there is a plan."""
    if placed.note:
        print(f"{PREFIX} node rank {placed.rank} on node {where or '?'}; {placed.note}",
              file=sys.stderr, flush=True)  # fmt: skip


def _exit_code(status: int | None) -> int:
    """A failed rank's exit status as a process's exit code (a signal as 128 + its number)."""
    if status is None or status == 0:
        return 1
    return 128 - status if status < 0 else status


def main(argv: Sequence[str] | None = None) -> int:
    return launch(parse(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
