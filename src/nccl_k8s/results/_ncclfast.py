"""The NCCL log reader's fast paths (`nccllog`): what lets it read a run of thousands of pods.

- `PLAIN`: lines in NCCL's own form, found by one regex over a whole log instead of a search per
  line; `nccllog._PREFIX`'s reading of them is what they give, and the lines it might read
  otherwise are left to it.
- `TIMESTAMP_CLUE`: a log without it holds no timestamp, and is not searched for one.
- `LineInterest`: which lines the diagnosis rules read, so that the reader keeps only those.
- `CONNECTION`: a connection line in NCCL's own form (most lines of a large run's log), read by
  one expression instead of `PLAIN` and then `nccllog._CHAN`; every other line is left to those.
- `via_parts`: a connection's transport, read once per distinct `via`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

# A line as NCCL prints it (`host:pid:tid [dev] NCCL INFO|WARN msg`, nothing before it): what
# `_PREFIX` reads from it, for the lines where it cannot read anything else. No source location
# may come between `[dev]` and the level, nor anything `_PREFIX` could take for one (`:NN` then
# a level word before a bracket); no character that ends a line for str.splitlines inside it.
_SEP = r"\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
PLAIN = re.compile(
    rf"^(?P<line>(?P<host>[^\s:\[\]]+):(?P<pid>\d+):\d+ \[(?P<dev>\d+)\]"
    rf"(?![^\[\]{_SEP}]*?:\d+(?: \([^(){_SEP}]*\))? (?:NCCL )?(?:INFO|WARN|ABORT|TRACE))"
    rf" NCCL (?P<level>INFO|WARN)[^\S{_SEP}]?(?P<msg>[^{_SEP}]*))(?:\r?\n|\Z)",
    re.MULTILINE,
)
# A connection line as NCCL prints it (`host:pid:tid [dev] NCCL INFO Channel 02/0 : 0[0] -> 1[1]
# [send] via NET/IB/0/GDRDMA`, or the older forms `nccllog._CHAN` reads), only where PLAIN and
# _CHAN would read the same: groups host, pid, dev, channel, source, destination, direction, via
# as they give them. Its via holds no `:` (so nothing in the line can be PLAIN's source location,
# whose lookahead it then need not repeat) and no `|` (a paste's repeat, which `nccllog` cuts),
# and starts and ends with a character `str.strip` keeps (the via _CHAN reads from the stripped
# message); any other line is not matched, and is read the ordinary way.
_IN_LINE = rf"[^\S{_SEP}]"
_VIA_END = rf"[^\s|:{_SEP}]"
CONNECTION = re.compile(
    rf"^([^\s:\[\]]+):(\d+):\d+ \[(\d+)\] NCCL INFO{_IN_LINE}*(?:Channel|Ring) (\d+)(?:/\d+)? : "
    rf"(\d+)(?:\[[0-9a-fx]+\])? -> (\d+)(?:\[[0-9a-fx]+\])? (?:\[(send|receive)\] )?"
    rf"via ({_VIA_END}(?:[^|:{_SEP}]*{_VIA_END})?){_IN_LINE}*(?:\r?\n|\Z)",
    re.MULTILINE,
)
# CONNECTION for a text of ASCII alone without the characters \x1c-\x1f: on such a text it
# finds the same lines and groups (re.ASCII changes what \s and \d match only beyond ASCII and
# for those four, which str counts as whitespace) about a third faster, as no class looks up
# a character's Unicode category. `connection_pattern` picks.
_CONNECTION_ASCII = re.compile(CONNECTION.pattern, re.MULTILINE | re.ASCII)


def connection_pattern(text: str) -> re.Pattern[str]:
    """CONNECTION, or its ASCII twin where `text` lets it find the same (isascii is O(1))."""
    if text.isascii() and not any(c in text for c in "\x1c\x1d\x1e\x1f"):
        return _CONNECTION_ASCII
    return CONNECTION


# What every TIMESTAMP holds, from a literal on: searched far faster than TIMESTAMP itself.
TIMESTAMP_CLUE = re.compile(r"-\d\d-\d\d[T ]\d\d:\d\d:\d\d")
_VIA_NET = re.compile(r"^NET/(?P<net>[^/]+)/(?P<dev>\d+)(?:\((?P<proxy>\d+)\))?(?P<flags>.*)$")


def _always(text: str) -> bool:
    return True


def _either(a: Callable[[str], bool], b: Callable[[str], bool]) -> Callable[[str], bool]:
    return lambda text: a(text) or b(text)


@dataclass(frozen=True)
class LineInterest:
    """Which lines a reader of `ParsedLog.lines` needs (each diagnosis rule declares its own):
    a parser given one keeps only those, so that a run of thousands of pods is not held line
    by line. Lines placed on a process are kept when one of `patterns` is found in them; lines
    placed on none, all of them when `unplaced`.

    `clue` is a cheap test of a whole log that is true whenever a line of it may match a
    pattern (a necessary condition: literal words, no backtracking); most logs fail it, and
    then no line of theirs is searched."""

    unplaced: bool = False
    patterns: tuple[re.Pattern[str], ...] = ()
    clue: Callable[[str], bool] = _always

    def __or__(self, other: LineInterest) -> LineInterest:
        a, b = self, other
        clue = b.clue if not a.patterns else a.clue if not b.patterns else _either(a.clue, b.clue)
        return LineInterest(a.unplaced or b.unplaced, (*a.patterns, *b.patterns), clue)

    def notable(self, text: str) -> bool:
        """Whether a placed line of `text` may be kept."""
        return bool(self.patterns) and self.clue(text)

    def wants(self, line: str) -> bool:
        """Whether to keep a placed line (of a notable text). The clue first: it holds for a
        line that may match, as for a text (a line is a text of one line), and is a few
        substring tests where the patterns are searches; on a real pod log whose text is
        notable, most lines fail it (training-on-eks_p4d: the reader 2x faster)."""
        return self.clue(line) and any(p.search(line) for p in self.patterns)


@functools.lru_cache(maxsize=4096)
def via_parts(via: str) -> tuple[str, int | None, bool | None]:
    """What a connection's `via` says: its transport, NET device, and GPUDirect RDMA (None: not
    an RDMA NET). A log holds few distinct ones, printed once per channel and peer: each is
    read once."""
    if n := _VIA_NET.match(via):
        net = n.group("net")
        # GPUDirect RDMA is a property of RDMA NICs, not of TCP
        gdr = None if net == "Socket" else "/GDRDMA" in n.group("flags")
        return f"NET/{net}", int(n.group("dev")), gdr
    if via.startswith("P2P/"):
        return f"P2P/{via[4:].split('/')[0]}", None, None
    if via.startswith("SHM/") or via == "direct shared memory":
        return "SHM", None, None
    return via.split("/")[0], None, None


__all__ = [
    "CONNECTION",
    "PLAIN",
    "TIMESTAMP_CLUE",
    "LineInterest",
    "connection_pattern",
    "via_parts",
]
