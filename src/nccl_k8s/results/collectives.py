"""What nccl-tests' collectives print, and which collective a table came from.

An nccl-tests output does not always name its collective: versions before 2.14 print no
"Collective test starting" line, launchers strip or rename files, users paste tables alone. The
table itself still says a lot, because each collective has a fixed signature in nccl-tests'
source (src/<op>.cu, 2.19.6): whether its redop column names a reduction (sendrecv prints one
although it reduces nothing), whether its root column is >= 0, whether its count is per rank
(size / element size / world size), its busbw / algbw (the bus factor at n ranks), and whether
its in-place #wrong is checked or N/A (`reportErrors = in_place ? 0 : 1`). For the collectives
the engine runs those facts are their entries in the engine's registry (bench.collectives), read
here; `NCCL_TESTS_ONLY` holds the signatures of the ones only nccl-tests runs.

`identify_op` combines that evidence and says how it decided, including when two collectives fit
equally (all_reduce and sendrecv at two ranks without a data check, gather and scatter always).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from nccl_k8s.bench.collectives import COLLECTIVES as ENGINE_COLLECTIVES
from nccl_k8s.bench.collectives import Collective as EngineCollective
from nccl_k8s.bench.collectives import Op
from nccl_k8s.bench.dtypes import DTYPE_ALIASES, DTYPES
from nccl_k8s.results.schema import Row

#: A collective nccl-tests has: the engine's, and those only nccl-tests runs (none now).
Collective: TypeAlias = Op


@dataclass(frozen=True)
class Facts:
    """One collective's signature in an nccl-tests table."""

    reduces: bool
    """The redop column names a reduction (sendrecv's too, though it reduces nothing)."""
    rooted: bool
    per_rank_count: bool
    """The printed count is per rank (size / element size / world size)."""
    bus_factor: Callable[[int], float]
    checks_in_place: bool = True

    @classmethod
    def of(cls, c: EngineCollective) -> Facts:
        """The signature of a collective the engine runs: its registry entry, read here."""
        return cls(c.prints_redop, c.rooted, c.split, c.bus_factor, c.inplace_checked)


#: Collectives the engine does not run, as nccl-tests 2.19.6's src/<op>.cu prints them.
NCCL_TESTS_ONLY: dict[Collective, Facts] = {}
FACTS: dict[Collective, Facts] = {
    **{op: Facts.of(c) for op, c in ENGINE_COLLECTIVES.items()},
    **NCCL_TESTS_ONLY,
}
_MORE_COMMON: tuple[Collective, ...] = ("all_reduce", "all_gather", "reduce_scatter", "alltoall")
#: In order of preference when the evidence cannot separate two: the more common tests first,
#: then the engine's order, then the collectives only nccl-tests runs.
COLLECTIVES: tuple[Collective, ...] = (
    *_MORE_COMMON,
    *(op for op in FACTS if op not in _MORE_COMMON),
)

#: Bytes per element of the type names nccl-tests prints: the engine's names, the spellings of
#: other versions (NCCL 1's "char"/"int", "float32"...).
DTYPE_BYTES: dict[str, int] = {
    **{str(name): size for name, size in DTYPES.items()},
    **{alias: DTYPES[name] for alias, name in DTYPE_ALIASES.items()},
}

_FIRST_FIVE = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")

# Longest names first so that "reduce_scatter" wins over "reduce", "all_gather" over "gather".
_NAMES = "|".join(sorted(COLLECTIVES, key=len, reverse=True))
_NAME = re.compile(rf"(?<![a-z])(?P<op>{_NAMES})(?![a-z])", re.IGNORECASE)
_PERF_NAME = re.compile(rf"(?<![a-z])(?P<op>{_NAMES})_perf(?:_mpi)?(?![a-z])", re.IGNORECASE)


def op_in_file_name(name: str) -> Collective | None:
    """The collective a file name carries anywhere: all_reduce_perf_2nodes.log,
    nccl_all_reduce_perf.log, reduce_scatter.txt. None when it names none or several."""
    return _single({m.group("op").lower() for m in _NAME.finditer(name)})


def op_in_command(line: str) -> Collective | None:
    """The collective a command line or a banner names as `<op>_perf` (mpirun ... all_reduce_perf,
    `===begin all_gather_perf test===`). None when it names none or several."""
    return _single({m.group("op").lower() for m in _PERF_NAME.finditer(line)})


# Each collective as prose writes it: "all_reduce", "All Reduce", "AllReduce", "all-to-all",
# "Scatter"; longest first, so that "reduce_scatter" is not read as "scatter".
_SEP = r"[ _-]?"
_WORDS = {op: _SEP.join(op.replace("alltoall", "all_to_all").split("_")) for op in COLLECTIVES}
_WORD = re.compile(
    "|".join(
        f"(?<![a-z])(?P<{op}>{w}(?:_perf)?)(?![a-z])"
        for op, w in sorted(_WORDS.items(), key=lambda kv: -len(kv[1]))
    ),
    re.IGNORECASE,
)


def ops_in_words(line: str) -> list[Collective]:
    """Every collective a line names, as `<op>_perf` or in words ("A Scatter performance test",
    "alltoall result"), in order, each once."""
    found: list[Collective] = []
    for m in _WORD.finditer(line):
        op = next(o for o in COLLECTIVES if m.group(o))
        if op not in found:
            found.append(op)
    return found


def _single(found: set[str]) -> Collective | None:
    if len(found) != 1:
        return None
    name = found.pop()
    for op in COLLECTIVES:
        if op == name:
            return op
    return None


@dataclass
class Identification:
    """Which collective a table is, and the evidence, in words a user can check."""

    op: Collective | None
    detail: str
    #: World size implied by the per-rank count, when the table shows one.
    world_from_count: int | None = None
    #: The other collectives the table fits equally, when `op` was only the likelier one.
    also: list[Collective] = field(default_factory=list)


def _count_ratio(rows: Sequence[Row]) -> int | None:
    """size / (element size x count), when it is one integer for every row that has a count."""
    ratios: set[float] = set()
    for r in rows:
        elt = DTYPE_BYTES.get(r.dtype or "")
        if not elt or not r.count or r.size_bytes <= 0:
            continue
        ratios.add(r.size_bytes / (elt * r.count))
    if len(ratios) != 1:
        return None
    k = ratios.pop()
    return int(k) if k == int(k) and k >= 1 else None


def _bus_ratio(rows: Sequence[Row]) -> float | None:
    """busbw / algbw of the out-of-place rows where two printed decimals make it precise."""
    outs = [r for r in rows if r.placement == "out" and r.algbw > 0]
    for floor in (1.0, 0.1):
        good = [r.busbw / r.algbw for r in outs if r.algbw >= floor]
        if len(good) >= 1:
            return statistics.median(good)
    return None


def _checked(row: Row) -> bool:
    return row.wrong is not None or row.max_error is not None


def _fits(ratio: float, factor: float) -> bool:
    return abs(ratio - factor) <= 0.03 * max(factor, 1.0)


class _Narrowing:
    """The collectives a table still fits, and the evidence that ruled the others out."""

    def __init__(self) -> None:
        self.cands: list[Collective] = list(COLLECTIVES)
        self.said: list[str] = []

    def keep(self, why: str, pred: Callable[[Collective], bool]) -> None:
        """Keep the candidates the evidence fits; evidence that would rule out all is ignored."""
        left = [op for op in self.cands if pred(op)]
        if left:
            self.cands = left
            self.said.append(why)

    def columns(self, rows: Sequence[Row], *, has_redop: bool, has_root: bool) -> None:
        """The redop and root columns: whether they exist and what they hold."""
        redops = {r.redop for r in rows if r.redop}
        blank = has_redop and not redops
        if not (has_redop and has_root) and not blank:
            # Before 2.11 each collective printed its own columns, and only these five existed.
            self.keep("pre-2.11 columns", lambda op: op in _FIRST_FIVE)
        if has_redop and redops:
            reduces = redops != {"none"}
            self.keep(f"redop {'/'.join(sorted(redops))}", lambda op: FACTS[op].reduces == reduces)
        elif blank:
            # nccl-tests 2.8-2.10 printed one header for all and an empty redop where none applies.
            self.keep("redop left blank", lambda op: not FACTS[op].reduces)
        elif not has_redop:
            # No redop column meant a data-moving collective (all_gather, broadcast).
            self.keep("no redop column", lambda op: not FACTS[op].reduces)
        roots = {r.root for r in rows if r.root is not None}
        if has_root and roots:
            rooted = any(x >= 0 for x in roots)
            shown = "/".join(str(x) for x in sorted(roots))
            self.keep(f"root {shown}", lambda op: FACTS[op].rooted == rooted)
        elif not has_root:
            self.keep("no root column", lambda op: not FACTS[op].rooted)

    def count(self, rows: Sequence[Row], world_size: int | None) -> int | None:
        """The count column against the size; the world size it implies, when it does."""
        k = _count_ratio(rows)
        if k is not None and k > 1:
            self.keep(f"count = size/{k} elements' bytes", lambda op: FACTS[op].per_rank_count)
            if all(FACTS[op].per_rank_count for op in self.cands):
                return k
        elif k == 1 and world_size != 1:
            self.keep("count = size / element size", lambda op: not FACTS[op].per_rank_count)
        return None

    def checks(self, rows: Sequence[Row]) -> None:
        """Whether in-place results are checked. Only the #wrong era prints N/A for an
        unchecked one; older tables printed an error there too (an alltoall's "1e+00")."""
        outs_checked = [r for r in rows if r.placement == "out" and r.wrong is not None]
        ins = [r for r in rows if r.placement == "in" and r.max_error is None]
        if outs_checked and ins:
            in_checked = any(_checked(r) for r in ins)
            why = "in-place results checked" if in_checked else "in-place results not checked (N/A)"
            self.keep(why, lambda op: FACTS[op].checks_in_place == in_checked)

    def bus(self, rows: Sequence[Row], n: int | None) -> None:
        """busbw / algbw against each collective's bus factor at n ranks."""
        ratio = _bus_ratio(rows)
        if ratio is not None and n:
            why = f"busbw/algbw {ratio:.2f} at {n} rank{'s' if n != 1 else ''}"
            self.keep(why, lambda op: _fits(ratio, FACTS[op].bus_factor(n)))
        elif ratio is not None and ratio > 0:
            # World size unknown: still, a ratio no rank count gives rules a collective out
            # (above 1 only all_reduce's 2(n-1)/n reaches).
            self.keep(
                f"busbw/algbw {ratio:.2f}",
                lambda op: any(_fits(ratio, FACTS[op].bus_factor(k)) for k in range(2, 4097)),
            )


def identify_op(
    rows: Sequence[Row], *, has_redop: bool, has_root: bool, world_size: int | None
) -> Identification:
    """Decide the collective of one table from its own rows (see the module docstring)."""
    found = _Narrowing()
    found.columns(rows, has_redop=has_redop, has_root=has_root)
    world_from_count = found.count(rows, world_size)
    found.checks(rows)
    found.bus(rows, world_size or world_from_count)

    cands, evidence = found.cands, ", ".join(found.said) or "no evidence"
    if len(cands) == 1:
        return Identification(cands[0], f"from the table: {evidence}", world_from_count)
    if len(cands) == len(COLLECTIVES):
        return Identification(None, "the table does not tell", world_from_count)
    chosen = cands[0]
    others = ", ".join(cands[1:])
    return Identification(
        chosen,
        f"from the table: {evidence}; also fits {others}, assumed {chosen} "
        "(keep the command line or name the file <op>_perf.* to be sure)",
        world_from_count,
        cands[1:],
    )


__all__ = [
    "COLLECTIVES",
    "DTYPE_BYTES",
    "FACTS",
    "Collective",
    "Facts",
    "Identification",
    "identify_op",
    "op_in_command",
    "op_in_file_name",
    "ops_in_words",
]
