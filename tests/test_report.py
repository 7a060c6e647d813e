"""Issue 5, acceptance 3: `report` of two runs is one HTML file with the plots embedded; the plots are
real pictures of both runs; `--png DIR` writes them alone; bad inputs are one line and exit 2."""

from __future__ import annotations

import base64
import copy
import io
import re
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.errors import install_hint
from nccl_k8s.results import Run, dump, import_file, store_run
from nccl_k8s.results.plots import COLORS, size_label

pytest.importorskip("matplotlib")
from PIL import Image  # pillow comes with matplotlib, the report extra

DATA = Path(__file__).parent / "data"
V100 = DATA / "nccl-tests" / "handmade-old" / "v100x8_2nodes_error_column.txt"
SOCKET_LOG = DATA / "nccl-logs" / "socket_fallback_h100.log"
IMG = re.compile(r'<img alt="([^"]*)" src="data:image/png;base64,([A-Za-z0-9+/=]+)">')


def _slower_with_spread(run: Run) -> Run:
    """all_reduce 20% slower from 8 MiB up, and per-rank min/max times on every row."""
    cur = copy.deepcopy(run)
    for row in cur.rows:
        if row.op == "all_reduce" and row.size_bytes >= 8 << 20:
            row.busbw *= 0.8
            row.algbw *= 0.8
            row.time_us /= 0.8
        row.time_us_min = row.time_us * 0.95
        row.time_us_max = row.time_us * 1.10
    return cur


@pytest.fixture
def two_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A stored baseline (run id) and a slower run with NCCL logs in its directory."""
    runs = tmp_path / "runs"
    monkeypatch.setenv("NCCL_K8S_RUNS_DIR", str(runs))
    monkeypatch.chdir(tmp_path)
    base = import_file(V100)
    base.meta.env = {"NCCL_IB_HCA": "mlx5_0"}
    store_run(base, run_id="v100-base")
    store_run(_slower_with_spread(base), run_id="v100-slow")
    (runs / "v100-slow" / "logs").mkdir()
    shutil.copy(SOCKET_LOG, runs / "v100-slow" / "logs" / "rank0.log")
    return "v100-base", "v100-slow"


def _png(data: bytes) -> Image.Image:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    img = Image.open(io.BytesIO(data))
    img.load()
    return img.convert("RGB")


def _has_color(img: Image.Image, hex_color: str, *, at_least: int = 50) -> bool:
    want = tuple(int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    hits = sum(
        n
        for n, px in _colors(img)
        if all(abs(int(a) - b) <= 12 for a, b in zip(px, want, strict=True))
    )
    return hits >= at_least


def _colors(img: Image.Image) -> list[tuple[int, tuple[int, int, int]]]:
    # An RGB image: every colour is a 3-tuple.
    return img.getcolors(maxcolors=img.width * img.height) or []  # type: ignore[return-value]


def test_report_of_two_runs_embeds_the_plots_metadata_and_diagnosis(
    two_runs: tuple[str, str], tmp_path: Path
) -> None:
    base, slow = two_runs
    out = tmp_path / "report.html"
    res = CliRunner().invoke(app, ["report", base, slow, "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert f"report: 6 plots of 2 runs, 1 diagnosed -> {out}" in res.stdout
    page = out.read_text(encoding="utf-8")

    # Self-contained: every image inline, nothing fetched from elsewhere.
    assert not re.search(r'src="(?!data:)', page) and "<link" not in page
    images = IMG.findall(page)
    titles = [t for t, _ in images]
    assert titles == [
        "all_reduce: bus bandwidth (GB/s) vs message size",
        "all_reduce: time per op (µs) for messages up to 64K",
        "all_reduce: per-rank spread, (slowest − fastest rank time) / time, %",
        "broadcast: bus bandwidth (GB/s) vs message size",
        "broadcast: time per op (µs) for messages up to 64K",
        "broadcast: per-rank spread, (slowest − fastest rank time) / time, %",
    ]
    pictures = [_png(base64.b64decode(data)) for _, data in images]
    for img in pictures:
        assert img.width == 1000 and img.height >= 520
        assert len(_colors(img)) > 20  # a drawing, not a blank canvas
    busbw, latency, spread = pictures[:3]
    # Both runs are drawn, each in its own colour; only the slower run has per-rank times.
    assert _has_color(busbw, COLORS[0]) and _has_color(busbw, COLORS[1])
    assert _has_color(latency, COLORS[0]) and _has_color(latency, COLORS[1])
    assert _has_color(spread, COLORS[1]) and not _has_color(spread, COLORS[0], at_least=1)

    # The metadata of each run.
    for text in (
        "v100-base (nccl-tests, 8× Tesla V100-SXM2-32GB, 2 nodes)",
        "v100-slow (nccl-tests, 8× Tesla V100-SXM2-32GB, 2 nodes)",
        "<th>world size</th><td>8</td><td>8</td>",
        "<th>nodes</th><td>2</td><td>2</td>",
        "<th>GPUs per node</th><td>4</td><td>4</td>",
        "<th>GPU model</th><td>Tesla V100-SXM2-32GB</td><td>Tesla V100-SXM2-32GB</td>",
        "<code>NCCL_IB_HCA=mlx5_0</code>",
        "sizes 8B..128M ×4, iters 20, warmup 5",
    ):
        assert text in page, text
    # Summary: the slow run's all_reduce peak is the 2M point, the baseline's the 128M one.
    assert re.search(r"v100-base[^<]*</td><td[^>]*>[\d.]+</td><td[^>]*>6\.\d\d</td>", page)
    # Diagnosis: the run with logs is diagnosed (socket fallback), the other says it has none.
    diag = page[page.index("Diagnosis of NCCL logs") :]
    assert "no NCCL logs kept with this run" in diag
    assert "socket-fallback" in diag and "inter-node: socket" in diag


def test_png_dir_writes_the_plots_alone(two_runs: tuple[str, str], tmp_path: Path) -> None:
    base, slow = two_runs
    res = CliRunner().invoke(app, ["report", base, slow, "--png", "plots"])
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "report.html").exists()
    names = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert names == sorted(
        f"{kind}-{op}.png"
        for kind in ("busbw", "latency", "spread")
        for op in ("all_reduce", "broadcast")
    )
    for name in names:
        img = _png((tmp_path / "plots" / name).read_bytes())
        assert img.width == 1000 and len(_colors(img)) > 20


def test_a_results_file_and_a_single_run_without_rows_details(tmp_path: Path) -> None:
    """A file path works as well as a run id; a run id in two places of the legend gets a #2."""
    run = import_file(V100)
    assert run.meta.devices[0].host  # nccl-tests names each rank's host
    run.meta.devices[0].node = "gpu-7"  # as a run collected from a cluster names its node
    path = dump(run, tmp_path / "v100.json")
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", str(path), str(path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text(encoding="utf-8")
    assert "v100 (nccl-tests, 8× Tesla V100-SXM2-32GB, 2 nodes) #2" in page
    host = run.meta.devices[0].host
    assert f"<code>0: {host} (node gpu-7) pid " in page
    # No per-rank times in either run: no spread plot, the other two per op.
    assert len(IMG.findall(page)) == 4


@pytest.mark.parametrize(
    ("make", "expect"),
    [
        (lambda d: "no-such-run", "no run 'no-such-run' in"),
        (lambda d: _write(d / "cut.json", '{"schema": "nccl-k8s/results", "schema_v'), "truncated"),
        (lambda d: str(V100), "not a results file"),
        (
            lambda d: _write(d / "v9.json", '{"schema_version": 9, "meta": {}, "rows": []}'),
            "schema version 9",
        ),
    ],
)
def test_bad_inputs_are_one_line_exit_2(
    two_runs: tuple[str, str], tmp_path: Path, make: object, expect: str
) -> None:
    bad = make(tmp_path)  # type: ignore[operator]
    res = CliRunner().invoke(app, ["report", two_runs[0], bad, "-o", "r.html"])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expect in lines[0], res.output
    assert not (tmp_path / "r.html").exists()


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_without_matplotlib_the_error_names_the_extra(
    two_runs: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    res = CliRunner().invoke(app, ["report", two_runs[0], "-o", "r.html"])
    assert res.exit_code == 2
    assert res.output.strip() == f"error: report needs matplotlib: {install_hint('report')}"


def test_size_labels() -> None:
    assert [size_label(2**e) for e in (3, 9, 10, 16, 20, 30)] == [
        "8B",
        "512B",
        "1K",
        "64K",
        "1M",
        "1G",
    ]


DALL = DATA / "nccl-tests" / "public" / "spectrumx_h200x16_all_reduce_d_all.txt"
DTYPES = [
    "int8",
    "uint8",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "half",
    "float",
    "double",
    "bfloat16",
    "f8e4m3",
    "f8e5m2",
]


def test_d_all_run_gets_one_plot_per_dtype_and_dtype_filters(tmp_path: Path) -> None:
    """Issue 10, acceptance 2 (report): a 12-dtype -d all output draws 12 busbw plots, one per
    dtype, none dropped; --dtype float keeps one."""
    path = dump(import_file(DALL), tmp_path / "dall.json")
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", str(path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert f"report: 12 plots of 1 run, 0 diagnosed -> {out}" in res.stdout
    page = out.read_text(encoding="utf-8")
    images = IMG.findall(page)
    # Sizes are 10G..40G: no small-message plot, and nccl-tests gives no per-rank times.
    assert [t for t, _ in images] == [
        f"all_reduce ({dt} sum): bus bandwidth (GB/s) vs message size" for dt in DTYPES
    ]
    for _, data in images:
        assert _has_color(_png(base64.b64decode(data)), COLORS[0])
    summary = page[page.index("<h2>Summary</h2>") : page.index("<h2>Plots</h2>")]
    assert [m for m in re.findall(r"<tr><td>all_reduce</td><td>([^<]*)</td>", summary)] == [
        f"{dt} sum" for dt in DTYPES
    ]
    # The float row's peak: 487.34 GB/s at 20G (read from the file).
    assert re.search(r"float sum</td>.*?>487\.34</td><td[^>]*>20G</td>", summary)

    res = CliRunner().invoke(
        app, ["report", str(path), "--png", str(tmp_path / "png"), "--dtype", "float"]
    )
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "png").iterdir()) == ["busbw-all_reduce.png"]
    res = CliRunner().invoke(app, ["report", str(path), "-o", "x.html", "--redop", "max"])
    assert res.exit_code == 2
    assert "--redop 'max': the run dall" in res.stderr and "(it has sum)" in res.stderr


def test_a_partial_run_is_marked_partial_in_the_page(tmp_path: Path) -> None:
    """Issue 39 item 9: a partial run (rows of a run that stopped) is said to be one above the
    summary and in its rows cell; a complete run beside it is not."""
    whole = import_file(V100)
    cut = copy.deepcopy(whole)
    cut.rows = cut.rows[:3]
    cut.meta.partial = True
    cut.meta.failure = "run r-1 failed: rank 1 (pod r-1-0-x, node node-1): exit code 1"
    files = [str(dump(whole, tmp_path / "whole.json")), str(dump(cut, tmp_path / "cut.json"))]
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", *files, "-o", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text(encoding="utf-8")
    text = re.sub(r"<[^>]+>", "", page)
    notes = [ln for ln in text.splitlines() if ln.startswith("PARTIAL")]
    assert len(notes) == 1, notes
    assert notes[0].startswith("PARTIAL cut (nccl-tests, ")
    assert "only the 3 rows measured before it stopped: run r-1 failed: rank 1" in notes[0]
    (cells,) = re.findall(r"<tr><th>rows</th><td>(.*?)</td><td>(.*?)</td></tr>", page)
    assert [re.sub(r"<[^>]+>", "", c) for c in cells] == [str(len(whole.rows)), "3 PARTIAL"]
