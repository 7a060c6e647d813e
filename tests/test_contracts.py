"""The layer contracts (import-linter, run by `make test`) catch what they guard: an import
planted in the engine, in any of the forms a newcomer might write, breaks them, and so does a
forbidden import planted in every other layer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).with_name("lint-imports")

PLANTS = {
    "absolute module": "from nccl_k8s.k8s import _client",
    "from the package": "from nccl_k8s import k8s",
    "relative": "from .. import k8s",
    "results": "import nccl_k8s.results.schema",
    "inside a function": "def _late():\n    from nccl_k8s.cli import main  # noqa",
    "a CLI library": "import rich",
}


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.run(
        [str(LINT), "--config", str(tree / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("form", sorted(PLANTS))
def test_an_import_planted_in_the_engine_breaks_the_contracts(tmp_path: Path, form: str) -> None:
    shutil.copytree(ROOT / "src" / "nccl_k8s", tmp_path / "nccl_k8s")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "nccl_k8s" / "bench" / "counts.py"
    target.write_text(target.read_text() + "\n" + PLANTS[form] + "\n")
    res = _lint(tmp_path)
    assert res.returncode != 0, res.stdout
    assert "The engine runs in pods next to torch alone" in res.stdout
    assert "nccl_k8s.bench.counts ->" in res.stdout, res.stdout


LAYERS = "Layers: cli > k8s | local > results | launch > spec > errors | fabrics > bench"
K8S_LAYERS = "Inside the Kubernetes layer: nodes > run > preflight > rendering > api"
#: (module planted in, the planted import, the contract it must break)
LAYER_PLANTS = [
    (
        "cli/_results.py",
        "from nccl_k8s.results.compare import judge as _j",
        "The CLI imports facades only",
    ),
    ("cli/_cluster.py", "import nccl_k8s.k8s.run._deploy", "The CLI imports facades only"),
    ("cli/_run.py", "from nccl_k8s.local import _run", "The CLI imports facades only"),
    ("cli/main.py", "import httpx2", "Only the Kubernetes layer talks HTTP"),
    ("k8s/run/_status.py", "from nccl_k8s.cli import main", LAYERS),
    ("k8s/rendering/_names.py", "from nccl_k8s import local", LAYERS),
    ("k8s/rendering/_names.py", "import torch", "The Kubernetes layer and the spec need no torch"),
    (
        "k8s/rendering/_names.py",
        "from nccl_k8s.k8s.api import _client",
        "Rendering needs no API client",
    ),
    ("k8s/run/_status.py", "import lightkube", "Only nccl_k8s.k8s.api talks HTTP"),
    ("k8s/api/_kinds.py", "from nccl_k8s.k8s.run import _deploy", K8S_LAYERS),
    ("k8s/preflight/_nodefit.py", "from nccl_k8s.k8s.nodes import _nodecheck", K8S_LAYERS),
    ("local/_run.py", "from nccl_k8s import cli", LAYERS),
    ("local/_run.py", "from nccl_k8s.k8s import render", LAYERS),
    ("results/schema.py", "from nccl_k8s.launch import check_writable", LAYERS),
    ("results/schema.py", "from nccl_k8s import k8s", LAYERS),
    ("results/schema.py", "from nccl_k8s import local", LAYERS),
    ("results/schema.py", "import torch", "Results are read on a laptop"),
    ("results/schema.py", "import lightkube", "Results are read on a laptop"),
    ("launch/local.py", "from nccl_k8s.results import load", LAYERS),
    ("launch/local.py", "import nccl_k8s.k8s", LAYERS),
    ("launch/local.py", "import httpx2", "Only the Kubernetes layer talks HTTP"),
    ("spec/_values.py", "from nccl_k8s.k8s import render", "The spec is pure"),
    ("spec/_values.py", "from nccl_k8s import results", LAYERS),
    ("errors.py", "from nccl_k8s import spec", "errors and the fabric table are the leaves"),
    ("fabrics.py", "from nccl_k8s import spec", "errors and the fabric table are the leaves"),
    ("fabrics.py", "from nccl_k8s import errors", LAYERS),
    ("bench/counts.py", "from nccl_k8s import fabrics", "The engine runs in pods"),
    ("bench/counts.py", "from nccl_k8s import errors", "The engine runs in pods"),
]


@pytest.mark.parametrize(("module", "line", "contract"), LAYER_PLANTS)
def test_a_forbidden_import_planted_in_any_layer_breaks_its_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    shutil.copytree(ROOT / "src" / "nccl_k8s", tmp_path / "nccl_k8s")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    assert _lint(tmp_path).returncode == 0  # the tree as it is keeps every contract
    target = tmp_path / "nccl_k8s" / module
    target.write_text(target.read_text() + "\n" + line + "  # noqa\n")
    res = _lint(tmp_path)
    assert res.returncode != 0, res.stdout
    broken = res.stdout.split("Broken contracts")[-1]
    assert contract in broken, res.stdout
    planted = "nccl_k8s." + module.removesuffix(".py").replace("/", ".")
    assert planted in broken, res.stdout


def test_a_new_flat_module_in_the_kubernetes_layer_must_be_given_its_place(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "src" / "nccl_k8s", tmp_path / "nccl_k8s")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "nccl_k8s" / "k8s" / "_stray.py").write_text('"""A module of no subpackage."""\n')
    res = _lint(tmp_path)
    assert res.returncode != 0 and K8S_LAYERS in res.stdout.split("Broken contracts")[-1]


def test_no_contract_is_weakened_by_ignored_imports() -> None:
    assert "ignore_imports" not in (ROOT / "pyproject.toml").read_text()
