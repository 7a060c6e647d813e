"""The bad-node finder's evidence rules (pure; nodes._badnodes' verdicts and plan read them).

A node is bad only with evidence against that node itself: (1) a failed test that named it as
its culprit; (2) a test with a partner shown good (a cleared node, the level confirmed) that was
slow: below `flag` x the level, alone, or its tests with two or more good partners `z` sigmas
down together (Stouffer's sum); or (3) slow in tests with two different partners, each slow in
no other test and not bad, while the level is confirmed by tests without it. A slow test (or a
failed one that named no culprit) whose partner is neither good nor bad says only that one of
its two nodes is slow: both are `suspect`, never one bad and one unknown.

`z` grows with the nodes judged (nodes._level.judged_z: FALSE_BAD healthy nodes called bad per
check, expected, by noise alone), so a check of 4,096 nodes drains a healthy one no more often
than a check of 8; a node slow within that is `unknown` and retested (nodes._badnodes.suspects)
with another good node, whose test adds to its first.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Collection, Sequence

from nccl_k8s.k8s.nodes._level import Level, PairResult, judged_flag, judged_z


def tested_with(
    node: str, mine: Sequence[PairResult], cleared: Collection[str]
) -> list[PairResult]:
    """The node's tests with a cleared node that say something about it, in pass order: a
    failed run that named the cleared node as its culprit says nothing about this one."""
    return [
        r
        for r in mine
        if not r.inconclusive and r.other(node) in cleared and (r.ok or r.culprit != r.other(node))
    ]


def _low(r: PairResult, node: str, lv: Level) -> bool:
    """The test is evidence that `node` or its partner is slow: it failed without naming the
    partner (nor this node: a named culprit is judged on its own), or it measured below the
    flag."""
    if r.inconclusive:
        return False
    if not r.ok:
        return r.culprit is None
    return lv.flags(r)


class Evidence:
    """The evidence rules over one set of results: who is good, who is bad and why, and
    which slow tests no verdict explains (their nodes are suspects)."""

    def __init__(
        self,
        lv: Level,
        tests_of: dict[str, list[PairResult]],
        threshold: float,
        why_not: str | None,
    ) -> None:
        self.lv, self.tests_of, self.threshold, self.why_not = lv, tests_of, threshold, why_not
        self.good: set[str] = set(lv.cleared) if why_not is None else set()
        # The nodes the noise could call bad: not good, with a measured test. A node whose
        # every test failed is judged by the runs' culprits (rule 1), never by the noise, so
        # it widens no one's z (a crashing node does not make its neighbours' verdicts harder).
        judged = sum(
            1 for n, mine in tests_of.items() if n not in self.good and any(r.ok for r in mine)
        )
        self.z = judged_z(judged)
        self.flag = judged_flag(lv, threshold, self.z)
        """A test below flag x its level calls a node bad: z noise sigmas, z for the count
        of nodes judged (nodes._level.judged_z)."""
        self.bad: dict[str, str] = {}
        for node, mine in tests_of.items():
            if node not in self.good and (why := self._own_evidence(node, mine)) is not None:
                self.bad[node] = why
        for node, mine in tests_of.items():  # rule 3 once rules 1-2 are known
            if (
                node not in self.good
                and node not in self.bad
                and ((why := self._twice_slow(node, mine)) is not None)
            ):
                self.bad[node] = why

    def flags(self, r: PairResult) -> bool:
        """The test is below the flag that calls a node bad (its round's level)."""
        at = self.lv.at(r)
        return at is not None and (r.busbw or 0.0) < self.flag * at

    def within_noise(self, node: str, mine: Sequence[PairResult]) -> bool:
        """Neither good nor bad, with tests with good nodes that all measured within the
        noise: another test with a good node would add to them."""
        if node in self.good or node in self.bad:
            return False
        evidence = tested_with(node, mine, self.good)
        return bool(evidence) and all(r.ok for r in evidence)

    def _own_evidence(self, node: str, mine: Sequence[PairResult]) -> str | None:
        """Rules 1 and 2: the named culprit of a failed test; or slow (alone, or its slow
        tests together) with a partner shown good."""
        evidence = tested_with(node, mine, self.good)
        named = next(
            (r for r in mine if r.culprit == node and r.error and not r.inconclusive), None
        )
        if not evidence:
            if named is None:
                return None
            return f"its test with {named.other(node)} failed, naming it: {named.error}"
        lv = self.lv
        first = evidence[0]
        if not first.ok:
            return f"its test with good node {first.other(node)} failed: {first.error}"
        if (
            not any(not r.ok or self.flags(r) for r in evidence)
            and _combined_z(evidence, lv) < self.z
        ):
            return None  # within the noise: unknown (_unknown_verdict says it)
        parts = [part(r, node, "good node") for r in evidence]
        ref = f"{lv.busbw or 0.0:.3g} GB/s{own(evidence, lv)}"
        cut = cut_text(lv, self.threshold, self.flag)
        return f"{', then '.join(parts)}, below {cut} x the cluster's {ref}"

    def _twice_slow(self, node: str, mine: Sequence[PairResult]) -> str | None:
        """Rule 3: slow in tests with two different partners, each slow in no other test and
        not bad, while the level is confirmed by tests without this node."""
        if self.why_not is not None:
            return None
        lows = [r for r in mine if _low(r, node, self.lv) and (not r.ok or self.flags(r))]
        alone = [
            r
            for r in lows
            if r.other(node) not in self.bad
            and all(
                t is r or not _low(t, r.other(node), self.lv)
                for t in self.tests_of.get(r.other(node), [])
            )
        ]
        if len({r.other(node) for r in alone}) < 2:
            return None
        parts = [part(r, node, "node") for r in alone]
        return (
            f"{', then '.join(parts)}: slow with {len({r.other(node) for r in alone})} "
            f"different partners (slow in no other test), below {cut_text(self.lv, self.threshold, self.flag)}"
            f" x the cluster's {self.lv.busbw or 0.0:.3g} GB/s"
        )

    def unexplained(self, node: str) -> list[PairResult] | None:
        """The node's slow tests that no good or bad verdict explains: a partner that is
        neither good nor bad (an unconfirmed partner); None when it has none."""
        lows = [
            r
            for r in self.tests_of.get(node, [])
            if _low(r, node, self.lv)
            and r.other(node) not in self.good
            and r.other(node) not in self.bad
        ]
        return lows or None

    def suspect_why(self, node: str, lows: Sequence[PairResult]) -> str:
        parts = [part(r, node, "node") for r in lows]
        partners = ", ".join(dict.fromkeys(r.other(node) for r in lows))
        return (
            f"{', then '.join(parts)}: slow, but {partners} is not shown good, so either node "
            f"could be the slow one (both are suspect; a test of each with a good node settles it)"
        )


def part(r: PairResult, node: str, partner: str) -> str:
    if r.ok:
        return f"{r.busbw:.3g} GB/s with {partner} {r.other(node)}"
    return f"its test with {partner} {r.other(node)} failed: {r.error}"


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
            per[frozenset((r.a, r.b))].append((1.0 - r.busbw / (lv.at(r) or 1.0)) / lv.noise)
    if len(per) < 2:
        return 0.0
    return sum(statistics.fmean(z) for z in per.values()) / math.sqrt(len(per))


def cut_text(lv: Level, threshold: float, flag: float | None = None) -> str:
    flag = lv.flag if flag is None else flag
    if flag >= threshold or lv.noise is None:
        return f"{threshold:g}"
    return f"{flag:.2g} (the threshold {threshold:g}, widened to the noise of {lv.noise:.0%})"


def own(tests: Sequence[PairResult], lv: Level) -> str:
    """The round levels the tests were judged against, where their rounds measured one."""
    own = sorted({r.pass_no for r in tests if r.ok and r.pass_no in lv.rounds})
    said = [f"pass {p}'s own: {lv.rounds[p]:.3g} GB/s" for p in own]
    return f" ({', '.join(said)})" if said else ""


__all__ = ["Evidence", "cut_text", "own", "part", "tested_with"]
