"""Upper bounds Kubernetes and NCCL have, refused at the edge: one line, exit 2, nothing sent."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--world-size", "100000000000000000000", "--gpus-per-node", "8"],
            "error: --world-size 100000000000000000000 --gpus-per-node 8: 12500000000000000000 "
            "pods, but an Indexed Job runs at most 100,000 (completions); expected a smaller run",
        ),
        (
            ["--nodes", "100001", "--gpus-per-node", "1"],
            "error: --nodes 100001 --gpus-per-node 1: 100001 pods, but an Indexed Job runs at "
            "most 100,000 (completions); expected a smaller run",
        ),
        (
            ["--nodes", "2", "--gpus-per-node", "2000000000"],
            "error: --nodes 2 --gpus-per-node 2000000000: world size 4000000000 exceeds the "
            "2,147,483,647 ranks NCCL can number; expected a smaller --gpus-per-node",
        ),
        (["--world-size", "1e20"], 'error: --world-size "1e20": expected a whole number >= 1'),
    ],
)
def test_sizes_kubernetes_cannot_hold_are_one_line_exit_2(args: list[str], line: str) -> None:
    res = CliRunner().invoke(app, ["render", *args])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines() == [line]


def test_the_largest_indexed_job_renders() -> None:
    res = CliRunner().invoke(app, ["render", "--nodes", "100000", "--gpus-per-node", "8"])
    assert res.exit_code == 0, res.output
    assert "completions: 100000" in res.output
