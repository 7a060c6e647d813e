"""Issue 39 acceptance 2: behind 0.2-1 s of API latency, Ctrl-C at random moments of deploy's
create phase leaves nothing of the run behind, and the message names the run.

Each of INTERRUPTS deploys is a `nccl-k8s deploy` process of its own in a namespace of its own,
every request of that namespace held 0.2-1 s (drawn per request) by the test cluster, and gets
SIGINT, as a user's Ctrl-C, at a moment drawn from a seeded RNG over its create phase: the create
phase is the run's creates and owner patches, one after the other, and nearly all of its time is
those requests' latency, so a moment is a request (uniform over them) and a point in its hold
(uniform). The seed is printed; NCCL_K8S_INTERRUPT_SEED overrides it, so a failing draw is
replayed exactly (the delays and moments come from it; the machine's load only shifts the
client's own few milliseconds between requests).

The cluster runs no scheduler, controllers or kubelet: a Job makes no pods, nothing runs, and
what is left is exactly what the deploy and its roll-back did. The deploys run a few at a time
(their time is the server's holds, not CPU), so the 20 take well under a minute.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tests.cluster.cluster import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("runs_dir")]

INTERRUPTS = 20
LATENCY_S = (0.2, 1.0)
SEED_ENV = "NCCL_K8S_INTERRUPT_SEED"
#: The seed CI draws from; seeds that once found a hole are kept in REGRESSION_SEEDS.
DEFAULT_SEED = 39
#: Deploys at once: each mostly waits on the server's holds.
WORKERS = 10
#: The requests of the create phase (creates and the owner patches after the Job).
CREATE_PHASE = ("POST", "PATCH")
INSTANCE = "app.kubernetes.io/instance"


@pytest.fixture(scope="module")
def cluster(cluster_factory: Callable[..., Cluster]) -> Cluster:
    # No components: the Job makes no pods, so nothing runs and nothing needs to end.
    return cluster_factory(nodes=2, gpus_per_node=1, components=False)


def _deploy_args(cluster: Cluster, namespace: str, rid: str) -> list[str]:
    return [
        sys.executable, "-m", "nccl_k8s.cli.main", "deploy", "-n", namespace, "--run-id", rid,
        "--kubeconfig", str(cluster.kubeconfig), "--no-wait", "--world-size", "2",
        "--gpus-per-node", "1", "--", "--backend", "gloo",
    ]  # fmt: skip


def _new_namespace(cluster: Cluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.store.create("namespaces", {"metadata": {"name": name}})
    return name


@dataclass
class Made:
    """What an uninterrupted deploy made: its objects (resource, name) and how many requests
    its create phase sends."""

    objects: list[tuple[str, str]]
    create_requests: int


@pytest.fixture(scope="module")
def made(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Made:
    """One deploy run to its end, no latency: the kinds and names a run creates, and the length
    of its create phase in requests (what the moments are drawn over)."""
    namespace = _new_namespace(cluster, "calib")
    rid = f"c-{uuid.uuid4().hex[:6]}"
    seen: list[str] = []

    def count(method: str, path: str) -> float:
        if method in CREATE_PHASE:
            seen.append(method)
        return 0.0

    cluster.faults.delay_requests(rf"/namespaces/{namespace}/", count, count=10_000)
    env = {**os.environ, "NCCL_K8S_RUNS_DIR": str(tmp_path_factory.mktemp("runs"))}
    try:
        proc = subprocess.run(
            _deploy_args(cluster, namespace, rid), capture_output=True, text=True, timeout=120,
            env=env,
        )  # fmt: skip
    finally:
        cluster.faults.clear()
    assert proc.returncode == 0, proc.stderr
    objects = [
        (resource, name.replace(rid, "{rid}"))
        for resource, name in _labelled(cluster, namespace, rid)
    ]
    assert ("jobs", "{rid}") in objects, objects
    cluster.store.delete("namespaces", None, namespace)
    return Made(objects, len(seen))


@dataclass
class Draw:
    """One interrupt: at request `request` of the create phase, `fraction` into its hold; the
    latencies from `latency_seed`."""

    index: int
    request: int
    fraction: float
    latency_seed: int
    rid: str = ""
    namespace: str = ""
    returncode: int | None = None
    stderr: str = ""
    left: list[str] = field(default_factory=list)
    sent: bool = False

    def __str__(self) -> str:
        last = self.stderr.strip().splitlines()[-1:] or ["(no stderr)"]
        return (
            f"#{self.index} run {self.rid} (SIGINT at create request {self.request}, "
            f"{self.fraction:.2f} into its hold; latency seed {self.latency_seed}): "
            f"exit {self.returncode}, left {self.left}, last line {last[0]!r}"
        )


def _interrupt(cluster: Cluster, made: Made, draw: Draw, runs: Path) -> Draw:
    draw.namespace = _new_namespace(cluster, "intr")
    draw.rid = f"i{draw.index}-{uuid.uuid4().hex[:6]}"
    latency = random.Random(draw.latency_seed)
    started = threading.Event()
    holder: list[subprocess.Popen[str]] = []
    creates = 0

    def ctrl_c() -> None:
        started.wait()
        if holder[0].poll() is None:
            draw.sent = True
            holder[0].send_signal(signal.SIGINT)

    def hold(method: str, path: str) -> float:
        nonlocal creates
        seconds = latency.uniform(*LATENCY_S)
        if method in CREATE_PHASE:
            if creates == draw.request:
                threading.Timer(draw.fraction * seconds, ctrl_c).start()
            creates += 1
        return seconds

    cluster.faults.delay_requests(rf"/namespaces/{draw.namespace}/", hold, count=100_000)
    env = {**os.environ, "NCCL_K8S_RUNS_DIR": str(runs)}
    proc = subprocess.Popen(
        _deploy_args(cluster, draw.namespace, draw.rid),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    holder.append(proc)
    started.set()
    try:
        _, draw.stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    draw.returncode = proc.returncode
    draw.left = _left(cluster, made, draw.namespace, draw.rid)
    return draw


def _left(cluster: Cluster, made: Made, namespace: str, rid: str) -> list[str]:
    """What of the run is in the namespace: every kind it creates listed by the run's label,
    and each of its objects fetched by name."""
    left = {f"{resource}/{name}" for resource, name in _labelled(cluster, namespace, rid)}
    for resource, name in made.objects:
        try:
            cluster.store.get(resource, namespace, name.replace("{rid}", rid))
        except Exception:  # the store's NotFound
            continue
        left.add(f"{resource}/{name.replace('{rid}', rid)}")
    return sorted(left)


def _labelled(cluster: Cluster, namespace: str, rid: str) -> list[tuple[str, str]]:
    """(resource, name) of every object of every namespaced kind the cluster serves that carries
    the run's instance label: the kinds the run creates and any it might."""
    found = []
    for resource, ri in cluster.store.resources.items():
        if not ri.namespaced or "list" not in ri.verbs:
            continue
        items, _ = cluster.store.list(resource, namespace, label_selector=f"{INSTANCE}={rid}")
        found += [(resource, o["metadata"]["name"]) for o in items]
    return sorted(found)


def _seed() -> int:
    raw = os.environ.get(SEED_ENV)
    return int(raw) if raw else DEFAULT_SEED


def test_interrupts_at_random_moments_of_the_create_phase_leave_nothing_of_the_run(
    cluster: Cluster, made: Made, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = _seed()
    with capsys.disabled():
        print(f"\n{SEED_ENV}={seed} ({INTERRUPTS} interrupts over {made.create_requests} "
              f"create-phase requests, {LATENCY_S[0]}-{LATENCY_S[1]} s each)")  # fmt: skip
    rng = random.Random(seed)
    draws = [
        Draw(i, rng.randrange(made.create_requests), rng.random(), rng.getrandbits(32))
        for i in range(INTERRUPTS)
    ]
    start = time.monotonic()
    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            done = list(pool.map(lambda d: _interrupt(cluster, made, d, tmp_path), draws))
    finally:
        cluster.faults.clear()
    took = time.monotonic() - start
    with capsys.disabled():
        print(f"{INTERRUPTS} interrupted deploys in {took:.1f} s")
    bad = []
    for d in done:
        lines = d.stderr.strip().splitlines()
        last = lines[-1] if lines else ""
        named = last.startswith(f"error: interrupted by SIGINT: run {d.rid}")
        if not d.sent or d.returncode != 130 or not named or "nothing of it" not in last:
            bad.append(f"{d} (message)")
        elif d.left:
            bad.append(f"{d} (left behind)")
    assert not bad, f"{SEED_ENV}={seed}:\n" + "\n".join(bad)
    for d in done:
        cluster.store.delete("namespaces", None, d.namespace)
