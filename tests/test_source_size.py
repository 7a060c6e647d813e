"""Issue 19, acceptance 6: no module of src/ over 600 lines and no function over 80, so that
each reads in one sitting. (It crept back once unnoticed: api/_client.py at 614 lines and
launch/_procs.run_ranks at 83.)"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "nccl_k8s"
MODULE_LINES = 600
FUNCTION_LINES = 80


def test_no_module_over_600_lines_and_no_function_over_80() -> None:
    too_long = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        name = path.relative_to(SRC.parent)
        if text.count("\n") > MODULE_LINES:
            too_long.append(f"{name}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > FUNCTION_LINES:
                    too_long.append(f"{name}: {node.name}() {lines} lines")
    assert not too_long, too_long
