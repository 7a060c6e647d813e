"""`Cluster`: store + API server + scheduler + controllers + kubelet, started and stopped as one.

This is what tests and `python -m tests.cluster` use. It owns what no single part can own: the
per-cluster number that keeps two clusters' addresses apart (127.<k>.x.y), the temp directory,
the Node objects, the kubeconfig, and an orderly stop that leaves no process, mount or file.

The cluster number is claimed by binding an abstract unix socket named after it: the kernel frees
it when the holder exits, even by SIGKILL, so a crashed test run never blocks a later one and no
lock file is left behind.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.cluster import admission, incluster, rbac
from tests.cluster.apiserver import APIServer
from tests.cluster.faults import Faults
from tests.cluster.kubeconfig import write_kubeconfig
from tests.cluster.store import Store, now_rfc3339

log = logging.getLogger(__name__)

_CLAIM_PREFIX = "nccl-k8s-test-cluster-"


def _claim_number() -> tuple[int, socket.socket]:
    """A cluster number 1..254 no other live cluster on this machine holds, and its claim."""
    for k in range(1, 255):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(f"\0{_CLAIM_PREFIX}{k}")
        except OSError:
            s.close()
            continue
        return k, s
    raise RuntimeError("all 254 test-cluster numbers are in use on this machine")


def node_address(k: int, i: int) -> str:
    """Node i's address in cluster k (INTERFACE.md: 127.<k>.<i//250>.<i%250+1>)."""
    return f"127.{k}.{i // 250}.{i % 250 + 1}"


def _optional(module: str, name: str) -> Any:
    """B's classes, or None while they are not written yet (so the API side tests alone)."""
    try:
        mod = importlib.import_module(f"tests.cluster.{module}")
    except ModuleNotFoundError as e:
        if e.name != f"tests.cluster.{module}":
            raise
        return None
    return getattr(mod, name, None)


class Cluster:
    """A local Kubernetes-like cluster. Use as a context manager, or start()/stop().

    Keyword arguments beyond nodes/gpus_per_node describe the nodes and the parts:
    `node_resources` adds resources to every node (e.g. {"rdma/ib": "4"}), `node_labels` adds
    labels, `schedulers` names the schedulerNames served, `image_pull_fail_pattern` makes images
    matching it fail with ErrImagePull, `log_max_bytes`/`log_max_files` rotate container logs as
    the kubelet's containerLogMaxSize/containerLogMaxFiles do, `node_cpus` holds each node's
    pods together to that many of this machine's CPUs (tests/cluster/throttle.py: nodes that do
    not speed up or slow down each other, as real ones; None, the default, lets them share the
    machine as they come), `components=False` runs only
    store + API server. Pod Security Admission is always on (it acts on namespaces labelled
    pod-security.kubernetes.io/enforce), as in every cluster since Kubernetes 1.25.
    """

    def __init__(
        self,
        nodes: int = 4,
        gpus_per_node: int = 8,
        *,
        cpu_per_node: str = "64",
        memory_per_node: str = "512Gi",
        pods_per_node: int = 110,
        node_resources: dict[str, str] | None = None,
        node_labels: dict[str, str] | None = None,
        schedulers: tuple[str, ...] = ("default-scheduler",),
        image_pull_fail_pattern: str | None = None,
        kubeconfig: Path | str | None = None,
        history: int = 20000,
        components: bool = True,
        log_max_bytes: int | None = None,
        log_max_files: int = 5,
        node_cpus: float | None = None,
    ) -> None:
        self.nodes = nodes
        self.gpus_per_node = gpus_per_node
        self._cpu = cpu_per_node
        self._memory = memory_per_node
        self._pods = pods_per_node
        self._node_resources = dict(node_resources or {})
        self._node_labels = dict(node_labels or {})
        self._schedulers = schedulers
        self._pull_fail = image_pull_fail_pattern
        self._kubeconfig_arg = Path(kubeconfig) if kubeconfig else None
        self._components = components
        self._log_max = (log_max_bytes, log_max_files)
        self._node_cpus = node_cpus
        self.store = Store(history=history, admission=[admission.pod_security])
        self.faults = Faults()
        self.number = 0
        self.workdir: Path | None = None
        self.kubeconfig: Path | None = None
        self.apiserver: APIServer | None = None
        self.scheduler: Any = None
        self.job_controller: Any = None
        self.statefulset_controller: Any = None
        self.resourceclaim_controller: Any = None
        self.kubelet: Any = None
        self.token_issuer: incluster.TokenIssuer | None = None
        self._claim: socket.socket | None = None
        self._started = False
        self._lock = threading.Lock()

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self.apiserver is None:
            raise RuntimeError("Cluster is not started")
        return self.apiserver.url

    def start(self) -> Cluster:
        with self._lock:
            if self._started:
                return self
            self._started = True
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self.number, self._claim = _claim_number()
        tmp = Path(tempfile.gettempdir())
        for stale in tmp.glob(f"nccl-k8s-cluster-{self.number}-*"):
            # Holding number k proves no live cluster owns these: left by a process killed
            # before it could stop (SIGKILL, or SIGTERM in a script without a handler).
            shutil.rmtree(stale, ignore_errors=True)
        self.workdir = Path(tempfile.mkdtemp(prefix=f"nccl-k8s-cluster-{self.number}-"))
        for i in range(self.nodes):
            self.store.create("nodes", self._node(i))
        rbac.bootstrap(self.store)
        self._start_components()
        self.apiserver = APIServer(self.store, logs=self.kubelet, faults=self.faults)
        self.apiserver.start()
        self._serve_pods()
        self.kubeconfig = self._kubeconfig_arg or self.workdir / "kubeconfig"
        write_kubeconfig(self.kubeconfig, self.url, name=f"nccl-k8s-test-{self.number}")
        log.info("cluster %d serving at %s (workdir %s)", self.number, self.url, self.workdir)

    def _serve_pods(self) -> None:
        """https for pods, and their service account tokens (incluster.py)."""
        assert self.apiserver is not None and self.workdir is not None
        tls = incluster.tls_material(self.workdir / "pki")
        self.apiserver.start_tls(str(tls.cert), str(tls.key))
        host, port = self.apiserver.https_address
        self.token_issuer = incluster.TokenIssuer(self.store, self.apiserver.authenticator)
        if self.kubelet is not None:
            self.kubelet.in_cluster = incluster.InCluster(
                host, port, tls.ca.read_bytes(), self.token_issuer.issue
            )

    def _start_components(self) -> None:
        if not self._components:
            return
        assert self.workdir is not None
        scheduler_cls = _optional("scheduler", "Scheduler")
        job_cls = _optional("controllers", "JobController")
        sts_cls = _optional("controllers", "StatefulSetController")
        claims_cls = _optional("dra", "ResourceClaimController")
        kubelet_cls = _optional("kubelet", "Kubelet")
        if kubelet_cls is not None:
            self.kubelet = kubelet_cls(
                self.store,
                workdir=self.workdir,
                image_pull_fail_pattern=self._pull_fail,
                log_max_bytes=self._log_max[0],
                log_max_files=self._log_max[1],
                node_cpus=self._node_cpus,
            )
        if scheduler_cls is not None:
            self.scheduler = scheduler_cls(self.store, names=self._schedulers)
        if job_cls is not None:
            self.job_controller = job_cls(self.store)
        if sts_cls is not None:
            self.statefulset_controller = sts_cls(self.store)
        if claims_cls is not None:
            self.resourceclaim_controller = claims_cls(self.store)
        self.faults.kubelet = self.kubelet
        self.faults.scheduler = self.scheduler
        # Kubelet first so a pod is never bound to a node nobody runs.
        for part in self._parts():
            part.start()

    def _parts(self) -> list[Any]:
        return [
            p
            for p in (
                self.kubelet,
                self.scheduler,
                self.job_controller,
                self.statefulset_controller,
                self.resourceclaim_controller,
            )
            if p is not None
        ]

    def stop(self) -> None:
        """Stop everything, kill every pod process, unmount, remove the temp dir. Idempotent."""
        with self._lock:
            if not self._started:
                return
            self._started = False
        if self.apiserver is not None:
            with _logged("API server"):
                self.apiserver.stop()
        for part in reversed(self._parts()):
            with _logged(type(part).__name__):
                part.stop()
        with _logged("store"):
            self.store.close()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        if self._claim is not None:
            self._claim.close()
            self._claim = None

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- helpers ---------------------------------------------------------------------------

    def node_address(self, i: int) -> str:
        return node_address(self.number, i)

    def add_user(
        self,
        name: str,
        groups: tuple[str, ...] = (),
        *,
        namespace: str = "default",
        https: bool = False,
    ) -> Path:
        """A kubeconfig that authenticates as user `name` (with `groups`) by a bearer token.
        Unlike the admin's, this user's requests are authorized by RBAC: it may do nothing until
        a binding grants it. For a ServiceAccount: `add_user(*rbac.service_account(ns, sa))`.
        With `https`, the kubeconfig names the https listener and the cluster's CA: kubectl
        sends a token only over https, so that is how kubectl acts as the user."""
        if self.apiserver is None or self.workdir is None:
            raise RuntimeError("Cluster is not started")
        _user, token = self.apiserver.authenticator.add(name, groups)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        path = self.workdir / "users" / f"{safe}-{token[:8]}.kubeconfig"
        url, ca = self.url, None
        if https:
            host, port = self.apiserver.https_address
            url, ca = f"https://{host}:{port}", (self.workdir / "pki" / "ca.crt").read_bytes()
        return write_kubeconfig(
            path,
            url,
            name=f"{safe}@nccl-k8s-test-{self.number}",
            namespace=namespace,
            token=token,
            ca_pem=ca,
        )

    def record_requests(self) -> contextlib.AbstractContextManager[list[rbac.Attributes]]:
        """`with cluster.record_requests() as seen:` every request served meanwhile, as the
        authorizer saw it (user, verb, group, resource, subresource, namespace, name, path)."""
        if self.apiserver is None:
            raise RuntimeError("Cluster is not started")
        return self.apiserver.recorder.recording()

    def kubectl_env(self) -> dict[str, str]:
        """os.environ with KUBECONFIG pointing at this cluster, for subprocess kubectl."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        # kubectl caches discovery per server address; keep it in our temp dir, not ~/.kube.
        if self.workdir is not None:
            env["KUBECACHEDIR"] = str(self.workdir / "kube-cache")
        return env

    def _node(self, i: int) -> dict[str, Any]:
        name = f"node-{i}"
        resources = {
            "cpu": self._cpu,
            "memory": self._memory,
            "pods": str(self._pods),
            "ephemeral-storage": "1Ti",
            "nvidia.com/gpu": str(self.gpus_per_node),
            **self._node_resources,
        }
        stamp = now_rfc3339()
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "nvidia.com/gpu.count": str(self.gpus_per_node),
                    **self._node_labels,
                },
            },
            # The kubelet gives node i's pods 127.<k>.<16+i>.x (INTERFACE.md); say so in podCIDR.
            "spec": {"podCIDR": f"127.{self.number}.{16 + i}.0/24"},
            "status": {
                "capacity": dict(resources),
                "allocatable": dict(resources),
                "addresses": [
                    {"type": "InternalIP", "address": self.node_address(i)},
                    {"type": "Hostname", "address": name},
                ],
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": stamp,
                        "lastTransitionTime": stamp,
                    }
                ],
                "nodeInfo": {
                    # Every field NodeSystemInfo requires: strict clients (lightkube) reject less.
                    "machineID": f"{self.number:08x}{i:024x}",
                    "systemUUID": f"{self.number:08x}-0000-0000-0000-{i:012x}",
                    "bootID": f"{self.number:08x}-{i:04x}-0000-0000-000000000000",
                    "kubeProxyVersion": "",
                    "kubeletVersion": "v1.34.0-nccl-k8s-test",
                    "containerRuntimeVersion": "process://local",
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                    "osImage": "nccl-k8s test node",
                    "kernelVersion": os.uname().release,
                },
                "phase": "Running",
            },
        }


@contextlib.contextmanager
def _logged(what: str) -> Any:
    # One part failing to stop must not keep the others (and their processes) alive.
    try:
        yield
    except Exception:
        log.exception("stopping %s failed", what)
