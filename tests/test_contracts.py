"""The layer contracts (import-linter, run by `make test`) catch what they guard: an import
planted in the engine, in any of the forms a newcomer might write, breaks them."""

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
