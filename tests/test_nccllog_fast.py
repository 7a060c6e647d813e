"""The NCCL log reader's fast paths read exactly what the line-by-line reader reads.

`PLAIN` takes lines in NCCL's own form out of a whole log at once, `CONNECTION` reads its
connection lines in one step, `LineInterest` keeps only the lines the rules read,
`TIMESTAMP_CLUE` skips the timestamp pass: each is checked here against the reader without it, on
every log of tests/data and on lines made to sit on the edges.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from nccl_k8s.results._ncclfast import (
    CONNECTION,
    PLAIN,
    TIMESTAMP_CLUE,
    LineInterest,
    connection_pattern,
)
from nccl_k8s.results.diagnose import analyse
from nccl_k8s.results.nccllog import (
    _CHAN,
    _PREFIX,
    _REPEAT,
    LogParser,
    ParsedLog,
    _only_connections,
)
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
    # Connection lines on the edges of CONNECTION (each read as PLAIN and _CHAN read it, or
    # left to them); one between a process's error trace and NCCL's giving up on a plugin (an
    # INFO line between ends the trace: the WARN stays fatal); bare version lines after one
    # (the line before names the process whose version it is).
    "c:1:2 [1] misc/socket.cc:50 NCCL WARN socket connect failed",
    "c:1:2 [1] NCCL INFO transport.cc:88 -> 2",
    "c:1:2 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/IB/0/GDRDMA",
    "c:1:2 [1] NCCL INFO Failed to initialize any GIN plugin",
    "c:7:8 [0] NCCL INFO Channel 01/0 : 7[0] -> 8[1] [send] via NET/IB/1",
    "NCCL version 2.18.1+cuda12.1",
    "c:9:9 [0] NCCL INFO Channel 01/0 : 9[0] -> 8[1] via P2P/IPC",
    "NCCL version 2.19.3+cuda12.2",
    "h:3:4 [2] NCCL INFO Ring 00 : 2 -> 3 [receive] via NET/Socket/0",
    "h:3:4 [2] NCCL INFO Ring 01 : 2 -> 3 via P2P/IPC",
    "h:3:4 [2] NCCL INFO  Channel 02/1 : 2[2] -> 3[3] via  P2P/IPC/read  ",
    "h:3:4 [2] NCCL INFOChannel 03/0 : 2[2] -> 3[3] via SHM/direct/direct",
    "h:3:4 [2] NCCL INFO Channel 04/0 : 2[2] -> 3[3] via direct shared memory\t",
    "h:3:4 [2] NCCL INFO Channel 05/0 : 2[2] -> 3[3] via NET/x:3 INFO y",
    "h:3:4 [2] NCCL INFO Channel 06/0 : 2[2] -> 3[3] via P2P/IPC | h:3:4 [2] NCCL INFO Channel",
    "h:3:4 [2] NCCL INFO Channel 07/0 : 2[2a000] -> 3[3b000] via NET/AWS Libfabric/0/GDRDMA",
    "h:3:4 [2] NCCL WARN Channel 08/0 : 2[2] -> 3[3] via P2P/IPC",
    "h:5:6 [0] NCCL INFO Channel 00/0 : 5[0] -> 6[1] via P2P/CUMEM",
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


def test_connection_reads_what_plain_and_chan_read() -> None:
    """Every line CONNECTION takes is one PLAIN takes whole, whose message _CHAN reads as
    CONNECTION's groups give it."""
    taken = 0
    for text in _corpus():
        for c in CONNECTION.finditer(text):
            m = PLAIN.match(text, c.start())
            assert m is not None and m.end() == c.end(), c.group(0)
            assert "|" not in m["msg"] and m["level"] == "INFO", c.group(0)
            ch = _CHAN.match(m["msg"].strip())
            assert ch is not None, c.group(0)
            assert c.groups() == (m["host"], m["pid"], m["dev"], ch["ch"], ch["src"], ch["dst"],
                                  ch["dir"], ch["via"]), c.group(0)  # fmt: skip
            taken += 1
    assert taken > 150


def test_connection_leaves_lines_it_cannot_read_alike() -> None:
    for line in (
        "h:3:4 [2] NCCL INFO Channel 05/0 : 2[2] -> 3[3] via NET/x:3 INFO y",  # PLAIN's location
        "h:3:4 [2] NCCL INFO Channel 06/0 : 2[2] -> 3[3] via P2P/IPC | h:3:4 [2] NCCL INFO x",
        "h:3:4 [2] NCCL WARN Channel 08/0 : 2[2] -> 3[3] via P2P/IPC",
        " h:3:4 [2] NCCL INFO Channel 08/0 : 2[2] -> 3[3] via P2P/IPC",
    ):
        assert CONNECTION.search(line + "\n") is None, line


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


@pytest.mark.parametrize("text", _corpus(), ids=[p.name for p in LOGS] + ["edges", "edges-crlf"])
def test_a_text_of_connections_alone_reads_as_line_by_line(text: str) -> None:
    """The connection lines of each log, alone (as most pods' NCCL lines are): read at once
    (`_only_connections`, no line kept) they give the facts the per-line reader gives."""
    alone = "".join(c.group(0) for c in CONNECTION.finditer(text))
    if not alone:
        return
    assert _only_connections(alone) is not None
    # An interest in no placed line: none of them is kept, so the text is read at once.
    fast, slow = LogParser(keep=LineInterest(unplaced=True)), LogParser()
    for p in (fast, slow):
        p.feed(alone)
        p.feed(alone.rstrip("\n"))  # a second log, its last line unended
    assert _facts(fast.finish()) == _facts(slow.finish())


def test_a_text_with_any_other_line_is_read_line_by_line() -> None:
    conn = "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM"
    assert _only_connections(f"{conn}\n{conn}\n") is not None
    for other in ("h:1:2 [0] NCCL INFO Using network Socket", "", " " + conn, "NCCL version 2.1.1"):
        assert _only_connections(f"{conn}\n{other}\n{conn}") is None, other
    assert _only_connections("") is None


def test_the_ascii_pattern_finds_what_connection_finds() -> None:
    """On a text connection_pattern gives the ASCII twin for, it finds CONNECTION's groups; a
    text it does not (a separator \\x1c-\\x1f, which str calls whitespace, or any non-ASCII
    character) gets CONNECTION itself."""
    conn = "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM"
    odd = [f"h\x1c:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM{c}" for c in "\x1f "]
    digit = "h:1:2 [0] NCCL INFO Channel 0\u0661 : 0 -> 1 via x"  # a Unicode digit: \\d
    for text in (*_corpus(), "\n".join([conn, *odd]), "\n".join([conn, digit])):
        assert connection_pattern(text).findall(text) == CONNECTION.findall(text)
    assert connection_pattern(conn) is not CONNECTION
    assert connection_pattern(conn + "\x1e") is CONNECTION
    assert connection_pattern(conn + "\u0661") is CONNECTION


def test_asking_each_line_the_clue_first_keeps_what_the_patterns_alone_keep() -> None:
    """`LineInterest.wants` asks a line the interest's clue before its patterns (a few substring
    tests where the patterns are searches: the reader of a real pod log twice as fast): on every
    log of tests/data/nccl-logs, the lines kept are those the patterns alone keep."""
    patterns_only = dataclasses.replace(LINES_READ, clue=lambda text: True)
    kept_somewhere = 0
    for path in sorted((DATA / "nccl-logs").rglob("*.log")):
        text = path.read_text(encoding="utf-8", errors="replace")
        kept = []
        for keep in (LINES_READ, patterns_only):
            p = LogParser(keep=keep)
            p.feed(text)
            kept.append([(x.text, x.key, x.level) for x in p.finish().lines])
        assert kept[0] == kept[1], path.name
        kept_somewhere += bool(kept[0])
    assert kept_somewhere > 30  # most of them say something the rules read
