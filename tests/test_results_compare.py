"""Issue 5, acceptance 2: one op 20% slower at large sizes -> compare exits 1 and names exactly those
rows; within tolerance -> exit 0."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.errors import ResultsError, UsageError
from nccl_k8s.results import (
    Device,
    Run,
    compare,
    dump,
    import_file,
    min_busbw_gate,
    parse_tolerance,
)

OLD = (
    Path(__file__).parent
    / "data"
    / "nccl-tests"
    / "handmade-old"
    / "v100x8_2nodes_error_column.txt"
)
LARGE = 8 << 20  # "large sizes": 8 MiB and up


def _slower(run: Run, op: str, factor: float, min_size: int = LARGE) -> Run:
    """The same run with `op` `factor` slower (time x 1/(1-factor)... as measured) at >= min_size."""
    cur = copy.deepcopy(run)
    for row in cur.rows:
        if row.op == op and row.size_bytes >= min_size:
            row.busbw *= 1 - factor
            row.algbw *= 1 - factor
            row.time_us /= 1 - factor
    return cur


@pytest.fixture
def baseline() -> Run:
    # 8 ranks on 2 nodes, all_reduce and broadcast: busbw is non-zero everywhere.
    return import_file(OLD)


def _files(tmp_path: Path, baseline: Run, current: Run) -> tuple[str, str]:
    return str(dump(current, tmp_path / "cur.json")), str(dump(baseline, tmp_path / "base.json"))


def test_20_percent_slower_exits_1_naming_exactly_the_regressed_rows(
    tmp_path: Path, baseline: Run
) -> None:
    cur, base = _files(tmp_path, baseline, _slower(baseline, "all_reduce", 0.20))
    res = CliRunner().invoke(app, ["compare", cur, "--baseline", base])
    assert res.exit_code == 1, res.output
    # 10 rows print busbw 0.00 in both runs (all_reduce 8 and 32 B, broadcast 8 to 128 B, both
    # placements): they are decided on time, unchanged, so ok.
    assert (
        "52 rows compared on busbw, 10 of them on time because busbw is 0 on either side "
        "(tolerance 5%): 46 ok, 6 regressed, 0 improved, 0 missing" in res.stdout
    )
    assert res.stderr.strip() == (
        "regressed: 6 rows past 5% on busbw: all_reduce 8M out (0.80x), all_reduce 8M in (0.80x), "
        "all_reduce 32M out (0.80x), all_reduce 32M in (0.80x), all_reduce 128M out (0.80x), "
        "all_reduce 128M in (0.80x)"
    )

    res = CliRunner().invoke(app, ["compare", cur, "--baseline", base, "-o", "json"])
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert doc["ok"] is False
    regressed = [
        (r["op"], r["size_bytes"], r["placement"])
        for r in doc["compare"]["rows"]
        if r["verdict"] == "regressed"
    ]
    assert regressed == [
        ("all_reduce", size, p) for size in (8 << 20, 32 << 20, 128 << 20) for p in ("out", "in")
    ]
    assert {r["verdict"] for r in doc["compare"]["rows"] if r["op"] == "broadcast"} == {"ok"}
    assert all(
        r["ratio"] == pytest.approx(0.8)
        for r in doc["compare"]["rows"]
        if r["verdict"] == "regressed"
    )


def test_same_regression_on_time(tmp_path: Path, baseline: Run) -> None:
    cur, base = _files(tmp_path, baseline, _slower(baseline, "all_reduce", 0.20))
    res = CliRunner().invoke(app, ["compare", cur, "--baseline", base, "--metric", "time"])
    assert res.exit_code == 1
    assert "6 rows past 5% on time" in res.stderr
    assert "all_reduce 128M in (1.25x)" in res.stderr


@pytest.mark.parametrize(("slowdown", "tolerance"), [(0.03, "5%"), (0.20, "25%"), (0.0, "0%")])
def test_within_tolerance_exits_0(
    tmp_path: Path, baseline: Run, slowdown: float, tolerance: str
) -> None:
    cur, base = _files(tmp_path, baseline, _slower(baseline, "all_reduce", slowdown))
    res = CliRunner().invoke(app, ["compare", cur, "--baseline", base, "--tolerance", tolerance])
    assert res.exit_code == 0, res.output
    assert "0 regressed" in res.stdout
    assert res.stderr == ""


def test_improved_and_missing_rows_do_not_fail(baseline: Run) -> None:
    faster = _slower(baseline, "broadcast", -0.5)  # 50% more busbw
    del faster.rows[:2]  # the 8 B all_reduce row is gone from the current run
    c = compare(faster, baseline)
    assert c.ok
    assert (c.count("improved"), c.count("missing"), c.count("regressed")) == (6, 2, 0)
    missing = [r for r in c.rows if r.verdict == "missing"]
    assert {(r.op, r.size_bytes, r.missing_in) for r in missing} == {("all_reduce", 8, "current")}


def test_zero_busbw_both_sides_is_decided_on_time() -> None:
    run = import_file(OLD.parent.parent / "h200x1-b" / "all_reduce_perf.txt")  # 1 GPU: busbw 0
    c = compare(run, run)
    assert c.ok and c.count("ok") == len(run.rows) == c.fell_back
    assert {(r.metric, r.ratio) for r in c.rows} == {("time", 1.0)}


def test_min_busbw_gate(tmp_path: Path, baseline: Run) -> None:
    gate = min_busbw_gate(baseline, 3.0)
    # nccl-tests' own closing line, averaged from unrounded cells: 2.61751 and 4.23859.
    assert gate.averages == pytest.approx({"all_reduce": 2.6175, "broadcast": 4.2386}, abs=5e-3)
    assert gate.failed_ops == ["all_reduce"]
    path = str(dump(baseline, tmp_path / "b.json"))
    res = CliRunner().invoke(app, ["compare", path, "--min-busbw", "3"])
    assert res.exit_code == 1
    assert res.stderr.strip() == "min busbw: all_reduce below 3 GB/s"
    res = CliRunner().invoke(app, ["compare", path, "--min-busbw", "2.5"])
    assert res.exit_code == 0


def test_tolerance_and_usage_errors(tmp_path: Path, baseline: Run) -> None:
    assert parse_tolerance("5%") == pytest.approx(0.05)
    assert parse_tolerance("0.05") == pytest.approx(0.05)
    assert parse_tolerance("10") == pytest.approx(0.10)
    with pytest.raises(UsageError, match="--tolerance 'lots'"):
        parse_tolerance("lots")
    path = str(dump(baseline, tmp_path / "b.json"))
    for args, message in (
        (
            ["--baseline", path, "--tolerance", "x%"],
            "--tolerance 'x%': expected a percentage such as 5% or a fraction such as 0.05",
        ),
        (["--baseline", path, "--metric", "speed"], "--metric 'speed': expected busbw or time"),
        ([], "compare needs --baseline RUN, --min-busbw GBPS, or both"),
        (["--baseline", path, "-o", "yaml"], '--output "yaml": expected text or json'),
    ):
        res = CliRunner().invoke(app, ["compare", path, *args])
        assert res.exit_code == 2, (args, res.output)
        assert res.stderr.strip() == f"error: {message}"


def test_duplicate_keys_are_refused(baseline: Run) -> None:
    twice = copy.deepcopy(baseline)
    twice.rows.append(copy.deepcopy(twice.rows[0]))
    with pytest.raises(ResultsError, match="two rows for all_reduce 8 B out-of-place"):
        compare(twice, baseline)


PUBLIC = OLD.parent.parent / "public"


def _scaled(run: Run, *, time: float, dtype: str | None = None) -> Run:
    """The same run with every time (of one dtype) multiplied by `time`, bandwidths divided."""
    cur = copy.deepcopy(run)
    for row in cur.rows:
        if dtype is None or row.dtype == dtype:
            row.time_us *= time
            row.algbw /= time
            row.busbw /= time
    return cur


def test_world_size_1_run_25_percent_slower_fails_on_time(tmp_path: Path) -> None:
    """Issue 9, acceptance 5: busbw is 0.00 everywhere at one rank; compare must not pass it."""
    base = import_file(PUBLIC / "nccl-tests-287_rtx5090x1.txt")  # one RTX 5090, all_reduce
    assert {r.busbw for r in base.rows} == {0.0}
    cur, ref = _files(tmp_path, base, _scaled(base, time=1.25))
    res = CliRunner().invoke(app, ["compare", cur, "--baseline", ref])
    assert res.exit_code == 1, res.output
    assert (
        "50 rows compared on busbw, 50 of them on time because busbw is 0 on either side "
        "(tolerance 5%): 0 ok, 50 regressed, 0 improved, 0 missing" in res.stdout
    )
    first = res.stderr.splitlines()[0]
    assert first.startswith(
        "regressed: 50 rows past 5% on time (busbw is 0 on either side): all_reduce 8 out (1.25x), "
        "all_reduce 8 in (1.25x), all_reduce 16 out (1.25x)"
    )
    doc = json.loads(
        CliRunner().invoke(app, ["compare", cur, "--baseline", ref, "-o", "json"]).stdout
    )
    assert doc["compare"]["decided_on_time"] == 50
    assert {r["metric"] for r in doc["compare"]["rows"]} == {"time"}
    # Within tolerance it passes, and still says which metric decided.
    cur, ref = _files(tmp_path, base, _scaled(base, time=1.02))
    res = CliRunner().invoke(app, ["compare", cur, "--baseline", ref])
    assert res.exit_code == 0 and "50 of them on time" in res.stdout


def test_zero_byte_rows_are_skipped_and_counted(tmp_path: Path) -> None:
    # nccl-tests prints two 0-byte rows (0 B out and in, twice) before 4 B in this 2-rank log.
    run = import_file(PUBLIC / "aws-eks-efa_t4x2_mpijob_launcher.log")
    c = compare(run, run)
    assert c.skipped_empty == 8 and c.ok
    assert {r.size_bytes for r in c.rows} == {4 << i for i in range(29)}
    assert c.summary().endswith("; 8 rows of 0 bytes skipped (both runs)")


def test_different_world_sizes_and_gpus_are_refused_unless_allowed(tmp_path: Path) -> None:
    """Issue 39, item 6: what used to be a warning beside confident verdicts is a refusal (exit
    2, naming each difference); --allow-different compares and warns as before."""
    one_node = import_file(PUBLIC / "nccl-tests-290_h100x8_single_node.txt")
    two_nodes = import_file(PUBLIC / "nccl-tests-290_h100x16_srun.txt")
    cur, ref = _files(tmp_path, one_node, two_nodes)
    res = CliRunner().invoke(app, ["compare", cur, "--baseline", ref])
    assert res.exit_code == 2, res.output
    assert res.stdout == ""
    assert res.stderr.startswith(
        "error: the runs are not comparable: world size 16 vs 8 (current vs baseline); "
        "pass --allow-different"
    )
    res = CliRunner().invoke(app, ["compare", cur, "--baseline", ref, "--allow-different"])
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
    assert warnings == [
        "warning: world size differs: current 16, baseline 8",
        "warning: node count differs: current 2, baseline 1",
    ]
    k80 = import_file(PUBLIC / "pkb_k80x2_nccl_output.txt")
    t4 = import_file(PUBLIC / "aws-eks-efa_t4x2_mpijob_launcher.log")
    with pytest.raises(UsageError, match="device Tesla K80 vs Tesla T4") as refused:
        compare(k80, t4)
    assert refused.value.key == "allow_different"
    assert compare(k80, t4, allow_different=True).warnings == [
        "device differs: current Tesla K80, baseline Tesla T4"
    ]


def test_runs_on_different_kubernetes_nodes_are_warned_naming_them() -> None:
    base = import_file(PUBLIC / "aws-eks-efa_t4x2_mpijob_launcher.log")
    cur = copy.deepcopy(base)
    assert compare(cur, base).warnings == []  # imported: no node named, nothing said
    for run, nodes in ((base, ("gpu-a", "gpu-b")), (cur, ("gpu-a", "gpu-c"))):
        run.meta.devices = [Device(rank=i, host=f"pod-{i}", node=n) for i, n in enumerate(nodes)]
    assert compare(cur, base).warnings == [
        "Kubernetes nodes differ: current gpu-a, gpu-c, baseline gpu-a, gpu-b"
    ]
    assert compare(cur, cur).warnings == []


def test_d_all_run_compares_per_dtype_and_filters(tmp_path: Path) -> None:
    """Issue 10, acceptance 2 (compare): 12 dtypes, each compared with itself."""
    dall = import_file(PUBLIC / "spectrumx_h200x16_all_reduce_d_all.txt")
    path = str(dump(dall, tmp_path / "dall.json"))
    res = CliRunner().invoke(app, ["compare", path, "--baseline", path])
    assert res.exit_code == 0, res.output
    assert "72 rows compared on busbw (tolerance 5%): 72 ok, 0 regressed" in res.stdout
    res = CliRunner().invoke(app, ["compare", path, "--baseline", path, "--dtype", "float"])
    assert res.exit_code == 0
    assert "6 rows compared on busbw (tolerance 5%): 6 ok" in res.stdout
    # bfloat16 alone 10% slower: exactly its rows regress, named with their dtype.
    cur = str(dump(_scaled(dall, time=1 / 0.9, dtype="bfloat16"), tmp_path / "cur.json"))
    res = CliRunner().invoke(app, ["compare", cur, "--baseline", path])
    assert res.exit_code == 1
    assert res.stderr.strip() == (
        "regressed: 6 rows past 5% on busbw: all_reduce bfloat16 sum 10G out (0.90x), "
        "all_reduce bfloat16 sum 10G in (0.90x), all_reduce bfloat16 sum 20G out (0.90x), "
        "all_reduce bfloat16 sum 20G in (0.90x), all_reduce bfloat16 sum 40G out (0.90x), "
        "all_reduce bfloat16 sum 40G in (0.90x)"
    )
    res = CliRunner().invoke(app, ["compare", cur, "--baseline", path, "--dtype", "float"])
    assert res.exit_code == 0
    res = CliRunner().invoke(app, ["compare", path, "--baseline", path, "--dtype", "fp32"])
    assert res.exit_code == 2
    assert res.stderr.strip() == (
        "error: --dtype 'fp32': the current run has no such rows (it has bfloat16, double, "
        "f8e4m3, f8e5m2, float, half, int32, int64, int8, uint32, uint64, uint8)"
    )
