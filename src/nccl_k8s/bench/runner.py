"""Everything one rank's process does around the engine: its metrics server (one per node, up
before the rendezvous), the watchdog that names a lost peer, the rank's process group, the
sweeps, rank 0's --json file (nccl-tests' -J layout), the exit code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from nccl_k8s import __version__
from nccl_k8s.bench import report
from nccl_k8s.bench.config import (
    ARGS_ENV,
    JOURNAL_ENV,
    NODE_NAME_ENV,
    Backend,
    BenchConfig,
    Driver,
    check_backend,
    timeout_for,
)
from nccl_k8s.bench.engine import PEER_ERRORS, Engine, Printer, RunOutcome
from nccl_k8s.bench.metrics import NULL as NULL_METRICS
from nccl_k8s.bench.metrics import Metrics, serve
from nccl_k8s.bench.options import nccl_tests_config
from nccl_k8s.bench.rank import NoGpu, Rank, default_env, resolve_backend
from nccl_k8s.bench.trace import stage
from nccl_k8s.bench.watch import Watchdog


def typed_args(argv: Sequence[str]) -> list[str]:
    """The flags as the user typed them (ARGS_ENV, from `nccl-k8s run`), else `argv`."""
    with contextlib.suppress(ValueError):
        typed = json.loads(os.environ.get(ARGS_ENV) or "null")
        if isinstance(typed, list) and all(isinstance(a, str) for a in typed):
            return typed
    return list(argv)


def write_json(path: str, engine: Engine, argv: Sequence[str], started: str, *, errors: Sequence[str] = ()) -> None:  # fmt: skip
    """nccl-tests' -J layout (version 3 field names), plus `op` per row and per-op summaries."""
    cfg, outcome, v = engine.cfg, engine.outcome(), engine.versions
    rows = [report.nccl_tests_json_row(row, cfg.iters) for s in outcome.summaries for row in s.rows]
    oob = sum(s.out_of_bounds for s in outcome.summaries)
    avg = sum(s.avg_busbw for s in outcome.summaries) / max(1, len(outcome.summaries))
    doc = {
        "version": 3,
        "generator": f"nccl-k8s {__version__}",
        "start_time": started,
        "args": typed_args(argv),
        "env": [f"{k}={val}" for k, val in sorted(os.environ.items()) if _nccl_variable(k)],
        "nccl_version": v.get("nccl_code", 0),
        "nccl_library": v.get("nccl_library"),
        **({"nccl_note": v["nccl_note"]} if v.get("nccl_note") else {}),
        "config": {
            **nccl_tests_config(dataclasses.replace(cfg, maxbytes=outcome.maxbytes, blocking=engine.blocking)),
            "backend": v.get("backend"),
            "devices": [
                {"rank": d["rank"], "group": 0, "pid": d["pid"], "hostname": d["host"], "device": d["device"],
                 "device_hex": d["pci"], "device_info": d["name"]}
                for d in engine.devices
            ],
        },
        "results": rows,
        "ops": [
            {"op": s.op, "out_of_bounds": {"count": s.out_of_bounds, "okay": "true" if s.ok else "false"},
             "average_bus_bandwidth": {"bandwidth": s.avg_busbw,
                                       "okay": "unchecked" if cfg.min_busbw is None
                                       else ("true" if s.avg_busbw >= cfg.min_busbw else "false")},
             **({"error": s.error} if s.error else {})}
            for s in outcome.summaries
        ],
        "out_of_bounds": {"count": oob, "okay": "true" if oob == 0 else "false"},
        "average_bus_bandwidth": {"bandwidth": avg, "okay": "unchecked" if cfg.min_busbw is None
                                  else ("true" if not outcome.failed_ops else "false")},
        "errors": [*errors, *(f"{s.op}: {s.error}" for s in outcome.summaries if s.error)],
        "end_time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }  # fmt: skip
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def _nccl_variable(name: str) -> bool:
    """NCCL's own variables; NCCL_K8S_* are ours (run id, heartbeat, journal), not NCCL's."""
    return name.startswith("NCCL_") and not name.startswith("NCCL_K8S_")


def run_rank(cfg: BenchConfig, argv: Sequence[str], *, stdout: TextIO = sys.stdout) -> int:
    """Everything one rank does; returns the exit code (0 ok, 1 wrong results or below --min-busbw).

    A collective that times out or loses a peer ends the process here with exit code 1 after
    the FAULT line naming the culprit (bench.watch); rank 0's --json keeps the ops measured.
    """
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    default_env()
    backend = _backend(cfg, stdout)
    if backend is None:
        return 1
    timeout_s = timeout_for(cfg)
    engine: Engine | None = None
    rank: Any = None
    journal: TextIO | None = None
    # One metrics server per node, up before the rendezvous: a port that cannot be had is a
    # one-line error before any rank waits for this one, and the run's info is scraped as soon
    # as it is known.
    metrics: Metrics = NULL_METRICS
    if cfg.metrics_port and os.environ.get("LOCAL_RANK", "0") == "0":
        metrics = serve(cfg.metrics_port, cfg.metrics_addr)

    def partial_json(error: str) -> None:
        if engine is None or rank is None or rank.rank != 0 or not cfg.json_path:
            return
        if engine.devices:
            with contextlib.suppress(OSError):
                write_json(cfg.json_path, engine, argv, started, errors=[error])

    def on_abort() -> None:
        partial_json("aborted: a collective timed out or lost a peer")
        if rank is not None:
            rank.abort()

    wd = Watchdog(
        int(os.environ["RANK"]),
        int(os.environ["WORLD_SIZE"]),
        host=socket.gethostname(),
        timeout_s=timeout_s,
        on_abort=on_abort,
        stdout=stdout if cfg.result_lines else None,
    )
    try:
        rank, agent_store = _join(cfg, backend, timeout_s, wd)
        check_backend(cfg, backend, world_size=rank.world)
        if not agent_store:
            wd.start()
        journal = _open_journal() if rank.rank == 0 else None
        printer = Printer(rank.rank == 0, stdout, cfg.result_lines, journal=journal)
        engine = Engine(cfg, rank, printer, wd, metrics)

        def sweep_ended(_: RunOutcome) -> None:
            if rank is not None and rank.rank == 0 and cfg.json_path and engine is not None:
                write_json(cfg.json_path, engine, argv, started)  # each sweep: the latest

        try:
            outcome = engine.run(on_sweep=sweep_ended)
            wd.progress("finishing")
            rank.barrier()
            stage("finished")
        except PEER_ERRORS as exc:
            if rank.world == 1:
                partial_json(f"{type(exc).__name__}: {exc}")
                raise
            wd.fault(f"{type(exc).__name__}: {_first_line(exc)}", raised_here=True)
            raise  # the culprit is this rank itself, or nobody could be named
        return outcome.exit_code
    finally:
        metrics.close()
        wd.stop()
        if journal is not None:
            journal.close()
        # The watchdog's abort hook refers to the engine, which refers to the watchdog: break
        # the cycle, so that the engine's process groups go now, in close(), and not at
        # interpreter exit, where tearing down a gloo group aborts the process.
        wd.on_abort = None
        engine = None
        if rank is not None:
            rank.close()
        stage("closed")


def _backend(cfg: BenchConfig, stdout: TextIO) -> Backend | None:
    """The backend to measure with; None when the rank asked for GPUs and sees none: then it
    has said so, as a fault line naming itself (kind NO_GPU, what the culprit logic reads) on
    stdout and one line on stderr, before any peer waits for it."""
    try:
        return resolve_backend(cfg.backend, gpus_requested=cfg.gpus_requested)
    except NoGpu as exc:
        rank = int(os.environ["RANK"])
        host = socket.gethostname()
        node = os.environ.get(NODE_NAME_ENV) or host
        payload = {"rank": rank, "culprit": rank, "host": host, "pid": os.getpid(),
                   "reason": str(exc), "kind": report.NO_GPU, "where": "start",
                   "noticed": str(exc), "timed_out": False}  # fmt: skip
        with contextlib.suppress(OSError, ValueError):
            stdout.write(report.fault_line(payload) + "\n")
            stdout.flush()
        sys.stderr.write(f"error: rank {rank} (host {host}, node {node}): {exc}\n")
        sys.stderr.flush()
        return None


def _open_journal() -> TextIO | None:
    path = os.environ.get(JOURNAL_ENV)
    if not path:
        return None
    try:
        return open(path, "a", encoding="utf-8")  # open for the whole run
    except OSError:
        return None  # the table is still printed; only a stopped run's rows would be lost


def _join(cfg: BenchConfig, backend: Backend, timeout_s: int, wd: Watchdog) -> tuple[Any, bool]:
    """The rank's process groups, and whether the rendezvous store lives in torchrun's agent.

    Under torchrun (and nccl-k8s run, which hosts the store itself) the store lives in the agent, so the watchdog can watch
    the rendezvous too: a rank that never joins is named after -T, not after the process
    group's backstop. A lone process hosts its own store only once it has joined.
    """
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    if agent_store:
        wd.progress("rendezvous")
        wd.start()
    try:
        return join(backend, timeout_s, driver=cfg.driver), agent_store
    except PEER_ERRORS as exc:
        if agent_store and wd.world != 1:
            wd.fault(f"{type(exc).__name__}: {_first_line(exc)}", raised_here=True)
        raise


def join(backend: Backend, timeout_s: int, *, driver: Driver = "direct") -> Any:
    """This process's rank: the direct NCCL path without torch, else the torch rank."""
    if backend == "nccl" and driver == "direct":
        from nccl_k8s.bench.direct import DirectRank

        return DirectRank(timeout_s)
    return Rank(backend, timeout_s, driver=driver)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


__all__ = ["join", "run_rank", "write_json"]
