"""The test cluster's kubelet: runs every bound pod's containers as local processes.

Why processes and namespaces rather than containers: there is no container engine on our machines,
yet the deployer's pods must really rendezvous (hostname, headless-service names, TCP between pods).
So each pod gets a *sandbox*: one `unshare -m -u --propagation private` process (the pod's "pause"),
in whose mount and UTS namespace the hostname is the pod's, /etc/hosts and /etc/resolv.conf are
bind-mounted from per-pod files, and every volume is bind-mounted at its mountPath. Containers join
that sandbox with `nsenter -t <sandbox> -m -u`, so all containers of a pod share mounts and hostname
as they would share a pod's volumes and UTS namespace on a real node.

What a container runs: its `command` + `args` (with `$(VAR)` expanded as Kubernetes does). The image
is never pulled; the process runs on this machine with the test environment's interpreter directory
first on PATH, so `python` is the venv's python. A container with `args` but no `command` runs the
args (we cannot know the image's entrypoint); one with neither runs `sleep infinity`.

Event-driven by design (1,024 pods must not mean 1,024 polling threads): one loop thread waits on a
selector holding a pidfd per process, the sandboxes' readiness pipes and a wake-up pipe, plus a heap
of timers (grace periods, restart back-off, image-pull back-off). Store changes arrive through
`store.subscribe`, are queued and handled on that thread; status goes back with `store.mutate`.

Pods share the host's network stack (no network namespace): a pod's address exists (every
127.0.0.0/8 address is the loopback's), servers bind to it, but a client's source address is
127.0.0.1 unless it binds one, and a server bound to 0.0.0.0:<port> takes that port for every pod
of every cluster on the machine (tests running at once must not share fixed ports). The root
filesystem is the host's too: write only under volumes; a volume mounted over /work hides the
venv (PATH then falls back to the real interpreter, without the venv's packages). stdout goes to
a file, so Python buffers it as it would buffer a container's pipe: flush or PYTHONUNBUFFERED=1.

A container is all its processes, as a cgroup would make it: when it ends, what it left in the
pod's namespace is killed too (torchrun's workers run in sessions of their own, which the process
group misses). Every process starts under `setpriv --pdeathsig KILL`, so even a SIGKILLed test run
takes its pods with it.

Fault injection (also reachable as `cluster.faults`): kill_pod(ns, pod), set_node_ready(node, b),
set_image_pull_fail_pattern(re), set_node_slow(node, factor) (its pods' processes get about
1/factor of the CPU: tests/cluster/throttle.py), set_node_crash(node, b) (its pods' containers exit 1
at start), set_node_link(node, bytes_per_s) (its pods' sends on the network held to that rate:
tests/cluster/slowlink.py), set_link_slow(label, a, b, factor) (the sends of pods on nodes
labelled label=a to pods on nodes labelled label=b, and back, held to 1/factor of the sending node's
link rate: tests/cluster/slowlink.py); the scheduler has set_delay(s).

Addresses: node `node-<i>` has 127.<k>.<i//250>.<i%250+1> (set by the Cluster); the pods of node i get
127.<k>.<16+i>.<1..254>, so a pod's address tells its node. hostNetwork pods use the node's address.

Leaves nothing behind: mounts live only in the sandboxes' private namespaces (they vanish with the
last process in them), mount points the kubelet had to create on the host are removed when the
last pod using them ends, and stop() kills every process in any of our namespaces and removes its
directory under `workdir`.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import heapq
import itertools
import logging
import os
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.cluster import slowlink
from tests.cluster.errors import ApiError
from tests.cluster.expansion import expand
from tests.cluster.node_common import (
    Obj,
    StoreLike,
    container_requests,
    now_iso,
    parse_quantity,
    set_condition,
)
from tests.cluster.throttle import Throttle

log = logging.getLogger(__name__)

_UNSHARE = shutil.which("unshare") or "/usr/bin/unshare"
_NSENTER = shutil.which("nsenter") or "/usr/bin/nsenter"
_SH = shutil.which("sh") or "/bin/sh"
# Every process we start dies with the kubelet's thread (PR_SET_PDEATHSIG, kept across exec), so
# even a SIGKILLed test run leaves no sandbox or container behind.
_SETPRIV = shutil.which("setpriv")
_DIE_WITH_US = [_SETPRIV, "--pdeathsig", "KILL"] if _SETPRIV else []
# The test environment's interpreter first: `python` in a pod is the venv's python. The real
# interpreter's directory follows, for pods that mount a volume over the venv's path (/work).
_PATH = os.pathsep.join(
    [
        str(Path(sys.executable).parent),
        str(Path(os.path.realpath(sys.executable)).parent),
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ]
)
_HOSTS_HEADER = (
    "# Kubernetes-managed hosts file (tests/cluster kubelet).\n"
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
)
_POD_RANGE_BASE = 16  # third octet of node 0's pod range
_GPU = "nvidia.com/gpu"
#: Where a pod finds its ServiceAccount's token, the CA bundle and its namespace.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: The ConfigMap of the cluster's CA bundle that Kubernetes publishes in every namespace.
ROOT_CA = "kube-root-ca.crt"
_XATTR = "user.nccl-k8s.mountpoint"  # on host paths a kubelet created as mount points
_HOLD = ".nccl-k8s-hold-"  # one per pod using such a mount point
# In every container's environment, so what a container leaves behind can be found and killed.
_MARKER = "NCCL_K8S_TEST_CONTAINER"


class _PodError(Exception):
    """A pod cannot start yet (missing ConfigMap, bad volume): the reason shown on its containers."""

    def __init__(self, reason: str, message: str, *, event: str = "Failed") -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.event = event


@dataclass
class _Container:
    name: str
    spec: Obj
    init: bool
    proc: subprocess.Popen[bytes] | None = None
    pidfd: int | None = None
    restart_count: int = 0
    attempts: int = 0  # log files written so far: <attempt>.log
    state: Obj = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: Obj = field(default_factory=dict)
    gpu_ids: list[int] = field(default_factory=list)
    done: bool = False  # terminated for good (no restart coming)
    restart_timer: int | None = None
    # With log rotation the container writes into a pipe the kubelet drains into its log file.
    log_pipe: int | None = None
    log_file: Any = None  # the open current file (BinaryIO)
    log_partial: bytes = b""
    log_rotations: int = 0


@dataclass
class _Pod:
    uid: str
    namespace: str
    name: str
    node: str
    obj: Obj  # the latest copy seen (metadata/spec; status is ours)
    dir: Path
    ip: str = ""
    host_ip: str = ""
    start_time: str = ""
    containers: list[_Container] = field(default_factory=list)
    sandbox: subprocess.Popen[bytes] | None = None
    sandbox_pidfd: int | None = None
    sandbox_ready: bool = False
    sandbox_out: bytes = b""
    ns_inode: int = 0  # the sandbox's mount namespace, valid while the sandbox lives
    mountpoints: list[Path] = field(default_factory=list)
    phase: str = "Pending"
    reason: str | None = None
    message: str | None = None
    extra_conditions: list[Obj] = field(default_factory=list)
    terminating: bool = False
    kill_timer: int | None = None
    finished: bool = False  # runtime torn down; only logs remain
    lost: bool = False
    image_fail: bool = False
    retry_timer: int | None = None
    hosts_text: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def spec(self) -> Obj:
        return self.obj.get("spec") or {}

    @property
    def hostname(self) -> str:
        if self.spec.get("hostNetwork"):
            return self.node
        return str(self.spec.get("hostname") or self.name)[:63]


@dataclass
class _Node:
    name: str
    address: str
    index: int
    prefix: str  # "127.<k>"
    gpus: int
    ready: bool = True
    free_gpus: set[int] = field(default_factory=set)
    used_ips: set[int] = field(default_factory=set)
    next_ip: int = 1


class Kubelet:
    """Runs the pods of every node of the test cluster (one kubelet serves all nodes)."""

    def __init__(
        self,
        store: StoreLike,
        *,
        workdir: Path,
        image_pull_fail_pattern: str | None = None,
        restart_backoff_s: float = 1.0,
        max_restart_backoff_s: float = 10.0,
        image_pull_backoff_s: float = 1.0,
        log_max_bytes: int | None = None,
        log_max_files: int = 5,
        node_cpus: float | None = None,
    ) -> None:
        """`restart_backoff_s` doubles per restart up to `max_restart_backoff_s` (Kubernetes uses
        10 s and 300 s; tests want restarts they can watch within seconds).

        `log_max_bytes` turns on log rotation as the kubelet's containerLogMaxSize (10Mi by
        default upstream) and containerLogMaxFiles do it: a container's current log file is
        renamed `<n>.log.<k>` once it reaches the size, at a line boundary, a new one is
        started, and at most `log_max_files` files are kept, the current one included. The log
        API (kubectl logs, `-f` included) serves only the current file, as kubelets do. None
        (the default) writes one unbounded file per run.

        `node_cpus` holds each node's pod processes together to that many CPUs of this machine
        (tests/cluster/throttle.py), a slowed node's to 1/factor of it."""
        self._store = store
        self._root = Path(workdir) / "kubelet"
        self._pattern = re.compile(image_pull_fail_pattern) if image_pull_fail_pattern else None
        self._restart_backoff_s = restart_backoff_s
        self._max_restart_backoff_s = max_restart_backoff_s
        self._image_pull_backoff_s = image_pull_backoff_s
        self._log_max_bytes = log_max_bytes
        self._log_max_files = max(2, log_max_files)
        self._lock = threading.RLock()
        self._pods: dict[str, _Pod] = {}
        self._by_key: dict[tuple[str, str], str] = {}
        self._nodes: dict[str, _Node] = {}
        self._services: dict[tuple[str, str], Obj] = {}
        self._inbox: deque[Callable[[], None]] = deque()
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._cancelled: set[int] = set()
        self._seq = itertools.count(1)
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, self._drain_wake)
        self._hosts_dirty = False
        self._hosts_due = 0.0
        self._dns: dict[str, list[tuple[str, list[str], list[str]]]] = {}
        self._sweeps: list[tuple[int, subprocess.Popen[bytes]]] = []
        self._sweep_timer: int | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._stopped = False
        self._throttle = Throttle(
            self._node_namespaces, node_cpus=node_cpus, nodes=self._node_names
        )
        self._crashing: set[str] = set()
        self._links: dict[str, float] = {}  # node -> bytes a second (the node-link fault)
        #: (label, a, b) -> (factor, bytes a second without a node link): the link-slow fault.
        self._slow_links: dict[tuple[str, str, str], tuple[float, float | None]] = {}
        #: The API server as pods reach it, and their tokens (set by the Cluster once the API
        #: server serves https; None: pods get neither, as before in-cluster access existed).
        self.in_cluster: Any = None

    # ---- public API --------------------------------------------------------------------------

    def start(self) -> None:
        self._root.mkdir(parents=True, exist_ok=True)
        self._store.subscribe(self._on_change)
        for svc in self._store.list("services")[0]:
            self._services[_key_of(svc)] = svc
        for node in self._store.list("nodes")[0]:
            self._post(functools.partial(self._node_seen, node))
        for pod in self._store.list("pods")[0]:
            self._post(functools.partial(self._pod_event, "ADDED", pod))
        self._thread = threading.Thread(target=self._run, name="kubelet", daemon=True)
        self._thread.start()
        self._throttle.start()

    def stop(self) -> None:
        """Kill every process, let every namespace (and its mounts) go, remove our files."""
        if self._stopped:
            return
        self._stopping = True
        self._throttle.stop()
        unsubscribe = getattr(self._store, "unsubscribe", None)
        if unsubscribe is not None:
            unsubscribe(self._on_change)
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            self._sweep()  # ended pods whose namespaces still wait for their sweep
            procs: list[subprocess.Popen[bytes]] = []
            for pod in self._pods.values():
                for c in pod.containers:
                    if c.proc is not None and c.proc.returncode is None:
                        _killpg(c.proc.pid, signal.SIGKILL)
                        procs.append(c.proc)
                if pod.sandbox is not None and pod.sandbox.returncode is None:
                    _killpg(pod.sandbox.pid, signal.SIGKILL)
                    procs.append(pod.sandbox)
            # Only namespaces whose sandbox still holds them: a dead one's inode number may
            # already belong to someone else's namespace.
            live_ns = set()
            for pod in self._pods.values():
                sb = pod.sandbox
                if sb is not None and sb.returncode is None:
                    with contextlib.suppress(OSError):
                        live_ns.add(os.stat(f"/proc/{sb.pid}/ns/mnt").st_ino)
            _kill_namespace_members(live_ns)
            for proc in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
            for pod in self._pods.values():
                self._close_fds(pod)
                self._release_mountpoints(pod)
            self._pods.clear()
            self._by_key.clear()
        self._sel.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
        shutil.rmtree(self._root, ignore_errors=True)
        self._stopped = True

    def log_path(
        self, namespace: str, pod: str, container: str, *, previous: bool = False
    ) -> Path | None:
        """The container's log file (current run, or the one before with previous=True)."""
        with self._lock:
            p = self._pod_by_key(namespace, pod)
            if p is None:
                return None
            c = next((c for c in p.containers if c.name == container), None)
            if c is None or c.attempts == 0:
                return None
            attempt = c.attempts - 1 - (1 if previous else 0)
            if attempt < 0:
                return None
            path = _log_file(p, c, attempt)
            return path if path.exists() else None

    def is_running(self, namespace: str, pod: str, container: str) -> bool:
        with self._lock:
            p = self._pod_by_key(namespace, pod)
            if p is None:
                return False
            c = next((c for c in p.containers if c.name == container), None)
            return bool(c and c.proc is not None and c.proc.returncode is None)

    def kill_pod(self, namespace: str, pod: str, *, sig: int = signal.SIGKILL) -> None:
        """Fault injection: signal every running container of the pod, as an OOM kill or a crash
        would; the pod then fails or restarts per its restartPolicy, through the normal path."""
        self._call(lambda: self._signal_pod(namespace, pod, sig))

    def set_node_ready(self, node: str, ready: bool) -> None:
        """Fault injection: the node goes NotReady (tainted as the node lifecycle controller does)
        and its pods fail with reason NodeLost and a DisruptionTarget condition; ready=True heals it.
        """

        def edit(n: Obj) -> None:
            conds = n.setdefault("status", {}).setdefault("conditions", [])
            if ready:
                set_condition(
                    conds,
                    "Ready",
                    "True",
                    reason="KubeletReady",
                    message="kubelet is posting ready status",
                )
            else:
                set_condition(
                    conds,
                    "Ready",
                    "False",
                    reason="KubeletNotReady",
                    message="node was marked NotReady by fault injection",
                )
            taints = [
                t
                for t in (n.get("spec") or {}).get("taints") or []
                if t.get("key") != "node.kubernetes.io/not-ready"
            ]
            if not ready:
                for effect in ("NoSchedule", "NoExecute"):
                    taints.append(
                        {
                            "key": "node.kubernetes.io/not-ready",
                            "effect": effect,
                            "timeAdded": now_iso(),
                        }
                    )
            n.setdefault("spec", {})["taints"] = taints

        # Conditions live in status and taints in spec: two writes, as kubelet + controller make.
        self._store.mutate("nodes", None, node, edit, subresource="status")
        self._store.mutate("nodes", None, node, edit)
        self._call(lambda: self._node_readiness(node, ready))

    def set_node_slow(self, node: str, factor: float | None) -> None:
        """Fault injection: the node's pod processes get about 1/factor of the CPU the other
        nodes' pod processes get (SIGSTOP/SIGCONT, tests/cluster/throttle.py), pods started later too; None (or a factor
        <= 1) ends it."""
        self._throttle.set(node, factor)

    def set_node_crash(self, node: str, crash: bool = True) -> None:
        """Fault injection: every container that starts on the node from now on exits 1 at once,
        after one line on stderr saying so (a node whose runtime or driver is broken)."""
        with self._lock:
            if crash:
                self._crashing.add(node)
            else:
                self._crashing.discard(node)

    def set_node_link(self, node: str, bytes_per_s: float | None) -> None:
        """Fault injection: every container that starts on the node from now on sends on its
        IPv4/IPv6 sockets at most `bytes_per_s` (tests/cluster/slowlink.py: a degraded link,
        in wall time whatever the machine's load); None heals it for containers started later."""
        lib = slowlink.build(self._root) if bytes_per_s else None
        with self._lock:
            if lib is None:
                self._links.pop(node, None)
            else:
                self._links[node] = float(bytes_per_s or 0)

    def set_link_slow(
        self,
        label: str,
        a: str,
        b: str,
        factor: float | None,
        bytes_per_s: float | None = None,
    ) -> None:
        """Fault injection: a slow link between the nodes labelled `label`=`a` and those labelled
        `label`=`b`: every container that starts on one side from now on sends to the pods
        (and node addresses) of the other side at most 1/`factor` of its node's node-link rate
        (or `bytes_per_s` on a node without one); its other sends are not touched. The labels
        are read when the container starts. None (or a factor <= 1) heals it for containers
        started later."""
        lib = slowlink.build(self._root) if factor and factor > 1 else None
        lo, hi = sorted((a, b))
        with self._lock:
            if lib is None:
                self._slow_links.pop((label, lo, hi), None)
            else:
                self._slow_links[(label, lo, hi)] = (float(factor or 1), bytes_per_s)

    def _slow_nets(self, node: str, link: float | None) -> tuple[list[str], float | None]:
        """The link-slow faults' destinations for a container starting on `node`, as networks,
        and their rate (the lowest of those that apply)."""
        with self._lock:
            faults = dict(self._slow_links)
            nodes = dict(self._nodes)
        if not faults:
            return [], None
        labels = {
            n["metadata"]["name"]: n["metadata"].get("labels") or {}
            for n in self._store.list("nodes")[0]
        }
        mine = labels.get(node, {})
        nets: list[str] = []
        rate: float | None = None
        for (label, a, b), (factor, bps) in faults.items():
            here = mine.get(label)
            if here not in (a, b) or a == b:
                continue
            other = b if here == a else a
            speed = link / factor if link else bps
            if not speed:
                continue
            rate = speed if rate is None else min(rate, speed)
            for name, lab in labels.items():
                far = nodes.get(name)
                if lab.get(label) == other and far is not None:
                    nets += [
                        f"{far.address}/32",
                        f"{far.prefix}.{_POD_RANGE_BASE + far.index}.0/24",
                    ]
        return nets, rate

    def _node_names(self) -> list[str]:
        with self._lock:
            return list(self._nodes)

    def _node_namespaces(self, node: str | None) -> tuple[set[int], set[int]]:
        """The mount-namespace inodes of the node's live pod sandboxes (every node's for None),
        and the sandboxes' pids."""
        inodes: set[int] = set()
        pids: set[int] = set()
        with self._lock:
            for pod in self._pods.values():
                sb = pod.sandbox
                if (
                    (node is not None and pod.node != node)
                    or sb is None
                    or sb.returncode is not None
                ):
                    continue
                if pod.ns_inode:
                    inodes.add(pod.ns_inode)
                    pids.add(sb.pid)
        return inodes, pids

    def set_image_pull_fail_pattern(self, pattern: str | None) -> None:
        """Change which images fail to pull; pods in back-off retry with the new pattern."""
        with self._lock:
            self._pattern = re.compile(pattern) if pattern else None

    def pod_ip(self, namespace: str, pod: str) -> str | None:
        with self._lock:
            p = self._pod_by_key(namespace, pod)
            return p.ip if p else None

    # ---- loop plumbing ---------------------------------------------------------------------

    def _on_change(self, etype: str, resource: str, obj: Obj) -> None:
        if self._stopping:
            return
        if resource == "pods":
            self._post(lambda: self._pod_event(etype, obj))
        elif resource == "services":
            self._post(lambda: self._service_event(etype, obj))
        elif resource == "nodes":
            self._post(lambda: self._node_seen(obj))

    def _post(self, fn: Callable[[], None]) -> None:
        self._inbox.append(fn)
        self._wake()

    def _call(self, fn: Callable[[], None], timeout_s: float = 30.0) -> None:
        """Run fn on the loop thread and wait for it (public fault knobs act before returning)."""
        done = threading.Event()
        box: list[BaseException] = []

        def run() -> None:
            try:
                fn()
            except BaseException as e:
                box.append(e)
            finally:
                done.set()

        self._post(run)
        if not done.wait(timeout_s):
            raise TimeoutError("kubelet loop did not answer")
        if box:
            raise box[0]

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"x")

    def _drain_wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self._wake_r, 4096):
                pass

    def _timer(self, delay_s: float, fn: Callable[[], None]) -> int:
        seq = next(self._seq)
        heapq.heappush(self._timers, (time.monotonic() + delay_s, seq, fn))
        return seq

    def _cancel(self, seq: int | None) -> None:
        if seq is not None:
            self._cancelled.add(seq)

    def _run(self) -> None:
        while not self._stopping:
            now = time.monotonic()
            timeout = 1.0
            if self._timers:
                timeout = min(timeout, max(0.0, self._timers[0][0] - now))
            if self._hosts_dirty:
                timeout = min(timeout, max(0.0, self._hosts_due - now))
            if self._inbox:
                timeout = 0.0
            try:
                ready = self._sel.select(timeout)
            except OSError:
                continue
            with self._lock:
                if self._stopping:
                    return
                for key, _ in ready:
                    self._guard(key.data)
                while self._inbox and not self._stopping:
                    self._guard(self._inbox.popleft())
                now = time.monotonic()
                while self._timers and self._timers[0][0] <= now:
                    _, seq, fn = heapq.heappop(self._timers)
                    if seq in self._cancelled:
                        self._cancelled.discard(seq)
                        continue
                    self._guard(fn)
                if self._hosts_dirty and now >= self._hosts_due:
                    self._guard(self._write_all_hosts)

    def _guard(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            log.exception("kubelet: handler failed")

    # ---- store events ------------------------------------------------------------------------

    def _pod_by_key(self, namespace: str, name: str) -> _Pod | None:
        uid = self._by_key.get((namespace, name))
        return self._pods.get(uid) if uid else None

    def _node_seen(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        addr = next(
            (
                a.get("address", "")
                for a in (node.get("status") or {}).get("addresses") or []
                if a.get("type") == "InternalIP"
            ),
            "",
        )
        if not addr:
            return
        parts = addr.split(".")
        index = int(parts[2]) * 250 + int(parts[3]) - 1
        gpus = int(float((node.get("status") or {}).get("allocatable", {}).get(_GPU, 0) or 0))
        known = self._nodes.get(name)
        if known is None:
            self._nodes[name] = _Node(
                name, addr, index, ".".join(parts[:2]), gpus, free_gpus=set(range(gpus))
            )
        elif known.gpus != gpus:
            used = set(range(known.gpus)) - known.free_gpus
            known.gpus = gpus
            known.free_gpus = set(range(gpus)) - used

    def _service_event(self, etype: str, svc: Obj) -> None:
        if etype == "DELETED":
            self._services.pop(_key_of(svc), None)
        else:
            self._services[_key_of(svc)] = svc
        self._mark_hosts_dirty()

    def _pod_event(self, etype: str, obj: Obj) -> None:
        meta = obj["metadata"]
        uid = meta["uid"]
        pod = self._pods.get(uid)
        if etype == "DELETED":
            if pod is not None:
                self._teardown(pod)
                self._forget(pod)
            return
        node = (obj.get("spec") or {}).get("nodeName")
        if pod is None:
            if not node:
                return
            if meta.get("deletionTimestamp"):
                # Bound but never started here (or already forgotten): nothing to stop.
                self._finalize(obj["metadata"].get("namespace", ""), meta["name"])
                return
            if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return
            self._admit(obj)
            return
        pod.obj = obj
        if meta.get("deletionTimestamp") and not pod.terminating:
            self._begin_termination(pod, int(meta.get("deletionGracePeriodSeconds") or 0))

    # ---- admission and start ---------------------------------------------------------------

    def _admit(self, obj: Obj) -> None:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        ns, name, node_name = meta.get("namespace", "default"), meta["name"], spec["nodeName"]
        node = self._nodes.get(node_name)
        if node is None:
            with contextlib.suppress(ApiError):
                self._node_seen(self._store.get("nodes", None, node_name))
            node = self._nodes.get(node_name)
        if node is None:
            log.warning("kubelet: pod %s/%s bound to unknown node %s", ns, name, node_name)
            return
        pod = _Pod(
            uid=meta["uid"],
            namespace=ns,
            name=name,
            node=node_name,
            obj=obj,
            dir=self._root / "pods" / f"{ns}_{name}_{meta['uid'][:8]}",
            host_ip=node.address,
            start_time=now_iso(),
        )
        for c in spec.get("initContainers") or []:
            pod.containers.append(_Container(c["name"], c, True))
        for c in spec.get("containers") or []:
            pod.containers.append(_Container(c["name"], c, False))
        if any(c.init for c in pod.containers):
            for c in pod.containers:
                if not c.init:
                    c.state = {"waiting": {"reason": "PodInitializing"}}
        self._pods[pod.uid] = pod
        self._by_key[pod.key] = pod.uid
        pod.dir.mkdir(parents=True, exist_ok=True)
        pod.ip = node.address if spec.get("hostNetwork") else self._allocate_ip(node)
        for c in pod.containers:
            want = int(container_requests(c.spec).get(_GPU, 0))
            if want:
                ids = sorted(node.free_gpus)[:want]
                node.free_gpus -= set(ids)
                c.gpu_ids = ids
        if not node.ready:
            self._write_status(pod)
            self._lose(pod)
            return
        self._write_status(pod)
        self._mark_hosts_dirty(pod)
        self._try_start(pod)
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None:
            self._timer(float(deadline), lambda: self._deadline(pod))

    def _allocate_ip(self, node: _Node) -> str:
        if _POD_RANGE_BASE + node.index > 255:
            raise RuntimeError(
                f"node {node.name}: pod ranges 127.<k>.<16+i>.x end at node 239 (INTERFACE.md)"
            )
        for _ in range(254):
            n = node.next_ip
            node.next_ip = n % 254 + 1
            if n not in node.used_ips:
                node.used_ips.add(n)
                return f"{node.prefix}.{_POD_RANGE_BASE + node.index}.{n}"
        raise RuntimeError(f"node {node.name}: no free pod address left")

    def _release_ip(self, pod: _Pod) -> None:
        node = self._nodes.get(pod.node)
        if node is None or not pod.ip or pod.ip == node.address:
            return
        node.used_ips.discard(int(pod.ip.rsplit(".", 1)[1]))

    def _image_failing(self, pod: _Pod) -> list[_Container]:
        if self._pattern is None:
            return []
        return [c for c in pod.containers if self._pattern.search(str(c.spec.get("image", "")))]

    def _try_start(self, pod: _Pod) -> None:
        """Pull (or fail to), prepare volumes, start the sandbox; containers follow when it is up."""
        pod.retry_timer = None
        if pod.terminating or pod.finished:
            return
        failing = self._image_failing(pod)
        if failing:
            self._image_pull_failed(pod, failing)
            return
        if pod.image_fail:
            pod.image_fail = False
            for c in pod.containers:
                c.state = {"waiting": {"reason": "ContainerCreating"}}
        try:
            mounts = self._prepare_volumes(pod)
            self._write_hosts(pod)
            self._start_sandbox(pod, mounts)
        except _PodError as e:
            for c in pod.containers:
                c.state = {"waiting": {"reason": e.reason, "message": e.message}}
            self._event(pod, e.event, e.message, type_="Warning")
            self._write_status(pod)
            pod.retry_timer = self._timer(1.0, lambda: self._try_start(pod))

    def _image_pull_failed(self, pod: _Pod, failing: list[_Container]) -> None:
        first_time = not pod.image_fail
        pod.image_fail = True
        for c in failing:
            image = c.spec.get("image", "")
            if first_time or c.state.get("waiting", {}).get("reason") == "ImagePullBackOff":
                why = (
                    f'failed to pull and unpack image "{image}": failed to resolve reference '
                    f'"{image}": pull access denied, repository does not exist or may require '
                    "authorization"
                )
                c.state = {"waiting": {"reason": "ErrImagePull", "message": why}}
                self._event(
                    pod, "Failed", f'Failed to pull image "{image}": {why}', type_="Warning"
                )
                self._event(pod, "Failed", "Error: ErrImagePull", type_="Warning")
            else:
                c.state = {
                    "waiting": {
                        "reason": "ImagePullBackOff",
                        "message": f'Back-off pulling image "{image}"',
                    }
                }
                self._event(pod, "BackOff", f'Back-off pulling image "{image}"')
                self._event(pod, "Failed", "Error: ImagePullBackOff", type_="Warning")
        self._write_status(pod)
        pod.retry_timer = self._timer(self._image_pull_backoff_s, lambda: self._try_start(pod))

    # ---- volumes and /etc/hosts --------------------------------------------------------------

    def _prepare_volumes(self, pod: _Pod) -> list[tuple[str, str, str]]:
        """Materialise volumes; return (kind, source, target) mounts in mount order.

        kind is "bind", "bind-ro" or "tmpfs:<options>".
        """
        vols_dir = pod.dir / "volumes"
        sources: dict[str, tuple[str, str]] = {}  # volume name -> (kind, source path)
        for vol in pod.spec.get("volumes") or []:
            name = vol.get("name", "")
            vdir = vols_dir / name
            if "emptyDir" in vol:
                ed = vol.get("emptyDir") or {}
                if ed.get("medium") == "Memory":
                    opts = "mode=1777"
                    if ed.get("sizeLimit"):
                        opts += f",size={_tmpfs_size(ed['sizeLimit'])}"
                    sources[name] = (f"tmpfs:{opts}", "")
                else:
                    vdir.mkdir(parents=True, exist_ok=True)
                    vdir.chmod(0o777)
                    sources[name] = ("bind", str(vdir))
            elif "configMap" in vol:
                self._write_keyed(pod, vdir, vol["configMap"], "configmaps")
                sources[name] = ("bind", str(vdir))
            elif "secret" in vol:
                self._write_keyed(pod, vdir, vol["secret"], "secrets")
                sources[name] = ("bind", str(vdir))
            elif "projected" in vol:
                for src in (vol["projected"] or {}).get("sources") or []:
                    if "configMap" in src:
                        self._write_keyed(pod, vdir, src["configMap"], "configmaps")
                    elif "secret" in src:
                        self._write_keyed(pod, vdir, src["secret"], "secrets")
                    elif "downwardAPI" in src:
                        self._write_downward(pod, vdir, src["downwardAPI"])
                    elif "serviceAccountToken" in src:
                        path = src["serviceAccountToken"].get("path", "token")
                        _write_file(vdir / path, self._token(pod).encode(), 0o644)
                vdir.mkdir(parents=True, exist_ok=True)
                sources[name] = ("bind", str(vdir))
            elif "downwardAPI" in vol:
                self._write_downward(pod, vdir, vol["downwardAPI"])
                sources[name] = ("bind", str(vdir))
            elif "hostPath" in vol:
                hp = vol["hostPath"] or {}
                path = self._root / "nodes" / pod.node / "hostpath" / hp["path"].lstrip("/")
                if hp.get("type") in ("File", "FileOrCreate"):
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.touch(exist_ok=True)
                else:
                    path.mkdir(parents=True, exist_ok=True)
                sources[name] = ("bind", str(path))
            elif "persistentVolumeClaim" in vol:
                claim = vol["persistentVolumeClaim"]["claimName"]
                path = self._root / "pvcs" / pod.namespace / claim
                path.mkdir(parents=True, exist_ok=True)
                sources[name] = ("bind", str(path))
            else:
                vdir.mkdir(parents=True, exist_ok=True)  # unsupported kinds: an empty dir
                sources[name] = ("bind", str(vdir))
        mounts: dict[str, tuple[str, str, str]] = {}
        account = self._service_account_dir(pod, vols_dir)
        if account is not None:
            mounts[SERVICE_ACCOUNT_DIR] = ("bind-ro", str(account), SERVICE_ACCOUNT_DIR)
        for c in pod.containers:
            for vm in c.spec.get("volumeMounts") or []:
                target = os.path.normpath(vm["mountPath"])
                if target in mounts:
                    continue
                if vm["name"] not in sources:
                    raise _PodError(
                        "CreateContainerConfigError",
                        f'volume "{vm["name"]}" not found in pod spec',
                        event="FailedMount",
                    )
                kind, src = sources[vm["name"]]
                if vm.get("subPath"):
                    if kind.startswith("tmpfs"):
                        raise _PodError(
                            "CreateContainerConfigError",
                            "subPath on a memory emptyDir is not supported here",
                        )
                    sub = Path(src) / vm["subPath"]
                    if not sub.exists():
                        sub.mkdir(parents=True, exist_ok=True)
                    src = str(sub)
                if kind == "bind" and vm.get("readOnly"):
                    kind = "bind-ro"
                mounts[target] = (kind, src, target)
        return [mounts[t] for t in sorted(mounts, key=lambda t: (t.count("/"), t))]

    def _automount(self, pod: _Pod) -> bool:
        """Does the pod get its ServiceAccount's token: the pod's automountServiceAccountToken,
        else the ServiceAccount's, else yes (as the ServiceAccount admission plugin decides)."""
        if self.in_cluster is None:
            return False
        own = pod.spec.get("automountServiceAccountToken")
        if own is not None:
            return bool(own)
        name = pod.spec.get("serviceAccountName") or "default"
        try:
            sa = self._store.get("serviceaccounts", pod.namespace, name)
        except ApiError:
            return True
        return sa.get("automountServiceAccountToken") is not False

    def _token(self, pod: _Pod) -> str:
        """A token of the pod's ServiceAccount; a missing ServiceAccount fails the mount."""
        name = pod.spec.get("serviceAccountName") or "default"
        if self.in_cluster is None:
            return "test-cluster-token"
        try:
            return str(self.in_cluster.issue(pod.namespace, name))
        except ApiError:
            raise _PodError(
                "ContainerCreating",
                f'MountVolume.SetUp failed for volume "kube-api-access": serviceaccount "{name}" '
                "not found",
                event="FailedMount",
            ) from None

    def _service_account_dir(self, pod: _Pod, vols_dir: Path) -> Path | None:
        """The token, CA bundle and namespace a pod finds under SERVICE_ACCOUNT_DIR (what the
        ServiceAccount admission plugin's kube-api-access volume gives it), unless it opted
        out or mounts something of its own there."""
        if not self._automount(pod):
            return None
        for c in pod.containers:
            for vm in c.spec.get("volumeMounts") or []:
                if os.path.normpath(vm["mountPath"]) == SERVICE_ACCOUNT_DIR:
                    return None
        vdir = vols_dir / "kube-api-access"
        _write_file(vdir / "token", self._token(pod).encode(), 0o644)
        _write_file(vdir / "ca.crt", self.in_cluster.ca_pem, 0o644)
        _write_file(vdir / "namespace", pod.namespace.encode(), 0o644)
        return vdir

    def _write_keyed(self, pod: _Pod, vdir: Path, ref: Obj, resource: str) -> None:
        """A configMap or secret volume (or projected source): one file per key or item."""
        name = ref.get("name") or ref.get("secretName") or ""
        try:
            obj = self._store.get(resource, pod.namespace, name)
        except ApiError:
            if (resource, name) == ("configmaps", ROOT_CA) and self.in_cluster is not None:
                # What the root CA publisher puts in every namespace (incluster.py).
                obj = {"data": {"ca.crt": self.in_cluster.ca_pem.decode()}}
            elif ref.get("optional"):
                vdir.mkdir(parents=True, exist_ok=True)
                return
            else:
                kind = "configmap" if resource == "configmaps" else "secret"
                raise _PodError(
                    "ContainerCreating",
                    f'MountVolume.SetUp failed for volume "{name}" : {kind} "{name}" not found',
                    event="FailedMount",
                ) from None
        data: dict[str, bytes] = {}
        if resource == "secrets":
            for k, v in (obj.get("data") or {}).items():
                data[k] = base64.b64decode(v)
            for k, v in (obj.get("stringData") or {}).items():
                data[k] = str(v).encode()
        else:
            for k, v in (obj.get("data") or {}).items():
                data[k] = str(v).encode()
            for k, v in (obj.get("binaryData") or {}).items():
                data[k] = base64.b64decode(v)
        mode = int(ref.get("defaultMode", 0o644))
        vdir.mkdir(parents=True, exist_ok=True)
        items = ref.get("items")
        if items:
            for item in items:
                if item["key"] not in data:
                    if ref.get("optional"):
                        continue
                    raise _PodError(
                        "ContainerCreating",
                        f"configmap references non-existent config key: {item['key']}",
                        event="FailedMount",
                    )
                _write_file(vdir / item["path"], data[item["key"]], int(item.get("mode", mode)))
        else:
            for k, v in data.items():
                _write_file(vdir / k, v, mode)

    def _write_downward(self, pod: _Pod, vdir: Path, spec: Obj) -> None:
        vdir.mkdir(parents=True, exist_ok=True)
        for item in spec.get("items") or []:
            ref = item.get("fieldRef") or {}
            path = ref.get("fieldPath", "")
            if path in ("metadata.labels", "metadata.annotations"):
                values = (pod.obj.get("metadata") or {}).get(path.split(".")[1]) or {}
                text = "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
            else:
                text = self._field_ref(pod, path)
            _write_file(vdir / item["path"], text.encode(), int(spec.get("defaultMode", 0o644)))

    def _mark_hosts_dirty(self, pod: _Pod | None = None) -> None:
        """Regenerate the hosts files soon; coalesced so a burst of pod changes costs one pass.

        Pods without a subdomain and not selected by any service add no names, so at scale
        (1,024 plain pods) nothing is regenerated."""
        if pod is not None and not pod.spec.get("subdomain") and not self._selected_by_service(pod):
            return
        if not self._hosts_dirty:
            self._hosts_dirty = True
            self._hosts_due = time.monotonic() + 0.05

    def _selected_by_service(self, pod: _Pod) -> bool:
        labels = (pod.obj.get("metadata") or {}).get("labels") or {}
        for (ns, _), svc in self._services.items():
            sel = (svc.get("spec") or {}).get("selector")
            if ns == pod.namespace and sel and all(labels.get(k) == v for k, v in sel.items()):
                return True
        return False

    def _dns_lines(self) -> dict[str, list[tuple[str, list[str], list[str]]]]:
        """Per namespace: (ip, cluster-wide names, namespace-relative names) for every name the
        cluster DNS would serve: `<host>.<subdomain>` of pods behind a Service of that name, and
        the Services themselves (headless ones resolve to every endpoint)."""
        out: dict[str, list[tuple[str, list[str], list[str]]]] = {}
        live = [p for p in self._pods.values() if p.ip and not p.finished and not p.terminating]
        for (ns, name), svc in self._services.items():
            spec = svc.get("spec") or {}
            not_ready_ok = bool(spec.get("publishNotReadyAddresses"))
            sel = spec.get("selector") or {}
            fq = f"{name}.{ns}.svc.cluster.local"
            for p in live:
                if p.namespace != ns or (not not_ready_ok and not _pod_ready(p)):
                    continue
                if p.spec.get("subdomain") == name:
                    h = p.hostname
                    out.setdefault(ns, []).append(
                        (
                            p.ip,
                            [f"{h}.{name}.{ns}.svc.cluster.local", f"{h}.{name}.{ns}.svc"],
                            [f"{h}.{name}"],
                        )
                    )
                labels = (p.obj.get("metadata") or {}).get("labels") or {}
                if sel and all(labels.get(k) == v for k, v in sel.items()):
                    out.setdefault(ns, []).append(
                        (p.ip, [fq, f"{name}.{ns}.svc"], [f"{name}.{ns}", name])
                    )
        return out

    def _hosts_text(self, pod: _Pod, dns: dict[str, list[tuple[str, list[str], list[str]]]]) -> str:
        lines = [_HOSTS_HEADER]
        if pod.ip and not pod.spec.get("hostNetwork"):
            names = [pod.hostname]
            sub = pod.spec.get("subdomain")
            if sub:
                ns = pod.namespace
                h = pod.hostname
                names = [
                    f"{h}.{sub}.{ns}.svc.cluster.local",
                    f"{h}.{sub}.{ns}.svc",
                    f"{h}.{sub}",
                    h,
                ]
            lines.append(f"{pod.ip}\t{' '.join(names)}\n")
        for ns, entries in sorted(dns.items()):
            for ip, names, local in entries:
                shown = names + local if ns == pod.namespace else names
                lines.append(f"{ip}\t{' '.join(shown)}\n")
        for alias in pod.spec.get("hostAliases") or []:
            lines.append(f"{alias.get('ip')}\t{' '.join(alias.get('hostnames') or [])}\n")
        return "".join(lines)

    def _write_hosts(self, pod: _Pod, dns: dict[str, Any] | None = None) -> None:
        """Write the pod's hosts file in place: the sandbox bind-mounts this inode, so a rename
        would leave the pod looking at the old file. Without `dns`, the last pass's names are
        used (a new pod is in the next pass, 50 ms later) so admitting N pods stays O(N)."""
        text = self._hosts_text(pod, self._dns if dns is None else dns)
        if text == pod.hosts_text:
            return
        path = pod.dir / "hosts"
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        pod.hosts_text = text

    def _write_all_hosts(self) -> None:
        self._hosts_dirty = False
        dns = self._dns = self._dns_lines()
        for pod in self._pods.values():
            if not pod.finished and pod.dir.exists():
                self._write_hosts(pod, dns)

    # ---- sandbox and containers -----------------------------------------------------------

    def _start_sandbox(self, pod: _Pod, mounts: list[tuple[str, str, str]]) -> None:
        resolv = pod.dir / "resolv.conf"
        ns = pod.namespace
        resolv.write_text(
            # Nothing answers on 127.0.0.1:53, so a name that is not in /etc/hosts fails at once
            # instead of waiting for a real DNS server's timeout.
            "nameserver 127.0.0.1\n"
            f"search {ns}.svc.cluster.local svc.cluster.local cluster.local\n"
            "options ndots:5 timeout:1 attempts:1\n"
        )
        script = ["set -e"]
        # Its own UTS namespace even with hostNetwork: the name is then the node's, as on a node.
        script.append(f"printf %s {shlex.quote(pod.hostname)} > /proc/sys/kernel/hostname")
        script.append(f"mount --bind {shlex.quote(str(pod.dir / 'hosts'))} /etc/hosts")
        if Path("/etc/resolv.conf").exists():
            script.append(f"mount --bind {shlex.quote(str(resolv))} /etc/resolv.conf")
        mounted: list[str] = []
        for kind, src, target in mounts:
            nested = any(target.startswith(m.rstrip("/") + "/") for m in mounted)
            is_file = bool(src) and Path(src).is_file()
            if not nested:
                self._make_mountpoint(pod, Path(target), is_file)
            elif is_file:
                script.append(f"[ -e {shlex.quote(target)} ] || touch {shlex.quote(target)}")
            else:
                script.append(f"mkdir -p {shlex.quote(target)}")
            q = shlex.quote(target)
            if kind.startswith("tmpfs:"):
                script.append(f"mount -t tmpfs -o {shlex.quote(kind[6:])} tmpfs {q}")
            else:
                script.append(f"mount --bind {shlex.quote(src)} {q}")
                if kind == "bind-ro":
                    script.append(f"mount -o remount,bind,ro {q}")
            mounted.append(target)
        script.append("echo ready")
        script.append("exec sleep infinity >/dev/null 2>&1 </dev/null")
        err = open(pod.dir / "sandbox.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(
                [
                    *_DIE_WITH_US,
                    _UNSHARE,
                    "-m",
                    "-u",
                    "--propagation",
                    "private",
                    _SH,
                    "-c",
                    "\n".join(script),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
                env={"PATH": _PATH},
            )
        finally:
            err.close()
        pod.sandbox = proc
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        self._sel.register(proc.stdout, selectors.EVENT_READ, lambda: self._sandbox_output(pod))
        pod.sandbox_pidfd = os.pidfd_open(proc.pid)
        self._sel.register(
            pod.sandbox_pidfd, selectors.EVENT_READ, lambda: self._sandbox_exited(pod)
        )

    def _make_mountpoint(self, pod: _Pod, target: Path, is_file: bool) -> None:
        """Make sure a mount point exists on the host (the pod's root is the host's).

        Components we create are marked with an xattr, and every pod using a marked mount point
        leaves a hold file in it (hidden from the pod by the mount). Removal is rmdir, which
        fails while any hold is there, so no kubelet, in this cluster or another one running
        at the same time, removes a directory some pod's namespace still mounts on (Linux
        would silently detach that mount)."""
        for _ in range(10):
            try:
                missing: list[Path] = []
                cur = target
                while not cur.exists() and not cur.is_symlink():
                    missing.append(cur)
                    cur = cur.parent
                for path in reversed(missing):
                    with contextlib.suppress(FileExistsError):
                        if path == target and is_file:
                            path.touch(exist_ok=False)
                        else:
                            path.mkdir()
                        os.setxattr(path, _XATTR, b"1")
                if not _marked(target):
                    return  # a path of the host itself (/dev/shm, /tmp): never removed
                hold = _hold_path(target, pod.uid)
                hold.touch()
                pod.mountpoints.append(target)
                return
            except FileNotFoundError:
                continue  # another kubelet removed a component meanwhile: start over
        raise _PodError("CreateContainerError", f"cannot create mount point {target}")

    def _release_mountpoints(self, pod: _Pod) -> None:
        for target in pod.mountpoints:
            with contextlib.suppress(OSError):
                _hold_path(target, pod.uid).unlink()
            _prune(target)
        pod.mountpoints = []

    def _sandbox_output(self, pod: _Pod) -> None:
        proc = pod.sandbox
        if proc is None or proc.stdout is None:
            return
        try:
            chunk = proc.stdout.read()
        except (BlockingIOError, ValueError):
            return
        if chunk:
            pod.sandbox_out += chunk
            if b"ready" in pod.sandbox_out and not pod.sandbox_ready:
                pod.sandbox_ready = True
                with contextlib.suppress(OSError):
                    pod.ns_inode = os.stat(f"/proc/{proc.pid}/ns/mnt").st_ino
                self._start_next(pod)
            return
        self._sel.unregister(proc.stdout)
        proc.stdout.close()

    def _sandbox_exited(self, pod: _Pod) -> None:
        proc = pod.sandbox
        if pod.sandbox_pidfd is not None:
            self._sel.unregister(pod.sandbox_pidfd)
            os.close(pod.sandbox_pidfd)
            pod.sandbox_pidfd = None
        if proc is None:
            return
        proc.wait()
        if proc.stdout is not None and not proc.stdout.closed:
            self._sel.unregister(proc.stdout)
            proc.stdout.close()
        if pod.sandbox_ready or pod.finished or pod.terminating:
            return
        # The sandbox died before it was up: a mount failed. Show it as Kubernetes shows a
        # failed volume set-up and retry, as the kubelet does.
        pod.sandbox = None
        err = ""
        with contextlib.suppress(OSError):
            err = (pod.dir / "sandbox.log").read_text(errors="replace").strip().splitlines()[-1]
        self._release_mountpoints(pod)
        msg = f"failed to set up the pod sandbox: {err or 'exit ' + str(proc.returncode)}"
        for c in pod.containers:
            c.state = {"waiting": {"reason": "CreateContainerError", "message": msg}}
        self._event(pod, "FailedMount", msg, type_="Warning")
        self._write_status(pod)
        pod.retry_timer = self._timer(2.0, lambda: self._try_start(pod))

    def _start_next(self, pod: _Pod) -> None:
        """Run the next init container, or every app container once init is done."""
        if pod.terminating or pod.finished:
            return
        for c in pod.containers:
            if c.init and not c.done:
                if c.proc is None and c.restart_timer is None:
                    self._start_container(pod, c)
                self._write_status(pod)
                return
        for c in pod.containers:
            if not c.init and c.proc is None and not c.done and c.restart_timer is None:
                self._start_container(pod, c)
        pod.phase = "Running"
        self._write_status(pod)
        self._mark_hosts_dirty(pod)

    def _start_container(self, pod: _Pod, c: _Container) -> None:
        c.restart_timer = None
        try:
            env = self._container_env(pod, c)
        except _PodError as e:
            c.state = {"waiting": {"reason": e.reason, "message": e.message}}
            self._event(pod, "Failed", f"Error: {e.message}", type_="Warning")
            c.restart_timer = self._timer(1.0, lambda: self._retry_container(pod, c))
            return
        argv = [expand(a, env) for a in (c.spec.get("command") or [])]
        argv += [expand(a, env) for a in (c.spec.get("args") or [])]
        if not argv:
            argv = ["sleep", "infinity"]
        if pod.node in self._crashing:
            said = (
                f"test cluster: node {pod.node} crashes every container at start (node-crash fault)"
            )
            argv = [_SH, "-c", f"echo {shlex.quote(said)} >&2; exit 1"]
        env[_MARKER] = f"{pod.uid}/{c.name}/{c.attempts}"
        with self._lock:
            link = self._links.get(pod.node)
        nets, nets_rate = self._slow_nets(pod.node, link)
        if link or nets:
            env.update(
                slowlink.env(
                    self._root / "slowlink.so",
                    link,
                    env.get("LD_PRELOAD"),
                    slow_nets=nets,
                    slow_bytes_per_s=nets_rate,
                )
            )
        if c.attempts > 0:
            c.restart_count += 1
        log_file = _log_file(pod, c, c.attempts)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        c.attempts += 1
        wd = c.spec.get("workingDir") or "/"
        assert pod.sandbox is not None
        out = open(log_file, "ab")  # noqa: SIM115 - handed to the child, or kept for the pipe
        pipe_w: int | None = None
        if self._log_max_bytes is not None:
            c.log_pipe, pipe_w = os.pipe()
            c.log_file, c.log_partial = out, b""
        try:
            c.proc = subprocess.Popen(
                [
                    *_DIE_WITH_US,
                    _NSENTER,
                    "-t",
                    str(pod.sandbox.pid),
                    "-m",
                    "-u",
                    f"--wd={wd}",
                    "--",
                    *argv,
                ],
                stdin=subprocess.DEVNULL,
                stdout=out if pipe_w is None else pipe_w,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        except OSError as e:
            c.proc = None
            self._close_log(c)
            c.state = {
                "terminated": {
                    "exitCode": 128,
                    "reason": "StartError",
                    "message": str(e),
                    "startedAt": now_iso(),
                    "finishedAt": now_iso(),
                }
            }
            self._container_exited(pod, c, 128, start_error=True)
            return
        finally:
            if pipe_w is None:
                out.close()
            else:
                os.close(pipe_w)
        if c.log_pipe is not None:
            os.set_blocking(c.log_pipe, False)
            self._sel.register(c.log_pipe, selectors.EVENT_READ, lambda: self._pump_log(pod, c))
        c.state = {"running": {"startedAt": now_iso()}}
        c.pidfd = os.pidfd_open(c.proc.pid)
        self._sel.register(c.pidfd, selectors.EVENT_READ, lambda: self._on_exit(pod, c))
        # What `kubectl describe pod` lists for every (re)start; the image is "present" because
        # nothing is pulled.
        image = c.spec.get("image", "")
        self._event(pod, "Pulled", f'Container image "{image}" already present on machine')
        self._event(pod, "Created", f"Created container {c.name}")
        self._event(pod, "Started", f"Started container {c.name}")

    def _retry_container(self, pod: _Pod, c: _Container) -> None:
        c.restart_timer = None
        if c.init:
            self._start_next(pod)
        elif not (pod.terminating or pod.finished):
            self._start_container(pod, c)
            self._write_status(pod)

    def _on_exit(self, pod: _Pod, c: _Container) -> None:
        if c.pidfd is not None:
            self._sel.unregister(c.pidfd)
            os.close(c.pidfd)
            c.pidfd = None
        if c.proc is None:
            return
        rc = c.proc.wait()
        # What it wrote before it ended is in the pipe: into the log before the status says
        # terminated, so a reader that waits for the end finds every line.
        self._pump_log(pod, c, final=True)
        code = rc if rc >= 0 else 128 - rc
        started = c.state.get("running", {}).get("startedAt", now_iso())
        c.state = {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": started,
                "finishedAt": now_iso(),
                "containerID": f"process://{c.proc.pid}",
            }
        }
        c.proc = None
        self._container_exited(pod, c, code)

    def _container_exited(
        self, pod: _Pod, c: _Container, code: int, start_error: bool = False
    ) -> None:
        if pod.terminating or pod.lost:
            c.done = True
            if pod.terminating and all(x.proc is None for x in pod.containers):
                self._end_termination(pod)
            return
        policy = pod.spec.get("restartPolicy", "Always")
        restart = policy == "Always" or (policy == "OnFailure" and code != 0)
        if c.init and code == 0:
            c.done = True
            self._sweep_container(pod, c)
            self._start_next(pod)
            return
        if c.init and policy == "Never":
            c.done = True
            self._pod_done(pod)
            return
        if restart:
            self._sweep_container(pod, c)
            delay = min(
                self._max_restart_backoff_s,
                self._restart_backoff_s * (2 ** min(c.restart_count, 16)),
            )
            c.last_state = dict(c.state)
            c.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {delay:g}s restarting failed container={c.name} "
                    f"pod={pod.name}_{pod.namespace}({pod.uid})",
                }
            }
            c.restart_timer = self._timer(delay, lambda: self._retry_container(pod, c))
            if code != 0:
                self._event(
                    pod,
                    "BackOff",
                    "Back-off restarting failed container "
                    f"{c.name} in pod {pod.name}_{pod.namespace}({pod.uid})",
                    type_="Warning",
                )
            self._write_status(pod)
            return
        c.done = True
        if all(x.done for x in pod.containers if not x.init):
            self._pod_done(pod)
        else:
            self._sweep_container(pod, c)
            self._write_status(pod)

    def _pod_done(self, pod: _Pod) -> None:
        """Every container ended for good: the pod's phase is final and its sandbox goes."""
        failed = any(
            c.state.get("terminated", {}).get("exitCode", 0) != 0
            for c in pod.containers
            if not c.init or c.done
        )
        pod.phase = "Failed" if failed else "Succeeded"
        self._teardown(pod)
        self._write_status(pod)
        self._mark_hosts_dirty(pod)

    # ---- termination ----------------------------------------------------------------------

    def _begin_termination(self, pod: _Pod, grace_s: int) -> None:
        pod.terminating = True
        self._cancel(pod.retry_timer)
        running = [c for c in pod.containers if c.proc is not None]
        for c in pod.containers:
            self._cancel(c.restart_timer)
            c.restart_timer = None
        if not running:
            self._end_termination(pod)
            return
        for c in running:
            assert c.proc is not None
            self._event(pod, "Killing", f"Stopping container {c.name}")
            _killpg(c.proc.pid, signal.SIGTERM if grace_s > 0 else signal.SIGKILL)
        if grace_s > 0:
            pod.kill_timer = self._timer(grace_s, lambda: self._kill_remaining(pod))
        self._mark_hosts_dirty(pod)

    def _kill_remaining(self, pod: _Pod) -> None:
        pod.kill_timer = None
        for c in pod.containers:
            if c.proc is not None:
                _killpg(c.proc.pid, signal.SIGKILL)

    def _end_termination(self, pod: _Pod) -> None:
        self._cancel(pod.kill_timer)
        self._teardown(pod)
        self._finalize(pod.namespace, pod.name)

    def _finalize(self, namespace: str, name: str) -> None:
        with contextlib.suppress(ApiError):
            self._store.finalize_delete("pods", namespace, name)

    def _teardown(self, pod: _Pod) -> None:
        """Stop the pod's runtime: kill what still runs, drop the sandbox (and with it every mount),
        give back GPUs, address and mount points. Logs stay until the pod object is gone."""
        if pod.finished:
            return
        pod.finished = True
        self._cancel(pod.retry_timer)
        self._cancel(pod.kill_timer)
        for c in pod.containers:
            self._cancel(c.restart_timer)
            c.restart_timer = None
            if c.proc is not None:
                _killpg(c.proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    c.proc.wait(timeout=5)
        sb = pod.sandbox
        if sb is not None and sb.returncode is None:
            if pod.ns_inode:
                # Processes that left the container's process group (torchrun's workers start
                # their own sessions) still live in the pod's namespace: a sweep kills them
                # before the sandbox, while the namespace's inode is still surely ours.
                self._sweeps.append((pod.ns_inode, sb))
                if self._sweep_timer is None:
                    self._sweep_timer = self._timer(0.02, self._sweep)
            else:
                _killpg(sb.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    sb.wait(timeout=5)
        self._close_fds(pod)
        self._release_mountpoints(pod)
        node = self._nodes.get(pod.node)
        if node is not None:
            for c in pod.containers:
                node.free_gpus |= {g for g in c.gpu_ids if g < node.gpus}
                c.gpu_ids = []
        self._release_ip(pod)

    def _sweep(self) -> None:
        """Kill everything left in ended pods' namespaces, then their sandboxes: one /proc scan
        for every pod that ended since the last sweep, so 1,024 pods ending cost a few scans."""
        self._sweep_timer = None
        batch, self._sweeps = self._sweeps, []
        if not batch:
            return
        sandboxes = {sb.pid for _, sb in batch}
        for pid in _namespace_members({ino for ino, _ in batch}):
            if pid not in sandboxes:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        for _, sb in batch:
            _killpg(sb.pid, signal.SIGKILL)
        for _, sb in batch:
            with contextlib.suppress(subprocess.TimeoutExpired):
                sb.wait(timeout=5)

    def _sweep_container(self, pod: _Pod, c: _Container) -> None:
        """Kill what a container that just ended left behind when its pod goes on (a restart, or
        other containers still running): processes carrying that run's marker in their
        environment, which children inherit even when they start their own session."""
        if not pod.ns_inode or pod.sandbox is None or pod.sandbox.returncode is not None:
            return
        marker = f"{_MARKER}={pod.uid}/{c.name}/{c.attempts - 1}".encode()
        for pid in _namespace_members({pod.ns_inode}):
            if pid == pod.sandbox.pid:
                continue
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker in environ:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    # ---- log rotation ------------------------------------------------------------------------

    def _pump_log(self, pod: _Pod, c: _Container, *, final: bool = False) -> None:
        """Move what the container wrote from its pipe into the log file, whole lines at a
        time, rotating at the size limit. `final`: the process has ended, take what is left
        (processes it left behind are killed with it, their later output is not kept)."""
        if c.log_pipe is None:
            return
        eof = False
        for _ in range(4096):  # bounded even when a leftover process keeps writing
            try:
                chunk = os.read(c.log_pipe, 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                eof = True
                break
            if not chunk:
                eof = True
                break
            data = c.log_partial + chunk
            cut = data.rfind(b"\n") + 1
            if cut == 0 and len(data) < (1 << 16):
                c.log_partial = data
            else:
                if cut == 0:
                    cut = len(data)  # one very long line: written as it is
                c.log_partial = data[cut:]
                self._write_log(pod, c, data[:cut])
            if not final:
                break  # one read per wake-up keeps the loop fair between containers
        if eof or final:
            if c.log_partial:
                self._write_log(pod, c, c.log_partial)
                c.log_partial = b""
            self._close_log(c)

    def _write_log(self, pod: _Pod, c: _Container, data: bytes) -> None:
        assert self._log_max_bytes is not None and c.log_file is not None
        for line in data.splitlines(keepends=True):
            c.log_file.write(line)
            if c.log_file.tell() >= self._log_max_bytes:
                self._rotate(pod, c)

    def _rotate(self, pod: _Pod, c: _Container) -> None:
        """The current file becomes `<n>.log.<k>`; the oldest beyond the limit goes."""
        current = _log_file(pod, c, c.attempts - 1)
        c.log_file.close()
        c.log_rotations += 1
        current.rename(current.with_name(f"{current.name}.{c.log_rotations}"))
        stale = c.log_rotations - (self._log_max_files - 1)
        if stale > 0:
            with contextlib.suppress(OSError):
                current.with_name(f"{current.name}.{stale}").unlink()
        c.log_file = open(current, "ab")  # noqa: SIM115 - kept open while the container runs

    def _close_log(self, c: _Container) -> None:
        if c.log_pipe is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(c.log_pipe)
            with contextlib.suppress(OSError):
                os.close(c.log_pipe)
            c.log_pipe = None
        if c.log_file is not None:
            c.log_file.close()
            c.log_file = None
        c.log_rotations = 0

    def _close_fds(self, pod: _Pod) -> None:
        for c in pod.containers:
            self._close_log(c)
            if c.pidfd is not None:
                with contextlib.suppress(KeyError, ValueError):
                    self._sel.unregister(c.pidfd)
                os.close(c.pidfd)
                c.pidfd = None
            if c.proc is not None and c.proc.returncode is not None:
                c.proc = None
        if pod.sandbox_pidfd is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(pod.sandbox_pidfd)
            os.close(pod.sandbox_pidfd)
            pod.sandbox_pidfd = None
        sb = pod.sandbox
        if sb is not None and sb.stdout is not None and not sb.stdout.closed:
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(sb.stdout)
            sb.stdout.close()

    def _forget(self, pod: _Pod) -> None:
        self._pods.pop(pod.uid, None)
        if self._by_key.get(pod.key) == pod.uid:
            del self._by_key[pod.key]
        shutil.rmtree(pod.dir, ignore_errors=True)
        self._mark_hosts_dirty(pod)

    # ---- fault injection on the loop thread ------------------------------------------------

    def _signal_pod(self, namespace: str, name: str, sig: int) -> None:
        pod = self._pod_by_key(namespace, name)
        if pod is None:
            raise KeyError(f"pod {namespace}/{name} is not running on this cluster's kubelet")
        for c in pod.containers:
            if c.proc is not None and c.proc.returncode is None:
                _killpg(c.proc.pid, sig)

    def _node_readiness(self, node_name: str, ready: bool) -> None:
        node = self._nodes.get(node_name)
        if node is not None:
            node.ready = ready
        if ready:
            return
        for pod in list(self._pods.values()):
            if pod.node == node_name and not pod.finished:
                self._lose(pod)

    def _lose(self, pod: _Pod) -> None:
        """The pod's node is gone: its processes die and the pod fails as a lost node's pods do."""
        self._fail_pod(
            pod,
            "NodeLost",
            f"Node {pod.node} which was running pod {pod.name} is unresponsive",
            [
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "DeletionByTaintManager",
                    "message": "Taint manager: deleting due to NoExecute taint",
                }
            ],
        )

    def _deadline(self, pod: _Pod) -> None:
        """spec.activeDeadlineSeconds of the pod itself ran out (the kubelet's active deadline)."""
        if pod.finished or pod.terminating:
            return
        self._fail_pod(
            pod, "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"
        )

    def _fail_pod(
        self, pod: _Pod, reason: str, message: str, conditions: list[Obj] | None = None
    ) -> None:
        """Kill what runs and mark the pod Failed with a pod-level reason."""
        pod.lost = True
        for c in pod.containers:
            if c.proc is not None:
                started = c.state.get("running", {}).get("startedAt", now_iso())
                c.state = {
                    "terminated": {
                        "exitCode": 137,
                        "reason": "Error",
                        "startedAt": started,
                        "finishedAt": now_iso(),
                    }
                }
            elif "terminated" not in c.state:
                c.state = {
                    "terminated": {
                        "exitCode": 137,
                        "reason": "ContainerStatusUnknown",
                        "message": "The container could not be located when the pod was terminated",
                        "finishedAt": now_iso(),
                    }
                }
            c.done = True
        self._teardown(pod)
        pod.phase = "Failed"
        pod.reason = reason
        pod.message = message
        pod.extra_conditions = list(conditions or [])
        self._write_status(pod)
        self._mark_hosts_dirty(pod)
        if pod.terminating:
            self._finalize(pod.namespace, pod.name)

    # ---- env -----------------------------------------------------------------------------

    def _field_ref(self, pod: _Pod, path: str) -> str:
        meta = pod.obj.get("metadata") or {}
        m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
        if m:
            return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
        simple: dict[str, str] = {
            "metadata.name": pod.name,
            "metadata.namespace": pod.namespace,
            "metadata.uid": pod.uid,
            "spec.nodeName": pod.node,
            "spec.serviceAccountName": str(pod.spec.get("serviceAccountName", "default")),
            "status.hostIP": pod.host_ip,
            "status.hostIPs": pod.host_ip,
            "status.podIP": pod.ip,
            "status.podIPs": pod.ip,
        }
        if path not in simple:
            raise _PodError("CreateContainerConfigError", f"unsupported fieldRef {path!r}")
        return simple[path]

    def _key_ref(self, pod: _Pod, ref: Obj, resource: str) -> str | None:
        kind = "configmap" if resource == "configmaps" else "secret"
        try:
            obj = self._store.get(resource, pod.namespace, ref.get("name", ""))
        except ApiError:
            if ref.get("optional"):
                return None
            raise _PodError(
                "CreateContainerConfigError", f'{kind} "{ref.get("name", "")}" not found'
            ) from None
        key = ref.get("key", "")
        if resource == "secrets":
            if key in (obj.get("data") or {}):
                return base64.b64decode(obj["data"][key]).decode(errors="replace")
            if key in (obj.get("stringData") or {}):
                return str(obj["stringData"][key])
        elif key in (obj.get("data") or {}):
            return str(obj["data"][key])
        if ref.get("optional"):
            return None
        raise _PodError(
            "CreateContainerConfigError",
            f"couldn't find key {key} in {kind.capitalize()} {pod.namespace}/{ref.get('name', '')}",
        )

    def _container_env(self, pod: _Pod, c: _Container) -> dict[str, str]:
        env = {"PATH": _PATH, "HOME": "/root", "HOSTNAME": pod.hostname}
        if self.in_cluster is not None:
            # As a kubelet sets them in every container for the `kubernetes` Service (with or
            # without enableServiceLinks): where the API server is, over https.
            host, port = self.in_cluster.host, str(self.in_cluster.port)
            env.update(
                {
                    "KUBERNETES_SERVICE_HOST": host,
                    "KUBERNETES_SERVICE_PORT": port,
                    "KUBERNETES_SERVICE_PORT_HTTPS": port,
                    "KUBERNETES_PORT": f"tcp://{host}:{port}",
                    f"KUBERNETES_PORT_{port}_TCP": f"tcp://{host}:{port}",
                }
            )
        if c.gpu_ids:
            env["NVIDIA_VISIBLE_DEVICES"] = ",".join(str(g) for g in c.gpu_ids)
        for src in c.spec.get("envFrom") or []:
            prefix = src.get("prefix", "")
            for kind, resource in (("configMapRef", "configmaps"), ("secretRef", "secrets")):
                if kind not in src:
                    continue
                ref = src[kind]
                try:
                    obj = self._store.get(resource, pod.namespace, ref.get("name", ""))
                except ApiError:
                    if ref.get("optional"):
                        continue
                    what = "configmap" if resource == "configmaps" else "secret"
                    raise _PodError(
                        "CreateContainerConfigError", f'{what} "{ref.get("name", "")}" not found'
                    ) from None
                for k, v in (obj.get("data") or {}).items():
                    env[prefix + k] = (
                        base64.b64decode(v).decode(errors="replace")
                        if resource == "secrets"
                        else str(v)
                    )
        for item in c.spec.get("env") or []:
            name = item["name"]
            if "value" in item:
                env[name] = expand(str(item["value"]), env)
                continue
            vf = item.get("valueFrom") or {}
            value: str | None = ""
            if "fieldRef" in vf:
                value = self._field_ref(pod, vf["fieldRef"].get("fieldPath", ""))
            elif "configMapKeyRef" in vf:
                value = self._key_ref(pod, vf["configMapKeyRef"], "configmaps")
            elif "secretKeyRef" in vf:
                value = self._key_ref(pod, vf["secretKeyRef"], "secrets")
            elif "resourceFieldRef" in vf:
                value = _resource_field(c.spec, vf["resourceFieldRef"])
            if value is not None:
                env[name] = value
        return env

    # ---- status ------------------------------------------------------------------------------

    def _write_status(self, pod: _Pod) -> None:
        """Publish the pod's state; the scheduler's PodScheduled condition is left as it is."""
        init = [c for c in pod.containers if c.init]
        app = [c for c in pod.containers if not c.init]
        initialized = all(c.done for c in init)
        all_ready = pod.phase == "Running" and all(
            "running" in c.state for c in app
        )  # no readiness probes here: a started container is ready
        completed = pod.phase in ("Succeeded", "Failed")
        unready = [c.name for c in app if "running" not in c.state]

        def statuses(cs: list[_Container]) -> list[Obj]:
            out = []
            for c in cs:
                out.append(
                    {
                        "name": c.name,
                        "image": c.spec.get("image", ""),
                        "imageID": "",
                        "ready": "running" in c.state and (not c.init),
                        "started": "running" in c.state,
                        "restartCount": c.restart_count,
                        "state": dict(c.state),
                        "lastState": dict(c.last_state),
                        **({"containerID": f"process://{c.proc.pid}"} if c.proc else {}),
                    }
                )
            return out

        def edit(obj: Obj) -> None:
            st = obj.setdefault("status", {})
            st["phase"] = pod.phase
            st["hostIP"] = pod.host_ip
            st["hostIPs"] = [{"ip": pod.host_ip}]
            if pod.ip:
                st["podIP"] = pod.ip
                st["podIPs"] = [{"ip": pod.ip}]
            st["startTime"] = pod.start_time
            st["qosClass"] = st.get("qosClass") or _qos(pod.spec)
            if pod.reason:
                st["reason"] = pod.reason
                st["message"] = pod.message
            st["containerStatuses"] = statuses(app)
            if init:
                st["initContainerStatuses"] = statuses(init)
            conds = st.setdefault("conditions", [])
            set_condition(
                conds,
                "PodReadyToStartContainers",
                "True" if pod.sandbox_ready and not pod.finished else "False",
            )
            if initialized:
                set_condition(
                    conds,
                    "Initialized",
                    "True",
                    reason="PodCompleted" if completed and init else None,
                )
            else:
                pending = [c.name for c in init if not c.done]
                set_condition(
                    conds,
                    "Initialized",
                    "False",
                    reason="ContainersNotInitialized",
                    message=f"containers with incomplete status: [{' '.join(pending)}]",
                )
            for type_ in ("ContainersReady", "Ready"):
                if all_ready:
                    set_condition(conds, type_, "True")
                elif completed:
                    set_condition(conds, type_, "False", reason="PodCompleted")
                else:
                    set_condition(
                        conds,
                        type_,
                        "False",
                        reason="ContainersNotReady",
                        message=f"containers with unready status: [{' '.join(unready)}]",
                    )
            for extra in pod.extra_conditions:
                set_condition(
                    conds,
                    extra["type"],
                    extra["status"],
                    reason=extra.get("reason"),
                    message=extra.get("message"),
                )

        # A pod deleted meanwhile: its DELETED event tears the rest down.
        with contextlib.suppress(ApiError):
            self._store.mutate("pods", pod.namespace, pod.name, edit, subresource="status")

    def _event(self, pod: _Pod, reason: str, message: str, *, type_: str = "Normal") -> None:
        with contextlib.suppress(ApiError):
            self._store.record_event(pod.obj, reason, message, type=type_, component="kubelet")


# ---- helpers ---------------------------------------------------------------------------------


def _key_of(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "default", meta.get("name") or "")


def _log_file(pod: _Pod, c: _Container, attempt: int) -> Path:
    return pod.dir / "logs" / c.name / f"{attempt}.log"


def _pod_ready(pod: _Pod) -> bool:
    return pod.phase == "Running" and all(
        "running" in c.state for c in pod.containers if not c.init
    )


def _write_file(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode & 0o777)


def _tmpfs_size(quantity: Any) -> str:
    return str(int(parse_quantity(quantity)))


def _resource_field(container: Obj, ref: Obj) -> str:
    what, _, name = str(ref.get("resource", "")).partition(".")
    res = (container.get("resources") or {}).get(what if what != "requests" else "requests") or {}
    if name not in res:
        return "0"
    value = parse_quantity(res[name])
    divisor = parse_quantity(ref.get("divisor", "1"))
    return str(int(-(-value // divisor)))


def _qos(spec: Obj) -> str:
    containers = spec.get("containers") or []
    reqs = [(c.get("resources") or {}) for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in reqs):
        return "BestEffort"
    for r in reqs:
        limits, requests = r.get("limits") or {}, r.get("requests") or {}
        if not {"cpu", "memory"} <= set(limits):
            return "Burstable"
        if any(requests.get(k, limits[k]) != limits[k] for k in limits):
            return "Burstable"
    return "Guaranteed"


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _marked(path: Path) -> bool:
    try:
        return os.getxattr(path, _XATTR, follow_symlinks=False) == b"1"
    except OSError:
        return False


def _hold_path(target: Path, uid: str) -> Path:
    """Where a pod's hold on a created mount point lives: inside it for a directory, beside it
    for a file. The pid keeps two clusters (two processes) apart even for equal pod uids."""
    if target.is_dir():
        return target / f"{_HOLD}{os.getpid()}-{uid}"
    return target.parent / f"{_HOLD}{target.name}-{os.getpid()}-{uid}"


def _prune(target: Path) -> None:
    """Remove a created mount point and created parents that nobody holds any more."""
    cur = target
    while cur != cur.parent and _marked(cur):
        try:
            if cur.is_dir():
                cur.rmdir()  # fails while a hold (or anything else) is inside
            elif any(cur.parent.glob(f"{_HOLD}{cur.name}-*")):
                return
            else:
                cur.unlink()
        except OSError:
            return
        cur = cur.parent


def _namespace_members(namespaces: set[int]) -> list[int]:
    """PIDs living in one of these mount namespaces (inodes of namespaces we hold open)."""
    if not namespaces:
        return []
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            ino = os.stat(f"/proc/{entry}/ns/mnt").st_ino
        except OSError:
            continue
        if ino in namespaces:
            found.append(int(entry))
    return found


def _kill_namespace_members(namespaces: set[int]) -> None:
    """SIGKILL every process living in one of our pods' mount namespaces, including children
    that left their container's process group (torchrun's workers, a daemonising script)."""
    for pid in _namespace_members(namespaces):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


__all__ = ["Kubelet"]
