"""The engine on real multi-process gloo: correct data, a checker that catches wrong data, the CLI.

Slow-ish (processes, torch imports); sizes and iterations are kept small.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import textwrap
from typing import Any, cast

import pytest
import torch.multiprocessing as mp
from typer.testing import CliRunner

from nccl_k8s.bench import report
from nccl_k8s.bench.collectives import COLLECTIVES
from nccl_k8s.bench.config import ALL_OPS, Dtype, Op, RedOp
from nccl_k8s.cli.main import app

pytestmark = pytest.mark.slow
ROW = re.compile(r"^\s+\d+\s+\d+\s+\w+")


@pytest.fixture(autouse=True)
def _runs_dir(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """nccl-k8s run stores runs/<id>/; keep them out of the working directory."""
    monkeypatch.setenv("NCCL_K8S_RUNS_DIR", str(tmp_path / "runs"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _check_worker(
    rank: int, world: int, port: int, out: str, cases: list[tuple[Dtype, RedOp]]
) -> None:
    import torch
    import torch.distributed as dist

    from nccl_k8s.bench.collectives import COLLECTIVES as collectives
    from nccl_k8s.bench.ops import Collectives

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    results: list[dict[str, Any]] = []
    for dtype, redop in cases:
        sendbuf = torch.zeros(1 << 14, dtype=torch.uint8)
        recvbuf = torch.zeros(1 << 14, dtype=torch.uint8)
        coll = Collectives(
            rank=rank, nranks=world, dtype=dtype, redop=redop, sendbuf=sendbuf, recvbuf=recvbuf
        )
        for op in (o for o in ALL_OPS if not collectives[o].refuses(world)):
            counts = collectives[op].counts(4096, coll.elt, world)
            for in_place in (False, True):
                root = 1 % world
                b = coll.bind(op, counts, [0], root, in_place)
                coll.init(b, root, rep=3)
                b.calls[0]()
                clean = coll.check(b, root, rep=3)
                has_result = coll.expected(b, root, 3) is not None
                if has_result and b.recv0.numel():
                    flat = b.recv0.view(-1)
                    flat[5] = -flat[5] - 1  # every pattern is >= 0; uint8 wraps to 255 - x
                corrupted = coll.check(b, root, rep=3)
                results.append(dict(op=op, dtype=dtype, redop=redop, in_place=in_place, clean=clean,
                                    corrupted=corrupted, has_result=has_result))  # fmt: skip
                dist.barrier()
    pathlib.Path(out, f"rank{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


@pytest.mark.parametrize(
    ("world", "cases"),
    [
        (2, [("float", "sum"), ("bfloat16", "max"), ("int8", "prod")]),
        (
            3,
            [
                ("half", "sum"),
                ("int32", "min"),
                ("float", "avg"),
                ("double", "prod"),
                ("uint8", "sum"),
            ],
        ),
    ],
)
def test_every_op_is_exact_and_the_checker_catches_one_wrong_element(
    tmp_path: pathlib.Path, world: int, cases: list[tuple[Dtype, RedOp]]
) -> None:
    mp.spawn(  # type: ignore[attr-defined,no-untyped-call]
        _check_worker, args=(world, _free_port(), str(tmp_path), cases), nprocs=world, join=True
    )
    for rank in range(world):
        for r in json.loads((tmp_path / f"rank{rank}.json").read_text()):
            where = f"rank {rank} {r}"
            if not COLLECTIVES[r["op"]].inplace_checked and r["in_place"]:
                continue  # nccl-tests prints N/A: in-place alltoall/sendrecv alias their buffers
            assert r["clean"] == 0, where
            if r["has_result"]:
                assert r["corrupted"] == 1, where
            else:  # e.g. non-root ranks of reduce/gather hold no result to check
                assert r["corrupted"] == 0, where


def _cli(
    *args: str, env: dict[str, str] | None = None, timeout: int = 240
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "nccl_k8s.cli.main", *args],
        capture_output=True, text=True, timeout=timeout, env=full_env, check=False,
    )  # fmt: skip


def _sections(stdout: str) -> dict[str, list[list[str]]]:
    """op -> table rows (split into fields) per 'Collective test starting' section."""
    sections: dict[str, list[list[str]]] = {}
    current = None
    for line in stdout.splitlines():
        m = re.match(r"# Collective test starting: (\w+)_perf", line)
        if m:
            current = m.group(1)
            sections[current] = []
        elif current and ROW.match(line):
            sections[current].append(line.split())
    return sections


@pytest.mark.parametrize(
    ("nproc", "extra"),
    [(4, []), (3, ["-d", "bfloat16", "-o", "avg"])],
    ids=["4-ranks-float-sum", "3-ranks-bf16-avg"],
)
def test_all_ops_table_and_json_agree(tmp_path: pathlib.Path, nproc: int, extra: list[str]) -> None:
    """Clean runs pass at 4 and 3 ranks (and at 2: test_plain_torchrun_prints_result_lines)."""
    out = tmp_path / "run.json"
    proc = _cli("run", "--nproc", str(nproc), "--ops", "all", "-b", "8", "-e", "1M", "-f", "4", "-n", "3", "-w", "1",
                "--json", str(out), *extra)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    sections = _sections(proc.stdout)
    runs = [op for op in ALL_OPS if not COLLECTIVES[op].refuses(nproc)]
    assert list(sections) == runs
    for skipped in set(ALL_OPS) - set(runs):  # `--ops all` skips what the world cannot run
        assert f"# {skipped}_perf skipped: {COLLECTIVES[skipped].refuses(nproc)}" in proc.stdout
    doc = json.loads(out.read_text())
    rows_by_op: dict[str, list[dict[str, Any]]] = {}
    for row in doc["results"]:
        rows_by_op.setdefault(row["op"], []).append(row)
    for op, rows in sections.items():
        shape = COLLECTIVES[cast(Op, op)]
        factor = shape.bus_factor(nproc)
        assert len(rows) == 9 and len(rows_by_op[op]) == 9, op
        for fields, js in zip(rows, rows_by_op[op], strict=True):
            assert int(fields[0]) == js["size"] and int(fields[1]) == js["count"]
            for base, key in ((5, "out_of_place"), (9, "in_place")):
                cell = js[key]
                # busbw = algbw x the op's factor, on every row (unrounded JSON numbers)
                assert cell["bus_bw"] == pytest.approx(cell["alg_bw"] * factor, rel=1e-9, abs=1e-12)
                # the table shows the JSON's numbers
                assert fields[base] == report.float_str(cell["time"], 7).strip()
                assert fields[base + 1] == report.float_str(cell["alg_bw"], 6).strip()
                assert fields[base + 2] == report.float_str(cell["bus_bw"], 6).strip()
                if key == "in_place" and not shape.inplace_checked:
                    assert fields[base + 3] == "N/A" and cell["nwrong"] is None
                else:
                    assert fields[base + 3] == "0" and cell["nwrong"] == 0
    assert proc.stdout.count("# Out of bounds values : 0 OK") == len(runs)
    assert doc["out_of_bounds"] == {"count": 0, "okay": "true"}


SABOTAGE = textwrap.dedent(
    """
    import os
    import torch.distributed as dist

    _orig = dist.all_reduce
    mode = os.environ.get("SABOTAGE")

    def all_reduce(tensor, *args, **kwargs):
        out = _orig(tensor, *args, **kwargs)
        rank = int(os.environ.get("RANK", "0"))
        if mode == "wrong" and rank == 1 and tensor.numel() > 2:
            tensor.view(-1)[2] += 1  # a broken reduction: one element off on rank 1
        if mode == "crash" and rank == 1:
            raise RuntimeError("injected NIC failure")
        return out

    dist.all_reduce = all_reduce
    """
)


def _sabotage_env(tmp_path: pathlib.Path, mode: str) -> dict[str, str]:
    (tmp_path / "sitecustomize.py").write_text(SABOTAGE)
    path = os.pathsep.join(p for p in [str(tmp_path), os.environ.get("PYTHONPATH", "")] if p)
    return {"PYTHONPATH": path, "SABOTAGE": mode}


def test_wrong_results_fail_the_run(tmp_path: pathlib.Path) -> None:
    proc = _cli(
        "run",
        "--nproc",
        "2",
        "-b",
        "1K",
        "-e",
        "4K",
        "-f",
        "4",
        "-n",
        "2",
        env=_sabotage_env(tmp_path, "wrong"),
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    rows = _sections(proc.stdout)["all_reduce"]
    assert rows and all(int(r[8]) > 0 and int(r[12]) > 0 for r in rows)
    assert "# Out of bounds values : 4 FAILED" in proc.stdout  # 2 sizes x 2 placements on rank 1


def test_a_crashing_rank_is_named(tmp_path: pathlib.Path) -> None:
    proc = _cli(
        "run",
        "--nproc",
        "2",
        "-b",
        "1K",
        "-e",
        "1K",
        env=_sabotage_env(tmp_path, "crash"),
        timeout=300,
    )
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert "rank 1" in last and "injected NIC failure" in last, proc.stderr[-2000:]


def test_plain_torchrun_prints_result_lines(tmp_path: pathlib.Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "nccl_k8s.bench", "-b", "64", "-e", "256", "-f", "4", "-n", "2", "--ops", "all_reduce,sendrecv"],
        capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"}, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    objs = [
        json.loads(line.split(" ", 1)[1])
        for line in proc.stdout.splitlines()
        if line.startswith(report.RESULT_PREFIX + " ")
    ]
    kinds = [o["kind"] for o in objs]
    assert kinds[0] == "meta" and kinds.count("summary") == 2
    assert objs[0]["world_size"] == 2 and objs[0]["backend"] == "gloo"
    rows = [o for o in objs if o["kind"] == "row"]
    assert len(rows) == 2 * 2 * 2  # 2 ops x 2 sizes x 2 placements
    assert all(o["wrong"] in (0, None) for o in rows)


def test_min_busbw_gate(tmp_path: pathlib.Path) -> None:
    """(Soak mode: tests/test_engine_soak.py.)"""
    gated = _cli("run", "-b", "1K", "-e", "1K", "-n", "2", "--min-busbw", "1000")
    assert gated.returncode == 1
    assert re.search(r"# Avg bus bandwidth\s+: \S+ FAILED", gated.stdout)


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["-b", "1Q"], "-b '1Q'"),
        (["-b", "1K", "-e", "8"], "-e '8'"),
        (["--nproc", "0"], "--nproc '0'"),
        (["--ops", "all_reduce,allreduce_fast"], "--ops 'allreduce_fast'"),
        (["-G", "1"], "-G 1"),
        (["-d", "f8e5m2"], "-d 'f8e5m2'"),
        (["-d", "quad"], "-d 'quad'"),
        (["-o", "avg", "-d", "int32"], "-o avg"),
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], names: str) -> None:
    result = CliRunner().invoke(app, ["run", *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and names in lines[0] and "Traceback" not in result.output
