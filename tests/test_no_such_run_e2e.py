"""Issue 39, item 9: a run id that names no run is one class of failure with one exit code (2,
bad input) in every command that takes one: the cluster's (`logs` included, which said "has no
pods (yet)") and `compare`/`report`, which read results files."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from tests.cluster.cluster import Cluster
from tests.e2e_helpers import cli
from typer.testing import CliRunner

from nccl_k8s.cli.main import app

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("runs_dir")]


def test_a_missing_run_is_exit_2_naming_it_everywhere(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    nope = f"nope-{uuid.uuid4().hex[:6]}"
    said = f"no run {nope} in namespace {namespace}"
    for command in (("logs",), ("status",), ("results",), ("cleanup",)):
        res = cli(cluster, *command, "-n", namespace, "--run", nope)
        assert res.exit_code == 2, (command, res.output)
        assert said in res.output, (command, res.output)
        assert "has no pods" not in res.output
    for args in (["compare", nope, "--min-busbw", "1"], ["report", nope]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert f"no run {nope!r} in" in res.stderr


def test_nodes_check_in_a_missing_namespace_fails_before_its_first_pass(cluster: Cluster) -> None:
    missing = f"nosuchns-{uuid.uuid4().hex[:6]}"
    res = cli(cluster, "nodes", "check", "-n", missing)
    assert res.exit_code == 2, res.output
    (line,) = [ln for ln in res.output.splitlines() if ln.strip()]
    assert line.startswith(f"error: namespace {missing} does not exist on ")
    assert "--create-namespace" not in line  # nodes check has no such flag
    assert "pass 1" not in res.output
