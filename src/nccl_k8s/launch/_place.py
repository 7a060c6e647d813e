"""The placement step before torchrun (issue 37): the deployer's rank plan for `--launcher
torchrun`, the default.

    python3 -m nccl_k8s.launch._place --nnodes=N --node-rank=I --master-addr=HOST \\
        --port=PORT --rdzv-timeout=SECONDS -- torchrun [torchrun's other flags]

torchrun's static rendezvous hosts its store on the agent of node rank 0 at the master address
(`torch.distributed.elastic.rendezvous.static_tcp_rendezvous`), so the pods' completion index
stays the rank order unless each pod is told its node rank and the address of the pod that got
node rank 0 before torchrun starts. This step does that, with no torch and no API token:

1. the pod of completion index 0 (`--node-rank`, the index; at `--master-addr`) hosts a
   bench.store server on a port of its own (`--port`, k8s.rendering's placement_port: torchrun's
   MASTER_PORT stays free for torchrun);
2. every pod joins it with its node's name (NCCL_K8S_NODE_NAME, the downward API's
   spec.nodeName) and its address (POD_IP, status.podIP), the direct launcher's rendezvous
   (launch._pod's `Launchers.rendezvous`, one implementation for both): index 0 numbers the
   pods in the plan's order of their nodes (`assign`; a pod off the plan puts the whole run in
   completion-index order, one line in every pod's log) and hands each its node rank and the
   address of the pod of node rank 0. A pod that never joins within --rdzv-timeout (the run's
   rendezvous timeout) fails index 0 with the words of torch's TCPStore, which k8s.run's
   culprit reads to name it, as with the direct launcher;
3. index 0 keeps the store only until every pod has said it has its answer (bounded by the same
   timeout), then closes it;
4. each pod replaces itself with `torchrun --node-rank=R --master-addr=ADDR` and the rest of the
   command unchanged (the same process: the pod wrapper's signals reach torchrun).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import socket
import sys
from collections.abc import Mapping, Sequence

from nccl_k8s.bench.config import NODE_NAME_ENV, POD_IP_ENV
from nccl_k8s.bench.store import StoreServer
from nccl_k8s.launch._pod import (
    PREFIX,
    Launchers,
    Placed,
    RendezvousFailed,
    listen,
    plan_from_env,
    say,
)


@dataclasses.dataclass(frozen=True)
class PlaceArgs:
    nnodes: int
    index: int
    """The pod's completion index: index 0 hosts the placement store."""
    master_addr: str
    """The address of the pod of index 0 (its DNS name)."""
    port: int
    rdzv_timeout_s: int
    command: tuple[str, ...]
    """torchrun and its flags, without --node-rank and --master-addr (this step adds them)."""


def parse(argv: Sequence[str]) -> PlaceArgs:
    """The step's flags before `--`, the torchrun command after it."""
    argv = list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser(prog="python -m nccl_k8s.launch._place", allow_abbrev=False)
    p.add_argument("--nnodes", type=int, required=True)
    p.add_argument("--node-rank", dest="index", type=int, required=True)
    p.add_argument("--master-addr", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--rdzv-timeout", dest="rdzv_timeout_s", type=int, default=900)
    ns = p.parse_args(argv[:cut])
    command = tuple(argv[cut + 1 :])
    if not 0 <= ns.index < ns.nnodes:
        p.error(f"--node-rank {ns.index}: expected 0 to {ns.nnodes - 1} (--nnodes {ns.nnodes})")
    if not command:
        p.error("expected the torchrun command after --")
    return PlaceArgs(
        ns.nnodes, ns.index, ns.master_addr, ns.port, ns.rdzv_timeout_s, command
    )  # fmt: skip


def own_address(environ: Mapping[str, str]) -> str:
    """The address the other pods reach this one at: POD_IP (the deployer renders it with the
    plan), else what the pod's host name resolves to (the kubelet's /etc/hosts entry)."""
    if environ.get(POD_IP_ENV):
        return environ[POD_IP_ENV]
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return ""


def place(args: PlaceArgs, environ: Mapping[str, str]) -> Placed:
    """This pod's node rank and torchrun's master address; RendezvousFailed when not every pod
    joined in time (index 0) or index 0 never answered (the others)."""
    server = None
    if args.index == 0:
        server = listen(lambda: StoreServer("0.0.0.0", args.port), args.port, "placement port")
    # Index 0 speaks to its own store over loopback (its service name may not resolve to
    # itself under host networking), as launch._pod's node 0 does.
    host = "127.0.0.1" if args.index == 0 else args.master_addr
    try:
        launchers = Launchers(False, host, args.port, args.rdzv_timeout_s)
        try:
            placed = launchers.rendezvous(
                args.index, args.nnodes, args.rdzv_timeout_s, environ.get(NODE_NAME_ENV, ""),
                plan_from_env(environ), own_address(environ),
            )  # fmt: skip
            if args.index == 0:  # keep the store until every pod has its answer
                launchers.exit_barrier(args.nnodes, args.rdzv_timeout_s)
            else:
                launchers.done(args.index)
        finally:
            with contextlib.suppress(OSError):
                launchers.store.sock.close()
    finally:
        if server is not None:
            server.close()
    return placed


def torchrun_argv(command: Sequence[str], placed: Placed, fallback_addr: str) -> list[str]:
    """torchrun's command with this pod's node rank and the master's address (index 0's DNS
    name where the pod of node rank 0 gave no address)."""
    master = placed.master or fallback_addr
    return [command[0], f"--node-rank={placed.rank}", f"--master-addr={master}", *command[1:]]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        placed = place(args, os.environ)
    except RendezvousFailed as exc:
        print(f"{PREFIX} rendezvous: {exc}", file=sys.stderr, flush=True)
        return 1
    say(placed, os.environ.get(NODE_NAME_ENV, ""))
    command = torchrun_argv(args.command, placed, args.master_addr)
    try:
        os.execvp(command[0], command)  # replaces this process: no return when it works
    except OSError as exc:
        print(f"{PREFIX} cannot run {command[0]}: {exc}", file=sys.stderr, flush=True)
    return 127


if __name__ == "__main__":
    sys.exit(main())
