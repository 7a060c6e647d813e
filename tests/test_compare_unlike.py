"""Issue 39, item 6 (acceptance 4): `compare` of runs that measured different things (backend,
device, world size, fabric) is refused with the reason, exit 2; with --allow-different it
compares, deciding on time every row whose busbw is 0 on either side."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.errors import UsageError
from nccl_k8s.results import Device, Run, RunMeta, compare, dump, import_file

DATA = Path(__file__).parent / "data" / "nccl-tests"
H200 = DATA / "h200x1-a" / "all_reduce_perf.txt"  # nccl-tests on one H200: busbw 0 everywhere


def _gloo_run(gpu: Run) -> Run:
    """Two gloo CPU ranks over the H200 run's sizes, as `nccl-k8s run` stores them: a CPU's
    name per rank, no GPU model, 100 times slower, busbw = algbw (2 ranks: factor 1)."""
    rows = copy.deepcopy(gpu.rows)
    for row in rows:
        row.time_us = row.time_us * 100 + 300
        row.algbw = row.size_bytes / row.time_us / 1e3
        row.busbw = row.algbw
    meta = RunMeta(
        run_id="gloo-cpu",
        backend="gloo",
        world_size=2,
        nodes=1,
        gpus_per_node=2,
        devices=[Device(rank=r, host="vm", device=r, name="AMD EPYC") for r in (0, 1)],
    )
    return Run(meta=meta, rows=rows)


def _invoke(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, ["compare", *args])
    return res.exit_code, res.stdout, res.stderr


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    gpu = import_file(H200)
    cpu = _gloo_run(gpu)
    assert any(r.busbw > 0 for r in cpu.rows) and {r.busbw for r in gpu.rows} == {0.0}
    return str(dump(cpu, tmp_path / "cpu.json")), str(dump(gpu, tmp_path / "gpu.json"))


def test_gloo_cpu_against_gpu_nccl_tests_is_refused_naming_each_difference(
    files: tuple[str, str],
) -> None:
    cpu, gpu = files
    for cur, base, expect in (
        (cpu, gpu, "backend gloo vs nccl, device CPU (AMD EPYC) vs NVIDIA H200, world size 2 vs 1"),
        (gpu, cpu, "backend nccl vs gloo, device NVIDIA H200 vs CPU (AMD EPYC), world size 1 vs 2"),
    ):
        for fmt in ("text", "json"):
            code, stdout, stderr = _invoke(cur, "--baseline", base, "-o", fmt)
            assert code == 2, stderr
            assert stdout == ""
            assert stderr.splitlines() == [
                f"error: the runs are not comparable: {expect} (current vs baseline); pass "
                "--allow-different to compare them anyway (each difference is then a warning, "
                "and rows where busbw is 0 on either side are decided on time)"
            ]


def test_allowed_it_decides_on_time_both_ways(files: tuple[str, str]) -> None:
    cpu, gpu = files
    code, stdout, stderr = _invoke(cpu, "--baseline", gpu, "--allow-different", "-o", "json")
    assert code == 1
    doc = json.loads(stdout)["compare"]
    assert {(r["metric"], r["verdict"]) for r in doc["rows"]} == {("time", "regressed")}
    assert doc["decided_on_time"] == len(doc["rows"]) == 28
    assert "warning: backend differs: current gloo, baseline nccl" in stderr.splitlines()
    # Reversed: the GPU is faster on every row, none "regressed" from a 0.00 busbw.
    code, stdout, _ = _invoke(gpu, "--baseline", cpu, "--allow-different")
    assert code == 0, stdout
    assert (
        "28 rows compared on busbw, 28 of them on time because busbw is 0 on either side "
        "(tolerance 5%): 0 ok, 0 regressed, 28 improved, 0 missing" in stdout
    )


def test_zero_busbw_on_one_side_is_decided_on_time() -> None:
    """A row printed 0.00 GB/s on one side only is no infinite gain nor total loss: time
    decides it (here unchanged, so ok)."""
    base = import_file(DATA / "public" / "aws-eks-efa_t4x2_mpijob_launcher.log")
    zero = next(r for r in base.rows if r.size_bytes > 0 and r.busbw == 0)
    cur = copy.deepcopy(base)
    same = next(
        r for r in cur.rows if (r.size_bytes, r.placement) == (zero.size_bytes, zero.placement)
    )
    same.busbw = 0.01
    some = next(r for r in base.rows if r.busbw > 0)
    gone = next(
        r for r in cur.rows if (r.size_bytes, r.placement) == (some.size_bytes, some.placement)
    )
    gone.busbw = 0.0
    c = compare(cur, base)
    for row in (zero, some):
        (got,) = [
            r for r in c.rows if (r.size_bytes, r.placement) == (row.size_bytes, row.placement)
        ]
        assert (got.metric, got.verdict, got.ratio) == ("time", "ok", 1.0)
    assert c.ok


def test_fabric_difference_refuses_unknown_fabric_does_not() -> None:
    base = import_file(DATA / "public" / "aws-eks-efa_t4x2_mpijob_launcher.log")
    cur = copy.deepcopy(base)
    base.meta.fabric, cur.meta.fabric = "efa", "socket"
    with pytest.raises(UsageError, match=r"not comparable: fabric socket vs efa \(") as e:
        compare(cur, base)
    assert e.value.exit_code == 2 and e.value.key == "allow_different"
    assert compare(cur, base, allow_different=True).warnings == [
        "fabric differs: current socket, baseline efa"
    ]
    cur.meta.fabric = None  # a run whose logs do not say: nothing to tell
    assert compare(cur, base).warnings == []
