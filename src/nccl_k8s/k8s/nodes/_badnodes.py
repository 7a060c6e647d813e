"""The bad-node finder's plan and verdicts, pure: which node pairs to test, and what their
bandwidths say about each node.

A 2-node test cannot tell which end is slow, and one slow node taints every pair it is in. So
pass 1 pairs the candidates round-robin (the circle method) for two rounds: every node meets two
different partners, and a healthy node almost always has one healthy partner. A node's pass-1
score is its best pair; the cluster reference is the median of those scores, robust to a third of
the nodes being slow. A node whose best pass-1 pair is below `threshold` x the reference, or whose
every pass-1 test failed, is a suspect. Pass 2 tests each suspect with a known-good node it has
not met yet. A suspect is bad when that test fails, and cleared when it is fine. One slow
retest is not enough: a measurement can be slow for reasons of its moment (other jobs on the
fabric or the hosts, a noisy neighbour), so a suspect whose retest was slow is tested once more
(pass 3) with another known-good node, and is bad only when that test is slow or fails too; a
node that is really slow is slow every time. A pass-1 pair that was slow (or failed) while both of its nodes end up good is a slow link between
two good nodes: reported, neither node flagged. "Slow" in passes 2 and 3 (and for links) is
measured against what one test between two known-good nodes typically gives (the median of the
pass-1 tests whose nodes are both known good), not the all-node median (on a small cluster the
partners of bad nodes pull that one down) and not a best of two (a retest is a single test).

A node's reported score is the median bus bandwidth of the tests it took part in.

A test that could not run at all (its pods were never scheduled: the GPUs were busy) says
nothing about either node: it is `inconclusive`, never a failure; a suspect whose retest could
not run stays `unknown`.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
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
    """The cluster's reference busbw (GB/s): the median pass-1 test between two known-good
    nodes (the median best pair of every node, when none is known good)."""
    threshold: float
    nodes: list[NodeVerdict]
    links: list[SlowLink]

    @property
    def flagged(self) -> list[NodeVerdict]:
        return [n for n in self.nodes if n.verdict != "good"]


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


def _best(node: str, results: Sequence[PairResult]) -> float | None:
    values = [r.busbw for r in results if r.ok and node in (r.a, r.b) and r.busbw is not None]
    return max(values) if values else None


def _typical(good: Sequence[str], pass1: Sequence[PairResult]) -> float | None:
    """What one test between two known-good nodes measures: the median of such pass-1 tests
    (a retest is one test, so it is held to one test's typical figure, not to the best of
    two); the good nodes' best pairs where no two good nodes met."""
    among = [r.busbw for r in pass1 if r.ok and r.a in good and r.b in good and r.busbw]
    return statistics.median(among) if among else reference(good, pass1)


def reference(nodes: Sequence[str], results: Sequence[PairResult]) -> float | None:
    """The median over nodes of their best pass-1 busbw."""
    best = [b for n in nodes if (b := _best(n, [r for r in results if r.pass_no == 1])) is not None]
    return statistics.median(best) if best else None


def suspects(
    nodes: Sequence[str], results: Sequence[PairResult], threshold: float
) -> tuple[list[str], list[str]]:
    """(suspects, known good) after pass 1."""
    pass1 = [r for r in results if r.pass_no == 1]
    ref = reference(nodes, pass1)
    sus = []
    for node in nodes:
        best = _best(node, pass1)
        if best is None or ref is None or best < threshold * ref:
            sus.append(node)
    return sus, [n for n in nodes if n not in sus]


def second_pass(
    suspect_nodes: Sequence[str], good: Sequence[str], met: Sequence[PairResult] = ()
) -> list[tuple[str, str]]:
    """Each suspect with a known-good node, preferring one it has not met; none without any."""
    if not good:
        return []
    pairs = []
    for i, s in enumerate(suspect_nodes):
        seen = {r.a if r.b == s else r.b for r in met if s in (r.a, r.b)}
        fresh = [g for g in good if g not in seen] or list(good)
        pairs.append((s, fresh[i % len(fresh)]))
    return pairs


def _after_pass1(
    nodes: Sequence[str], results: Sequence[PairResult], threshold: float
) -> tuple[list[str], float | None]:
    """The known-good nodes after pass 1, and the reference later tests are held to."""
    pass1 = [r for r in results if r.pass_no == 1]
    _, good = suspects(nodes, pass1, threshold)
    return good, _typical(good, pass1) if good else reference(nodes, pass1)


def confirm_pass(
    nodes: Sequence[str], results: Sequence[PairResult], threshold: float
) -> list[tuple[str, str]]:
    """Pass 3: each suspect whose pass-2 test ran but was slow, with another known-good node
    (one it has not met, where there is one)."""
    good, ref = _after_pass1(nodes, results, threshold)
    if ref is None or not good:
        return []
    floor = threshold * ref
    pairs: list[tuple[str, str]] = []
    for r in results:
        if r.pass_no != 2 or not r.ok or (r.busbw or 0.0) >= floor:
            continue
        seen = {x.a if x.b == r.a else x.b for x in results if r.a in (x.a, x.b)}
        fresh = [g for g in good if g not in seen]
        if fresh:
            pairs.append((r.a, fresh[len(pairs) % len(fresh)]))
    return pairs


def verdicts(nodes: Sequence[str], results: Sequence[PairResult], threshold: float) -> Findings:
    """Every node's verdict from both passes' results."""
    pass1 = [r for r in results if r.pass_no == 1]
    pass2 = [r for r in results if r.pass_no == 2]
    good, ref = _after_pass1(nodes, results, threshold)
    floor = None if ref is None else threshold * ref
    out: list[NodeVerdict] = []
    for node in nodes:
        mine = [r.busbw for r in results if r.ok and node in (r.a, r.b) and r.busbw is not None]
        score = statistics.median(mine) if mine else None
        if node in good:
            out.append(NodeVerdict(node, "good", score, "a pass-1 pair at or above the floor"))
            continue
        checks = [r for r in pass2 if r.a == node]
        if not checks:
            why = "no known-good node to test it against" if not good else "it was not retested"
            out.append(NodeVerdict(node, "unknown", score, why))
            continue
        r = checks[0]
        if r.inconclusive:
            out.append(
                NodeVerdict(
                    node,
                    "unknown",
                    score,
                    f"its test with good node {r.b} could not run: {r.error}",
                )
            )
        elif not r.ok:
            out.append(
                NodeVerdict(node, "bad", score, f"its test with good node {r.b} failed: {r.error}")
            )
        elif floor is not None and (r.busbw or 0.0) < floor:
            slow = f"{r.busbw:.3g} GB/s with good node {r.b}"
            again = next((x for x in results if x.pass_no == 3 and x.a == node), None)
            if again is not None and again.ok and (again.busbw or 0.0) >= floor:
                out.append(
                    NodeVerdict(
                        node,
                        "good",
                        score,
                        f"it tested fine with good node {again.b} ({again.busbw:.3g} GB/s; "
                        f"a first retest measured {slow})",
                    )
                )
                continue
            if again is not None and not again.inconclusive:
                got = (
                    f"{again.busbw:.3g} GB/s with good node {again.b}"
                    if again.ok
                    else f"its test with good node {again.b} failed: {again.error}"
                )
                slow = f"{slow}, then {got}"
            out.append(
                NodeVerdict(
                    node,
                    "bad",
                    score,
                    f"{slow}, below {threshold:g} x the cluster's {ref:.3g} GB/s",
                )
            )
        else:
            out.append(NodeVerdict(node, "good", score, f"it tested fine with good node {r.b}"))
    good_after = {v.node for v in out if v.verdict == "good"}
    links = [
        SlowLink(r.a, r.b, r.busbw, _link_why(r, threshold, ref))
        for r in pass1
        if not r.inconclusive
        and (not r.ok or (floor is not None and (r.busbw or 0.0) < floor))
        and r.a in good_after
        and r.b in good_after
    ]
    return Findings(ref, threshold, out, links)


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
    "NodeVerdict",
    "PairResult",
    "SlowLink",
    "Verdict",
    "confirm_pass",
    "first_pass",
    "reference",
    "second_pass",
    "suspects",
    "verdicts",
]
