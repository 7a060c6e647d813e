"""Issue 24, acceptance 1: the README's install works as a new user runs it. In a fresh venv,
`pip install '<clone>[k8s]'` (the working tree, built by pip through its build backend, every
dependency resolved from PyPI: no `--no-deps`, nothing borrowed from the test environment), then
that venv's own `nccl-k8s render` and `nccl-k8s deploy` against the test cluster: the run's
objects exist and the run succeeds.

The walk over every `pip install 'nccl-k8s[EXTRA]'` hint the CLI prints is tests/test_extras.py.
Needs PyPI (the build backend and the dependencies); without it the test is skipped, saying so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from tests.cluster.cluster import Cluster

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ["--", "--backend", "gloo", "--ops", "all_reduce", "-b", "1K", "-e", "4K",
          "-c", "1", "-w", "1", "-n", "2"]  # fmt: skip


def _pypi_reachable() -> bool:
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple/")
    try:
        with urllib.request.urlopen(index.rstrip("/") + "/pip/", timeout=15) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def venv_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with `<clone>[k8s]` installed by pip, as the README says."""
    if not _pypi_reachable():
        pytest.skip("PyPI is not reachable: pip cannot install the k8s extra here")
    base = tmp_path_factory.mktemp("fresh")
    # A copy of the tracked tree: pip builds from it without writing into the checkout.
    clone = base / "clone"
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")  # fmt: skip
    for name in filter(None, (f.decode() for f in files)):
        src = ROOT / name
        if src.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, clone / name)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
         "--no-input", f"{clone}[k8s]"],
        capture_output=True, text=True, timeout=900,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
    )  # fmt: skip
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    return venv / "bin"


def test_a_fresh_venv_with_the_k8s_extra_renders_and_deploys(
    venv_bin: Path, cluster: Cluster, namespace: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["NCCL_K8S_RUNS_DIR"] = str(venv_bin.parent / "runs")
    # Its own package, not the test environment's (no PYTHONPATH, its own interpreter).
    where = subprocess.run([str(venv_bin / "python"), "-c", "import nccl_k8s; print(nccl_k8s.__file__)"],
                           capture_output=True, text=True, env=env, check=True).stdout  # fmt: skip
    assert where.startswith(str(venv_bin.parent)), where
    nccl = str(venv_bin / "nccl-k8s")
    rid = f"fresh-{uuid.uuid4().hex[:6]}"
    shape = ["-n", namespace, "--run-id", rid, "--world-size", "2", "--gpus-per-node", "1"]
    render = subprocess.run([nccl, "render", *shape, *ENGINE], capture_output=True, text=True,
                            env=env, timeout=120)  # fmt: skip
    assert render.returncode == 0, render.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(render.stdout) if d]
    assert kinds == [
        "ConfigMap",
        "NetworkPolicy",
        "Service",
        "Job",
    ]  # no RBAC objects without --adopt
    deploy = subprocess.run(
        [nccl, "deploy", *shape, "--kubeconfig", str(cluster.kubeconfig), *ENGINE],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert deploy.returncode == 0, deploy.stdout + deploy.stderr
    assert f"run {rid} succeeded" in deploy.stdout + deploy.stderr
    sel = f"app.kubernetes.io/instance={rid}"
    for res, name in (("configmaps", f"{rid}-engine"), ("services", rid), ("jobs", rid)):
        items, _ = cluster.store.list(res, namespace, label_selector=sel)
        assert [o["metadata"]["name"] for o in items] == [name], res
    pods, _ = cluster.store.list("pods", namespace, label_selector=sel)
    assert sorted(p["status"]["phase"] for p in pods) == ["Succeeded", "Succeeded"]
