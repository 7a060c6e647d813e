"""The local ranks' lives: started, watched, stopped, and nothing of theirs left behind.

Ranks are started as plain child processes, each in a session of its own (as torch's elastic
`start_processes`, which torchrun's agent uses, starts them), with torchrun's worker environment,
so `python -m nccl_k8s.bench` runs the same here as under torchrun. torch is not imported here:
for the direct NCCL path neither this launcher nor the ranks need it (issue 23). This module does
the agent's jobs in the open:

- it hosts the ranks' store on 127.0.0.1, so no port is guessed: bench.store's own server for the
  direct NCCL path (NCCL_K8S_STORE=nccl-k8s tells the ranks), torch's TCPStore for gloo and
  `--driver torch` (whose process groups rendezvous through it), as the agent does with
  TORCHELASTIC_USE_AGENT_STORE;
- it watches every rank's pid every POLL_S seconds: whether and how it ended, and its process
  state (/proc/<pid>/stat; for a stopped rank, the signal that stopped it);
- after the first failure it lets the others end on their own for up to SETTLE_S seconds, decides
  (launch._culprit), then stops the rest: SIGKILL for stopped ranks (they cannot act on SIGTERM),
  SIGTERM and after STOP_TIMEOUT_S SIGKILL for the others, each to its own process group;
- SIGINT, SIGTERM and SIGHUP of this process stop every rank the same way and raise Interrupted;
- a failed rank's error comes from the error file it wrote (TORCHELASTIC_ERROR_FILE, the layout
  torch's elastic `record` writes; bench.__main__ writes it).

Each rank also dies with this process (launch._rank sets PR_SET_PDEATHSIG), so a launcher killed
with SIGKILL leaves no rank running. Its private directory (the ranks' error files, the engine's
fault files, the engine's JSON) cannot be removed then: the next run removes it (`workdir`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from nccl_k8s.bench.config import ARGS_ENV, JOURNAL_ENV
from nccl_k8s.bench.store import STORE_ENV, STORE_OURS, StoreServer
from nccl_k8s.bench.trace import stage
from nccl_k8s.bench.watch import FAULT_DIR_ENV  # where ranks write fault-<rank>.json
from nccl_k8s.errors import Interrupted, UsageError
from nccl_k8s.launch._culprit import RankFacts, attribute, read_faults, said
from nccl_k8s.launch._rank import LAUNCHER_PID_ENV

#: How often the launcher looks at its ranks (seconds).
POLL_S = 0.1
#: After the first failure, how long the other ranks get to end on their own (and say why)
#: before the launcher decides and stops them (seconds). Peers of a dead rank see its sockets
#: close within milliseconds; this only has to cover a loaded machine.
SETTLE_S = 2.0
#: How long a rank gets to end after SIGTERM before SIGKILL (seconds).
STOP_TIMEOUT_S = 5
#: The launcher's own calls on the store it hosts (it makes none; the ranks' waits on it are
#: bounded by their process group's timeout: -T SECONDS, else torch's default).
STORE_TIMEOUT_S = 60
#: Prefix of the per-run private directories under the temporary directory.
WORKDIR_PREFIX = "nccl-k8s-run-"
#: Held (flock) by the launcher that owns a work dir for as long as it runs.
_LOCK = ".nccl-k8s-launcher.lock"
_HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

log = logging.getLogger(__name__)


# -- interrupts ---------------------------------------------------------------------------------


class _Interrupts:
    """Turns the first SIGINT/SIGTERM/SIGHUP into Interrupted; later ones wait for the clean-up
    the first one started (bounded by STOP_TIMEOUT_S)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def handler(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            return
        self.signum = signum
        raise Interrupted(signum)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise Interrupted in the main thread for the duration."""
    with _restoring(_HANDLED) as main:
        if main:
            interrupts = _Interrupts()
            for s in _HANDLED:
                signal.signal(s, interrupts.handler)
        yield


@contextlib.contextmanager
def _restoring(signals: Sequence[int]) -> Iterator[bool]:
    """The handlers of `signals` as they were before, once the block ends (in the main thread,
    the only one that has handlers; yields whether this is it)."""
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    before = {s: signal.getsignal(s) for s in signals}
    try:
        yield True
    finally:
        for s, h in before.items():
            signal.signal(s, h)


# -- the private directory ----------------------------------------------------------------------


@contextlib.contextmanager
def workdir(base: Path | None = None) -> Iterator[Path]:
    """A private directory for one run, removed when the run ends. Directories of earlier runs
    whose launcher was killed (its lock no longer held) are removed first; nothing else is."""
    root = Path(base) if base is not None else Path(tempfile.gettempdir())
    remove_stale_workdirs(root)
    try:
        path = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX, dir=root))
        # Lock under a temporary name, then rename: another launcher's clean-up sees the lock
        # file only once it is held.
        fd = os.open(path / (_LOCK + ".new"), os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise UsageError(
            f"temporary directory {root}: cannot create a directory there ({exc.strerror}): "
            "set TMPDIR to a writable directory"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.rename(path / (_LOCK + ".new"), path / _LOCK)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)


def remove_stale_workdirs(root: Path) -> list[Path]:
    """Remove this user's run directories under `root` whose launcher is gone; returns them.

    Only directories this module made are candidates (the prefix, our uid, our lock file), and
    only those whose lock nobody holds: the lock dies with its launcher, however it died.
    """
    removed: list[Path] = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(WORKDIR_PREFIX):
            continue
        try:
            st = entry.lstat()
            if not entry.is_dir() or entry.is_symlink() or st.st_uid != os.getuid():
                continue
            fd = os.open(entry / _LOCK, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                log.debug("cannot lock %s: %s", entry, exc)
            os.close(fd)
            continue
        shutil.rmtree(entry, ignore_errors=True)
        os.close(fd)
        removed.append(entry)
    return removed


# -- the ranks ----------------------------------------------------------------------------------


@dataclasses.dataclass
class _Rank:
    """The launcher's running record of one rank."""

    rank: int
    proc: subprocess.Popen[bytes]
    exitcode: int | None = None
    ended_at: float | None = None
    state: str | None = None
    stop_signal: int | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.exitcode is None

    def look(self, now: float) -> None:
        """Has it ended, and if not, in what state is it? (Popen keeps the exit code it reaps,
        so torch's own bookkeeping later sees the same.)"""
        if not self.running:
            return
        code = self.proc.poll()
        if code is not None:
            self.exitcode, self.ended_at = code, now
            return
        self.state = proc_state(self.pid)
        if self.state == "T" and self.stop_signal is None and hasattr(os, "waitid"):
            # Which signal stopped it: the kernel tells the parent, without consuming the event.
            try:
                stop = os.waitid(os.P_PID, self.pid, os.WSTOPPED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                stop = None
            if stop is not None and stop.si_code == os.CLD_STOPPED:
                self.stop_signal = stop.si_status


def proc_state(pid: int) -> str | None:
    """The state letter of /proc/<pid>/stat (R, S, D, T, t, Z, ...); None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces and parentheses itself.
    rest = stat.rsplit(")", 1)[-1].split()
    return rest[0] if rest else None


@dataclasses.dataclass(frozen=True)
class Node:
    """Where this launcher's ranks sit in a run of several nodes (pods), each with a launcher
    of its own: node `rank` of `count`, the store at `master_addr:master_port` (node 0's
    launcher hosts it, launch._pod). The default, one node on 127.0.0.1, is `nccl-k8s run`'s."""

    rank: int = 0
    count: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int | None = None


def rank_env(
    rank: int,
    nproc: int,
    *,
    port: int,
    run_id: str,
    fault_dir: Path,
    stored_as: str | None = None,
    node: Node | None = None,
    typed: Sequence[str] | None = None,
) -> dict[str, str]:
    """torchrun's worker environment for local rank `rank` of this node's `nproc`, plus ours:
    `stored_as` is the id the results are stored under (NCCL_K8S_RUN_ID, as pods have it: the
    engine's meta and its metrics' run_info name the run by it); `typed` the command line the
    user typed."""
    node = node or Node()
    world = nproc * node.count
    env = {
        "RANK": str(node.rank * nproc + rank),
        "LOCAL_RANK": str(rank),
        "GROUP_RANK": str(node.rank),
        "ROLE_RANK": str(node.rank * nproc + rank),
        "ROLE_NAME": "default",
        "LOCAL_WORLD_SIZE": str(nproc),
        "WORLD_SIZE": str(world),
        "GROUP_WORLD_SIZE": str(node.count),
        "ROLE_WORLD_SIZE": str(world),
        "MASTER_ADDR": node.master_addr,
        "MASTER_PORT": str(port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_USE_AGENT_STORE": str(True),
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        FAULT_DIR_ENV: str(fault_dir),
        LAUNCHER_PID_ENV: str(os.getpid()),
    }
    if stored_as:
        env["NCCL_K8S_RUN_ID"] = stored_as
        # Rank 0 writes each result line there as soon as it is known: what a run stopped
        # half-way leaves for its results (nccl_k8s.local stores them, marked partial).
        env[JOURNAL_ENV] = str(journal_path(fault_dir.parent))
    if typed is not None:
        env[ARGS_ENV] = json.dumps(list(typed))
    return env


def journal_path(work: Path) -> Path:
    """Where rank 0 of a run whose results are stored journals its result lines."""
    return work / "journal"


def run_ranks(
    nproc: int,
    argv: Sequence[str],
    *,
    work: Path,
    run_id: str | None = None,
    torch_store: bool = True,
    node: Node | None = None,
    typed: Sequence[str] | None = None,
) -> int:
    """Run `python -m nccl_k8s.bench ARGV` as `nproc` local ranks; returns the run's exit code
    (0, or the 1/2 verdict the table printed), raises RunFailed naming the culprit, or
    Interrupted once every rank has been stopped. `torch_store`: the ranks speak torch's
    TCPStore (gloo, `--driver torch`) rather than bench.store's server (the direct NCCL path, no
    torch). This launcher hosts it on 127.0.0.1, unless `node` names where it is (a launcher
    per pod: launch._pod hosts it on node 0). Ranks are named by their global rank."""
    fault_dir = work / "faults"
    fault_dir.mkdir()
    errors = work / "errors"
    errors.mkdir()
    node = node or Node()
    if node.master_port is None:
        store, port = _host_store(torch_store)
    else:
        store, port = None, node.master_port
    envs = _rank_envs(nproc, port, work, run_id, node, typed, torch_store)
    ranks: list[_Rank] = []
    started = time.monotonic()
    try:
        for env in envs:
            proc = subprocess.Popen(
                [sys.executable, "-m", "nccl_k8s.launch._rank", *argv],
                env={**os.environ, **env}, start_new_session=True,
            )  # fmt: skip
            ranks.append(_Rank(rank=int(env["RANK"]), proc=proc))
        stage("ranks started")
        _watch(ranks, started)
        stage("ranks ended")
        _stop(ranks)
    except BaseException as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else None
        _stop(ranks)
        if signum is None:
            raise
        n = len(ranks)
        raise Interrupted(
            int(signum), detail=f"stopped {n} rank{'s' if n != 1 else ''}" if n else ""
        ) from None
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()
        del store
    facts = [_facts(r, _message(errors / f"{r.rank}.json") if r.exitcode else "") for r in ranks]
    return attribute(facts, read_faults(fault_dir))


def _facts(r: _Rank, error: str) -> RankFacts:
    """What the launcher knows of an ended rank, its error (text) read for what it says."""
    return RankFacts(
        rank=r.rank,
        pid=r.pid,
        exitcode=r.exitcode,
        ended_at=r.ended_at,
        state=r.state,
        stop_signal=r.stop_signal,
        message=error,
        said=said(error),
    )


def _rank_envs(
    nproc: int,
    port: int,
    work: Path,
    run_id: str | None,
    node: Node,
    typed: Sequence[str] | None,
    torch_store: bool,
) -> list[dict[str, str]]:
    """Each rank's environment (rank_env), with where it writes its error file and, without
    torch's store, which store it speaks."""
    elastic_id = os.environ.get("NCCL_K8S_RUN_ID") or f"nccl-k8s-{uuid.uuid4().hex[:8]}"
    envs = [
        rank_env(
            r,
            nproc,
            port=port,
            run_id=elastic_id,
            fault_dir=work / "faults",
            stored_as=run_id,
            node=node,
            typed=typed,
        )
        for r in range(nproc)
    ]
    for env in envs:
        env["TORCHELASTIC_ERROR_FILE"] = str(work / "errors" / f"{env['RANK']}.json")
        if not torch_store:
            env[STORE_ENV] = STORE_OURS
    return envs


def _host_store(torch_store: bool) -> tuple[Any, int]:
    """The store the ranks rendezvous through, and its port."""
    if not torch_store:
        server = StoreServer("127.0.0.1", 0)
        return server, server.port
    import torch.distributed as dist

    store = dist.TCPStore(  # type: ignore[attr-defined]  # torch re-exports it from torch._C
        "127.0.0.1",
        0,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=STORE_TIMEOUT_S),
    )
    return store, int(store.port)


def _watch(ranks: list[_Rank], started: float) -> None:
    """Until every rank has ended, or SETTLE_S after the first failure: the ranks that noticed it
    get that long to end on their own and say what they saw."""
    first_failure: float | None = None
    while True:
        now = time.monotonic()
        for r in ranks:
            r.look(now - started)
        running = [r for r in ranks if r.running]
        if not running:
            return
        failed = [r for r in ranks if not r.running and r.exitcode != 0]
        if failed and first_failure is None:
            first_failure = now
        if first_failure is not None and now - first_failure >= SETTLE_S:
            return
        # Sleep until the next look, or until the first running rank ends (a run's end is
        # then seen at once, not up to POLL_S later).
        with contextlib.suppress(subprocess.TimeoutExpired):
            running[0].proc.wait(timeout=POLL_S)


def _stop(ranks: Sequence[_Rank]) -> None:
    """End every rank still running: stopped ones with SIGKILL (SIGTERM would wait for a SIGCONT
    that never comes), the others with SIGTERM, then SIGKILL after STOP_TIMEOUT_S; each signal
    to the rank's process group (its session)."""
    for r in ranks:
        if r.running and r.proc.poll() is None and proc_state(r.pid) in ("T", "t"):
            _signal_group(r.pid, signal.SIGKILL)
    for r in ranks:
        if r.running and r.proc.poll() is None:
            _signal_group(r.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for r in ranks:
        with contextlib.suppress(subprocess.TimeoutExpired):
            r.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    for r in ranks:
        if r.proc.poll() is None:
            _signal_group(r.pid, signal.SIGKILL)
            r.proc.wait()
        if r.running:
            r.exitcode = r.proc.poll()


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _message(path: Path) -> str:
    """A failed rank's error: the message of its error file, "" when it wrote none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    if isinstance(data, dict):
        inner = data.get("message", data)
        text = str(inner.get("message", "")) if isinstance(inner, dict) else str(inner)
        return text.strip()
    return ""


__all__ = [
    "FAULT_DIR_ENV",
    "POLL_S",
    "SETTLE_S",
    "STOP_TIMEOUT_S",
    "WORKDIR_PREFIX",
    "Node",
    "interruptible",
    "journal_path",
    "proc_state",
    "rank_env",
    "remove_stale_workdirs",
    "run_ranks",
    "workdir",
]
