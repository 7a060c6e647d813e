"""Issue 24, acceptance 2: the `nccl-k8s` command lines of the README's and docs/' code blocks run
as written on a machine without a GPU, or are marked GPU and refused in one line.

Every line of a ```sh / ```console block (or an unmarked one) that starts with `nccl-k8s` (after a
`$ ` prompt or `.venv/bin/`) is an example. A comment line naming GPU marks the lines after it in
its block. What each is held to:
- `run` marked GPU: exit 2 and one line saying why (no CUDA device here);
- `run` otherwise: runs to exit 0 on two CPU ranks (slow: the README's own timings);
- `render`: prints its objects, exit 0;
- the cluster commands (deploy, status, logs, ...): the command exists and parses every option as
  written (placeholders such as ID stay words); running them needs a cluster of GPU nodes.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from nccl_k8s.cli.main import app

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def examples() -> list[tuple[str, list[str], bool]]:
    """(where, argv, marked GPU) of every example line."""
    found: list[tuple[str, list[str], bool]] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            if m.group(1) not in ("", "sh", "bash", "console"):
                continue
            gpu = False
            first = text[: m.start()].count("\n") + 2
            # A command continued with a trailing backslash is one example.
            lines = m.group(2).replace("\\\n", " ").splitlines()
            for i, line in enumerate(lines):
                stripped = line.strip()
                if stripped.startswith("#"):
                    gpu = gpu or "GPU" in stripped
                    continue
                stripped = stripped.removeprefix("$ ").removeprefix(".venv/bin/")
                if not stripped.startswith("nccl-k8s "):
                    continue
                argv = shlex.split(stripped.split(" | ")[0], comments=True)
                found.append((f"{doc.name}:{first + i}", argv[1:], gpu))
    return found


EXAMPLES = examples()
IDS = [f"{where} {' '.join(argv)}" for where, argv, _ in EXAMPLES]


def _cli(argv: list[str], cwd: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NCCL_K8S_RUNS_DIR": str(cwd / "runs"), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "nccl_k8s.cli.main", *argv],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout_s, check=False,
    )  # fmt: skip


def test_the_docs_have_examples_of_each_kind() -> None:
    kinds = {(argv[0], gpu) for _, argv, gpu in EXAMPLES}
    assert {("run", True), ("run", False), ("render", False), ("deploy", False)} <= kinds


@pytest.mark.parametrize(("where", "argv", "gpu"), EXAMPLES, ids=IDS)
def test_every_example_parses_as_written(where: str, argv: list[str], gpu: bool) -> None:
    cmd: typer.core.TyperGroup | typer.core.TyperCommand = typer.main.get_command(app)  # type: ignore[assignment]
    rest = list(argv)
    while isinstance(cmd, typer.core.TyperGroup):
        # get_command: the root loads a command's module when asked for it (cli.main).
        sub = cmd.get_command(None, rest[0]) if rest else None  # type: ignore[arg-type]
        assert sub is not None, f"{where}: no command {rest[:1]}"
        cmd, rest = sub, rest[1:]  # type: ignore[assignment]
    if "--help" not in rest and "-h" not in rest:
        cmd.make_context(f"nccl-k8s {argv[0]}", rest)


@pytest.mark.parametrize(
    ("where", "argv"),
    [(w, a) for w, a, gpu in EXAMPLES if a[0] == "run" and gpu],
    ids=[i for i, (_, a, gpu) in zip(IDS, EXAMPLES, strict=True) if a[0] == "run" and gpu],
)
def test_gpu_examples_are_refused_in_one_line_without_a_gpu(
    tmp_path: Path, where: str, argv: list[str]
) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the example runs (the gpu-marked device tests)")
    proc = _cli(argv, tmp_path, 120)
    assert proc.returncode == 2, (where, proc.stderr)
    assert proc.stderr.splitlines() == [
        "error: --backend nccl: no CUDA device is visible here; use --backend gloo"
    ], where
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("where", "argv"),
    [(w, a) for w, a, _ in EXAMPLES if a[0] == "render"],
    ids=[i for i, (_, a, _) in zip(IDS, EXAMPLES, strict=True) if a[0] == "render"],
)
def test_render_examples_print_their_objects(where: str, argv: list[str]) -> None:
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0, (where, res.output)
    assert "kind: Job" in res.stdout or '"kind": "StatefulSet"' in res.stdout, where


@pytest.mark.slow
@pytest.mark.parametrize(
    ("where", "argv"),
    [(w, a) for w, a, gpu in EXAMPLES if a[0] == "run" and not gpu],
    ids=[i for i, (_, a, gpu) in zip(IDS, EXAMPLES, strict=True) if a[0] == "run" and not gpu],
)
def test_cpu_run_examples_run_as_written(tmp_path: Path, where: str, argv: list[str]) -> None:
    pytest.importorskip("torch")
    proc = _cli(argv, tmp_path, 240)
    assert proc.returncode == 0, (where, proc.stderr[-2000:])
    if "--help" not in argv:
        assert re.search(r"^# results: \S+results.json$", proc.stderr, re.M), where
