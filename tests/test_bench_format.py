"""The table and the numbers, against real nccl-tests outputs (tests/data/nccl-tests)."""

from __future__ import annotations

import pathlib
import re
from typing import cast

import pytest

from nccl_k8s.bench import report
from nccl_k8s.bench.collectives import COLLECTIVES
from nccl_k8s.bench.config import DTYPES, Dtype, Op, parse_size
from nccl_k8s.bench.counts import memory_limit, rotation_shifts

DATA = pathlib.Path(__file__).parent / "data" / "nccl-tests"
REFERENCE = sorted((DATA / "h200x1-a").glob("*.txt")) + sorted((DATA / "h200x1-b").glob("*.txt"))
ROW = re.compile(r"^\s+\d+\s+\d+\s+\w+")


def _op_of(path: pathlib.Path) -> str:
    return path.name.split("_perf")[0]


def _cell(fields: list[str]) -> report.Cell:
    wrong = None if fields[3] == "N/A" else int(fields[3])
    t = float(fields[0])
    return report.Cell(t, float(fields[1]), float(fields[2]), wrong, t, t)


@pytest.mark.parametrize("path", REFERENCE, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_rows_print_exactly_as_nccl_tests(path: pathlib.Path) -> None:
    """Reprinting each reference row from its numbers gives the very same line."""
    rows = [line.rstrip("\n") for line in path.read_text().splitlines() if ROW.match(line)]
    assert rows, path
    for line in rows:
        f = line.split()
        row = report.TableRow(
            _op_of(path), int(f[0]), int(f[1]), f[2], f[3], int(f[4]), _cell(f[5:9]), _cell(f[9:13])
        )
        assert report.row_line(row) == line


@pytest.mark.parametrize("path", REFERENCE, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_size_and_count_columns_follow_nccl_tests(path: pathlib.Path) -> None:
    """From the requested sizes (-b 8 -f 4/8) our counts give the reference's size and count columns."""
    text = path.read_text()
    header = re.search(r"minBytes (\d+) maxBytes (\d+) step: (\d+)\(factor\)", text)
    assert header
    lo, hi, factor = (int(x) for x in header.groups())
    rows = [line.split() for line in text.splitlines() if ROW.match(line)]
    dtype = cast(Dtype, rows[0][2])
    shape = COLLECTIVES[cast(Op, _op_of(path))]
    size, expected = lo, list[tuple[int, int]]()
    while size <= hi and len(expected) < len(rows):
        c = shape.counts(size, DTYPES[dtype], 1)
        expected.append((c.size_bytes(DTYPES[dtype]), c.param))
        size *= factor
    assert [(int(r[0]), int(r[1])) for r in rows] == expected


def test_header_matches_nccl_tests_columns() -> None:
    ref = (DATA / "h200x1-b" / "all_reduce_perf.txt").read_text().splitlines()
    start = ref.index(next(line for line in ref if "out-of-place" in line)) - 1
    assert report.table_header() == ref[start : start + 4]


def test_footer_lines() -> None:
    lines = report.footer_lines(
        out_of_bounds=0, avg_busbw=17541.4, min_busbw=None, program="broadcast_perf"
    )
    assert lines[:2] == ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 17541.4 "]
    failed = report.footer_lines(out_of_bounds=3, avg_busbw=1.5, min_busbw=2.0, program="x")
    assert failed[:2] == [
        "# Out of bounds values : 3 FAILED",
        "# Avg bus bandwidth    : 1.5 FAILED",
    ]


@pytest.mark.parametrize(
    ("value", "width", "text"),
    [(6.63, 7, "   6.63"), (2552.7, 6, "2552.7"), (44862.0, 6, " 44862"), (392335.0, 6, "392335"),
     (12345.6, 7, "12345.6"), (0.0, 6, "  0.00"), (12345678.0, 6, " 1e+07"), (123456789.0, 7, "1.2e+08")],
)  # fmt: skip
def test_number_format(value: float, width: int, text: str) -> None:
    assert report.float_str(value, width) == text


def test_columns_never_overflow_at_rounding_edges() -> None:
    """nccl-tests picks the format by the printed width (snprintf), so 9999.996 in a 7-wide
    column is '10000.0', not the 8-character '10000.00'."""
    assert report.float_str(9999.996, 7) == "10000.0"
    assert report.float_str(999999.6, 6) == " 1e+06"
    assert report.float_str(99.996, 6) == "100.00"
    for width in (6, 7):
        for exp in range(-3, 12):
            for mant in (1.0, 9.9949, 9.995, 9.996, 9.99999):
                assert len(report.float_str(mant * 10.0**exp, width)) == width, (mant, exp, width)


def test_wrong_counts_print_as_nccl_tests_6g() -> None:
    cell = report.Cell(1.0, 1.0, 1.0, 1234567, 1.0, 1.0)
    row = report.TableRow("all_reduce", 8, 2, "float", "sum", -1, cell, cell)
    assert report.row_line(row).split()[8] == "1.23457e+06"


def test_fault_line_round_trip() -> None:
    payload = {"rank": 0, "culprit": 3, "host": "bench-0", "pid": 42, "reason": "no heartbeat for 31 s",
               "where": "all_reduce 8 B out-of-place timing"}  # fmt: skip
    line = report.fault_line(payload)
    assert line.startswith(report.FAULT_PREFIX + ' {"v":1,')
    assert report.parse_fault_line("2026-12-03T10:00:00Z " + line) == {"v": 1, **payload}
    assert report.parse_fault_line(line[:-5]) is None  # cut off
    assert report.parse_fault_line('NCCL_K8S_FAULT {"v":2}') is None
    assert report.parse_fault_line("nothing here") is None


@pytest.mark.parametrize(
    ("op", "nranks", "factor"),
    [("all_reduce", 8, 1.75), ("all_gather", 8, 0.875), ("reduce_scatter", 4, 0.75), ("alltoall", 2, 0.5),
     ("broadcast", 8, 1.0), ("reduce", 8, 1.0), ("sendrecv", 8, 1.0), ("gather", 4, 0.75), ("scatter", 4, 0.75)],
)  # fmt: skip
def test_bus_factors(op: Op, nranks: int, factor: float) -> None:
    shape = COLLECTIVES[op]
    counts = shape.counts(1 << 20, 4, nranks)
    algbw, busbw = shape.bandwidth(counts, 4, nranks, 1e-3)
    assert busbw == pytest.approx(algbw * factor, rel=1e-12)
    # algbw = size / time with 1e9 bytes per GB: the whole buffer for split collectives
    assert algbw == pytest.approx(counts.size_bytes(4) / 1e9 / 1e-3, rel=1e-12)


def test_split_collectives_round_chunks_down_to_16_bytes() -> None:
    c = COLLECTIVES["all_gather"].counts(
        1000, 4, 3
    )  # 250 floats / 3 ranks = 83 -> 80 (16-byte chunks)
    assert (c.param, c.send, c.recv, c.size_bytes(4)) == (80, 80, 240, 960)
    c = COLLECTIVES["reduce_scatter"].counts(1 << 20, 2, 4)  # half: 131072 per rank
    assert (c.param, c.send, c.recv, c.recv_inplace_offset) == (131072, 524288, 131072, 131072)
    c = COLLECTIVES["alltoall"].counts(8, 1, 2)  # int8: 4 per rank rounds to 0
    assert c.size_bytes(1) == 0


def test_rotation_walks_the_buffer_at_small_sizes() -> None:
    c = COLLECTIVES["all_reduce"].counts(1024, 4, 2)
    assert rotation_shifts(c, 4, 1 << 20, 20) == [1024 * i for i in range(20)]
    big = COLLECTIVES["all_reduce"].counts(1 << 20, 4, 2)
    assert rotation_shifts(big, 4, 1 << 20, 20) == [0]


def test_memory_limit_is_nccl_tests_2_19_6_rule() -> None:
    """src/common.cu of 2.19.6: reserve min(ceil(mem / 16 GiB) GiB, 4 GiB) plus 1 GiB, then room
    for send, recv and (checking) expected buffers."""
    gib = 1 << 30
    assert memory_limit(256 << 20, 141 * gib, check=True) is None
    assert memory_limit(64 * gib, 141 * gib, check=True) == (141 - 4 - 1) * gib // 3
    assert memory_limit(100 * gib, 141 * gib, check=False) == (141 - 4 - 1) * gib // 2
    assert memory_limit(8 * gib, 16 * gib, check=True) == (16 - 1 - 1) * gib // 3
    assert memory_limit(8 * gib, 17 * gib, check=True) == (17 - 2 - 1) * gib // 3


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", 8),
        ("64K", 65536),
        ("1M", 1 << 20),
        ("8G", 8 << 30),
        ("1.5k", 1536),
        ("256m", 256 << 20),
    ],
)
def test_sizes_use_binary_suffixes(text: str, value: int) -> None:
    assert parse_size(text) == value
