"""`report` by topology domain (issue 37): the domain-by-domain heatmap of a saved `nodes check
-o json` (its JSON made by the check's own result type, NodesChecked.to_dict, from pair results
judged by the check's own code), and busbw by rank layout where runs' ranks sat in domains
differently."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.k8s.nodes._badnodes import SlowLink, verdicts
from nccl_k8s.k8s.nodes._checked import NodesChecked, PairTest, Topology
from nccl_k8s.k8s.nodes._domains import link_verdicts
from nccl_k8s.k8s.nodes._level import PairResult
from nccl_k8s.results import Device, import_file, store_run
from nccl_k8s.results.report import load_runs, render_html

pytest.importorskip("matplotlib")

BLOCK = "cloud.google.com/gce-topology-block"
NODES = ["a0", "a1", "a2", "a3", "b0", "b1", "b2", "b3", "c0", "c1"]
DOMAIN = {n: f"block-{n[0]}" for n in NODES}
V100 = Path(__file__).parent / "data/nccl-tests/handmade-old/v100x8_2nodes_error_column.txt"
CELL = re.compile(r"<t[hd][^>]*>(.*?)</t[hd]>")


def cells(row: str) -> list[str]:
    """A table row's cells as text (tags such as the runs' colour swatches dropped)."""
    return [re.sub(r"<[^>]+>", "", c) for c in CELL.findall(row)]


def checked_json(path: Path) -> dict[str, object]:
    """A check of three blocks: every block tested inside, a-b slow across, a-c across, b-c
    never tested; written as `nodes check -o json` writes it."""
    intra = [
        PairResult("a0", "a1", 10.0),
        PairResult("a2", "a3", 10.2),
        PairResult("b0", "b1", 9.5),
        PairResult("b2", "b3", 9.6),
        PairResult("c0", "c1", 9.8),
    ]
    cross = [
        PairResult("a0", "b0", 3.0, pass_no=2),
        PairResult("a1", "b1", 3.2, pass_no=2),
        PairResult("a2", "c0", 8.25, pass_no=2),
    ]
    findings = verdicts(NODES, intra, 0.9)
    links, _ = link_verdicts(intra, cross, findings, DOMAIN, 0.9)
    topology = Topology((BLOCK,), "auto", DOMAIN, links, list[SlowLink]())
    tests = [PairTest(r, f"t{i}", 1.0) for i, r in enumerate([*intra, *cross])]
    doc = NodesChecked(NODES, {}, tests, findings, [], False, topology=topology).to_dict()
    path.write_text(json.dumps(doc, indent=1))
    return doc


def _table(page: str) -> list[list[str]]:
    body = page.split('<table class="domains">', 1)[1].split("</table>", 1)[0]
    return [cells(row) for row in body.split("</tr>") if row.strip()]


def test_report_draws_the_checks_domain_matrix_and_its_numbers_are_the_jsons(
    tmp_path: Path,
) -> None:
    from PIL import Image  # pillow comes with matplotlib, the report extra

    saved = tmp_path / "check.json"
    doc = checked_json(saved)
    out, png = tmp_path / "report.html", tmp_path / "png"
    res = CliRunner().invoke(
        app, ["report", "--nodes-check", str(saved), "-o", str(out), "--png", str(png)]
    )
    assert res.exit_code == 0, res.output
    assert "the domain matrix of 3 domains" in res.output
    heat = png / "domain-matrix.png"
    with Image.open(heat) as img:
        assert img.format == "PNG" and img.width > 300
    page = out.read_text(encoding="utf-8")
    assert 'id="domain-matrix"' in page and "data:image/png;base64," in page
    matrix = {(m["a"], m["b"]): m["busbw"] for m in doc["topology"]["matrix"]}  # type: ignore[index]
    table = _table(page)
    names = table[0][1:]
    assert names == ["block-a", "block-b", "block-c"]
    for row in table[1:]:
        a = row[0]
        for b, cell in zip(names, row[1:], strict=True):
            value = matrix.get((a, b), matrix.get((b, a)))
            assert cell == ("-" if value is None else f"{value:.3g}"), (a, b)
    assert table[2][3] == "-"  # block-b x block-c: no test measured it
    assert table[1][2] == "3.2" and table[1][3] == "8.25"
    # The check's verdict on the slow link rides along.
    assert "slow between block-a and block-b" in page


def test_a_file_that_is_not_a_checks_json_is_one_line_and_exit_2(tmp_path: Path) -> None:
    no_topology = tmp_path / "flat.json"
    no_topology.write_text(json.dumps({"nodes": [], "topology": None}))
    res = CliRunner().invoke(
        app, ["report", "--nodes-check", str(no_topology), "-o", str(tmp_path / "r.html")]
    )
    assert res.exit_code == 2, res.output
    assert res.stderr.splitlines() == [
        f"error: --nodes-check {no_topology}: the check's nodes were in fewer than two topology "
        "domains (its `topology` is null): no domain matrix to draw"
    ]
    junk = tmp_path / "junk.json"
    junk.write_text("not json")
    res = CliRunner().invoke(app, ["report", "--nodes-check", str(junk)])
    assert res.exit_code == 2
    assert res.stderr.splitlines() == [
        f"error: --nodes-check {junk}: not JSON: expected the JSON that `nccl-k8s nodes check "
        "-o json` writes"
    ]
    assert not (tmp_path / "r.html").exists() and not Path("report.html").exists()
    res = CliRunner().invoke(app, ["report", "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 2 and "--nodes-check FILE" in res.stderr


def _stored(blocks: str, run_id: str, factor: float) -> None:
    run = import_file(V100)
    run.meta.devices = [
        Device(rank=r, node=f"n{r}", domain={BLOCK: b}) for r, b in enumerate(blocks)
    ]
    for row in run.rows:
        row.busbw *= factor
    store_run(run, run_id=run_id)


def test_report_groups_busbw_by_rank_layout_when_runs_sat_differently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NCCL_K8S_RUNS_DIR", str(tmp_path / "runs"))
    _stored("aaaabbbb", "grouped", 1.0)
    _stored("abababab", "interleaved", 0.5)
    # The page's tables (the plots are report's other tests' business, and slow to draw).
    page = render_html(load_runs(["grouped", "interleaved"], diagnose=False), [])
    section = page.split('id="busbw-by-layout"', 1)[1].split("</table>", 1)[0]
    rows = [cells(r) for r in section.split("</tr>")[1:] if "<td" in r]
    run = import_file(V100)
    largest = max((x for x in run.rows if x.placement == "out"), key=lambda x: x.size_bytes)
    got = {(r[2], r[3].split(" (")[0]): float(r[4]) for r in rows if r[0] == largest.op}
    assert got == {
        ("2 domains: ranks 0-3 | 4-7", "grouped"): pytest.approx(largest.busbw, abs=0.01),
        ("2 domains: ranks 0,2,4,6 | 1,3,5,7", "interleaved"): pytest.approx(
            largest.busbw * 0.5, abs=0.01
        ),
    }
    # One layout (or none recorded): no such table.
    assert "busbw-by-layout" not in render_html(load_runs(["grouped"], diagnose=False), [])


def test_no_run_and_a_check_writes_only_the_domain_section(tmp_path: Path) -> None:
    saved = tmp_path / "check.json"
    checked_json(saved)
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", "--nodes-check", str(saved), "-o", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text(encoding="utf-8")
    assert "<h2>Summary</h2>" not in page and "Topology domains (nodes check)" in page
