"""The bad-node finder's plan and verdicts, pure: which node pairs to test, and what their
bandwidths say about each node.

A 2-node test cannot tell which end is slow, and one slow node taints every pair it is in; but
a slow node only ever lowers a test, so a test that measures well proves both of its nodes. So
pass 1 pairs the candidates round-robin (the circle method) for two rounds: every node meets two
different partners, and a healthy node almost always has one healthy partner.

The level: the highest bus bandwidth that a set of tests agrees on, the highest fixed point of
"the median of the tests at or above `threshold` x it" (a lone fast outlier does not set it;
noise, which only ever lowers a measurement, does not pull it down). The tests at or above that
floor are fine, and their nodes are cleared. The level is the cluster's reference only when no
single node could explain it: its fine tests must not all share one node (two of them without a
node in common, or three in a triangle). When every fine test included node X, X may be slow and
that level its own, with no two healthy nodes ever measured together: no node is called good
(they are `unknown`, the check inconclusive, naming the tests that would settle it), and the
planner asks for such a test in the next pass.

A node that is not cleared is a suspect. Pass 2 tests each suspect with a cleared node it has
not met yet. A suspect whose test with a cleared node failed is bad. One slow retest is not
enough: a measurement can be slow for reasons of its moment (other jobs on the fabric or the
hosts), so a suspect whose only retest was slow is tested once more (pass 3) with another cleared
node, and is bad when that is slow or fails too (a node that is really slow is slow every time);
fine there, it is cleared. Slow and failed verdicts hold even when the level is not confirmed:
a cleared node reached that level, so a test of it below the floor is the other node's doing,
whatever the true healthy level is. A test that was slow (or failed) while both of its nodes end
up good is a slow link between two good nodes: reported, neither node flagged.

A node's reported score is the median bus bandwidth of the tests it took part in.

A test that could not run at all (its pods were never scheduled: the GPUs were busy) says
nothing about either node: it is `inconclusive`, never a failure; a suspect whose retest could
not run stays `unknown`.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Collection, Sequence
from typing import Literal

Verdict = Literal["good", "bad", "unknown"]

#: Pass-1 rounds: two partners per node (see the module docstring).
ROUNDS = 2


@dataclasses.dataclass(frozen=True)
class PairResult:
    """One 2-node test: its bus bandwidth (GB/s), or why it failed."""

    a: str
    b: str
    busbw: float | None
    error: str | None = None
    pass_no: int = 1
    inconclusive: bool = False
    """The test never ran (not scheduled): neither node is to blame for `error`."""

    @property
    def ok(self) -> bool:
        return self.error is None and self.busbw is not None and not self.inconclusive

    def other(self, node: str) -> str:
        return self.b if node == self.a else self.a


@dataclasses.dataclass(frozen=True)
class NodeVerdict:
    node: str
    verdict: Verdict
    score: float | None
    """Median busbw (GB/s) of the tests the node took part in; None when all failed."""
    why: str


@dataclasses.dataclass(frozen=True)
class SlowLink:
    a: str
    b: str
    busbw: float | None
    why: str


@dataclasses.dataclass(frozen=True)
class Findings:
    reference: float | None
    """The cluster's reference busbw (GB/s): the level of the fine tests, when no single node
    could explain it; None when the check is inconclusive."""
    threshold: float
    nodes: list[NodeVerdict]
    links: list[SlowLink]
    inconclusive: str | None = None
    """Why no node could be called good, and which test would settle it; None otherwise."""

    @property
    def flagged(self) -> list[NodeVerdict]:
        return [n for n in self.nodes if n.verdict != "good"]


@dataclasses.dataclass(frozen=True)
class Level:
    """What the tests so far say the cluster reaches (see the module docstring)."""

    busbw: float | None
    """The highest level a set of tests agrees on (GB/s); None without a measured test."""
    fine: list[PairResult]
    """The tests at or above threshold x busbw: their nodes are cleared."""
    shared: frozenset[str]
    """The nodes every fine test includes: empty when the level is confirmed."""

    @property
    def confirmed(self) -> bool:
        return bool(self.fine) and not self.shared

    @property
    def cleared(self) -> set[str]:
        return {n for r in self.fine for n in (r.a, r.b)}


def first_pass(nodes: Sequence[str], rounds: int = ROUNDS) -> list[list[tuple[str, str]]]:
    """Pass 1 as rounds of disjoint pairs (the circle method: node 0 stays, the others rotate);
    with an odd count one node sits out each round. Pairs within a round run at once."""
    ring: list[str | None] = list(nodes)
    if len(ring) % 2:
        ring.append(None)
    n = len(ring)
    out: list[list[tuple[str, str]]] = []
    for _ in range(min(rounds, max(n - 1, 0))):
        pairs = []
        for i in range(n // 2):
            a, b = ring[i], ring[n - 1 - i]
            if a is not None and b is not None:
                pairs.append((a, b))
        out.append(pairs)
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return out


def level(results: Sequence[PairResult], threshold: float) -> Level:
    """The level the tests agree on, its fine tests, and the nodes they all share."""
    values = sorted(r.busbw for r in results if r.ok and r.busbw is not None)
    if not values:
        return Level(None, [], frozenset())
    ref, count = values[-1], 0
    while True:
        above = [v for v in values if v >= threshold * ref]
        if len(above) == count:
            break  # the same set as last time: its median is the fixed point
        count, ref = len(above), statistics.median(above)
    fine = [r for r in results if r.ok and (r.busbw or 0.0) >= threshold * ref]
    shared = {fine[0].a, fine[0].b}
    for r in fine[1:]:
        shared &= {r.a, r.b}
    return Level(ref, fine, frozenset(shared))


def suspects(
    nodes: Sequence[str], results: Sequence[PairResult], threshold: float
) -> tuple[list[str], list[str]]:
    """(suspects, cleared): the nodes of no fine test, and those of one."""
    cleared = level(results, threshold).cleared
    return [n for n in nodes if n not in cleared], [n for n in nodes if n in cleared]


def second_pass(
    suspect_nodes: Sequence[str], good: Sequence[str], met: Sequence[PairResult] = ()
) -> list[tuple[str, str]]:
    """Each suspect with a cleared node, preferring one it has not met; none without any."""
    if not good:
        return []
    pairs = []
    for i, s in enumerate(suspect_nodes):
        seen = {r.other(s) for r in met if s in (r.a, r.b)}
        fresh = [g for g in good if g not in seen] or list(good)
        pairs.append((s, fresh[i % len(fresh)]))
    return pairs


def confirmation(
    nodes: Sequence[str],
    results: Sequence[PairResult],
    threshold: float,
    busy: Collection[str] = (),
) -> list[tuple[str, str]]:
    """While the level is not confirmed, the test that could confirm it: two cleared nodes
    outside the shared ones that have not been measured together, neither `busy`."""
    lv = level(results, threshold)
    if lv.confirmed or not lv.fine:
        return []
    met = {frozenset((r.a, r.b)) for r in results if not r.inconclusive}
    free = [n for n in nodes if n in lv.cleared and n not in lv.shared and n not in busy]
    for i, a in enumerate(free):
        for b in free[i + 1 :]:
            if frozenset((a, b)) not in met:
                return [(a, b)]
    return []


def confirm_pass(
    nodes: Sequence[str], results: Sequence[PairResult], threshold: float
) -> list[tuple[str, str]]:
    """Pass 3: each suspect whose only retest ran but was slow, with another cleared node (one
    it has not met, where there is one)."""
    lv = level(results, threshold)
    if lv.busbw is None:
        return []
    floor, cleared = threshold * lv.busbw, lv.cleared
    good = [n for n in nodes if n in cleared]
    pairs: list[tuple[str, str]] = []
    for node in nodes:
        if node in cleared:
            continue
        retests = [r for r in results if r.pass_no >= 2 and r.a == node and not r.inconclusive]
        if len(retests) != 1 or not retests[0].ok or (retests[0].busbw or 0.0) >= floor:
            continue
        seen = {r.other(node) for r in results if node in (r.a, r.b)}
        fresh = [g for g in good if g not in seen]
        if fresh:
            pairs.append((node, fresh[len(pairs) % len(fresh)]))
    return pairs


def verdicts(nodes: Sequence[str], results: Sequence[PairResult], threshold: float) -> Findings:
    """Every node's verdict from all passes' results."""
    lv = level(results, threshold)
    cleared = lv.cleared
    why_not = None if lv.confirmed else _why_inconclusive(nodes, results, lv)
    out: list[NodeVerdict] = []
    for node in nodes:
        mine = [r for r in results if node in (r.a, r.b)]
        got = [r.busbw for r in mine if r.ok and r.busbw is not None]
        score = statistics.median(got) if got else None
        if node in cleared:
            if why_not is None:
                out.append(NodeVerdict(node, "good", score, _cleared_why(node, mine, lv)))
            else:
                out.append(NodeVerdict(node, "unknown", score, f"inconclusive: {why_not}"))
            continue
        out.append(_suspect_verdict(node, mine, lv, threshold, score, why_not))
    good_after = {v.node for v in out if v.verdict == "good"}
    floor = None if lv.busbw is None else threshold * lv.busbw
    links = [
        SlowLink(r.a, r.b, r.busbw, _link_why(r, threshold, lv.busbw))
        for r in results
        if not r.inconclusive
        and (not r.ok or (floor is not None and (r.busbw or 0.0) < floor))
        and r.a in good_after
        and r.b in good_after
    ]
    return Findings(lv.busbw if lv.confirmed else None, threshold, out, links, why_not)


def _cleared_why(node: str, mine: Sequence[PairResult], lv: Level) -> str:
    floor_tests = [r for r in lv.fine if node in (r.a, r.b)]
    retests = [r for r in mine if r.pass_no >= 2 and r.a == node and not r.inconclusive]
    fine_retest = next((r for r in retests if r in floor_tests), None)
    if fine_retest is None:
        best = max(floor_tests, key=lambda r: r.busbw or 0.0)
        return f"{best.busbw:.3g} GB/s with node {best.other(node)}, at or above the floor"
    why = f"it tested fine with good node {fine_retest.b}"
    before = retests[: retests.index(fine_retest)]
    if before and before[0].ok:
        why += (
            f" ({fine_retest.busbw:.3g} GB/s; a first retest measured {before[0].busbw:.3g} "
            f"GB/s with good node {before[0].b})"
        )
    return why


def _suspect_verdict(
    node: str,
    mine: Sequence[PairResult],
    lv: Level,
    threshold: float,
    score: float | None,
    why_not: str | None,
) -> NodeVerdict:
    """A node of no fine test: bad on a slow or failed test with a cleared node (its retests
    first), unknown without one."""
    cleared = lv.cleared
    with_good = [r for r in mine if not r.inconclusive and r.other(node) in cleared]
    retests = [r for r in with_good if r.pass_no >= 2 and r.a == node]
    evidence = retests or with_good
    if not evidence:
        if why_not is not None:
            return NodeVerdict(node, "unknown", score, f"inconclusive: {why_not}")
        tried = next((r for r in mine if r.inconclusive and r.a == node and r.pass_no >= 2), None)
        if tried is not None:
            why = f"its test with good node {tried.b} could not run: {tried.error}"
        elif cleared:
            why = "it was not retested"
        else:
            why = "no known-good node to test it against"
        return NodeVerdict(node, "unknown", score, why)
    # "good node" only where the level is confirmed; otherwise the partner reached the level.
    partner = "good node" if why_not is None else "node"
    first = evidence[0]
    if not first.ok:
        why = f"its test with {partner} {first.other(node)} failed: {first.error}"
        return NodeVerdict(node, "bad", score, why)
    parts = [
        f"{r.busbw:.3g} GB/s with {partner} {r.other(node)}"
        if r.ok
        else f"its test with {partner} {r.other(node)} failed: {r.error}"
        for r in evidence
    ]
    of = "the cluster's" if why_not is None else "the best level measured,"
    why = f"{', then '.join(parts)}, below {threshold:g} x {of} {lv.busbw or 0.0:.3g} GB/s"
    return NodeVerdict(node, "bad", score, why)


def _why_inconclusive(nodes: Sequence[str], results: Sequence[PairResult], lv: Level) -> str:
    """Why no node can be called good, naming the test (or the nodes) that would settle it."""
    if lv.busbw is None:
        return "no known-good node: no test measured a bus bandwidth (rerun once the nodes run)"
    at = f"{lv.busbw:.3g} GB/s"
    shared = sorted(lv.shared, key=list(nodes).index)
    if len(shared) == 2:
        a, b = shared
        return (
            f"no known-good node: the only test at the best level measured ({at}) was {a} + "
            f"{b}, and one slow node could explain it; a third node that tests as fast with one "
            "of them would settle it (rerun with more nodes)"
        )
    hub = shared[0]
    met = {frozenset((r.a, r.b)) for r in results if not r.inconclusive}
    others = [n for n in nodes if n in lv.cleared and n != hub]
    untried = [
        f"{a} + {b}"
        for i, a in enumerate(others)
        for b in others[i + 1 :]
        if frozenset((a, b)) not in met
    ]
    rerun = (
        f"a test of {' or '.join(untried[:3])} would settle it"
        if untried
        else f"no two of {', '.join(others)} ran together without failing: rerun the check"
    )
    return (
        f"no known-good node: every test at the best level measured ({at}) included {hub}, "
        f"so that level may be {hub}'s own, and no two other nodes were measured together at "
        f"it; {rerun}"
    )


def _link_why(r: PairResult, threshold: float, ref: float | None) -> str:
    if not r.ok:
        return f"the test between two good nodes failed: {r.error}"
    return (
        f"{r.busbw:.3g} GB/s between two good nodes, below {threshold:g} x the cluster's "
        f"{ref or 0.0:.3g} GB/s"
    )


__all__ = [
    "ROUNDS",
    "Findings",
    "Level",
    "NodeVerdict",
    "PairResult",
    "SlowLink",
    "Verdict",
    "confirm_pass",
    "confirmation",
    "first_pass",
    "level",
    "second_pass",
    "suspects",
    "verdicts",
]
