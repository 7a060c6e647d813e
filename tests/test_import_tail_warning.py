"""Issue 21, acceptance 3: `nccl-k8s import` of a tail (complete rows and the footer, no nccl-tests
preamble above them) exits 0 and says, in one warning line, what it took from the footer or the
rows and which fields it cannot know. Real corpus tails (their last 20 lines)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.errors import ResultsError
from nccl_k8s.results import import_file

DATA = Path(__file__).parent / "data" / "nccl-tests"
OUTPUTS = sorted(
    p
    for p in DATA.rglob("*")
    if p.is_file() and not p.name.startswith("README") and p.suffix != ".json"
)
#: Outputs re-typed as a pipe table with labelled columns: their rows, without the header (a
#: tail), read as a table whose size is in bytes, which they are not; such a tail is refused
#: ("no nccl-tests table found").
LABELLED = {"datacrunch-blogs_gb300x72_labelled_pipe_table.md"}
#: Outputs pasted in the middle of a long document: its last 20 lines are the document's, not
#: the output's (AMD's MI300X guide goes on with rocBLAS and BabelStream for 800 lines).
INSIDE = {"rocm-sad-pr3_mi300x8_rccl_rst_mark_roles.rst"}
#: RunMeta field -> the words the warning uses for it.
FIELDS = {
    "world_size": "world size",
    "nodes": "node count",
    "gpu_model": "GPU model",
    "nccl": "NCCL version",
    "nccl_tests": "nccl-tests version",
}


def _import(path: Path, tmp_path: Path) -> tuple[int, list[str]]:
    res = CliRunner().invoke(app, ["import", str(path), "-o", str(tmp_path / "r.json")])
    # Other warnings (the run's failure line, wrong results) are not about the preamble.
    return res.exit_code, [ln for ln in res.stderr.splitlines() if "preamble" in ln]


def _tail(path: Path, tmp_path: Path) -> Path:
    tail = tmp_path / path.name
    tail.write_text("".join(path.read_text(errors="replace").splitlines(keepends=True)[-20:]))
    return tail


def test_a_tail_named_by_its_footer_warns_once_naming_what_it_took_and_lost(
    tmp_path: Path,
) -> None:
    # h200x1-b/alltoall_perf.txt: the preamble says nccl-tests 2.19.6, library 22809 (2.28.9),
    # one rank on host vm, NVIDIA H200; its last 20 lines start at the units line "#  (B)".
    path = DATA / "h200x1-b" / "alltoall_perf.txt"
    code, warnings = _import(_tail(path, tmp_path), tmp_path)
    assert code == 0
    (line,) = warnings
    assert "no nccl-tests preamble ('# nThread', '# Rank' lines, column header)" in line
    assert "took alltoall from the footer '# Collective test concluded: alltoall_perf'" in line
    assert (
        "cannot know world size, node count, GPU model, NCCL version, nccl-tests version, "
        "iterations and warmup (left empty)"
    ) in line
    assert "sizes below" not in line  # the tail still starts at 0 B, the run's first size
    # The whole file has its preamble: no such warning.
    code, warnings = _import(path, tmp_path)
    assert (code, warnings) == (0, [])


def test_a_tail_cut_above_its_smallest_sizes_says_where_the_rows_start(tmp_path: Path) -> None:
    # a3mega_h100x16_mpirun.txt: 16 x H100 80GB HBM3, all_reduce 8 B..8 GB; its last 20 lines
    # hold the rows from 65536 B and the footer "# Avg bus bandwidth", no op name.
    path = DATA / "public" / "a3mega_h100x16_mpirun.txt"
    code, warnings = _import(_tail(path, tmp_path), tmp_path)
    assert code == 0
    (line,) = warnings
    assert "took all_reduce from the rows;" in line
    assert "GPU model" in line and "world size" in line
    assert line.endswith("sizes below 65536 B, if the run had any, were above the cut")


@pytest.mark.parametrize("path", OUTPUTS, ids=lambda p: p.name)
def test_every_corpus_tail_names_each_field_it_lost(tmp_path: Path, path: Path) -> None:
    try:
        whole = import_file(path)
    except ResultsError:
        pytest.skip("the whole file does not import (a failed run, or two runs in one file)")
    if path.name in LABELLED:
        pytest.skip("a pipe table whose labelled header alone says its size unit (GB): no tail")
    if path.name in INSIDE:
        pytest.skip("the output is inside a document: its tail is the document's")
    tail = _tail(path, tmp_path)
    code, warnings = _import(tail, tmp_path)
    assert code == 0
    cut = import_file(tail)
    if cut.meta.devices or cut.meta.config.iters is not None:
        assert warnings == []  # the preamble is in the last 20 lines: nothing to say
        return
    (line,) = warnings
    lost = [
        words
        for name, words in FIELDS.items()
        if getattr(whole.meta, name) is not None and getattr(cut.meta, name) is None
    ]
    for words in lost:
        assert words in line
    assert all(f"{op} from" in line for op in cut.ops())
