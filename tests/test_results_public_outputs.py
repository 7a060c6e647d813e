"""Issue 10, acceptance 1: every public nccl-tests output of tests/data/nccl-tests/public imports with
the right collective, world size, node count and every number equal to the file, and copies of them
behind launcher prefixes (Open MPI tags, srun -l, kubectl timestamps) import identically.

The expected values below were read from the files by eye; the row-by-row check compares with the
file's own tokens, split by a few lines of test code that know each file's prefix and width."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.errors import ResultsError
from nccl_k8s.results import Run, dump, import_file, load
from nccl_k8s.results.layouts import layout_from_labels
from nccl_k8s.results.nccltests import parse_text
from nccl_k8s.results.pastes import labelled_footer, role_paragraphs

PUBLIC = Path(__file__).parent / "data" / "nccl-tests" / "public"


@dataclass(frozen=True)
class Case:
    file: str
    ops: tuple[str, ...]
    by: str  # how the (first) op is identified
    world: int
    nodes: int
    gpu: str
    rows: int
    #: Tokens per table line of the file (lead columns + 4 per placement).
    width: int
    #: The file's first and last table line, as printed.
    first: str
    last: str
    #: What each line carries before the table (a launcher prefix), removed by the reference reader.
    prefix: str = ""


CASES = [
    Case(
        "aws-eks-efa_t4x2_mpijob_launcher.log",
        ("all_reduce",),
        "table",
        2,
        2,
        "Tesla T4",
        62,
        13,
        "0 0 float sum -1 6.36 0.00 0.00 0 6.40 0.00 0.00 0",
        "1073741824 268435456 float sum -1 344981 3.11 3.11 0 344454 3.12 3.12 0",
        prefix="[1,0]<stdout>:",
    ),
    Case(
        "pkb_k80x2_nccl_output.txt",
        ("all_reduce",),
        "table",
        2,
        2,
        "Tesla K80",
        22,
        13,
        "1048576 262144 float sum -1 2410.0 0.44 0.44 N/A 2709.7 0.39 0.39 N/A",
        "1073741824 268435456 float sum -1 1752724 0.61 0.61 N/A 1763386 0.61 0.61 N/A",
    ),
    Case(
        "nccl-tests-290_h100x8_single_node.txt",
        ("all_reduce",),
        "table",
        8,
        1,
        "NVIDIA H100 80GB HBM3",
        12,
        13,
        "134217728 33554432 float sum -1 613.3 218.85 382.99 0 614.3 218.48 382.34 0",
        "4294967296 1073741824 float sum -1 15870 270.63 473.60 0 15773 272.30 476.53 0",
    ),
    Case(
        "nccl-tests-290_h100x16_srun.txt",
        ("all_reduce",),
        "table",
        16,
        2,
        "NVIDIA H100 80GB HBM3",
        22,
        13,
        "8388608 2097152 float sum -1 215.3 38.96 73.04 N/A 180.0 46.60 87.38 N/A",
        "8589934592 2147483648 float sum -1 103530 82.97 155.57 N/A 103538 82.96 155.56 N/A",
        prefix=" 0:",
    ),
    Case(
        "spectrumx_h200x16_all_reduce_d_all.txt",
        ("all_reduce",),
        "header",
        16,
        2,
        "NVIDIA H200",
        72,
        13,
        "10737418240 10737418240 int8 sum -1 51702.1 207.68 389.40 0 51698.8 207.69 389.42 0",
        "42949672960 42949672960 f8e5m2 sum -1 221331 194.05 363.85 0 221569 193.84 363.46 0",
    ),
    Case(
        "a3mega_h100x16_mpirun.txt",
        ("all_reduce",),
        "command",
        16,
        2,
        "NVIDIA H100 80GB HBM3",
        62,
        13,
        "8 2 float sum -1 135.8 0.00 0.00 0 123.5 0.00 0.00 0",
        "8589934592 2147483648 float sum -1 47535 180.71 338.82 0 47743 179.92 337.35 0",
    ),
    Case(
        "nccl-osx_gtx1080x2_three_ops.txt",
        ("all_reduce", "all_gather", "broadcast"),
        "command",
        2,
        1,
        "GeForce GTX 1080",
        150,
        0,  # three layouts: 12, 11 and 12 columns; checked per table below
        "8 2 float sum 25.34 0.00 0.00 0e+00 25.23 0.00 0.00 0e+00",
        "134217728 33554432 float 0 91250 1.47 1.47 0e+00 91248 1.47 1.47 0e+00",
    ),
    Case(
        "nccl-tests-287_rtx5090x1.txt",
        ("all_reduce",),
        "command",
        1,
        1,
        "NVIDIA GeForce RTX 5090",
        50,
        13,
        "8 2 float sum -1 5.63 0.00 0.00 0 0.20 0.04 0.00 0",
        "134217728 33554432 float sum -1 175.6 764.34 0.00 0 0.08 1777718.25 0.00 0",
    ),
    Case(
        "oci_gb300x4_alltoall.txt",
        ("alltoall",),
        "header",
        4,
        1,
        "NVIDIA GB300",
        4,
        13,
        "8589934592 536870912 float none -1 10308 833.31 624.98 0 9568.2 897.76 673.32 N/A",
        "17179869184 1073741824 float none -1 20527 836.92 627.69 0 18929 907.60 680.70 N/A",
    ),
    Case(
        "azureml_k80x4_gpu_perf.log",
        ("all_reduce",),
        "table",
        4,
        1,
        "Tesla K80",
        14,
        12,
        "33554432 8388608 float sum 19902 1.69 2.53 2e-07 19898 1.69 2.53 2e-07",
        "2147483648 536870912 float sum 1258554 1.71 2.56 2e-07 1258876 1.71 2.56 2e-07",
    ),
    Case(
        "sheffield_bessemer_v100x4_nccl2.4.rst.txt",
        ("all_reduce",),
        "command",
        4,
        1,
        "Tesla V100-PCIE-32GB",
        50,
        12,
        "8 2 float sum 16.36 0.00 0.00 1e-07 15.99 0.00 0.00 0e+00",
        "134217728 33554432 float sum 18003 7.46 11.18 2e-07 17974 7.47 11.20 2e-07",
    ),
]

FAILED = {
    "nccl-tests-5_p100x8_nccl1_failure.txt": "NCCL failure all_reduce.cu:95 'unhandled cuda error'",
    "nccl-tests-287_rtx5090x2_failure.txt": "GENOA-06: Test NCCL failure common.cu:392 'unhandled "
    "cuda error (run with NCCL_DEBUG=INFO for details) / '",
    "nccl-tests-287_rtx5090x2_debug_failure.log": "GENOA-06: Test NCCL failure common.cu:392 "
    "'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / '",
    "nccl-tests-355_h800x16_alltoall_failure.txt": "node0: Test CUDA failure common.cu:389 'an "
    "illegal memory access was encountered'",
}


#: Files with tests of their own below (what each shows is in the README).
MORE = [
    "olivia_gh200x16_int8_wrong_nonzero.md",
    "nccl-tests-369_gh200x2_wrong_oob_failed.md",
    "nccl-tests-78_v100x64_two_tables_no_names.txt",
    "coreweave-43_gb200x72_header_cut.txt",
    "awsome-p4de_srun_two_single_row_tables.md",
    "awsome-dt_readme_srun_0prefix.md",
    "skypilot_h200x16_ray_prefix.txt",
    "dstack_a3mega_no_hash_marks.md",
    "mscclpp-736_markdown_pipe_table.txt",
    "hisohara-ai-scripts_mi355x16_rccl_no_gpu_name.txt",
    "oci-hpc-oke_mi300x16_rccl_four_nameless_ranks.txt",
    "datacrunch-blogs_gb300x72_labelled_pipe_table.md",
    "rocm-sad-pr3_mi300x8_rccl_rst_mark_roles.rst",
]


def test_the_corpus_is_what_the_readme_lists() -> None:
    files = sorted(p.name for p in PUBLIC.iterdir() if p.name != "README.md")
    assert files == sorted([c.file for c in CASES] + list(FAILED) + MORE)
    readme = (PUBLIC / "README.md").read_text()
    for name in files:
        assert f"`{name}`" in readme, name
    assert len(files) >= 15


def _reference_lines(case: Case) -> list[list[str]]:
    """The file's table lines, split on whitespace: what the import must reproduce."""
    out = []
    for line in (PUBLIC / case.file).read_text().splitlines():
        if case.prefix and line.startswith(case.prefix):
            line = line[len(case.prefix) :]
        toks = line.split()
        if toks and toks[0].isdigit() and (len(toks) == case.width or case.width == 0):
            out.append(toks)
    return out


def _cell(tok: str) -> float | None:
    return None if tok == "N/A" else float(tok.rstrip("*"))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.file)
def test_imports_with_the_files_op_world_and_numbers(case: Case) -> None:
    run = import_file(PUBLIC / case.file)
    meta = run.meta
    assert tuple(run.ops()) == case.ops
    assert meta.op_identified[0].by == case.by
    assert (meta.world_size, meta.nodes, meta.gpu_model) == (case.world, case.nodes, case.gpu)
    assert len(run.rows) == case.rows
    lines = _reference_lines(case)
    assert " ".join(lines[0]) == case.first and " ".join(lines[-1]) == case.last
    assert len(run.rows) == 2 * len(lines)
    for toks, out, inp in zip(lines, run.rows[::2], run.rows[1::2], strict=True):
        lead = len(toks) - 8
        assert out.size_bytes == inp.size_bytes == int(toks[0])
        assert out.count == int(toks[1]) and out.dtype == toks[2]
        for row, cells in ((out, toks[lead : lead + 4]), (inp, toks[lead + 4 :])):
            assert (row.time_us, row.algbw, row.busbw) == tuple(float(x) for x in cells[:3])
            checked = row.wrong if row.wrong is not None else row.max_error
            assert checked == _cell(cells[3])
        assert (out.placement, inp.placement) == ("out", "in")


def test_spot_values_read_from_the_files() -> None:
    efa = import_file(PUBLIC / "aws-eks-efa_t4x2_mpijob_launcher.log")
    assert efa.meta.nccl == "2.12.7" and efa.meta.cuda == "11.4"
    assert efa.meta.env == {"NCCL_SHM_DISABLE": "0."}
    assert [(s.op, s.out_of_bounds, s.ok, s.avg_busbw) for s in efa.summaries] == [
        ("all_reduce", 0, True, 1.15327)
    ]
    assert [r.size_bytes for r in efa.rows[:6]] == [0, 0, 0, 0, 4, 4]
    assert (efa.meta.config.minbytes, efa.meta.config.iters, efa.meta.config.check) == (1, 100, 1)

    osx = import_file(PUBLIC / "nccl-osx_gtx1080x2_three_ops.txt")
    gather = [r for r in osx.rows if r.op == "all_gather"]
    assert (gather[0].count, gather[0].redop, gather[0].root, gather[0].max_error) == (
        1,
        None,
        None,
        0.0,
    )
    bcast = [r for r in osx.rows if r.op == "broadcast"]
    assert {(r.redop, r.root) for r in bcast} == {(None, 0)}
    assert [s.avg_busbw for s in osx.summaries] == [0.414483, 0.347488, 0.698235]
    assert [i.detail for i in osx.meta.op_identified] == [
        f"named before the table: ===begin {op}_perf test===" for op in osx.ops()
    ]

    dall = import_file(PUBLIC / "spectrumx_h200x16_all_reduce_d_all.txt")
    assert [r.dtype for r in dall.rows[::6]] == [
        "int8", "uint8", "int32", "uint32", "int64", "uint64",
        "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2",
    ]  # fmt: skip
    assert (dall.meta.nccl_tests, dall.meta.nccl) == ("2.18.3", "2.30.4")
    flt = [r for r in dall.rows if r.dtype == "float" and r.size_bytes == 42949672960]
    assert [(r.time_us, r.algbw, r.busbw) for r in flt] == [
        (165340.0, 259.77, 487.06),
        (164958.0, 260.37, 488.19),
    ]

    one = import_file(PUBLIC / "nccl-tests-287_rtx5090x1.txt")
    assert {r.busbw for r in one.rows} == {0.0}
    assert one.rows[-1].algbw == 1777718.25

    gb300 = import_file(PUBLIC / "oci_gb300x4_alltoall.txt")
    assert [r.wrong for r in gb300.rows] == [0, None, 0, None]
    assert gb300.meta.nccl == "2.28.7"


def test_a_table_names_its_collective_when_nothing_else_does() -> None:
    cases = {
        "nccl-tests-290_h100x8_single_node.txt": (
            "all_reduce",
            "from the table: redop sum, root -1, count = size / element size, in-place results "
            "checked, busbw/algbw 1.75 at 8 ranks",
        ),
        "pkb_k80x2_nccl_output.txt": (
            "all_reduce",
            "from the table: redop sum, root -1, count = size / element size, busbw/algbw 1.00 at "
            "2 ranks; also fits sendrecv, assumed all_reduce (keep the command line or name the "
            "file <op>_perf.* to be sure)",
        ),
    }
    for name, (op, detail) in cases.items():
        (ident,) = import_file(PUBLIC / name).meta.op_identified
        assert (ident.op, ident.by, ident.detail) == (op, "table", detail)
    # The same tables with their collective's name taken out: the table alone still tells.
    for name, op in (
        ("oci_gb300x4_alltoall.txt", "alltoall"),
        ("spectrumx_h200x16_all_reduce_d_all.txt", "all_reduce"),
        ("a3mega_h100x16_mpirun.txt", "all_reduce"),
    ):
        text = "\n".join(
            ln
            for ln in (PUBLIC / name).read_text().splitlines()
            if "Collective test" not in ln and "_perf" not in ln
        )
        run = parse_text(text, origin="pasted.txt")
        assert run.ops() == [op] and run.meta.op_identified[0].by == "table", name


@pytest.mark.parametrize(
    "name", ["all_reduce_perf_2nodes.log", "nccl_all_reduce_perf.log", "all_reduce.txt"]
)
def test_the_file_name_names_the_collective(tmp_path: Path, name: str) -> None:
    shutil.copy(PUBLIC / "pkb_k80x2_nccl_output.txt", tmp_path / name)
    run = import_file(tmp_path / name)
    assert run.ops() == ["all_reduce"]
    (ident,) = run.meta.op_identified
    assert (ident.by, ident.detail) == ("file-name", f"file name {name}")


_PREFIXERS = {
    "open-mpi": lambda i, ln: f"[1,0]<stdout>:{ln}",
    "srun-l": lambda i, ln: f"  0: {ln}",
    "kubectl-timestamps": lambda i, ln: f"2026-12-03T05:00:{i % 60:02d}.123456789Z {ln}",
    "mpich-rank": lambda i, ln: f"[0] {ln}",
}


@pytest.mark.parametrize("prefixer", sorted(_PREFIXERS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.file)
def test_prefixed_copies_import_identically(tmp_path: Path, case: Case, prefixer: str) -> None:
    original = import_file(PUBLIC / case.file)
    add = _PREFIXERS[prefixer]
    lines = (PUBLIC / case.file).read_text().splitlines()
    copy = tmp_path / case.file
    copy.write_text("\n".join(add(i, ln) for i, ln in enumerate(lines)) + "\n")
    run = import_file(copy)
    assert run.rows == original.rows
    assert run.summaries == original.summaries
    m, o = run.meta, original.meta
    assert (m.world_size, m.nodes, m.gpu_model, m.nccl) == (
        o.world_size,
        o.nodes,
        o.gpu_model,
        o.nccl,
    )
    assert [(i.op, i.by) for i in m.op_identified] == [(i.op, i.by) for i in o.op_identified]


@pytest.mark.parametrize("name", sorted(FAILED))
def test_a_failed_run_says_its_own_failure(tmp_path: Path, name: str) -> None:
    with pytest.raises(ResultsError) as info:
        import_file(PUBLIC / name)
    assert str(info.value) == (
        f"{PUBLIC / name}: the run failed before its first result: {FAILED[name]}"
    )
    res = CliRunner().invoke(app, ["import", str(PUBLIC / name), "-o", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.strip() == f"error: {info.value}"
    assert not (tmp_path / "x.json").exists()


def test_rows_before_a_failure_are_kept_and_the_failure_is_reported(tmp_path: Path) -> None:
    # The 1-GPU table, then the 2-GPU failure, as one terminal transcript holds them.
    text = (PUBLIC / "nccl-tests-287_rtx5090x1.txt").read_text() + (
        PUBLIC / "nccl-tests-287_rtx5090x2_failure.txt"
    ).read_text()
    (tmp_path / "session.txt").write_text(text)
    res = CliRunner().invoke(
        app, ["import", str(tmp_path / "session.txt"), "-o", str(tmp_path / "r.json")]
    )
    assert res.exit_code == 0, res.output
    run: Run = load(tmp_path / "r.json")
    assert len(run.rows) == 50
    assert run.meta.failure == FAILED["nccl-tests-287_rtx5090x2_failure.txt"]
    assert res.stderr.strip() == (
        f"warning: the run failed after 50 rows: {FAILED['nccl-tests-287_rtx5090x2_failure.txt']}"
    )


def test_import_notes_how_it_identified_the_collective(tmp_path: Path) -> None:
    # Only the inferred one gets a note; the named one needs none.
    notes = []
    for name in ("nccl-tests-290_h100x8_single_node.txt", "a3mega_h100x16_mpirun.txt"):
        res = CliRunner().invoke(app, ["import", str(PUBLIC / name), "-o", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
        notes += res.stderr.splitlines()
        assert load(tmp_path / name).meta.op_identified[0].by == (
            "table" if "290" in name else "command"
        )
    assert notes == [
        "note: all_reduce from the table: redop sum, root -1, count = size / element size, "
        "in-place results checked, busbw/algbw 1.75 at 8 ranks"
    ]


def test_an_unnamed_ambiguous_table_is_not_guessed_silently() -> None:
    # gather and scatter print the same columns and numbers: the note says both.
    text = "\n".join(
        re.sub(r"\bnone      -1\b", "none       0", ln)
        for ln in (PUBLIC / "oci_gb300x4_alltoall.txt").read_text().splitlines()
        if "Collective test" not in ln
    )
    run = parse_text(text, origin="pasted.txt")
    (ident,) = run.meta.op_identified
    assert ident.by == "table"
    assert "also fits scatter" in ident.detail and ident.op == "gather"


def _import(tmp_path: Path, *names: str) -> tuple[int, str, Path]:
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["import", *(str(PUBLIC / n) for n in names), "-o", str(out)])
    return res.exit_code, res.stderr, out


def test_compare_fails_a_run_whose_results_are_wrong(tmp_path: Path) -> None:
    code, _, wrong = _import(tmp_path, "olivia_gh200x16_int8_wrong_nonzero.md")
    assert code == 0
    # The same run as if its data check had passed: a clean baseline, equal speed.
    clean = load(wrong)
    for row in clean.rows:
        row.wrong = 0
    dump(clean, tmp_path / "clean.json")
    # Read from the file: #wrong at 2M..64M, 3,935,945 wrong elements in 11 cells.
    said = (
        "3935945 wrong elements in 11 rows (int8): all_reduce 2M out 18134, all_reduce 2M in "
        "9609, all_reduce 4M out 96817, all_reduce 4M in 124342, all_reduce 8M out 763876, "
        "all_reduce 8M in 530181, all_reduce 16M out 404221, all_reduce 16M in 103664 and 3 more"
    )
    res = CliRunner().invoke(
        app, ["compare", str(wrong), "--baseline", str(tmp_path / "clean.json")]
    )
    assert res.exit_code == 1
    assert "56 ok, 0 regressed" in res.stdout  # the speed verdict, apart
    assert res.stderr.strip() == f"data check failed in the current run: {said}"
    res = CliRunner().invoke(
        app, ["compare", str(wrong), "--baseline", str(tmp_path / "clean.json"), "-o", "json"]
    )
    doc = json.loads(res.stdout)
    assert res.exit_code == 1 and doc["ok"] is False
    assert doc["data_check"]["wrong_elements"] == 3935945
    assert [(r["size_bytes"], r["placement"], r["wrong"]) for r in doc["data_check"]["wrong_rows"]][
        -1
    ] == (67108864, "out", 113492)
    assert doc["compare"]["counts"]["regressed"] == 0
    # A wrong baseline is no reference: said, and the clean current run passes.
    res = CliRunner().invoke(
        app, ["compare", str(tmp_path / "clean.json"), "--baseline", str(wrong)]
    )
    assert res.exit_code == 0
    assert res.stderr.strip() == (
        f"warning: the baseline's own data check failed, it is no trustworthy reference: {said}"
    )
    # The floor alone fails it too.
    res = CliRunner().invoke(app, ["compare", str(wrong), "--min-busbw", "1"])
    assert res.exit_code == 1 and "data check failed" in res.stderr


def test_a_data_check_failure_after_rows_is_kept_and_warned(tmp_path: Path) -> None:
    code, stderr, out = _import(tmp_path, "nccl-tests-369_gh200x2_wrong_oob_failed.md")
    assert code == 0
    run = load(out)
    assert len(run.rows) == 50
    assert run.meta.failure == "gpu-1-1 pid 662195: Test failure common.cu:1189"
    assert [(s.out_of_bounds, s.ok, s.avg_busbw) for s in run.summaries] == [(4, False, 4.79995)]
    assert stderr.splitlines() == [
        "warning: the run failed after 50 rows: gpu-1-1 pid 662195: Test failure common.cu:1189",
        "warning: wrong results: 128 wrong elements in 2 rows (float): all_reduce 1M out 96, "
        "all_reduce 1M in 32; all_reduce: out of bounds values 4 FAILED",
    ]
    res = CliRunner().invoke(app, ["compare", str(out), "--baseline", str(out)])
    assert res.exit_code == 1 and "the run failed: gpu-1-1 pid 662195" in res.stderr


@pytest.mark.parametrize(
    ("line", "failure"),
    [
        (
            " .. gpu-1-7 pid 2448661: Test failure common.cu:1189",
            "gpu-1-7 pid 2448661: Test failure common.cu:1189",
        ),
        (" .. node3: Test failure common.cu:841", "node3: Test failure common.cu:841"),
    ],
)
def test_testcheck_relay_lines_of_every_version(line: str, failure: str) -> None:
    from nccl_k8s.results.pastes import failure_in

    assert failure_in(line) == failure


def test_rows_with_an_empty_redop_are_read() -> None:
    run = import_file(PUBLIC / "nccl-tests-78_v100x64_two_tables_no_names.txt")
    assert run.ops() == ["all_reduce", "alltoall"]
    assert [(s.op, s.avg_busbw) for s in run.summaries] == [
        ("all_reduce", 4.32178),
        ("alltoall", 0.507636),
    ]
    a2a = [r for r in run.rows if r.op == "alltoall"]
    assert [(r.size_bytes, r.count, r.redop, r.time_us, r.busbw, r.max_error) for r in a2a] == [
        (268435456, 1048576, None, 520935.0, 0.51, 0.0),
        (268435456, 1048576, None, 519562.0, 0.51, 1.0),
        (536870912, 2097152, None, 1041974.0, 0.51, 0.0),
        (536870912, 2097152, None, 1041299.0, 0.51, 1.0),
    ]
    assert run.meta.world_size == 64  # 268435456 B / 4 B / 1048576 per rank
    ar, at = run.meta.op_identified
    assert (ar.op, ar.by) == ("all_reduce", "table")
    assert (at.op, at.by) == ("alltoall", "text") and "alltoall result" in at.detail


def test_a_row_one_column_short_is_still_an_error_when_not_an_empty_redop() -> None:
    text = (PUBLIC / "nccl-tests-78_v100x64_two_tables_no_names.txt").read_text()
    cut = text.replace("122131    2.20", "122131", 1)
    with pytest.raises(ResultsError, match="table row has 11 columns, the header announced 12"):
        parse_text(cut, origin="cut.txt")


def test_device_lines_cut_above_do_not_make_one_rank() -> None:
    run = import_file(PUBLIC / "coreweave-43_gb200x72_header_cut.txt")
    meta = run.meta
    # Rank 71 is the only device line; busbw/algbw 834.57/423.16 = 1.9722 = 2*71/72.
    assert (meta.world_size, meta.nodes, meta.gpus_per_node) == (72, None, None)
    assert run.ops() == ["all_reduce"] and "also fits" not in meta.op_identified[0].detail
    assert [s.avg_busbw for s in run.summaries] == [745.53]
    # A rank the ratio does not confirm: the world size stays unknown, never 1.
    text = (PUBLIC / "coreweave-43_gb200x72_header_cut.txt").read_text()
    other = parse_text(text.replace("Rank 71", "Rank 40"), origin="pasted.txt")
    assert (other.meta.world_size, other.meta.nodes) == (None, None)


def test_two_runs_in_one_file_are_refused(tmp_path: Path) -> None:
    name = "awsome-p4de_srun_two_single_row_tables.md"
    code, stderr, out = _import(tmp_path, name)
    assert code == 2 and not out.exists()
    assert stderr.strip() == (
        f"error: {PUBLIC / name}:33: this all_reduce table measures the same sizes as the one at "
        "21: two runs in one file; import each run from its own file (cut the file between the "
        "tables)"
    )
    # One file given twice: the same refusal between files.
    code, stderr, out = _import(
        tmp_path, "nccl-tests-290_h100x8_single_node.txt", "nccl-tests-290_h100x8_single_node.txt"
    )
    assert code == 2 and not out.exists()
    assert "both measure all_reduce at 134217728 B: two runs (or one file given twice)" in stderr


def test_files_of_different_clusters_are_refused(tmp_path: Path) -> None:
    a, b = "nccl-tests-290_h100x8_single_node.txt", "a3mega_h100x16_mpirun.txt"
    code, stderr, out = _import(tmp_path, a, b)
    assert code == 2 and not out.exists()
    assert stderr.strip() == (
        f"error: {PUBLIC / a} and {PUBLIC / b} are not one run: world size 8 vs 16; import each "
        "file on its own and compare the results"
    )


def test_the_text_names_the_collective_a_table_leaves_open() -> None:
    run = import_file(PUBLIC / "awsome-dt_readme_srun_0prefix.md")
    assert run.ops() == ["scatter"] and run.meta.world_size == 16
    (ident,) = run.meta.op_identified
    assert ident.by == "text"
    assert ident.detail.startswith(
        "the table fits gather, scatter; the text names scatter: A Scatter performance test"
    )
    two_g = [r for r in run.rows if r.size_bytes == 2147483648]
    assert [(r.busbw, r.placement) for r in two_g] == [(79.20, "out"), (79.63, "in")]


def test_ray_and_skypilot_prefixes_are_stripped(tmp_path: Path) -> None:
    run = import_file(PUBLIC / "skypilot_h200x16_ray_prefix.txt")
    meta = run.meta
    assert run.ops() == ["all_gather"]
    assert (meta.world_size, meta.nodes, meta.gpu_model, len(run.rows)) == (
        16,
        2,
        "NVIDIA H200",
        48,
    )
    assert [s.avg_busbw for s in run.summaries] == [122.073]
    assert [r.busbw for r in run.rows[-2:]] == [325.72, 332.58]
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(
        (PUBLIC / "skypilot_h200x16_ray_prefix.txt").read_bytes().replace(b"\n", b"\r\n")
    )
    assert import_file(crlf).rows == run.rows
    plain = "\n".join(
        f"(pid={i}) {ln}" if i % 2 else f"(MyActor pid={i}, ip=10.0.0.{i % 9}) {ln}"
        for i, ln in enumerate(
            (PUBLIC / "nccl-tests-290_h100x8_single_node.txt").read_text().splitlines()
        )
    )
    assert (
        parse_text(plain).rows == import_file(PUBLIC / "nccl-tests-290_h100x8_single_node.txt").rows
    )


def test_headers_and_footers_without_their_hash_marks() -> None:
    run = import_file(PUBLIC / "dstack_a3mega_no_hash_marks.md")
    assert len(run.rows) == 22 and run.meta.world_size == 16  # 8388608 / 4 / 131072
    assert [(s.out_of_bounds, s.ok, s.avg_busbw) for s in run.summaries] == [(0, True, 146.948)]
    assert (run.meta.config.minbytes, run.meta.config.iters, run.meta.config.check) == (
        8388608,
        200,
        0,
    )
    assert [(r.busbw, r.wrong) for r in run.rows[-2:]] == [(188.54, None), (188.59, None)]


def test_a_markdown_pipe_table_is_read() -> None:
    run = import_file(PUBLIC / "mscclpp-736_markdown_pipe_table.txt")
    assert run.ops() == ["all_reduce"] and len(run.rows) == 18
    assert [r.size_bytes for r in run.rows[::2]] == [1024 << k for k in range(9)]
    first, last = run.rows[0], run.rows[-1]
    assert (first.count, first.dtype, first.redop, first.time_us, first.busbw) == (
        512,
        "half",
        "sum",
        5.39,
        0.33,
    )
    assert (last.time_us, last.algbw, last.busbw, last.wrong) == (12.1, 21.67, 37.93, 0)


def test_a_labelled_pipe_table_with_decorated_footer_values_is_read() -> None:
    """Issue 35: an 18-node GB300 all_reduce pasted into a markdown report as a pipe table with
    labelled columns (`| Message Size (GB) | Count (elements) | ... | In-place #wrong |`) and its
    footer as list items with decorated values (`` `0` (OK)``, `` **`836.792 GB/s`** ``) was
    refused ("no nccl-tests table found"). Read from the file by eye: 5 sizes 1-16 GB (count
    268435456 floats = 1 GiB), out-of-place and in-place each; the first row's in-place busbw
    725.75, the last's 918.89; the footer 0 OK and 836.792. The report's other pipe tables (GPU
    specs with bold cells) are not nccl-tests tables and stay out."""
    run = import_file(PUBLIC / "datacrunch-blogs_gb300x72_labelled_pipe_table.md")
    assert run.ops() == ["all_reduce"] and len(run.rows) == 10
    assert run.meta.op_identified[0].by == "command"
    assert [r.size_bytes for r in run.rows[::2]] == [1 << k for k in range(30, 35)]
    first, last = run.rows[0], run.rows[-1]
    assert (first.count, first.dtype, first.redop, first.placement) == (
        268435456,
        "float",
        "sum",
        "out",
    )
    assert (first.time_us, first.algbw, first.busbw, first.wrong) == (2914.04, 368.47, 726.71, 0)
    assert (run.rows[1].placement, run.rows[1].busbw) == ("in", 725.75)
    assert (last.placement, last.time_us, last.algbw, last.busbw, last.wrong) == (
        "in",
        36873.3,
        465.92,
        918.89,
        0,
    )
    assert [(s.op, s.out_of_bounds, s.ok, s.avg_busbw) for s in run.summaries] == [
        ("all_reduce", 0, True, 836.792)
    ]


def test_device_lines_without_a_gpu_name_still_give_the_world() -> None:
    """Issue 35: rccl-tests on MI355X prints `device  0 [0000:75:00]` and no name; today the
    lines are not read and world size and nodes are None. Read from the file: ranks 0-15, eight
    on mi355-gpu-23 and eight on mi355-gpu-24."""
    run = import_file(PUBLIC / "hisohara-ai-scripts_mi355x16_rccl_no_gpu_name.txt")
    meta = run.meta
    assert (meta.world_size, meta.nodes, meta.gpus_per_node, meta.gpu_model) == (16, 2, 8, None)
    assert [(d.rank, d.host, d.device) for d in meta.devices[7:9]] == [
        (7, "mi355-gpu-23", 7),
        (8, "mi355-gpu-24", 0),
    ]
    assert run.ops() == ["all_reduce"] and len(run.rows) == 62
    assert [r.busbw for r in run.rows[-2:]] == [369.04, 369.08]


def test_nameless_device_lines_thinned_by_the_author_still_give_the_nodes() -> None:
    """Issue 35: rccl-tests on MI300X (develop:a52452e) prints no GPU name, and the guide's
    author kept only ranks 0, 7, 8 and 15. Read from the file: SLURM_NTASKS=16 on the two hosts
    of SLURM_JOB_NODELIST, busbw/algbw 349.95/186.64 = 1.875 = 2*15/16, rank 7 on device 7 of
    the first host and rank 15 on device 7 of the second. Before, world 16 but nodes None."""
    run = import_file(PUBLIC / "oci-hpc-oke_mi300x16_rccl_four_nameless_ranks.txt")
    meta = run.meta
    assert (meta.world_size, meta.nodes, meta.gpus_per_node, meta.gpu_model) == (16, 2, 8, None)
    assert [(d.rank, d.host, d.device) for d in meta.devices] == [
        (0, "inst-aq8lt-oke-rdma", 0),
        (7, "inst-aq8lt-oke-rdma", 7),
        (8, "inst-ao2dl-oke-rdma", 0),
        (15, "inst-ao2dl-oke-rdma", 7),
    ]
    assert run.ops() == ["all_reduce"] and len(run.rows) == 10
    assert [r.size_bytes for r in run.rows[::2]] == [1 << k for k in range(30, 35)]
    assert [r.busbw for r in run.rows[-2:]] == [358.37, 358.24]
    assert [(s.out_of_bounds, s.avg_busbw) for s in run.summaries] == [(0, 354.659)]


@pytest.mark.parametrize(
    ("ranks", "expected"),
    [
        # Blocks of 8 by host, ranks 1-6 and 9-14 left out: their hosts follow from 7 and 15.
        ({0: ("a", 0), 7: ("a", 7), 8: ("b", 0), 15: ("b", 7)}, (16, 2, 8)),
        # Round robin (`--map-by node`): rank 3 on device 1 of b leaves 1 or 2 on b: unknown.
        ({0: ("a", 0), 3: ("b", 1)}, (4, None, None)),
        # NCCL_TESTS_DEVICE=3 gives every rank device 3, which counts no rank below it.
        ({0: ("a", 3), 3: ("a", 3)}, (4, None, None)),
        # Rank 0 left out: NCCL_TESTS_DEVICE=1 or 3 (one device for all) is not ruled out.
        ({1: ("a", 1), 3: ("a", 3)}, (4, None, None)),
        # Six ranks on a, two on b: two nodes, GPUs per node not one number.
        ({0: ("a", 0), 5: ("a", 5), 6: ("b", 0), 7: ("b", 1)}, (8, 2, None)),
    ],
)
def test_thinned_device_lines_give_nodes_only_where_the_device_index_pins_them(
    ranks: dict[int, tuple[str, int]], expected: tuple[int, int | None, int | None]
) -> None:
    """A rank on device d has at least d ranks below it on its host (nccl-tests' device is
    localRank x nThreads x nGpus + i): the nodes are known only when that places every rank."""
    world = expected[0]
    algbw = 100.0
    lines = [
        "# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 1073741824 step: 2(factor) warmup "
        "iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "# Using devices",
        *(
            f"#  Rank {r:2d} Group  0 Pid {100 + r:6d} on {h:>10s} device {d:2d} [0000:{r:02x}:00]"
            for r, (h, d) in sorted(ranks.items())
        ),
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        f"  1073741824     268435456     float     sum      -1   10737.4  {algbw:.2f}  "
        f"{algbw * 2 * (world - 1) / world:.2f}      0   10737.4  {algbw:.2f}  "
        f"{algbw * 2 * (world - 1) / world:.2f}      0",
    ]
    meta = parse_text("\n".join(lines) + "\n", origin="pasted.txt").meta
    assert (meta.world_size, meta.nodes, meta.gpus_per_node) == expected


def test_a_decorated_cell_is_read(tmp_path: Path) -> None:
    """Issue 35: one emphasised cell (`**468.57**`, `` `8002.1` ``) in a pasted table refused the
    whole file ("busbw '**468.57**' is not a number"). No public markdown paste with such a cell
    was found (tests/data/nccl-tests/public/README.md; the public one is reStructuredText, below):
    the test decorates cells of a real output and expects the rows of the undecorated file."""
    src = PUBLIC / "nccl-tests-290_h100x8_single_node.txt"
    text = src.read_text()
    row = "  2147483648     536870912     float     sum      -1   8020.3  267.76  468.57      0"
    assert row in text
    decorated = text.replace(
        row, "  2147483648     536870912     float     sum      -1   8020.3  267.76  **468.57**  0"
    ).replace("   8002.1  268.36", "   `8002.1`  __268.36__")
    assert decorated != text
    path = tmp_path / "decorated.md"
    path.write_text(decorated)
    assert import_file(path).rows == import_file(src).rows
    # nccl-tests' own mark of an error past its threshold (`1e-05*`) keeps its meaning.
    assert [r.busbw for r in import_file(path).rows if r.size_bytes == 2147483648] == [
        468.57,
        469.64,
    ]


@pytest.mark.parametrize(
    "decorated",
    [
        "*468.57*",
        "_468.57_",
        "***468.57***",
        "**`468.57`**",
        "~~468.57~~",
        "<b>468.57</b>",
        ":mark:`468.57`",
        ":strong:`468.57`",
    ],
)
def test_a_cell_decorated_in_any_markdown_or_html_emphasis_is_read(
    tmp_path: Path, decorated: str
) -> None:
    """Issue 35: italics, bold italics, nested marks, strikethrough, HTML emphasis and
    reStructuredText roles refused the whole file ("busbw '*468.57*' is not a number"); the value
    inside is the cell."""
    src = PUBLIC / "nccl-tests-290_h100x8_single_node.txt"
    text = src.read_text()
    assert text.count(" 468.57 ") == 1
    path = tmp_path / "decorated.md"
    path.write_text(text.replace(" 468.57 ", f" {decorated} "))
    assert import_file(path).rows == import_file(src).rows


def test_an_rst_paste_with_its_lines_in_mark_roles_and_a_cell_in_its_own_is_read() -> None:
    """Issue 35: AMD's MI300X Customer Acceptance Test Guide, converted by pandoc from Word to
    reStructuredText (ROCm/system-acceptance-docs PR #3), pastes an rccl-tests all_reduce line by
    line, each line a paragraph in a `:mark:` role, the longer rows wrapped onto a second line,
    and the last row's in-place busbw (the value the guide's criterion reads, "exceed an in-place
    busbw metric of 304 GB/s at a message size of 8589934592B") in a span of its own:
    `` 180.48` :mark:`315.84` :mark:`0` `` on the row's second line. It was refused ("no
    nccl-tests table found"). Read from the file by eye: 8 ranks on SMC-SC-DC19-06 (AMD Instinct MI300X), sizes
    8 B to 8 GiB (31 sizes, 62 rows); the first row out-of-place 34.13 us, 0.00 GB/s; the 512 KiB
    row wrapped before its in-place #wrong 0 (in-place 51.85 us, 10.11/17.70 GB/s); the last row
    in-place 47594 us, algbw 180.48, busbw 315.84, #wrong 0; footer 0 OK, 102.138. The guide's
    other pasted outputs (TransferBench, rocBLAS, BabelStream, RVS) are no tables of it."""
    run = import_file(PUBLIC / "rocm-sad-pr3_mi300x8_rccl_rst_mark_roles.rst")
    meta = run.meta
    assert (meta.world_size, meta.nodes, meta.gpus_per_node, meta.gpu_model) == (
        8,
        1,
        8,
        "AMD Instinct MI300X",
    )
    assert {d.host for d in meta.devices} == {"SMC-SC-DC19-06"}
    assert run.ops() == ["all_reduce"] and len(run.rows) == 62
    assert meta.op_identified[0].by == "command"
    assert [r.size_bytes for r in run.rows[::2]] == [8 << k for k in range(31)]
    first = run.rows[0]
    assert (first.placement, first.count, first.dtype, first.redop, first.root) == (
        "out",
        2,
        "float",
        "sum",
        -1,
    )
    assert (first.time_us, first.algbw, first.busbw, first.wrong) == (34.13, 0.0, 0.0, 0)
    wrapped = [r for r in run.rows if r.size_bytes == 524288]
    assert [(r.placement, r.time_us, r.algbw, r.busbw, r.wrong) for r in wrapped] == [
        ("out", 57.96, 9.05, 15.83, 0),
        ("in", 51.85, 10.11, 17.70, 0),
    ]
    last = run.rows[-1]
    assert (last.size_bytes, last.count, last.placement) == (8589934592, 2147483648, "in")
    assert (last.time_us, last.algbw, last.busbw, last.wrong) == (47594, 180.48, 315.84, 0)
    assert run.rows[-2].busbw == 316.55
    assert [(s.op, s.out_of_bounds, s.ok, s.avg_busbw) for s in run.summaries] == [
        ("all_reduce", 0, True, 102.138)
    ]


def test_role_paragraphs_read_a_paragraph_of_roles_as_one_line_and_keep_the_line_count() -> None:
    lines = [
        ":mark:`# size count type redop root time algbw busbw #wrong time algbw",
        "busbw #wrong`",
        "",
        "  :mark:`8 2 float sum -1 47488 180.88` :mark:`316.55` :mark:`0 \\| x`",
        "",
        # Text beside the spans, or no span at its start: the paragraph is prose, kept.
        ":mark:`315.84` is the value",
        "The value :mark:`315.84`",
        "",
        ":mark:`unclosed",
        "",
    ]
    assert role_paragraphs(lines) == [
        "# size count type redop root time algbw busbw #wrong time algbw busbw #wrong",
        "",
        "",
        "8 2 float sum -1 47488 180.88 316.55 0 | x",
        "",
        ":mark:`315.84` is the value",
        "The value :mark:`315.84`",
        "",
        ":mark:`unclosed",
        "",
    ]


@pytest.mark.parametrize(
    "header",
    [
        # A report's summary tables (tests/data/nccl-tests/public/README.md): not nccl-tests'.
        "| Message size | Time (ms) | algbw (GB/s) | busbw (GB/s) | Errors |",
        "| size | algbw (GB/s) | busbw (GB/s) |",
        "| **Feature** | **GB300** | **GB200** | **B300** | **B200** |",
        # Placements named in the wrong order.
        "| Size (B) | Count | Type | In-place time (us) | In-place algbw | In-place busbw "
        "| In-place #wrong | Out-of-place time (us) | Out-of-place algbw | Out-of-place busbw "
        "| Out-of-place #wrong |",
    ],
)
def test_a_pipe_table_whose_labels_are_not_nccl_tests_columns_is_no_table(header: str) -> None:
    assert layout_from_labels(header) is None


@pytest.mark.parametrize(
    ("line", "footer"),
    [
        ("- Average bus bandwidth: **`836.792 GB/s`**", "# Avg bus bandwidth : 836.792"),
        ("- Out-of-bounds values: `0` (OK)", "# Out of bounds values : 0 OK"),
        ("**Avg bus bandwidth**: 146.948", "# Avg bus bandwidth : 146.948"),
        ("* Out of bounds values: 4 FAILED", "# Out of bounds values : 4 FAILED"),
        # Prose around the words is not the footer.
        ("- **Avg bus bandwidth** (from the logs): AR OFF **20.827**; AR ON **20.8229**", None),
        ("Avg bus bandwidth: 487 GB/s, always lower than peak", None),
    ],
)
def test_a_footer_retyped_with_emphasis_is_read_as_the_footer(
    line: str, footer: str | None
) -> None:
    assert labelled_footer(line) == footer
