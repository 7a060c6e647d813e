"""How `results` reads a pod's log (k8s.run._collect): what it keeps and how it writes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nccl_k8s.k8s.run._collect import _nccl_lines, _rewritten

DATA = Path(__file__).parent / "data"
#: What _nccl_lines replaced: the lines that mention NCCL's INFO or WARN level.
NCCL_LINE = re.compile(r"^.*NCCL (?:INFO|WARN).*$", re.MULTILINE)
EDGES = [
    "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
    "h:1:2 [0] NCCL INFO ends with a carriage return\r",
    "h:1:2 [0] NCCL WARN a vertical\x0btab and a form\x0cfeed stay in the line",
    "NCCL INFO",
    "xNCCL WARNx",
    "NCCL  INFO two spaces",
    "nccl info lower case",
    "",
    "\r",
    "[1,0]<stdout>:h:1:2 [0] NCCL INFO a launcher's prefix",
]


def test_the_nccl_lines_are_those_the_regex_found() -> None:
    logs = sorted((DATA / "nccl-logs").rglob("*.log"))
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in logs]
    texts += ["\n".join(EDGES), "\n".join(EDGES) + "\n", "\r\n".join(EDGES), "\n\n"]
    assert sum(len(_nccl_lines(t)) for t in texts) > 300
    for text in texts:
        assert _nccl_lines(text) == NCCL_LINE.findall(text)


def test_a_log_collected_again_holds_the_new_log_alone(tmp_path: Path) -> None:
    """A second `results` writes each log over the first (not truncating it first) and cuts it
    to the new log's length: longer, shorter, empty, or where there was none."""
    path = tmp_path / "rank-0-pod.log"
    for log in (b"first log\n", b"a longer second log\n", b"short\n", b"", b"again\n"):
        with _rewritten(path) as out:
            out.write(log[:3])
            out.write(log[3:])
        assert path.read_bytes() == log
    with _rewritten(tmp_path / "new.log") as out:
        out.write(b"x")
    assert (tmp_path / "new.log").read_bytes() == b"x"


def test_a_log_cut_short_by_an_error_holds_what_arrived(tmp_path: Path) -> None:
    path = tmp_path / "rank-0-pod.log"
    path.write_bytes(b"an old log, longer than what arrives\n")
    with pytest.raises(OSError), _rewritten(path) as out:
        out.write(b"part")
        raise OSError("connection lost")
    assert path.read_bytes() == b"part"
