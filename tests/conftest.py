"""Shared fixtures: the local test cluster (tests/cluster) and ways to talk to it.

`cluster` is one cluster for the whole session, because starting one costs about a second on a
busy machine; tests keep out of each other's way by working in their own namespace (`namespace`).
Tests that need a cluster of their own shape ask `cluster_factory`, which stops what it started.
In-process engine tests ask `world_of_one`: one gloo rank (tests/_helpers.py has its clock).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

# `python -m pytest` puts the repo root on sys.path; a bare `pytest` does not, and the cluster
# lives in the `tests` package.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

# deploy pins images by asking their registries (run._images); the tests reach loopback only,
# so it is off unless a test turns it on against its own registry (tests/_registry.py).
os.environ["NCCL_K8S_PIN_IMAGES"] = "0"

from tests._helpers import free_port, one_rank_env  # noqa: E402
from tests.cluster.cluster import Cluster  # noqa: E402

if TYPE_CHECKING:
    from nccl_k8s.bench.rank import Rank

Obj = dict[str, Any]


class Api:
    """Plain-HTTP access to a cluster's API server, returning (status code, decoded body)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        timeout_s: float = 20,
    ) -> tuple[int, Any]:
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return resp.status, _decode(resp.read())
        except urllib.error.HTTPError as e:
            with e:
                return e.code, _decode(e.read())

    def get(self, path: str) -> tuple[int, Any]:
        return self.request("GET", path)

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        return self.request("POST", path, body)

    def watch(self, path: str, *, timeout_s: float = 10) -> list[Obj]:
        """All events of a watch that the server ends (pass timeoutSeconds in `path`)."""
        with urllib.request.urlopen(self.url + path, timeout=timeout_s) as resp:
            return [json.loads(line) for line in resp.read().splitlines() if line.strip()]


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


@pytest.fixture(scope="session")
def cluster_factory() -> Iterator[Callable[..., Cluster]]:
    """make(**Cluster kwargs) -> a started Cluster, stopped at the end of the session."""
    started: list[Cluster] = []

    def make(**kwargs: Any) -> Cluster:
        c = Cluster(**kwargs)
        started.append(c)
        return c.start()

    try:
        yield make
    finally:
        for c in reversed(started):
            c.stop()


@pytest.fixture(scope="session")
def cluster(cluster_factory: Callable[..., Cluster]) -> Cluster:
    # Images whose name contains "does-not-exist" fail with ErrImagePull, for doctor-style tests.
    return cluster_factory(nodes=4, gpus_per_node=8, image_pull_fail_pattern="does-not-exist")


@contextlib.contextmanager
def fresh_namespace(cluster: Cluster, prefix: str = "t") -> Iterator[str]:
    """A new namespace in `cluster`, deleted (with everything in it) at the end, and the
    cluster's request faults dropped, so that a test that failed early leaves none behind."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.store.create("namespaces", {"metadata": {"name": name}})
    try:
        yield name
    finally:
        cluster.faults.clear()
        with contextlib.suppress(Exception):
            cluster.store.delete("namespaces", None, name)


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A fresh namespace of `cluster` (a module's own cluster where it defines one)."""
    with fresh_namespace(cluster) as name:
        yield name


@pytest.fixture
def runs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """NCCL_K8S_RUNS_DIR in this test's directory: what a run saves stays out of the user's."""
    d = tmp_path / "runs"
    monkeypatch.setenv("NCCL_K8S_RUNS_DIR", str(d))
    return d


@pytest.fixture
def api(cluster: Cluster) -> Api:
    return Api(cluster.url)


@pytest.fixture
def kubectl(cluster: Cluster) -> Callable[..., subprocess.CompletedProcess[str]]:
    """kubectl(*args, input=None, check=True) against `cluster`; stdout/stderr as text."""
    exe = shutil.which("kubectl")
    if exe is None:
        pytest.skip("kubectl is not installed")

    def run(
        *args: str, input: str | None = None, check: bool = True, timeout_s: float = 30
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [exe, *args],
            input=input,
            capture_output=True,
            text=True,
            env=cluster.kubectl_env(),
            timeout=timeout_s,
        )
        if check and proc.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
        return proc

    return run


@pytest.fixture
def world_of_one(monkeypatch: pytest.MonkeyPatch) -> Iterator[Rank]:
    """One gloo rank in this process (a world of one on a free port), closed at the end."""
    from nccl_k8s.bench.rank import Rank

    for k, v in one_rank_env(free_port()).items():
        monkeypatch.setenv(k, v)
    rank = Rank("gloo", 0)
    try:
        yield rank
    finally:
        rank.close()
