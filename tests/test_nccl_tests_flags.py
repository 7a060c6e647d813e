"""Every flag NVIDIA nccl-tests takes is accepted: the engine does those that mean something here
(-m, -N, -C, -u, -R, -J, -p, -d all, -o all; -g/-t become the rank count of `nccl-k8s run`), and
refuses a value it cannot honour in one line naming the flag and why.

The flag letters are nccl-tests' own getopt string (src/common.cu at NCCL_TESTS_VERSION 2.19.6,
github.com/NVIDIA/nccl-tests commit a0b82b2), copied verbatim.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests._helpers import FakeClock, free_port, one_rank_env
from typer.testing import CliRunner

from nccl_k8s.bench import engine as engine_module
from nccl_k8s.bench.collectives import COLLECTIVES
from nccl_k8s.bench.config import REDOPS, ConfigError, check_backend, parse_args
from nccl_k8s.bench.counts import rotation_shifts
from nccl_k8s.bench.dtypes import DTYPES
from nccl_k8s.bench.engine import Engine, Printer
from nccl_k8s.bench.ops import Bound, Collectives
from nccl_k8s.bench.options import NOT_HONOURED
from nccl_k8s.bench.rank import Rank
from nccl_k8s.bench.watch import Watchdog
from nccl_k8s.cli.main import app

# nccl-tests 2.19.6, src/common.cu, getopt_long's optstring.
NCCL_TESTS_GETOPT = "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:"
# nccl-tests' long names (the same file's longopts), for the letters above.
NCCL_TESTS_LONG = {
    "t": "nthreads", "g": "ngpus", "b": "minbytes", "e": "maxbytes", "i": "stepbytes",
    "f": "stepfactor", "n": "iters", "m": "agg_iters", "w": "warmup_iters", "N": "run_cycles",
    "p": "parallel_init", "c": "check", "o": "op", "d": "datatype", "r": "root", "z": "blocking",
    "y": "stream_null", "T": "timeout", "G": "cudagraph", "C": "report_cputime",
    "S": "report_timestamps", "J": "output_file", "a": "average", "R": "local_register",
    "x": "cta_policy", "D": "device_implementation", "V": "device_cta_count", "M": "memory",
    "u": "unalign", "I": "per_iter_timing", "K": "per_iter_skip",
}  # fmt: skip
# A value nccl-tests itself would take as its default (or a harmless one) for each letter.
DEFAULTS = {
    "t": "1", "g": "1", "b": "32M", "e": "32M", "i": "1M", "f": "1", "n": "20", "m": "1", "w": "1",
    "N": "1", "p": "0", "c": "1", "o": "sum", "d": "float", "r": "0", "z": "0", "y": "0",
    "T": "0", "G": "0", "C": "0", "S": "0", "J": "out.json", "a": "1", "R": "0", "D": "0",
    "V": "16", "M": "0", "u": "0", "I": "0", "K": "0",
}  # fmt: skip


def _letters() -> list[str]:
    return [c for c in NCCL_TESTS_GETOPT if c not in ":h"]


def test_every_nccl_tests_letter_and_long_name_is_accepted() -> None:
    assert set(_letters()) == set(NCCL_TESTS_LONG)
    for letter in _letters():
        if letter == "x":  # nccl-tests' default is "not set": any value is refused (below)
            continue
        parse_args([f"-{letter}", DEFAULTS[letter]])
        parse_args([f"--{NCCL_TESTS_LONG[letter]}", DEFAULTS[letter]])


@pytest.mark.parametrize(("short", "long", "default", "why"), NOT_HONOURED)
def test_a_flag_not_honoured_says_which_and_why(
    short: str, long: str, default: str | None, why: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_args([short, "3"])
    message = str(info.value)
    assert message == f"{short} 3 ({long}): not supported by nccl-k8s: {why}"
    assert "\n" not in message


def test_flags_that_work_map_to_the_engine() -> None:
    c = parse_args(["-m", "4", "-N", "3", "-C", "1", "-u", "1", "-J", "x.json", "-p", "1"])
    assert (c.agg_iters, c.sweeps, c.cputime, c.unalign, c.json_path) == (4, 3, True, 1, "x.json")
    assert parse_args(["--run_cycles", "0"]).sweeps == 0  # 0: until stopped, as nccl-tests
    assert parse_args(["--output_file", "y.json"]).json_path == "y.json"
    c = parse_args(["-d", "all", "-o", "all"])
    assert c.dtypes == tuple(DTYPES) and c.redops == REDOPS
    with pytest.raises(ConfigError, match="-R 3: expected 0"):
        parse_args(["-R", "3"])
    with pytest.raises(ConfigError, match="-R 1: buffer registration is NCCL's"):
        check_backend(parse_args(["-R", "1"]), "gloo", world_size=2)


def test_g_and_t_are_ranks_or_refused_naming_the_equivalent() -> None:
    check_backend(parse_args(["-g", "4"]), "gloo", world_size=4)  # 4 ranks: what -g 4 means
    with pytest.raises(ConfigError) as info:
        check_backend(parse_args(["-g", "8"]), "nccl", world_size=16)
    assert "-g 8 -t 1: each rank here is one process driving one GPU" in str(info.value)
    assert "deploy --gpus-per-node 8" in str(info.value)
    assert "nccl-k8s run -g 8" in str(info.value)


@pytest.mark.parametrize("cputime", [0, 1])
def test_m_aggregates_and_c_reports_the_issue_time(
    world_of_one: Rank, monkeypatch: pytest.MonkeyPatch, cputime: int
) -> None:
    """-n 2 -m 4: 8 ops, each 1 s on the test clock, then a final wait of 10 s; the time per op
    is 18/8 s, or with -C 1 the issue time alone, 8/8 s (nccl-tests' cputime)."""
    clock = FakeClock()
    monkeypatch.setattr(engine_module, "time", clock)
    rank = world_of_one
    monkeypatch.setattr(rank, "finish", lambda: setattr(clock, "now", clock.now + 10))
    cfg = parse_args(["-b", "1K", "-e", "1K", "-n", "2", "-m", "4", "-C", str(cputime)])
    engine = Engine(cfg, rank, Printer(False, open(os.devnull, "w"), False),  # noqa: SIM115
                    Watchdog(0, 1, host="h", timeout_s=0, interval_s=-1))  # fmt: skip
    coll = Collectives(rank=0, nranks=1, dtype="float", redop="sum",
                       sendbuf=rank.buffer(4096), recvbuf=rank.buffer(4096), group=rank.data_group)  # fmt: skip
    counts = COLLECTIVES["all_reduce"].counts(1024, 4, 1)
    b = coll.bind("all_reduce", counts, rotation_shifts(counts, 4, 4096, 8), 0, False)
    issued: list[int] = []

    def op() -> None:
        issued.append(1)
        clock.now += 1

    timed = Bound(b.op, b.counts, b.in_place, [op], lambda: None, b.send0, b.recv0)
    try:
        per_op = engine._timed(timed)
    finally:
        engine.p.stream.close()
    assert len(issued) == 8
    assert per_op == (1.0 if cputime else 18 / 8)


def _engine(*flags: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **one_rank_env(free_port())}
    return subprocess.run(
        [sys.executable, "-m", "nccl_k8s.bench", "--backend", "gloo", *flags],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240, check=False,
    )  # fmt: skip


@pytest.mark.slow
def test_d_all_o_all_runs_every_type_and_reduction(tmp_path: Path) -> None:
    """One gloo rank, 1 KB: every type with every reduction, less what gloo cannot do (8-bit
    floats; avg of integers), each skip said in the table; -u 1 -N 2 -J as nccl-tests'."""
    out = _engine("-b", "1K", "-e", "1K", "-n", "1", "-w", "0", "-d", "all", "-o", "all",
                  "-u", "1", "-J", "r.json", tmp_path=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = [
        json.loads(line.split(" ", 1)[1])
        for line in out.stdout.splitlines()
        if line.startswith("NCCL_K8S_RESULT ") and '"kind":"row"' in line
    ]
    measured = {(r["dtype"], r["redop"]) for r in rows}
    ints = {"int8", "uint8", "int32", "int64"}
    expected = {
        (d, o)
        for d in DTYPES
        for o in REDOPS
        if not d.startswith("f8") and d not in ("uint32", "uint64")
        and not (o == "avg" and d in ints)
    }  # fmt: skip
    assert measured == expected
    assert all(r["wrong"] == 0 for r in rows)
    # Issue 39 item 8: the types gloo has not are each said skipped, once, not left out.
    for d in ("uint32", "uint64"):
        said = f"# -d {d} skipped: torch.distributed's gloo has no uint32 or uint64"
        assert sum(line.startswith(said) for line in out.stdout.splitlines()) == 1, out.stdout
    assert "# -d f8e4m3 skipped: gloo has no 8-bit floats" in out.stdout
    assert "# -d int8 -o avg skipped: gloo averages only floating types" in out.stdout
    assert "unalign: 1" in out.stdout
    doc = json.loads((tmp_path / "r.json").read_text())
    assert (doc["config"]["datatype"], doc["config"]["redop"]) == ("all", "all")
    assert len(doc["results"]) == len(expected)
    assert {(r["type"], r["redop"]) for r in doc["results"]} == expected


@pytest.mark.parametrize("dtype", ["uint32", "uint64"])
def test_uint32_uint64_run_on_nccl_direct_and_are_refused_on_gloo_and_torch_nccl_with_why(
    dtype: str,
) -> None:
    """Issue 39 item 8: -d uint32/uint64 are nccl-tests' types (ncclUint32 3, ncclUint64 5 in
    nccl.h). The NCCL path's fill and check kernels have both (tests/test_kernels.py), so NCCL
    takes them, alone and in -d all; gloo has neither: named alone it refuses them in one line
    naming the type and why, and -d all says the skip (test above)."""
    from nccl_k8s.bench.compat import skipped
    from nccl_k8s.bench.nccl import NCCL_DTYPES

    assert parse_args(["-d", dtype]).dtype == dtype
    assert NCCL_DTYPES[dtype] == {"uint32": 3, "uint64": 5}[dtype]  # type: ignore[index]
    why = "torch.distributed's gloo has no uint32 or uint64 ('Invalid scalar type')"
    for o in ("sum", "avg", "all"):
        with pytest.raises(ConfigError, match=re.escape(f"-d {dtype!r}: {why}")):
            check_backend(parse_args(["-d", dtype, "-o", o]), "gloo", world_size=2)
        check_backend(parse_args(["-d", dtype, "-o", o]), "nccl", world_size=2)
    for backend in ("gloo", "nccl"):
        check_backend(parse_args(["-d", "all", "-o", "all"]), backend, world_size=2)
    assert (skipped("gloo", dtype, None) or "").startswith(why)  # type: ignore[arg-type]
    for redop in (None, "sum", "prod", "max", "min", "avg"):
        assert skipped("nccl", dtype, redop) is None  # type: ignore[arg-type]
    # torch.distributed's NCCL process group has neither (torch 2.11 on an H100: 'Input tensor
    # data type is not supported for NCCL process group: UInt32'; the direct driver passed the
    # data check of every op): --driver torch refuses them, -d all skips them there.
    torch_why = "torch.distributed's NCCL process group has no uint32 or uint64"
    with pytest.raises(ConfigError, match=re.escape(f"-d {dtype!r}: {torch_why}")):
        check_backend(parse_args(["-d", dtype, "--driver", "torch"]), "nccl", world_size=2)
    check_backend(parse_args(["-d", dtype, "--driver", "direct"]), "nccl", world_size=2)
    assert (skipped("nccl", dtype, "sum", "torch") or "").startswith(torch_why)  # type: ignore[arg-type]
    check_backend(parse_args(["-d", "all", "--driver", "torch"]), "nccl", world_size=2)
    res = CliRunner().invoke(app, ["run", "--nproc", "1", "-d", dtype, "--backend", "gloo"])
    assert res.exit_code == 2, res.output
    assert res.output.splitlines() == [f"error: -d {dtype!r}: {why}"]


def test_nccl_fp8_avg_is_skipped_in_all_and_refused_alone() -> None:
    """NCCL 2.28 on an H200 answered ncclAvg of f8e4m3 with ncclInvalidArgument (measured on
    the lent GPU): `-d all -o all` skips those pairs with a line, naming one is refused."""
    from nccl_k8s.bench.compat import skipped
    from nccl_k8s.bench.config import ConfigError, check_backend, parse_args

    assert skipped("nccl", "f8e4m3", "avg") == skipped("nccl", "f8e5m2", "avg") is not None
    assert skipped("nccl", "f8e4m3", "max") is None and skipped("nccl", "bfloat16", "avg") is None
    with pytest.raises(ConfigError, match=r"-o avg with -d f8e5m2: NCCL averages no 8-bit floats"):
        check_backend(parse_args(["-d", "f8e5m2", "-o", "avg"]), "nccl", world_size=2)
    check_backend(parse_args(["-d", "all", "-o", "all"]), "nccl", world_size=2)


@pytest.mark.slow
def test_s_adds_nccl_tests_timestamp_column_after_the_in_place_cells(tmp_path: Path) -> None:
    """-S 1 as nccl-tests 2.19.6 prints it (src/util.cu): a `timestamp` column headed by its
    strftime format, then each row's local time (%21s) after the in-place #wrong."""
    from nccl_k8s.bench.report import table_header

    before = time.strftime("%Y-%m-%d %H:%M:%S")
    out = _engine("-b", "1K", "-e", "4K", "-f", "2", "-n", "1", "-w", "0", "-S", "1", tmp_path=tmp_path)  # fmt: skip
    after = time.strftime("%Y-%m-%d %H:%M:%S")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    head = table_header()
    assert head[2] + f"{'timestamp':>19}" in lines
    assert head[3] + f"{'%Y-%m-%d %H:%M:%S':>19}" in lines
    rows = [line for line in lines if line.strip()[:1].isdigit()]
    assert len(rows) == 3  # 1K, 2K, 4K
    for row in rows:
        stamp = row[-21:]
        assert stamp.startswith("  ") and before <= stamp.strip() <= after, row
        assert row[:-21].split()[-1] == "0"  # the in-place #wrong, then the time
