"""Issue 5, acceptance 1: importing each nccl-tests output yields rows whose numbers equal the file's,
and comparing an import with itself reports no regression."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.errors import ResultsError
from nccl_k8s.results import import_file, import_files, load

NCCL_TESTS = Path(__file__).parent / "data" / "nccl-tests"
# Our own H200 outputs and the hand-made old format; the public corpus has its own test module.
TEXT_FILES = sorted(p for p in NCCL_TESTS.glob("*/*.txt") if p.parent.name != "public")
JSON_FILES = sorted(NCCL_TESTS.glob("*/*.json"))
OLD = NCCL_TESTS / "handmade-old" / "v100x8_2nodes_error_column.txt"


def _table_lines(path: Path) -> list[list[str]]:
    """The file's data rows, split on whitespace: the reference the import must reproduce."""
    return [
        ln.split()
        for ln in path.read_text().splitlines()
        if ln.strip() and not ln.lstrip().startswith(("#", "$")) and ln.split()[0].isdigit()
    ]


def test_fixtures_are_present() -> None:
    # 10 real text outputs from ../shared plus the hand-made old-format file.
    assert len(TEXT_FILES) == 11
    assert [p.name for p in JSON_FILES] == ["all_reduce_perf.json"]


@pytest.mark.parametrize("path", TEXT_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_text_import_numbers_equal_the_file(path: Path) -> None:
    run = import_file(path)
    lines = _table_lines(path)
    old = path == OLD
    lead = 4 if old else 5
    assert len(run.rows) == 2 * len(lines)
    for toks, (out, inp) in zip(
        lines, zip(run.rows[::2], run.rows[1::2], strict=True), strict=True
    ):
        assert out.size_bytes == inp.size_bytes == int(toks[0])
        assert out.count == int(toks[1])
        assert out.dtype == toks[2]
        for row, cells in ((out, toks[lead : lead + 4]), (inp, toks[lead + 4 : lead + 8])):
            assert (row.time_us, row.algbw, row.busbw) == tuple(float(x) for x in cells[:3])
            if old:
                assert row.wrong is None
                assert row.max_error == float(cells[3])
            elif cells[3] == "N/A":
                assert row.wrong is None
            else:
                assert row.wrong == int(cells[3])
        assert (out.placement, inp.placement) == ("out", "in")


def test_text_import_spot_values() -> None:
    run = import_file(NCCL_TESTS / "h200x1-a" / "all_reduce_perf.txt")
    last_out, last_in = run.rows[-2], run.rows[-1]
    assert (last_out.op, last_out.size_bytes, last_out.count) == (
        "all_reduce",
        536870912,
        134217728,
    )
    assert (last_out.time_us, last_out.algbw, last_out.busbw) == (255.83, 2098.5, 0.0)
    assert last_in.algbw == 1e6  # printed as "1e+06"
    assert (last_out.redop, last_out.root) == ("sum", -1)
    meta = run.meta
    assert (meta.source, meta.nccl_tests, meta.nccl) == ("nccl-tests", "2.19.6", "2.28.9")
    assert (meta.world_size, meta.nodes, meta.gpus_per_node) == (1, 1, 1)
    assert meta.gpu_model == "NVIDIA H200"
    assert (meta.config.minbytes, meta.config.maxbytes, meta.config.stepfactor) == (8, 1 << 30, 4)
    assert (meta.config.iters, meta.config.warmup, meta.config.check) == (20, 5, 1)
    assert run.summaries[0].out_of_bounds == 0 and run.summaries[0].ok is True

    sendrecv = import_file(NCCL_TESTS / "h200x1-b" / "sendrecv_perf.txt")
    assert {r.wrong for r in sendrecv.rows if r.placement == "in"} == {None}  # N/A
    assert sendrecv.summaries[0].avg_busbw == 2724.77

    bf16 = import_file(NCCL_TESTS / "h200x1-b" / "all_reduce_perf_bf16_max.txt")
    assert {(r.dtype, r.redop) for r in bf16.rows} == {("bfloat16", "max")}


def test_json_import_numbers_equal_the_file() -> None:
    path = JSON_FILES[0]
    doc = json.loads(path.read_text())
    run = import_file(path)
    assert len(run.rows) == 2 * len(doc["results"])
    for res, (out, inp) in zip(
        doc["results"], zip(run.rows[::2], run.rows[1::2], strict=True), strict=True
    ):
        for row, cell in ((out, res["out_of_place"]), (inp, res["in_place"])):
            assert row.size_bytes == res["size"] and row.count == res["count"]
            assert (row.time_us, row.algbw, row.busbw) == (
                cell["time"],
                cell["alg_bw"],
                cell["bus_bw"],
            )
            assert row.wrong == int(cell["nwrong"])
            assert (row.op, row.dtype, row.redop, row.root) == ("all_reduce", "float", "sum", -1)
    assert run.meta.nccl == "2.28.9"
    assert run.meta.env == {"NCCL_VERSION": "2.28.3-1", "NCCL_NVLS_ENABLE": "0"}
    assert run.meta.time == "2026-12-02 18:51:56"
    assert run.meta.config.iters == 20


def test_old_format_with_two_collectives() -> None:
    run = import_file(OLD)
    assert run.ops() == ["all_reduce", "broadcast"]
    ar = [r for r in run.rows if r.op == "all_reduce"]
    bc = [r for r in run.rows if r.op == "broadcast"]
    assert len(ar) == len(bc) == 26
    assert (ar[-2].size_bytes, ar[-2].time_us, ar[-2].busbw, ar[-2].max_error) == (
        134217728,
        37922.0,
        6.19,
        1e-07,
    )
    assert (ar[0].redop, ar[0].root) == ("sum", None)  # no root column for all_reduce then
    assert (bc[0].redop, bc[0].root) == (None, 0)  # broadcast printed root, no redop
    assert (run.meta.world_size, run.meta.nodes, run.meta.gpus_per_node) == (8, 2, 4)
    assert run.meta.gpu_model == "Tesla V100-SXM2-32GB"
    assert [(s.op, s.avg_busbw) for s in run.summaries] == [
        ("all_reduce", 2.61751),
        ("broadcast", 4.23859),
    ]


def test_several_files_into_one_run() -> None:
    run = import_files(sorted((NCCL_TESTS / "h200x1-b").glob("*_perf.txt")))
    assert run.ops() == [
        "all_gather",
        "all_reduce",
        "alltoall",
        "broadcast",
        "reduce",
        "reduce_scatter",
        "sendrecv",
    ]
    assert len(run.meta.inputs) == 7


def test_truncated_table_is_partial_a_short_row_inside_is_an_error(tmp_path: Path) -> None:
    text = (NCCL_TESTS / "h200x1-a" / "all_reduce_perf.txt").read_text()
    cut = text[: text.index("2048           512") + 60]
    # The output ends inside a row (issue 39): the whole rows before it are the run's, partial.
    (tmp_path / "cut.txt").write_text(cut)
    run = import_file(tmp_path / "cut.txt")
    assert run.meta.partial and [r.size_bytes for r in run.rows[::2]] == [8, 32, 128, 512]
    # A short row with more lines after it is no cut: an edited file.
    (tmp_path / "edited.txt").write_text(cut + "\n" + text[len(cut) :])
    with pytest.raises(ResultsError, match="table row has 7 columns, the header announced 13"):
        import_file(tmp_path / "edited.txt")
    (tmp_path / "empty.txt").write_text("hello\n")
    with pytest.raises(ResultsError, match="no nccl-tests table found"):
        import_file(tmp_path / "empty.txt")


PUBLIC_OK = sorted(
    p for p in (NCCL_TESTS / "public").iterdir() if p.suffix != ".md" and "failure" not in p.name
)


@pytest.mark.parametrize(
    "path", [*TEXT_FILES, *JSON_FILES, *PUBLIC_OK], ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_import_then_compare_with_itself_exits_0(tmp_path: Path, path: Path) -> None:
    out = tmp_path / "imported.json"
    res = CliRunner().invoke(app, ["import", str(path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert f"-> {out}" in res.stdout
    run = load(out)
    assert run.rows == import_file(path).rows
    res = CliRunner().invoke(app, ["compare", str(out), "--baseline", str(out)])
    assert res.exit_code == 0, res.output
    assert "0 regressed, 0 improved, 0 missing" in res.stdout
    assert res.stderr == ""


def test_import_without_output_makes_a_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NCCL_K8S_RUNS_DIR", str(tmp_path / "runs"))
    res = CliRunner().invoke(app, ["import", str(OLD)])
    assert res.exit_code == 0, res.output
    (written,) = (tmp_path / "runs").glob("nccl-*/results.json")
    run = load(written)
    assert run.meta.run_id == written.parent.name
    assert "imported 52 rows (all_reduce, broadcast) from 1 file" in res.stdout
    # The run id works wherever a results file does.
    res = CliRunner().invoke(app, ["compare", written.parent.name, "--baseline", str(written)])
    assert res.exit_code == 0, res.output


def test_import_bad_files_one_line_exit_2(tmp_path: Path) -> None:
    text = JSON_FILES[0].read_text()
    (tmp_path / "cut.json").write_text(text[: len(text) // 2])
    (tmp_path / "ours.json").write_text('{"schema": "nccl-k8s/results", "schema_version": 1}')
    for name, message in (
        ("cut.json", "nccl-tests JSON is not valid"),
        ("ours.json", "is already an nccl-k8s results file"),
        ("missing.txt", "no such file"),
    ):
        res = CliRunner().invoke(app, ["import", str(tmp_path / name), "-o", "x.json"])
        assert res.exit_code == 2, res.output
        assert res.stdout == ""
        (line,) = res.stderr.strip().splitlines()
        assert line.startswith(f"error: {tmp_path / name}") and message in line
    assert not Path("x.json").exists()
