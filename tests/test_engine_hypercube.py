"""hypercube, nccl-tests' hypercube_perf: an all_gather made of send/recv along the dimensions of
a hypercube, on power-of-two rank counts only.

From nccl-tests 2.19.6's src/hypercube.cu: all_gather's counts (each rank sends count elements,
receives n x count), algbw = count x element size x (n - 1) / time, busbw = algbw, no root, no
reduction, the in-place result checked; any other rank count is skipped there, refused here when
named (`--ops all` skips it with a line). The libnccl calls are checked on a simulated NCCL in
tests/test_collectives_registry.py; the sabotage test is in tests/test_engine_sabotage.py.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from nccl_k8s.bench.collectives import ALL_OPS, COLLECTIVES
from nccl_k8s.bench.config import ConfigError, check_backend, parse_args
from nccl_k8s.cli.main import app
from nccl_k8s.results.collectives import FACTS

ROW = re.compile(r"^\s+\d+\s+\d+\s+\w+")


def test_counts_and_bandwidth_are_nccl_tests() -> None:
    hc, ag = COLLECTIVES["hypercube"], COLLECTIVES["all_gather"]
    c = hc.counts(1 << 20, 4, 4)
    assert c == ag.counts(1 << 20, 4, 4)
    assert (c.send, c.recv, c.param, c.send_inplace_offset, c.size_bytes(4)) == (
        65536, 262144, 65536, 65536, 1 << 20
    )  # fmt: skip
    algbw, busbw = hc.bandwidth(c, 4, 4, 1e-3)
    assert algbw == pytest.approx(65536 * 4 * 3 / 1e9 / 1e-3) and busbw == algbw
    # all_gather counts all n chunks and scales by (n-1)/n: the same busbw, another algbw
    assert ag.bandwidth(c, 4, 4, 1e-3)[1] == pytest.approx(busbw)
    assert hc.bandwidth(hc.counts(1024, 4, 1), 4, 1, 1e-3) == (0.0, 0.0)  # nothing received
    assert FACTS["hypercube"].bus_factor is hc.bus_factor and not FACTS["hypercube"].rooted


@pytest.mark.parametrize("ops", ["hypercube", "all_reduce,hypercube"])
def test_a_rank_count_not_a_power_of_two_is_one_line_exit_2(ops: str) -> None:
    result = CliRunner().invoke(app, ["run", "--nproc", "3", "--ops", ops])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    assert "--ops hypercube: expected a power-of-two number of ranks" in lines[0]
    assert "this run has 3" in lines[0]


def test_named_it_is_refused_in_all_it_is_skipped() -> None:
    for n in (1, 2, 4, 8, 16, 1024):
        check_backend(parse_args(["--ops", "hypercube"]), "gloo", world_size=n)
    for n in (3, 5, 6, 12):
        with pytest.raises(ConfigError, match=f"this run has {n}$"):
            check_backend(parse_args(["--ops", "hypercube"]), "gloo", world_size=n)
        check_backend(parse_args(["--ops", "all"]), "gloo", world_size=n)  # the engine skips it
    assert "hypercube" in ALL_OPS


def _run(tmp_path: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NCCL_K8S_RUNS_DIR": str(tmp_path / "runs")}
    return subprocess.run(
        [sys.executable, "-m", "nccl_k8s.cli.main", "run", "--no-save", *args],
        capture_output=True, text=True, timeout=400, env=env, check=False,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [4, 8])
def test_gloo_ranks_gather_every_chunk(tmp_path: pathlib.Path, nproc: int) -> None:
    """log2(n) exchanges; every row checked out of place and in place, the numbers nccl-tests'."""
    out = tmp_path / "run.json"
    proc = _run(tmp_path, "--nproc", str(nproc), "--ops", "hypercube", "-b", "64", "-e", "64K",
                "-f", "32", "-n", "2", "-c", "2", "--json", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines() if ROW.match(line)]
    assert [int(r[0]) for r in rows] == [0 if nproc == 8 else 64, 2048, 65536]
    assert all(r[3] == "none" and r[4] == "-1" and r[8] == "0" and r[12] == "0" for r in rows)
    for js in json.loads(out.read_text())["results"]:
        assert js["count"] * nproc * 4 == js["size"]
        for cell in (js["out_of_place"], js["in_place"]):
            assert cell["nwrong"] == 0
            expected = js["count"] * 4 * (nproc - 1) / 1e9 / (cell["time"] * 1e-6)
            assert cell["alg_bw"] == pytest.approx(expected, rel=1e-6)
            assert cell["bus_bw"] == cell["alg_bw"]
