"""Issue 39, item 7: `import` of an output cut off (the table stops before the sizes its header
announced, no footer; or its last row cut in the middle) marks the result partial and warns
where it stops against what the header announced. Outputs that end early for other reasons
(a sweep whose step does not land on maxBytes, maxBytes lowered for memory, a footer left out
of a paste after the whole sweep) are not partial. Built on every text output of the corpus,
cut after each of its rows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.results import import_file, import_with_gaps
from nccl_k8s.results.pastes import strip_prefixes

DATA = Path(__file__).parent / "data" / "nccl-tests"
OUTPUTS = sorted(
    p
    for p in DATA.rglob("*")
    if p.is_file() and not p.name.startswith("README") and p.suffix != ".json"
)
# A row's size and count; in a reStructuredText role (`:mark:`), also its type (the guide that
# pastes so has other outputs in roles: `0 125 W 37 °C ...`).
_ROW = re.compile(r"^\s*(?::mark:`(?=\d+ \d+ [a-z]))?\|?\s*(\d+)\s*\|?\s+\d+\s")
_TABLE_END = re.compile(r"#\s*(Out of bounds|Avg bus bandwidth|Collective test concluded)|size")


def _rows(lines: list[str]) -> list[tuple[int, int, bool]]:
    """(line index, size, whether the next row of the same table is no smaller: the sweep went
    on, not a new cycle of dtype or root) per row line."""
    found: list[tuple[int, int]] = []
    ends: list[int] = []
    for i, line in enumerate(lines):
        s = strip_prefixes(line)
        if m := _ROW.match(s):
            # A row in a reStructuredText role wrapped onto the next line: it ends there.
            while s.startswith(":mark:`") and not s.rstrip().endswith("`") and i + 1 < len(lines):
                i += 1
                s = lines[i]
            found.append((i, int(m.group(1))))
        elif _TABLE_END.search(s):
            ends.append(i)
    out = []
    for k, (i, size) in enumerate(found):
        nxt = found[k + 1] if k + 1 < len(found) else None
        same_table = nxt is not None and not any(i < e < nxt[0] for e in ends)
        out.append((i, size, same_table and nxt is not None and nxt[1] >= size))
    return out


def _importable(path: Path) -> bool:
    try:
        import_file(path)
    except Exception:
        return False
    return True


CUTTABLE = [p for p in OUTPUTS if _importable(p)]


def test_no_output_of_the_corpus_is_partial() -> None:
    for path in OUTPUTS:
        if _importable(path):
            run, warnings = import_with_gaps([path])
            assert not run.meta.partial, path.name
            assert not [w for w in warnings if "cut off" in w], path.name


@pytest.mark.parametrize("path", CUTTABLE, ids=lambda p: p.name)
def test_cut_after_any_row_is_partial_exactly_when_the_sweep_had_more(
    path: Path, tmp_path: Path
) -> None:
    lines = path.read_text(errors="replace").splitlines()
    config = import_file(path).meta.config
    announced, factor = config.maxbytes, config.stepfactor or 1
    cut = tmp_path / path.name
    rows = _rows(lines)
    assert rows, path.name
    for i, size, more in rows:
        cut.write_text("\n".join(lines[: i + 1]) + "\n")
        run, warnings = import_with_gaps([cut])
        said = [w for w in warnings if "cut off" in w]
        # The table went on to larger sizes: a cut the header's maxBytes shows. A table that
        # stopped short of its header's maxBytes on its own (old nccl-tests lowered it for
        # memory without a word: azureml's K80s stop at 2G of 8G) said so only by its footer:
        # without it, it reads as cut, and is said to be (never the other way round).
        short = announced is not None and factor > 1 and size * factor <= announced
        expected = announced is not None and (more or short)
        assert run.meta.partial is expected, (path.name, i + 1)
        if not expected:
            assert said == [], (path.name, i + 1)
            continue
        assert run.rows[-1].size_bytes == size
        (line,) = said
        assert line.startswith(f"{cut}: the {run.rows[-1].op} table stops at ")
        assert "no footer ('# Avg bus bandwidth') follows" in line


@pytest.mark.parametrize("path", CUTTABLE, ids=lambda p: p.name)
def test_last_row_cut_in_the_middle_is_partial_and_not_stored(path: Path, tmp_path: Path) -> None:
    lines = path.read_text(errors="replace").splitlines()
    whole = _rows(lines)
    (i, _, _), (j, _, _) = whole[-2], whole[-1]
    if j != i + 1:  # something between the two rows (an INFO line, a new table): keep it simple
        pytest.skip("rows not adjacent")
    half = lines[j][: len(lines[j]) * 2 // 3]
    cut = tmp_path / path.name
    cut.write_text("\n".join([*lines[: i + 1], half]) + "\n")
    before = import_file(_write(tmp_path / "whole.txt", lines[: i + 1]))
    run, warnings = import_with_gaps([cut])
    assert run.meta.partial
    assert len(run.rows) == len(before.rows)  # the half row is not stored
    (line,) = [w for w in warnings if "cut off" in w]
    assert f"(and {cut}:{j + 1} is a row cut in the middle, not stored)" in line


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


H200 = DATA / "h200x1-a" / "all_reduce_perf.txt"


def test_the_issue_case_1g_announced_stops_at_2m(tmp_path: Path) -> None:
    lines = H200.read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.strip().startswith("2097152 "))
    cut = _write(tmp_path / "all_reduce_perf.txt", lines[: at + 1])
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["import", str(cut), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines() == [
        f"warning: {cut}: the all_reduce table stops at 2M after 10 rows, its header announced "
        "sizes up to 1G (8M next), and no footer ('# Avg bus bandwidth') follows: the output is "
        "cut off; the rows read are stored, marked partial"
    ]
    assert res.stdout.startswith("imported 20 rows (all_reduce) from 1 file, partial -> ")
    assert json.loads(out.read_text())["meta"]["partial"] is True


def test_maxbytes_reduced_for_memory_is_what_the_sweep_is_held_to(tmp_path: Path) -> None:
    """nccl-tests lowers maxBytes to what the GPU holds and says so; a sweep that stops there
    without a footer is whole, one that stops before it is cut."""
    lines = H200.read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.strip().startswith("33554432 "))
    config = next(i for i, ln in enumerate(lines) if ln.startswith("# nThread"))
    reduced = [*lines[: config + 1], "# Reducing maxBytes to 100000000 due to memory limitation"]
    whole = _write(tmp_path / "whole.txt", reduced + lines[config + 1 : at + 1])  # to 32M
    run, warnings = import_with_gaps([whole])
    assert not run.meta.partial and warnings == []
    early = _write(tmp_path / "early.txt", reduced + lines[config + 1 : at])  # to 8M
    run, warnings = import_with_gaps([early])
    assert run.meta.partial
    assert (
        "stops at 8M after 11 rows, nccl-tests lowered maxBytes to 95.4M for memory "
        in (warnings[0])
    )
    assert "(32M next)" in warnings[0]
