"""The NCCL log reader's fast paths read exactly what the line-by-line reader reads.

`PLAIN` takes lines in NCCL's own form out of a whole log at once, `LineInterest` keeps only the
lines the rules read, `TIMESTAMP_CLUE` skips the timestamp pass: each is checked here against
the reader without it, on every log of tests/data and on lines made to sit on the edges.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from nccl_k8s.results._ncclfast import PLAIN, TIMESTAMP_CLUE
from nccl_k8s.results.diagnose import analyse
from nccl_k8s.results.nccllog import _PREFIX, _REPEAT, LogParser, ParsedLog
from nccl_k8s.results.pastes import TIMESTAMP
from nccl_k8s.results.rules import LINES_READ

DATA = Path(__file__).parent / "data"
LOGS = sorted(p for p in (DATA / "nccl-logs").iterdir() if p.suffix == ".log")

# Lines on the edges of PLAIN: each must read as _PREFIX reads it, or be left to _PREFIX.
EDGES = [
    "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
    "h:1:2 [0] NCCL INFO foo.cc:12 INFO bar",  # _PREFIX reads `foo.cc:12` as a location
    "h:1:2 [0] NCCL INFO x:3 (fn) WARN y",
    "h:1:2 [0] NCCL WARN  two spaces",
    "h:1:2 [0] NCCL INFO",
    "h:1:2 [0] NCCL INFO\tTab",
    "h:1:2 [3] NCCL INFO a | h:1:2 [3] NCCL INFO a",  # a paste's repeat
    "h:1:2 [0] NCCL INFO ends with a carriage return\r",
    "h:1:2 [0] NCCL INFO vertical\x0btab splits the line",
    "h:1:2 [0] NCCL INFO stamp 2024-01-02T03:04:05.678Z inside",
    "2024-01-02T03:04:05Z h:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via SHM/direct/direct",
    "[1,0]<stdout>:h:1:2 [0] NCCL INFO Channel 00 : 0 -> 1 via direct shared memory",
    "h:1:2 [0] misc/ibvwrap.cc:1 NCCL WARN Call to ibv_open_device failed",
    "h:1:2 [0] NCCL TRACE something",
    ":1:2 [0] NCCL INFO empty host",
    "h:1:2 [0] NCCL INFO transport.cc:88 -> 2",
]


def _corpus() -> list[str]:
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in LOGS]
    return [*texts, "\n".join(EDGES) + "\n", "\r\n".join(EDGES)]


def _slow(text: str) -> str:
    """The same log with a space before each line PLAIN would take: NCCL's prefix is still
    found (`_PREFIX` is searched anywhere), but the line reader reads it."""
    lines = text.splitlines(keepends=True)
    return "".join(" " + x if PLAIN.match(x) else x for x in lines)


def _facts(log: ParsedLog) -> tuple[object, ...]:
    return (
        [dataclasses.asdict(r) for r in log.reports],
        sorted(log.hosts),
        log.failures,
        log.torch_events,
    )


def test_plain_reads_what_prefix_reads() -> None:
    """Every line PLAIN takes gives the host, pid, device, level and message _PREFIX gives."""
    taken = 0
    for text in _corpus():
        for m in PLAIN.finditer(text):
            line = m.group("line")
            p = _PREFIX.search(line)
            assert p is not None, line
            assert p.start() == 0, line
            want = (p["host"], p["pid"], p["dev"], p["level"], _REPEAT.split(p["msg"])[0].strip())
            msg = _REPEAT.split(m["msg"])[0].strip()
            assert (m["host"], m["pid"], m["dev"], m["level"], msg) == want, line
            assert line in text.splitlines(), line  # one whole line, as splitlines cuts them
            taken += 1
    assert taken > 300  # the corpus is mostly NCCL's own lines


def test_plain_leaves_location_lines_to_prefix() -> None:
    """`foo.cc:12 INFO bar` after the level is a location to _PREFIX: PLAIN must not take it."""
    assert PLAIN.search("h:1:2 [0] NCCL INFO foo.cc:12 INFO bar\n") is None
    assert _PREFIX.search("h:1:2 [0] NCCL INFO foo.cc:12 INFO bar")["msg"] == "bar"  # type: ignore[index]


@pytest.mark.parametrize("text", _corpus(), ids=[p.name for p in LOGS] + ["edges", "edges-crlf"])
def test_fast_reader_gives_the_facts_of_the_line_by_line_reader(text: str) -> None:
    fast, slow = LogParser(), LogParser()
    fast.feed(text)
    slow.feed(_slow(text))
    a, b = fast.finish(), slow.finish()
    assert _facts(a) == _facts(b)
    assert [(x.text, x.key, x.level) for x in a.lines] == [
        (x.text, x.key, x.level) for x in b.lines
    ]


@pytest.mark.parametrize("text", _corpus(), ids=[p.name for p in LOGS] + ["edges", "edges-crlf"])
def test_keeping_only_the_lines_rules_read_changes_no_finding(text: str) -> None:
    every, few = LogParser(), LogParser(keep=LINES_READ)
    every.feed(text)
    few.feed(text)
    a, b = every.finish(), few.finish()
    assert _facts(a) == _facts(b)
    assert len(b.lines) <= len(a.lines)
    if a.reports:
        da, db = analyse(a), analyse(b)
        assert [(f.severity, f.code, f.message, f.ranks) for f in da.findings] == [
            (f.severity, f.code, f.message, f.ranks) for f in db.findings
        ]


def test_kept_lines_are_the_warnings_and_errors() -> None:
    text = (
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
        "h:1:2 [0] misc/socket.cc:50 NCCL WARN socket connect failed\n"
        "h:1:2 [0] NCCL INFO transport.cc:88 -> 2\n"
        "h:1:2 [0] NCCL INFO Using network Socket\n"
        "RuntimeError: NCCL error: unhandled system error\n"
    )
    p = LogParser(keep=LINES_READ)
    p.feed(text)
    kept = [x.text for x in p.finish().lines]
    assert kept == [
        "h:1:2 [0] misc/socket.cc:50 NCCL WARN socket connect failed",
        "h:1:2 [0] NCCL INFO transport.cc:88 -> 2",
        "RuntimeError: NCCL error: unhandled system error",
    ]


def test_a_log_of_connections_keeps_no_line() -> None:
    text = "".join(
        f"host-{i}:{i}:{i} [0] NCCL INFO Channel {i % 32:02d}/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
        for i in range(100)
    )
    assert not LINES_READ.notable(text)
    p = LogParser(keep=LINES_READ)
    p.feed(text)
    log = p.finish()
    assert log.lines == [] and len(log.reports) == 100


def test_the_timestamp_clue_is_in_every_timestamp() -> None:
    for stamp in (
        "2024-01-02T03:04:05Z",
        "2024-01-02 03:04:05,123",
        "2026-12-03T05:00:00.123456789+01:00",
    ):
        assert TIMESTAMP.fullmatch(stamp)
        assert TIMESTAMP_CLUE.search(stamp)
