"""What the end-to-end tests of the Kubernetes commands share: running the CLI against a test
cluster, the run's labelled objects left in the store, and waiting for a condition."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cluster.cluster import Cluster
from typer.testing import CliRunner

from nccl_k8s.cli.main import app

MANAGED = "app.kubernetes.io/managed-by=nccl-k8s"
RESOURCES = ("configmaps", "services", "jobs", "statefulsets", "pods")


def cli(cluster: Cluster, *args: str, input: str | None = None) -> Any:
    """`nccl-k8s ARGS` in this process (fast); result.output holds stdout and stderr."""
    # Our options go before `--`: what follows it is the engine's.
    cut = args.index("--") if "--" in args else len(args)
    argv = [*args[:cut], "--kubeconfig", str(cluster.kubeconfig), *args[cut:]]
    return CliRunner().invoke(app, argv, input=input)


def labelled(cluster: Cluster, ns: str, selector: str = MANAGED) -> list[str]:
    """`resource/name` of every object in the namespace with the labels, sorted."""
    found = []
    for res in RESOURCES:
        items, _ = cluster.store.list(res, ns, label_selector=selector)
        found += [f"{res}/{o['metadata']['name']}" for o in items]
    return sorted(found)


def engine_zipapp_with(tmp_path: Path, code: str) -> bytes:
    """The engine zipapp with `code` run first by its entry point (after its __future__ import):
    a marker, or a hook that sabotages the data plane."""
    import shutil

    import nccl_k8s
    from nccl_k8s.k8s.rendering._zipapp import build_zipapp

    root = tmp_path / "pkg" / "nccl_k8s"
    src = Path(nccl_k8s.__file__).parent
    shutil.copytree(src / "bench", root / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(src / "launch", root / "launch", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(src / "__init__.py", root / "__init__.py")
    shutil.copy(src / "errors.py", root / "errors.py")  # the in-pod launcher's
    main = root / "bench" / "__main__.py"
    future = "from __future__ import annotations\n"
    main.write_text(main.read_text().replace(future, future + code, 1))
    return build_zipapp(root)


def wait_for(what: str, fn: Callable[[], Any], timeout_s: float = 120.0) -> Any:
    """fn()'s first truthy value, or the test fails naming `what` and the last value.

    The wait is for an event (a state in the API, a line in a log); `timeout_s` only keeps a
    test that would never see it from hanging, so it is generous: a loaded machine may take
    many times the usual to get there, and that must not fail a test."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            last = fn()
            if last:
                return last
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout_s}s waiting for {what}; last: {last!r}")


@contextlib.contextmanager
def cli_process(
    *args: str, sigint: signal.Handlers = signal.SIG_DFL
) -> Iterator[subprocess.Popen[str]]:
    """`nccl-k8s ARGS` as a process of its own (to send it signals), started with SIGINT as
    `sigint` (SIG_IGN: as a script's `&` starts it); killed at the end if still alive."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "nccl_k8s.cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
