"""The layering of DESIGN.md as a check: imports point downwards only.

bench/ runs inside pods as a zipapp next to nothing but torch, so it may import only the
standard library, torch, prometheus_client and itself. results/ must not need torch or a cluster.
"""

from __future__ import annotations

import ast
import pathlib
import sys

import pytest

SRC = pathlib.Path(__file__).parent.parent / "src" / "nccl_k8s"

ALLOWED_THIRD_PARTY = {
    "bench": {"torch", "prometheus_client"},
    "results": {"yaml", "matplotlib"},
}
FORBIDDEN_OURS = {
    "bench": {
        "nccl_k8s.k8s",
        "nccl_k8s.results",
        "nccl_k8s.cli",
        "nccl_k8s.launch",
        "nccl_k8s.spec",
        "nccl_k8s.errors",
    },
    "results": {"nccl_k8s.k8s", "nccl_k8s.cli", "nccl_k8s.launch", "nccl_k8s.bench.engine"},
    "k8s": {"nccl_k8s.cli"},
    # launch returns plain facts; storing results is the cli's (issue 14: cli > k8s > results > launch)
    "launch": {"nccl_k8s.cli", "nccl_k8s.k8s", "nccl_k8s.results"},
}


def _imports(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("layer", sorted(FORBIDDEN_OURS))
def test_imports_point_downwards(layer: str) -> None:
    files = sorted((SRC / layer).rglob("*.py"))
    assert files, layer
    for path in files:
        for name in _imports(path):
            for bad in FORBIDDEN_OURS[layer]:
                assert not (name == bad or name.startswith(bad + ".")), (
                    f"{path.relative_to(SRC)} imports {name}"
                )
            top = name.split(".")[0]
            if (
                layer in ALLOWED_THIRD_PARTY
                and top not in sys.stdlib_module_names
                and top != "nccl_k8s"
            ):
                assert top in ALLOWED_THIRD_PARTY[layer], f"{path.relative_to(SRC)} imports {name}"
