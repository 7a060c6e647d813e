"""The bad-node finder's plan and verdicts, pure: which node pairs to test, and what their
bandwidths say about each node.

A 2-node test cannot tell which end is slow, and one slow node taints every pair it is in; but
a slow node only ever lowers a test, so a test that measures well proves both of its nodes.

Rounds. A round is a set of disjoint pairs, all run at once (they share no node). Pass 1 is one
round: the candidates paired off (the circle method's first round; with an odd count one node
waits for pass 2). Each later pass is one round planned from everything measured so far: every
node that is neither cleared nor judged (a suspect) is tested with a distinct cleared node it
has not met (no cleared node is given two tests at once); suspects left over when the cleared
nodes run out are paired with each other (never with a node they met); while the level is not
confirmed (below), the test that would confirm it; and controls, tests of idle cleared nodes
that measure the round's own level (`controls`, nodes._level). Nothing left to learn, or MAX_PASSES
reached, ends the check. With a minority of bad nodes this is two passes: pass 1, then one
retest of each suspect, which settles it.

The level (nodes._level): the highest bus bandwidth a set of tests agrees on, its cut and
the noise; the nodes of the tests at or above the cut are cleared.

Verdicts (the evidence rules: nodes._evidence). A cleared node is good once the level is
confirmed. A node is bad only with evidence against it alone: a failed test that named it, a slow
(or failed) test with a good partner, or slow tests with two different partners each slow in no
other test. A slow test whose partner is neither good nor bad makes both nodes `suspect` (while
the level is not confirmed no node is good, so that is every slow test). A node with tests with
good partners slow only within the noise is `unknown`, and retested once more while passes are
left: a second such test adds to the first. A test that was slow (or failed) while both of its
nodes end up good is a slow link between two good nodes: reported (measured once, unless a later
pass happened to repeat it), neither node flagged.

A node's reported score is the median bus bandwidth of the tests it took part in. A test that
could not run at all (its pods were never scheduled: the GPUs were busy) says nothing about
either node: it is `inconclusive`, never a failure.

Planning and judging are O(T log T) in the number of tests (one sort, then index lookups), so a
4,096-node check plans in milliseconds.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
from collections.abc import Collection, Sequence
from typing import Literal

from nccl_k8s.k8s.nodes._evidence import Evidence, cut_text, own, part, tested_with
from nccl_k8s.k8s.nodes._level import (
    Level,
    PairResult,
    by_node,
    level,
)

Verdict = Literal["good", "bad", "suspect", "unknown"]
#: The verdicts that are written to a node (--label, --taint): the others are open.
DECIDED: tuple[Verdict, ...] = ("good", "bad")

#: Rounds of pass 1: one partner per node; a suspect's retest is the second.
ROUNDS = 1
#: Passes at most (pass 1 and two retest rounds): the second retest round only runs for what
#: the first left open (a retest that could not run, a partner that turned out not cleared, a
#: level still unconfirmed).
MAX_PASSES = 3


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
    ran: str = ""
    """How many tests the check ran, and why (see _ran)."""
    flag: float | None = None
    """The fraction of the reference below which one test with a good node called a node bad:
    the threshold, widened to `z` x the noise (nodes._evidence)."""
    z: float | None = None
    """The noise sigmas below the reference that called a node bad (nodes._level.judged_z)."""

    @property
    def flagged(self) -> list[NodeVerdict]:
        return [n for n in self.nodes if n.verdict != "good"]

    @property
    def good(self) -> list[str]:
        """The nodes called good: the ends of the tests across domains and of --links."""
        return [n.node for n in self.nodes if n.verdict == "good"]

    @property
    def bad(self) -> list[str]:
        return [n.node for n in self.nodes if n.verdict == "bad"]


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


def suspects(
    nodes: Sequence[str],
    results: Sequence[PairResult],
    threshold: float,
    *,
    lv: Level | None = None,
) -> tuple[list[str], list[str]]:
    """(suspects, cleared): the nodes that still need a test with a cleared node (none yet,
    or only tests with good nodes that were slow within the noise: another such test adds to
    them, _combined_z), and the cleared ones."""
    lv = lv or level(results, threshold)
    cleared, mine = lv.cleared, by_node(results)
    ev = Evidence(lv, mine, threshold, None) if lv.confirmed else None
    sus = [
        n
        for n in nodes
        if n not in cleared
        and (
            not tested_with(n, mine.get(n, []), cleared)
            or (ev is not None and ev.within_noise(n, mine.get(n, [])))
        )
    ]
    return sus, [n for n in nodes if n in cleared]


def plan(
    nodes: Sequence[str],
    results: Sequence[PairResult],
    threshold: float,
    pass_no: int,
    at_once: int | None = None,
) -> list[tuple[str, str]]:
    """Pass `pass_no`'s round: pass 1's pairing, then next_round up to MAX_PASSES; empty when
    the check is done. The runner and benchmarks/badnode_sim.py both plan through this."""
    if pass_no == 1:
        rounds = first_pass(nodes)
        return rounds[0] if rounds else []
    return next_round(nodes, results, threshold, at_once) if pass_no <= MAX_PASSES else []


def next_round(
    nodes: Sequence[str],
    results: Sequence[PairResult],
    threshold: float,
    at_once: int | None = None,
) -> list[tuple[str, str]]:
    """The next round of disjoint pairs (see the module docstring); empty when nothing is left
    to learn. `at_once`: the tests the runner runs at once (None: all), which the round's
    controls never outgrow into another wave."""
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
    room = max(2, len(pairs))
    if at_once is not None:
        room = min(room, -len(pairs) % at_once)  # what the last wave has free
    if pairs and room >= 2:
        pairs += controls(nodes, results, lv, {n for p in pairs for n in p}, room)
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
    return _unmet(free, met, 1)


def controls(
    nodes: Sequence[str],
    results: Sequence[PairResult],
    lv: Level,
    busy: Collection[str],
    count: int,
) -> list[tuple[str, str]]:
    """A retest round's controls: up to `count` tests of cleared nodes the round leaves idle,
    which measure the round's own level (nodes._level). next_round asks for as many as the
    round has other tests (two at the least) or, when the runner caps the tests at once, for
    what fills the round's last wave: they run beside the retests and cost no pass and no
    wave; on a real cluster, only nodes that would wait anyway."""
    met = {frozenset((r.a, r.b)) for r in results if not r.inconclusive}
    cleared = lv.cleared
    free = [n for n in nodes if n in cleared and n not in busy]
    return _unmet(free, met, count)


def _unmet(
    free: Sequence[str], met: Collection[frozenset[str]], count: int
) -> list[tuple[str, str]]:
    """Up to `count` disjoint pairs of `free` nodes that have not met, in their order."""
    pairs: list[tuple[str, str]] = []
    taken: set[str] = set()
    for i, a in enumerate(free):
        if len(pairs) == count:
            break
        if a in taken:
            continue
        b = next(
            (b for b in free[i + 1 :] if b not in taken and frozenset((a, b)) not in met), None
        )
        if b is not None:
            pairs.append((a, b))
            taken.update((a, b))
    return pairs


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
    """Every node's verdict from all passes' results (the evidence rules: module docstring)."""
    lv = level(results, threshold)
    cleared, tests_of = lv.cleared, by_node(results)
    fine_ids = {id(r) for r in lv.fine}
    why_not = None if lv.confirmed else _why_inconclusive(nodes, results, lv)
    ev = Evidence(lv, tests_of, threshold, why_not)
    out: list[NodeVerdict] = []
    for node in nodes:
        mine = tests_of.get(node, [])
        got = [r.busbw for r in mine if r.ok and r.busbw is not None]
        score = statistics.median(got) if got else None
        if node in ev.good:
            out.append(NodeVerdict(node, "good", score, _cleared_why(node, mine, fine_ids)))
        elif node in ev.bad:
            out.append(NodeVerdict(node, "bad", score, ev.bad[node]))
        elif (low := ev.unexplained(node)) is not None:
            out.append(NodeVerdict(node, "suspect", score, ev.suspect_why(node, low)))
        elif node in cleared:
            out.append(NodeVerdict(node, "unknown", score, f"inconclusive: {why_not}"))
        else:
            out.append(_unknown_verdict(node, mine, lv, score, why_not))
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
    z = ev.z if lv.noise is not None else None
    ran = _ran(results, lv)
    return Findings(
        reference, threshold, out, links, why_not, lv.noise, lv.cut, passes, ran, ev.flag, z
    )


def _ran(results: Sequence[PairResult], lv: Level) -> str:
    """How many tests the check ran, and why: pass 1 pairs the nodes off, later passes retest
    what was open (a suspect with a cleared node) or measure a round's level between cleared
    nodes (controls, the test that confirms the level)."""
    if not results:
        return "no tests"
    passes = max(r.pass_no for r in results)
    first = sum(1 for r in results if r.pass_no == 1)
    said = [f"{first} in pass 1 pairing the nodes off"]
    fine = {id(r) for r in lv.fine}
    before = {n for r in results if r.pass_no == 1 and id(r) in fine for n in (r.a, r.b)}
    retests = between = 0
    for p in range(2, passes + 1):
        mine = [r for r in results if r.pass_no == p]
        both = sum(1 for r in mine if r.a in before and r.b in before)
        between += both
        retests += len(mine) - both
        before |= {n for r in mine if id(r) in fine for n in (r.a, r.b)}
    if retests:
        said.append(f"{retests} retests of open nodes with cleared ones")
    if between:
        said.append(f"{between} between cleared nodes (controls, or confirming the level)")
    return f"{len(results)} tests in {passes} passes: {', '.join(said)}"


def _unknown_verdict(
    node: str,
    mine: Sequence[PairResult],
    lv: Level,
    score: float | None,
    why_not: str | None,
) -> NodeVerdict:
    """A node with no verdict: tests with good nodes within the noise, a slow test explained
    by a bad partner, or no test that says anything."""
    evidence = tested_with(node, mine, lv.cleared) if why_not is None else []
    if evidence and all(r.ok for r in evidence):
        parts = [part(r, node, "good node") for r in evidence]
        of = f"{lv.busbw or 0.0:.3g} GB/s{own(evidence, lv)}"
        why = (
            f"{', then '.join(parts)}: below {lv.cut:.2g} x the cluster's {of}, but within the "
            f"measured noise ({lv.noise or 0.0:.0%}) of it: rerun the check to settle it"
        )
        return NodeVerdict(node, "unknown", score, why)
    tried = next((r for r in reversed(mine) if r.inconclusive), None)
    if why_not is not None:
        why = f"inconclusive: {why_not}"
    elif tried is not None:
        why = f"its test with {tried.other(node)} could not run: {tried.error}"
    elif any(not r.inconclusive for r in mine):
        why = "its slow tests were with nodes found bad: rerun the check"
    elif lv.cleared:
        why = "no test with a cleared node (rerun the check)"
    else:
        why = "no known-good node to test it against"
    return NodeVerdict(node, "unknown", score, why)


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
        f"{r.busbw:.3g} GB/s between two good nodes, below {cut_text(lv, threshold)} x the "
        f"cluster's {lv.busbw or 0.0:.3g} GB/s{own([r], lv)}"
    )


__all__ = [
    "DECIDED",
    "MAX_PASSES",
    "ROUNDS",
    "Findings",
    "Level",
    "NodeVerdict",
    "PairResult",
    "SlowLink",
    "Verdict",
    "confirmation",
    "controls",
    "first_pass",
    "level",
    "link_rounds",
    "next_round",
    "plan",
    "suspects",
    "verdicts",
]
