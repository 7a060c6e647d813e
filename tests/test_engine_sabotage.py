"""Sabotaged collectives fail the run: the data check catches what nccl-tests catches.

A sitecustomize in every rank process wraps torch.distributed's data-plane collectives (never
the control plane) and breaks them the way a faulty fabric, library or rank would:

- shift:   one rank's chunk arrives shifted by 16 elements within itself;
- swap:    two ranks' chunks trade places (for sendrecv: every rank receives from the wrong side);
- nothing: one rank contributes nothing (its input zeroed, or its chunk never delivered);
- other:   one rank contributes another rank's input instead of its own.

To keep the number of process launches low, the sabotage depends on the size: each of the four
sizes of a run gets one of the four, so one launch covers every sabotage for every op, and
every row of every table must show wrong elements.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from nccl_k8s.bench.collectives import ALL_OPS

pytestmark = pytest.mark.slow
ROW = re.compile(r"^\s+\d+\s+\d+\s+\w+")

SABOTAGE = textwrap.dedent(
    """
    import math
    import os

    import torch
    import torch.distributed as dist

    MODES = ("shift", "swap", "nothing", "other")
    RANK = int(os.environ.get("RANK", "0"))
    WORLD = int(os.environ.get("WORLD_SIZE", "1"))
    orig = {n: getattr(dist, n) for n in ("all_reduce", "broadcast", "all_to_all_single",
                                         "batch_isend_irecv", "all_gather_single",
                                         "all_gather_into_tensor", "reduce_scatter_single",
                                         "reduce_scatter_tensor") if hasattr(dist, n)}

    def mode(count):
        return MODES[int(math.log2(max(count, 1))) % len(MODES)]

    def data_plane(group):
        return group is None or group == dist.group.WORLD

    def from_rank0(t, group):
        copy = t.clone()
        orig["broadcast"](copy, src=0, group=group)
        return copy

    def roll16(t):
        t.copy_(torch.roll(t.clone(), 16))

    def swap(a, b):
        tmp = a.clone()
        a.copy_(b)
        b.copy_(tmp)

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        if not data_plane(group):
            return orig["all_reduce"](tensor, op=op, group=group, async_op=async_op)
        m = mode(tensor.numel())
        if m == "nothing" and RANK == 1:
            tensor.zero_()
        if m == "other":
            theirs = from_rank0(tensor, group)
            if RANK == 1:
                tensor.copy_(theirs)
        out = orig["all_reduce"](tensor, op=op, group=group)
        flat = tensor.view(-1)
        if m == "shift" and RANK == 1:
            roll16(flat)
        if m == "swap" and RANK == 1:
            half = flat.numel() // 2
            swap(flat[:half], flat[half : 2 * half])
        return out

    def broadcast(tensor, src, group=None, async_op=False):
        if not data_plane(group):
            return orig["broadcast"](tensor, src=src, group=group, async_op=async_op)
        m = mode(tensor.numel())
        before = tensor.clone()
        if m == "other":
            theirs = tensor.clone()
            orig["broadcast"](theirs, src=1, group=group)
            if RANK == src:
                tensor.copy_(theirs)
        out = orig["broadcast"](tensor, src=src, group=group)
        flat = tensor.view(-1)
        if RANK == 1 and m == "shift":
            roll16(flat)
        if RANK == 1 and m == "swap":
            half = flat.numel() // 2
            swap(flat[:half], flat[half : 2 * half])
        if RANK == 1 and m == "nothing":
            tensor.copy_(before)
        return out

    def chunked(name):
        def wrapped(output, input, *args, group=None, **kwargs):
            fn = orig[name]
            if not data_plane(group):
                return fn(output, input, *args, group=group, **kwargs)
            count = input.numel() // WORLD if name == "all_to_all_single" else input.numel()
            m = mode(count)
            chunks = output.view(-1).split(count)
            before = output.clone().view(-1).split(count)
            if m == "other":
                theirs = from_rank0(input, group)
                if RANK == 1:
                    input = theirs
            out = fn(output, input, *args, group=group, **kwargs)
            if m == "shift" and RANK == 1:
                roll16(chunks[0])
            if m == "swap" and RANK == 0:
                swap(chunks[0], chunks[1])
            if m == "nothing":
                chunks[1].copy_(before[1])
            return out
        return wrapped

    def reducing_scatter(name):
        def wrapped(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
            fn = orig[name]
            if not data_plane(group):
                return fn(output, input, op=op, group=group, async_op=async_op)
            m = mode(output.numel())
            if m == "other":
                theirs = from_rank0(input, group)
                if RANK == 1:
                    input = theirs
            if m == "nothing" and RANK == 1:
                input = torch.zeros_like(input)
            if m == "swap":
                input = input.clone()
                c = output.numel()
                swap(input.view(-1)[:c], input.view(-1)[c : 2 * c])
            out = fn(output, input, op=op, group=group)
            if m == "shift" and RANK == 1:
                roll16(output.view(-1))
            return out
        return wrapped

    def batch_isend_irecv(ops):
        group = ops[0].group
        if not data_plane(group):
            return orig["batch_isend_irecv"](ops)
        send = next(o for o in ops if o.op is dist.isend)
        recv = next(o for o in ops if o.op is dist.irecv)
        m = mode(recv.tensor.numel())
        before = recv.tensor.clone()
        send_t = send.tensor
        send_to, recv_from = send.peer, recv.peer
        if m == "other":
            theirs = from_rank0(send_t, group)
            if RANK == 1:
                send_t = theirs
        if m == "swap":
            send_to, recv_from = recv_from, send_to
        works = orig["batch_isend_irecv"]([
            dist.P2POp(dist.isend, send_t, send_to, group=group),
            dist.P2POp(dist.irecv, recv.tensor, recv_from, group=group),
        ])
        for w in works:
            w.wait()
        if m == "shift" and RANK == 1:
            roll16(recv.tensor.view(-1))
        if m == "nothing" and RANK == 1:
            recv.tensor.copy_(before)
        return []  # already waited for (a gloo recv waited twice never returns)

    dist.all_reduce = all_reduce
    dist.broadcast = broadcast
    dist.batch_isend_irecv = batch_isend_irecv
    for n in ("all_gather_single", "all_gather_into_tensor", "all_to_all_single"):
        if n in orig:
            setattr(dist, n, chunked(n))
    for n in ("reduce_scatter_single", "reduce_scatter_tensor"):
        if n in orig:
            setattr(dist, n, reducing_scatter(n))
    """
)


def _run(tmp_path: pathlib.Path, *args: str, sabotage: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NCCL_K8S_RUNS_DIR": str(tmp_path / "runs")}
    if sabotage:
        (tmp_path / "sitecustomize.py").write_text(SABOTAGE)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in [str(tmp_path), os.environ.get("PYTHONPATH", "")] if p
        )
    return subprocess.run(
        [sys.executable, "-m", "nccl_k8s.cli.main", "run", "--no-save", *args],
        capture_output=True, text=True, timeout=400, env=env, check=False,
    )  # fmt: skip


def _tables(stdout: str) -> dict[str, tuple[list[list[str]], str]]:
    """op -> (table rows split into fields, its 'Out of bounds values' line)."""
    out: dict[str, tuple[list[list[str]], str]] = {}
    current = None
    for line in stdout.splitlines():
        m = re.match(r"# Collective test starting: (\w+)_perf", line)
        if m:
            current = m.group(1)
            out[current] = ([], "")
        elif current and ROW.match(line):
            out[current][0].append(line.split())
        elif current and line.startswith("# Out of bounds values"):
            out[current] = (out[current][0], line)
    return out


MOVERS_AND_SUM = "all_gather,alltoall,reduce_scatter,sendrecv,broadcast,all_reduce"


@pytest.mark.parametrize(
    ("dtype", "redop", "ops"),
    [
        ("float", "sum", MOVERS_AND_SUM),
        ("bfloat16", "sum", MOVERS_AND_SUM),
        ("float", "avg", "all_reduce,reduce_scatter"),
        ("bfloat16", "avg", "all_reduce,reduce_scatter"),
    ],
)
def test_every_sabotage_fails_the_run(
    tmp_path: pathlib.Path, dtype: str, redop: str, ops: str
) -> None:
    # 4 sizes (x2): each meets one of the 4 sabotages, whichever the op's per-rank chunk.
    proc = _run(tmp_path, "--nproc", "3", "-b", "4K", "-e", "32K", "-f", "2", "-n", "2", "-w", "1",
                "-d", dtype, "-o", redop, "--ops", ops, sabotage=True)  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    tables = _tables(proc.stdout)
    assert list(tables) == ops.split(","), proc.stdout[-3000:]
    for op, (rows, footer) in tables.items():
        assert len(rows) == 4, (op, rows)
        for fields in rows:
            cells = [fields[8]] + ([] if fields[12] == "N/A" else [fields[12]])
            assert all(float(c) > 0 for c in cells), (
                f"{op} {dtype} {redop}: a sabotaged row passed: {fields}"
            )
        m = re.match(r"# Out of bounds values : (\d+) FAILED", footer)
        assert m and int(m.group(1)) > 0, (op, footer)


def test_world_size_one_every_op(tmp_path: pathlib.Path) -> None:
    """sendrecv to itself included (gloo has no self pair: a copy, said in the header)."""
    proc = _run(tmp_path, "--nproc", "1", "-b", "8", "-e", "64K", "-f", "8", "-n", "2",
                "--ops", "all", sabotage=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    tables = _tables(proc.stdout)
    assert list(tables) == list(ALL_OPS) and all(
        f == "# Out of bounds values : 0 OK" for _, f in tables.values()
    )
    assert "sendrecv at world size 1 is a copy" in proc.stdout


def test_every_sabotage_fails_hypercube(tmp_path: pathlib.Path) -> None:
    """At 4 ranks a hypercube op is two exchanges (count, then 2 x count elements), so each size
    meets two consecutive sabotages of the four. `swap` alone changes nothing here (both sides of
    an exchange are the same peer); every size also meets one that does."""
    proc = _run(tmp_path, "--nproc", "4", "-b", "4K", "-e", "32K", "-f", "2", "-n", "2", "-w", "1",
                "--ops", "hypercube", sabotage=True)  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    rows, footer = _tables(proc.stdout)["hypercube"]
    assert len(rows) == 4, rows
    for fields in rows:
        assert float(fields[8]) > 0 and float(fields[12]) > 0, f"a sabotaged row passed: {fields}"
    m = re.match(r"# Out of bounds values : (\d+) FAILED", footer)
    assert m and int(m.group(1)) > 0, footer
