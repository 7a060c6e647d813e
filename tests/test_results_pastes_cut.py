"""Issue 21, acceptance 3 and 5: pastes cut anywhere. The tail of every corpus output (its last
20 lines: complete rows and the footer, no header) imports with the same rows as the whole file,
or says which column it cannot know; and no file of tests/data, cut at every tenth of its length,
makes import or diagnose raise anything but their one-line errors."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.errors import NcclK8sError, ResultsError
from nccl_k8s.results import diagnose_text, import_file
from nccl_k8s.results.nccltests import parse_text

DATA = Path(__file__).parent / "data"
OUTPUTS = sorted(
    p
    for p in (DATA / "nccl-tests").rglob("*")
    if p.is_file() and not p.name.startswith("README") and p.suffix != ".json"
)
#: Outputs re-typed as a pipe table with labelled columns: their rows, without the header (a
#: tail), read as a table whose size is in bytes, which they are not; such a tail is refused
#: ("no nccl-tests table found").
LABELLED = {"datacrunch-blogs_gb300x72_labelled_pipe_table.md"}
#: Outputs pasted in the middle of a long document: its last 20 lines are the document's, not
#: the output's (AMD's MI300X guide goes on with rocBLAS and BabelStream for 800 lines).
INSIDE = {"rocm-sad-pr3_mi300x8_rccl_rst_mark_roles.rst"}
EVERY_FILE = sorted(p for p in DATA.rglob("*") if p.is_file())


def _whole(path: Path):  # type: ignore[no-untyped-def]
    try:
        return import_file(path)
    except ResultsError:
        return None  # a failed run or two runs in one file: no whole to compare with


@pytest.mark.parametrize("path", OUTPUTS, ids=lambda p: p.name)
def test_the_tail_imports_with_the_rows_of_the_whole(tmp_path: Path, path: Path) -> None:
    whole = _whole(path)
    if whole is None:
        pytest.skip("the whole file does not import")
    if path.name in LABELLED:
        pytest.skip("a pipe table whose labelled header alone says its size unit (GB): no tail")
    if path.name in INSIDE:
        pytest.skip("the output is inside a document: its tail is the document's")
    lines = path.read_text(errors="replace").splitlines(keepends=True)
    tail = tmp_path / path.name
    tail.write_text("".join(lines[-20:]))
    res = CliRunner().invoke(app, ["import", str(tail), "-o", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.stderr
    cut = import_file(tail)
    assert cut.rows, "the last 20 lines hold complete rows"
    k = len(cut.rows)
    same_but_op = [(r.__dict__ | {"op": ""}) for r in cut.rows] == [
        (r.__dict__ | {"op": ""}) for r in whole.rows[-k:]
    ]
    assert same_but_op
    if [r.op for r in cut.rows] != [r.op for r in whole.rows[-k:]]:
        # Only the collective may be unknowable from a tail; import says so, naming the one
        # the whole file names among those the rows fit.
        (ident,) = cut.meta.op_identified
        assert "also fits" in ident.detail and whole.rows[-1].op in ident.detail
        assert f"also fits {whole.rows[-1].op}" in res.stderr


def test_a_tail_says_the_columns_it_read_and_the_footer_names_the_op(tmp_path: Path) -> None:
    path = DATA / "nccl-tests" / "h200x1-b" / "alltoall_perf.txt"
    text = "".join(path.read_text().splitlines(keepends=True)[-20:])
    assert "#  size" not in text and "# Collective test concluded: alltoall_perf" in text
    run = parse_text(text, origin="tail.txt")
    (ident,) = run.meta.op_identified
    assert (ident.op, ident.by) == ("alltoall", "footer")
    assert ident.detail == "# Collective test concluded: alltoall_perf"
    assert ident.columns == "size count type redop root, then time algbw busbw #wrong x2"


def test_an_old_all_gather_table_gets_its_world_from_count_and_nGpus() -> None:
    """nccl-osx: `===begin all_gather_perf test===`, `nGpus 2`, all_gather count = size / 4 /
    2. Without its `# Rank` lines (a paste cut there) the count and -g still give 2 ranks in one
    process: nodes 1."""
    src = (DATA / "nccl-tests" / "public" / "nccl-osx_gtx1080x2_three_ops.txt").read_text()
    cut = "\n".join(ln for ln in src.splitlines() if "Rank" not in ln)
    meta = parse_text(cut, origin="osx.txt").meta
    assert (meta.world_size, meta.nodes, meta.gpus_per_node) == (2, 1, 2)
    # The -g 8 table of issue 290 (one process, 8 x H100): busbw/algbw 1.75 pins 8 ranks.
    src = (DATA / "nccl-tests" / "public" / "nccl-tests-290_h100x8_single_node.txt").read_text()
    cut = "\n".join(ln for ln in src.splitlines() if "Rank" not in ln)
    meta = parse_text(cut, origin="h100.txt").meta
    assert (meta.world_size, meta.nodes, meta.gpus_per_node) == (8, 1, 8)
    # With a -g that the table disagrees with, no node count is made up.
    wrong = cut.replace("nGpus 8", "nGpus 4")
    meta = parse_text(wrong, origin="h100.txt").meta
    assert (meta.world_size, meta.nodes) == (None, None)


@pytest.mark.parametrize("path", EVERY_FILE, ids=lambda p: str(p.relative_to(DATA)))
def test_no_traceback_on_any_cut(tmp_path: Path, path: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    cut = tmp_path / path.name
    for tenth in range(1, 11):
        part = text[: len(text) * tenth // 10]
        cut.write_text(part)
        # A one-line error (NcclK8sError) is what the CLI prints; anything else is a traceback.
        with contextlib.suppress(NcclK8sError):
            import_file(cut)
        with contextlib.suppress(NcclK8sError):
            diagnose_text(part)
