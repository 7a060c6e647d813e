"""How `results` reads a pod's log (k8s.run._collect): what it keeps and how it writes."""

from __future__ import annotations

import os
import re
from pathlib import Path

from nccl_k8s.k8s.run._collect import _fresh, _nccl_lines

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


def test_a_log_collected_again_is_a_new_file(tmp_path: Path) -> None:
    """A second `results` writes each log as a new file, not over the old one's blocks: a hard
    link to the first still holds the first log."""
    path = tmp_path / "rank-0-pod.log"
    path.write_bytes(b"first log\n")
    os.link(path, tmp_path / "kept")
    with _fresh(path) as out:
        out.write(b"second\n")
    assert path.read_bytes() == b"second\n"
    assert (tmp_path / "kept").read_bytes() == b"first log\n"
    with _fresh(tmp_path / "new.log") as out:  # none there before
        out.write(b"x")
    assert (tmp_path / "new.log").read_bytes() == b"x"
