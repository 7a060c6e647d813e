"""The bad-node finder's plan and verdicts, pure: which node pairs to test, and what their
bandwidths say about each node.

A 2-node test cannot tell which end is slow, and one slow node taints every pair it is in; but
a slow node only ever lowers a test, so a test that measures well proves both of its nodes.

Rounds. A round is a set of disjoint pairs, all run at once (they share no node). Pass 1 is one
round: the candidates paired off (the circle method's first round; with an odd count one node
waits for pass 2). Each later pass is one round planned from everything measured so far: every
node that is neither cleared nor judged (a suspect) is tested with a distinct cleared node it
has not met (no cleared node is given two tests at once); suspects left over when the cleared
nodes run out are paired with each other (never with a node they met); and, while the level is
not confirmed (below), the test that would confirm it. Nothing left to learn, or MAX_PASSES
reached, ends the check. With a minority of bad nodes this is two passes: pass 1, then one
retest of each suspect, which settles it.

The level: the highest bus bandwidth a set of tests agrees on, the highest fixed point of "the
median of the tests at or above `cut` x it" (slow tests do not pull it down; a lone fast test
sets it only when no other test is within the cut of it, and a level of one test is never
confirmed, below). `cut` is the threshold, widened to the measured noise: with at least
NOISE_MIN_TESTS such tests (8 nodes have about 6 after two passes), their spread less the tests
of the node whose median test is lowest (1.4826 x the median absolute deviation, relative to
their median) is the noise sigma: on a small cluster a slow node's own tests, or a second slow
node's beside them, would otherwise pass for noise. A test flags a node only below `flag` =
min(threshold, 1 - NOISE_Z x sigma) x the level, where noise alone puts a test of two healthy
nodes about once in 4,000 (one such test with a cleared node flags a node: that is the
false-flag rate per retest); so do a node's tests with two or more cleared partners that are
NOISE_Z sigmas down together (Stouffer's sum), each of them less.
The cut is that too, but never below half the threshold: a test under threshold/2 x the level
never clears a node, whatever the noise; between flag and cut a test neither clears nor flags
(the node is `unknown`: within the noise). A slowdown smaller than NOISE_Z sigmas cannot be told
from noise in one test, and the findings say what the noise was (`noise`). The tests at or above
the cut are fine, and their nodes are cleared.
The level is the cluster's reference only when no single node could explain it: its fine tests
must not all share one node (two of them without a node in common, or three in a triangle).
When every fine test included node X, X may be slow and that level its own, with no two healthy
nodes ever measured together: no node is called good (they are `unknown`, the check
inconclusive, naming the test that would settle it), and the next pass asks for such a test.

Verdicts. A cleared node is good. A suspect is bad on a test with a cleared node that was slow
(below the flag, alone or together with its other such tests) or failed (a failed run that
named the cleared node itself as its culprit is not held against the other one), and unknown
without one. Bad verdicts hold even when the level is not confirmed:
the cleared node reached the level, so a test below the cut is the other node's doing, whatever
the true healthy level is. A test that was slow (or failed) while both of its nodes end up good
is a slow link between two good nodes: reported (measured once, unless a later pass happened to
repeat it), neither node flagged.

A node's reported score is the median bus bandwidth of the tests it took part in. A test that
could not run at all (its pods were never scheduled: the GPUs were busy) says nothing about
either node: it is `inconclusive`, never a failure.

Planning and judging are O(T log T) in the number of tests (one sort, then index lookups), so a
4,096-node check plans in milliseconds.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import random
import statistics
from collections import defaultdict
from collections.abc import Collection, Sequence
from typing import Literal

Verdict = Literal["good", "bad", "unknown"]

#: Rounds of pass 1: one partner per node; a suspect's retest is the second.
ROUNDS = 1
#: Passes at most (pass 1 and two retest rounds): the second retest round only runs for what
#: the first left open (a retest that could not run, a partner that turned out not cleared, a
#: level still unconfirmed).
MAX_PASSES = 3
#: A test is slow only this many noise sigmas below the level (see the module docstring).
NOISE_Z = 3.5
#: Fine tests needed before their spread is taken as the noise (see `_spread`); with fewer, a
#: test below the threshold flags a node whatever the noise.
NOISE_MIN_TESTS = 5
#: A test flags a node only below this fraction of the level at the least, whatever the noise.
MIN_FLAG = 0.05
#: The cut never falls below this fraction of the threshold, whatever the noise: a test below
#: it never clears a node.
CUT_FLOOR = 0.5
#: Where the noise is first measured from: the tests within half of the level (a node slowed
#: 2x or more is outside it; the spread of what is inside then sets the cut).
NOISE_WINDOW = 0.5


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
    culprit: str | None = None
    """The node a failed run named as its culprit's, when it named one of the two."""

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
    noise: float | None = None
    """The measured noise sigma, relative to the reference, when NOISE_MIN_TESTS fine tests
    gave one; a cut below the threshold is its doing."""
    cut: float | None = None
    """The fraction of the reference below which a test was called slow."""
    passes: int = 0

    @property
    def flagged(self) -> list[NodeVerdict]:
        return [n for n in self.nodes if n.verdict != "good"]

    @property
    def bad(self) -> list[str]:
        return [n.node for n in self.nodes if n.verdict == "bad"]


@dataclasses.dataclass(frozen=True)
class Level:
    """What the tests so far say the cluster reaches (see the module docstring)."""

    busbw: float | None
    """The highest level a set of tests agrees on (GB/s); None without a measured test."""
    cut: float
    """Tests below cut x busbw are slow: the threshold, or lower where the noise says so."""
    flag: float
    """Tests below flag x busbw flag a node: the cut, or lower (never above it) with noise."""
    noise: float | None
    fine: list[PairResult]
    """The tests at or above cut x busbw: their nodes are cleared."""
    shared: frozenset[str]
    """The nodes every fine test includes: empty when the level is confirmed."""

    @property
    def confirmed(self) -> bool:
        return bool(self.fine) and not self.shared

    @property
    def cleared(self) -> set[str]:
        return {n for r in self.fine for n in (r.a, r.b)}

    def slow(self, r: PairResult) -> bool:
        return self.busbw is not None and (r.busbw or 0.0) < self.cut * self.busbw

    def flags(self, r: PairResult) -> bool:
        return self.busbw is not None and (r.busbw or 0.0) < self.flag * self.busbw


def first_pass(nodes: Sequence[str], rounds: int = ROUNDS) -> list[list[tuple[str, str]]]:
    """Rounds of disjoint pairs by the circle method (node 0 stays, the others rotate): round
    r pairs every node with a partner it met in no earlier round; with an odd count one node
    sits out each round. Pass 1 is its first round."""
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


def _fixed_point(values: list[float], cut: float) -> tuple[float, int]:
    """The highest R with R == median(values >= cut x R), values sorted; and where they start."""
    ref, start = values[-1], len(values)
    while True:
        i = bisect.bisect_left(values, cut * ref)
        if i == start:
            return ref, i
        start, n = i, len(values) - i
        mid = i + n // 2
        ref = values[mid] if n % 2 else (values[mid - 1] + values[mid]) / 2


def _spread(fine: Sequence[PairResult]) -> float | None:
    """The noise sigma of the tests at or above the cut, relative to their median; None when
    they are too few to say. 1.4826 x the median absolute deviation of the tests less those of
    the node whose median test is lowest, when NOISE_MIN_TESTS - 1 or more are left. A slow
    node only lowers its tests, and on a small cluster its two or three are a third of them
    (with a second slow node's, half), enough to widen the spread until they pass for noise.
    Without a slow node, leaving one healthy node out narrows the spread a little; the cut then
    stays nearer the threshold, which is the rule without a noise. On models of 8 and 16 nodes
    with two of them at 0.7 and 3% noise, a spread over all the tests called those two good in
    85% and 12% of the runs; this one, in 17% and 1%."""
    if len(fine) < NOISE_MIN_TESTS:
        return None
    mine = _by_node(fine)
    low = min(mine, key=lambda n: (statistics.median(r.busbw or 0.0 for r in mine[n]), n))
    rest = [r.busbw or 0.0 for r in fine if low not in (r.a, r.b)]
    if len(rest) < NOISE_MIN_TESTS - 1:
        return None
    mid = statistics.median(rest)
    return 1.4826 * statistics.median(abs(v - mid) for v in rest) / mid if mid > 0 else 0.0


def level(results: Sequence[PairResult], threshold: float) -> Level:
    """The level the tests agree on, its cut, its fine tests, and the nodes they all share."""
    ok = [r for r in results if r.ok and r.busbw is not None]
    values = sorted(r.busbw or 0.0 for r in ok)
    if not values:
        return Level(None, threshold, threshold, None, [], frozenset())
    cut, flag, noise = threshold, threshold, None
    ref, start = _fixed_point(values, cut)
    if len(values) >= NOISE_MIN_TESTS:  # the spread first from a wide window, then settled
        cut = min(threshold, NOISE_WINDOW)
        ref, start = _fixed_point(values, cut)
    for _ in range(8):  # cut and noise settle together (a cut too high trims the spread)
        noise = _spread([r for r in ok if (r.busbw or 0.0) >= values[start]])
        if noise is None:
            cut = flag = threshold
            ref, start = _fixed_point(values, cut)
            break
        flag = max(MIN_FLAG, min(threshold, 1.0 - NOISE_Z * noise))
        new = max(CUT_FLOOR * threshold, flag)
        if abs(new - cut) < 1e-3:
            break
        cut = new
        ref, start = _fixed_point(values, cut)
    fine = [r for r in results if r.ok and (r.busbw or 0.0) >= cut * ref]
    shared = {fine[0].a, fine[0].b}
    for r in fine[1:]:
        if not shared:
            break
        shared &= {r.a, r.b}
    return Level(ref, cut, flag, noise, fine, frozenset(shared))


def _by_node(results: Sequence[PairResult]) -> dict[str, list[PairResult]]:
    out: dict[str, list[PairResult]] = defaultdict(list)
    for r in results:
        out[r.a].append(r)
        out[r.b].append(r)
    return out


def _evidence(node: str, mine: Sequence[PairResult], cleared: Collection[str]) -> list[PairResult]:
    """The node's tests with a cleared node that say something about it, in pass order: a
    failed run that named the cleared node as its culprit says nothing about this one."""
    return [
        r
        for r in mine
        if not r.inconclusive and r.other(node) in cleared and (r.ok or r.culprit != r.other(node))
    ]


def suspects(
    nodes: Sequence[str],
    results: Sequence[PairResult],
    threshold: float,
    *,
    lv: Level | None = None,
) -> tuple[list[str], list[str]]:
    """(suspects, cleared): the nodes that still need a test with a cleared node, and the
    cleared ones."""
    lv = lv or level(results, threshold)
    cleared, mine = lv.cleared, _by_node(results)
    sus = [n for n in nodes if n not in cleared and not _evidence(n, mine.get(n, []), cleared)]
    return sus, [n for n in nodes if n in cleared]


def plan(
    nodes: Sequence[str], results: Sequence[PairResult], threshold: float, pass_no: int
) -> list[tuple[str, str]]:
    """Pass `pass_no`'s round: pass 1's pairing, then next_round up to MAX_PASSES; empty when
    the check is done. The runner and benchmarks/badnode_sim.py both plan through this."""
    if pass_no == 1:
        rounds = first_pass(nodes)
        return rounds[0] if rounds else []
    return next_round(nodes, results, threshold) if pass_no <= MAX_PASSES else []


def next_round(
    nodes: Sequence[str], results: Sequence[PairResult], threshold: float
) -> list[tuple[str, str]]:
    """The next round of disjoint pairs (see the module docstring); empty when nothing is left
    to learn."""
    lv = level(results, threshold)
    sus, cleared = suspects(nodes, results, threshold, lv=lv)
    met = {frozenset((r.a, r.b)) for r in results}  # a test that could not run: another partner
    if not lv.confirmed:  # partners outside the shared nodes first: they can confirm it
        cleared = [n for n in cleared if n not in lv.shared] + [
            n for n in cleared if n in lv.shared
        ]
    busy: set[str] = set()
    pairs: list[tuple[str, str]] = []
    left: list[str] = []
    start = 0
    for s in sus:
        j = start
        while j < len(cleared) and (cleared[j] in busy or frozenset((s, cleared[j])) in met):
            j += 1  # skips at most the partners s met, and those taken
        if j == len(cleared):
            left.append(s)
            continue
        pairs.append((s, cleared[j]))
        busy.update((s, cleared[j]))
        while start < len(cleared) and cleared[start] in busy:
            start += 1
    pairs += _among(left, met, busy)
    pairs += confirmation(nodes, results, threshold, busy, lv=lv)
    return pairs


def _among(left: list[str], met: set[frozenset[str]], busy: set[str]) -> list[tuple[str, str]]:
    """Suspects without a cleared partner, paired with each other where they have not met."""
    pairs: list[tuple[str, str]] = []
    free = [s for s in left if s not in busy]
    while free:
        a = free.pop(0)
        b = next((x for x in free if frozenset((a, x)) not in met), None)
        if b is not None:
            free.remove(b)
            pairs.append((a, b))
            busy.update((a, b))
    return pairs


def confirmation(
    nodes: Sequence[str],
    results: Sequence[PairResult],
    threshold: float,
    busy: Collection[str] = (),
    *,
    lv: Level | None = None,
) -> list[tuple[str, str]]:
    """While the level is not confirmed, the test that could confirm it: two cleared nodes
    outside the shared ones that have not been measured together, neither `busy`."""
    lv = lv or level(results, threshold)
    if lv.confirmed or not lv.fine:
        return []
    met = {frozenset((r.a, r.b)) for r in results if not r.inconclusive}
    cleared = lv.cleared
    free = [n for n in nodes if n in cleared and n not in lv.shared and n not in busy]
    for i, a in enumerate(free):
        for b in free[i + 1 :]:
            if frozenset((a, b)) not in met:
                return [(a, b)]
    return []


def link_rounds(
    nodes: Sequence[str], *, sample: int | None = None, seed: int = 0
) -> list[list[tuple[str, str]]]:
    """--links: rounds of disjoint pairs that cover every link among `nodes` (the circle
    method's n-1 rounds), or with `sample` that many rounds of random pairings (each a fresh
    shuffle: about sample x n/2 links)."""
    if sample is None:
        return first_pass(nodes, rounds=max(len(nodes) - 1, 0))
    rng = random.Random(seed)
    out = []
    for _ in range(sample):
        order = list(nodes)
        rng.shuffle(order)
        out.append([(order[i], order[i + 1]) for i in range(0, len(order) - 1, 2)])
    return out


def verdicts(nodes: Sequence[str], results: Sequence[PairResult], threshold: float) -> Findings:
    """Every node's verdict from all passes' results."""
    lv = level(results, threshold)
    cleared, by_node = lv.cleared, _by_node(results)
    fine_ids = {id(r) for r in lv.fine}
    why_not = None if lv.confirmed else _why_inconclusive(nodes, results, lv)
    out: list[NodeVerdict] = []
    for node in nodes:
        mine = by_node.get(node, [])
        got = [r.busbw for r in mine if r.ok and r.busbw is not None]
        score = statistics.median(got) if got else None
        if node not in cleared:
            out.append(_suspect_verdict(node, mine, lv, threshold, score, why_not))
        elif why_not is None:
            out.append(NodeVerdict(node, "good", score, _cleared_why(node, mine, fine_ids)))
        else:
            out.append(NodeVerdict(node, "unknown", score, f"inconclusive: {why_not}"))
    good_after = {v.node for v in out if v.verdict == "good"}
    links = [
        SlowLink(r.a, r.b, r.busbw, _link_why(r, threshold, lv))
        for r in results
        if not r.inconclusive
        and (not r.ok or lv.slow(r))
        and r.a in good_after
        and r.b in good_after
    ]
    passes = max((r.pass_no for r in results), default=0)
    reference = lv.busbw if lv.confirmed else None
    return Findings(reference, threshold, out, links, why_not, lv.noise, lv.cut, passes)


def _cleared_why(node: str, mine: Sequence[PairResult], fine_ids: set[int]) -> str:
    fine = [r for r in mine if id(r) in fine_ids]
    retests = [r for r in mine if r.pass_no >= 2 and r.a == node and not r.inconclusive]
    fine_retest = next((r for r in retests if id(r) in fine_ids), None)
    if fine_retest is None:
        best = max(fine, key=lambda r: r.busbw or 0.0)
        return f"{best.busbw:.3g} GB/s with node {best.other(node)}, at or above the cut"
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
    """A node of no fine test: bad on a slow or failed test with a cleared node, unknown
    without one."""
    evidence = _evidence(node, mine, lv.cleared)
    if not evidence:
        if why_not is not None:
            return NodeVerdict(node, "unknown", score, f"inconclusive: {why_not}")
        tried = next((r for r in reversed(mine) if r.inconclusive), None)
        if tried is not None:
            why = f"its test with {tried.other(node)} could not run: {tried.error}"
        elif lv.cleared:
            why = "no test with a cleared node (rerun the check)"
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
    ref = f"{lv.busbw or 0.0:.3g} GB/s"
    if not any(not r.ok or lv.flags(r) for r in evidence) and _combined_z(evidence, lv) < NOISE_Z:
        why = (
            f"{', then '.join(parts)}: below {lv.cut:.2g} x {of} {ref}, but within the "
            f"measured noise ({lv.noise or 0.0:.0%}) of it: rerun the check to settle it"
        )
        return NodeVerdict(node, "unknown", score, why)
    why = f"{', then '.join(parts)}, below {_cut_text(lv, threshold)} x {of} {ref}"
    return NodeVerdict(node, "bad", score, why)


def _combined_z(evidence: Sequence[PairResult], lv: Level) -> float:
    """How far below the level a node's measured tests with cleared partners are together, in
    noise sigmas: Stouffer's sum (each partner's sigmas, over the root of the partner count; a
    partner met twice counts once, with its mean). 0 without a measured noise or with fewer than
    two partners. Two partners' tests 2.5 sigmas down each are 3.5 together: as unlikely from a
    healthy node as one test 3.5 down."""
    if not lv.noise or lv.busbw is None:
        return 0.0
    per: dict[frozenset[str], list[float]] = defaultdict(list)
    for r in evidence:
        if r.ok and r.busbw is not None:
            per[frozenset((r.a, r.b))].append((1.0 - r.busbw / lv.busbw) / lv.noise)
    if len(per) < 2:
        return 0.0
    return sum(statistics.fmean(z) for z in per.values()) / math.sqrt(len(per))


def _cut_text(lv: Level, threshold: float) -> str:
    if lv.flag >= threshold or lv.noise is None:
        return f"{threshold:g}"
    return f"{lv.flag:.2g} (the threshold {threshold:g}, widened to the noise of {lv.noise:.0%})"


def _why_inconclusive(nodes: Sequence[str], results: Sequence[PairResult], lv: Level) -> str:
    """Why no node can be called good, naming the test (or the nodes) that would settle it."""
    if lv.busbw is None:
        return "no known-good node: no test measured a bus bandwidth (rerun once the nodes run)"
    at = f"{lv.busbw:.3g} GB/s"
    order = {n: i for i, n in enumerate(nodes)}
    shared = sorted(lv.shared, key=lambda n: order.get(n, 0))
    cleared = lv.cleared
    met = {frozenset((r.a, r.b)) for r in results if not r.inconclusive}
    if len(shared) == 2:
        a, b = shared
        others = [n for n in nodes if n not in cleared]
        return (
            f"no known-good node: the only test at the best level measured ({at}) was {a} + "
            f"{b}, and one slow node could explain it; a third node that tests as fast with one "
            f"of them would settle it ({_rerun(others, (a, b), met)})"
        )
    hub = shared[0]
    others = [n for n in nodes if n in cleared and n != hub]
    untried = [
        f"{a} + {b}"
        for i, a in enumerate(others)
        for b in others[i + 1 : i + 3]
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


def _rerun(others: Sequence[str], pair: tuple[str, str], met: set[frozenset[str]]) -> str:
    tries = [f"{o} + {p}" for o in others for p in pair if frozenset((o, p)) not in met]
    return f"a test of {' or '.join(tries[:3])}" if tries else "rerun with more nodes"


def _link_why(r: PairResult, threshold: float, lv: Level) -> str:
    if not r.ok:
        return f"the test between two good nodes failed: {r.error}"
    return (
        f"{r.busbw:.3g} GB/s between two good nodes, below {_cut_text(lv, threshold)} x the "
        f"cluster's {lv.busbw or 0.0:.3g} GB/s"
    )


__all__ = [
    "MAX_PASSES",
    "ROUNDS",
    "Findings",
    "Level",
    "NodeVerdict",
    "PairResult",
    "SlowLink",
    "Verdict",
    "confirmation",
    "first_pass",
    "level",
    "link_rounds",
    "next_round",
    "plan",
    "suspects",
    "verdicts",
]
