"""Issue 13: several sweeps in one engine process, read back one by one.

With --sweeps N the engine prints each sweep's result lines as one framed block when the sweep
ends, its own meta line first and a sweep line last; the pod wrapper keeps no copy of what the
engine framed; the reader takes complete blocks only. Deploy options own the engine flags they
render, and `report` refuses a run with nothing to plot.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.errors import UsageError
from nccl_k8s.k8s.rendering._wrapper import POD_WRAPPER
from nccl_k8s.results import blocks, parse_sweeps
from nccl_k8s.results.schema import Run, RunMeta, dump
from nccl_k8s.spec import build_run_spec


def test_blocks_are_read_only_when_complete() -> None:
    text = "\n".join(
        [
            "x NCCL_K8S_END results 2",  # the end of a block whose start rotation took
            "NCCL_K8S_BEGIN results 2", "a", "b", "NCCL_K8S_END results 2",
            "NCCL_K8S_BEGIN results 3", "c", "d", "NCCL_K8S_END results 3",  # one line short
            "NCCL_K8S_BEGIN nccl 1", "n", "NCCL_K8S_END nccl 1",
            "[pod/x] NCCL_K8S_BEGIN results 1", "[pod/x] e", "[pod/x] NCCL_K8S_END results 1",
            "NCCL_K8S_BEGIN results 1", "f",  # still being written
        ]
    )  # fmt: skip
    assert blocks(text, "results") == [["a", "b"], ["[pod/x] e"]]
    assert blocks(text, "nccl") == [["n"]]


@pytest.fixture(scope="module")
def two_sweeps() -> str:
    """A real engine process of two sweeps, under the pod wrapper: its whole stdout."""
    argv = [sys.executable, "-m", "nccl_k8s.bench", "--backend", "gloo", "--sweeps", "2",
            "--sweep-interval", "0.2", "-b", "8", "-e", "64", "-f", "8", "-n", "1", "-w", "0"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", POD_WRAPPER, *argv], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_each_sweep_is_one_block_that_reads_on_its_own(two_sweeps: str) -> None:
    # Two blocks, the engine's; the wrapper adds no third copy of the lines at the end.
    assert two_sweeps.count("NCCL_K8S_BEGIN results") == 2
    assert two_sweeps.count("NCCL_K8S_RESULT ") == 2 * (1 + 4 + 1 + 1)  # meta, rows, summary, sweep
    runs = parse_sweeps(two_sweeps, origin="engine")
    assert [r.meta.sweep for r in runs] == [0, 1]
    for run in runs:
        assert sorted((r.size_bytes, r.placement) for r in run.rows) == [
            (8, "in"), (8, "out"), (64, "in"), (64, "out"),
        ]  # fmt: skip
        assert run.meta.world_size == 1 and all(r.wrong == 0 for r in run.rows)
    # Each block ends with its sweep line: which sweep, passed, when, how long.
    last = blocks(two_sweeps, "results")[-1][-1]
    sweep = json.loads(last.split(" ", 1)[1])
    assert (sweep["kind"], sweep["sweep"], sweep["ok"], sweep["wrong_ranks"]) == (
        "sweep", 1, True, []
    )  # fmt: skip
    # The human table says where each sweep starts and ends.
    assert "# nccl-k8s sweep 1 starting" in two_sweeps
    assert "# nccl-k8s sweep 1 ended after" in two_sweeps


def test_a_single_sweep_prints_as_before(two_sweeps: str) -> None:
    del two_sweeps  # order: the module's process first, to share the machine less
    argv = [sys.executable, "-m", "nccl_k8s.bench", "--backend", "gloo", "-b", "8", "-e", "8",
            "-n", "1", "-w", "0"]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout
    assert "NCCL_K8S_BEGIN" not in out and '"kind":"sweep"' not in out
    (run,) = parse_sweeps(out)
    assert run.meta.sweep is None and len(run.rows) == 2


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"engine_args": ["--metrics-port", "9000"]},
            "engine arguments: --metrics-port is set by the deploy option --metrics-port",
        ),
        (
            {"workload": "statefulset", "engine_args": ["--sweeps", "3"]},
            "engine arguments: --sweeps is set by --workload statefulset",
        ),
        (
            {"workload": "statefulset", "engine_args": ["--sweep-interval=5"]},
            "engine arguments: --sweep-interval is set by --workload statefulset",
        ),
        (
            {"engine_args": ["--sweeps", "0"]},
            "engine arguments: --sweeps 0 sweeps until stopped, which a Job never is",
        ),
        ({"metrics_port": "http"}, '--metrics-port "http": expected a TCP port, 1 to 65535'),
        ({"metrics_port": "70000"}, '--metrics-port "70000": expected a TCP port'),
        ({"metrics_port": "-1"}, '--metrics-port "-1": expected a TCP port'),
        # Below 1024: a container without NET_BIND_SERVICE cannot bind it, and under host
        # networking it is the node's (issue 36).
        ({"metrics_port": "80"}, '--metrics-port "80": a privileged port (below 1024)'),
        ({"metrics_port": "1023"}, '--metrics-port "1023": a privileged port (below 1024)'),
        ({"metrics_port": "0", "pod_monitor": True}, "--pod-monitor with --metrics-port 0"),
    ],
)
def test_deploy_options_own_the_engine_flags_they_render(
    values: dict[str, object], message: str
) -> None:
    with pytest.raises(UsageError) as e:
        build_run_spec(world_size=8, run_id="r", **values)  # type: ignore[arg-type]
    assert str(e.value).startswith(message)


def test_a_privileged_metrics_port_is_one_line_exit_2() -> None:
    res = CliRunner().invoke(app, ["render", "--world-size", "8", "--metrics-port", "443"])
    assert res.exit_code == 2
    assert res.output.strip() == (
        'error: --metrics-port "443": a privileged port (below 1024); expected 1024 to 65535, '
        "or 0 for none"
    )
    assert build_run_spec(world_size=8, run_id="r", metrics_port="1024").metrics_port == 1024


def test_a_job_may_run_a_few_sweeps_and_no_metrics() -> None:
    spec = build_run_spec(world_size=8, run_id="r", metrics_port="0", engine_args=["--sweeps", "3"])
    assert spec.metrics_port == 0 and spec.engine_args == ("--sweeps", "3")


def test_report_of_a_run_without_rows_fails_and_writes_nothing(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = dump(Run(meta=RunMeta(run_id="empty", world_size=2)), tmp_path / "results.json")
    page = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["report", str(path), "-o", str(page)])
    assert result.exit_code == 2, result.output
    assert "no rows to plot; nothing written" in result.output
    assert not page.exists()
