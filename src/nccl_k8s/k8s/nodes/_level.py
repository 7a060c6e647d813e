"""The level the bad-node finder judges tests against (pure): the highest bus bandwidth a set
of 2-node tests agrees on, its cut, and the noise measured around it.

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

A round's own level. A retest round also tests pairs of nodes cleared in earlier passes
(controls, planned by _badnodes.controls); where two or more of them agree on a level (the same
fixed point, over the round's controls), that round's tests are judged against it, not against
the cluster's level measured minutes earlier: whatever moved every test since (the hosts' load,
the fabric's) would otherwise look like the doing of the suspect beside a good partner. On the
test cluster (8 nodes on 2 shared cores) a retest of two good nodes measured 0.85-0.9 of pass 1's
level, twice, and the threshold of 0.9 flagged it; its round's other tests had moved alike. The
suspect's own retests are never controls, so a slow node cannot set the level it is judged by.
The cluster's level is then that of the passes without one of their own (pass 1's), and the
nodes pass 1 cleared are those within the cut of pass 1's own level: a round that measured more
than pass 1 throughout would otherwise raise the level above pass 1's healthy tests.
"""

from __future__ import annotations

import bisect
import dataclasses
import statistics
from collections import defaultdict
from collections.abc import Sequence
from statistics import NormalDist

from nccl_k8s.errors import RunFailed

#: A test is slow only this many noise sigmas below the level (see the module docstring).
NOISE_Z = 3.5
#: Healthy nodes one check may call bad on noise alone, expected, over all the nodes it judges:
#: the sigmas a test must be below the level grow with their count (`judged_z`), so a check of
#: 4,096 nodes is no likelier to drain a healthy one than a check of 8 (about once in 10,000
#: checks, where the noise is Gaussian).
FALSE_BAD = 0.0001
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


def failed_test(a: str, b: str, failure: RunFailed, pass_no: int) -> PairResult:
    """The result of a pair test whose run failed: inconclusive when no scheduler placed its
    pods (its reason says so: neither node is to blame), else a failure naming the culprit's
    node when it is one of the two. Its error is the failure's headline, without what the
    deploy then did to end the run."""
    return PairResult(
        a,
        b,
        None,
        error=failure.headline,
        pass_no=pass_no,
        inconclusive=failure.reason.unplaced,
        culprit=failure.node if failure.node in (a, b) else None,
    )


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
    rounds: dict[int, float] = dataclasses.field(default_factory=dict)
    """Pass -> the level its own controls measured (GB/s), for the passes that had them."""

    @property
    def confirmed(self) -> bool:
        return bool(self.fine) and not self.shared

    @property
    def cleared(self) -> set[str]:
        return {n for r in self.fine for n in (r.a, r.b)}

    def at(self, r: PairResult) -> float | None:
        """The level `r` is judged against: its round's own, or the cluster's."""
        return self.rounds.get(r.pass_no, self.busbw)

    def slow(self, r: PairResult) -> bool:
        at = self.at(r)
        return at is not None and (r.busbw or 0.0) < self.cut * at

    def flags(self, r: PairResult) -> bool:
        at = self.at(r)
        return at is not None and (r.busbw or 0.0) < self.flag * at


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
    mine = by_node(fine)
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
    rounds = _round_levels(ok, ref, cut)
    if rounds:  # the cluster's level from the passes judged against it
        ref = _fixed_point(sorted(r.busbw or 0.0 for r in ok if r.pass_no not in rounds), cut)[0]
    fine = [r for r in ok if (r.busbw or 0.0) >= cut * rounds.get(r.pass_no, ref)]
    return Level(ref, cut, flag, noise, fine, _shared(fine), rounds)


def _shared(fine: Sequence[PairResult]) -> frozenset[str]:
    """The nodes every one of the tests includes (none when two share no node)."""
    shared = {fine[0].a, fine[0].b} if fine else set()
    for r in fine[1:]:
        if not shared:
            break
        shared &= {r.a, r.b}
    return frozenset(shared)


def _round_levels(ok: Sequence[PairResult], ref: float, cut: float) -> dict[int, float]:
    """Pass -> the level of its controls (its tests of two nodes cleared in earlier passes),
    where two or more of them agree on one (see the module docstring). The nodes pass 1
    cleared are those of its tests within the cut of its own level (where no single node could
    explain that level; else of `ref`, all passes' level): a later round that measured more
    than pass 1 throughout must not take pass 1's healthy tests for slow ones."""
    out: dict[int, float] = {}
    cleared: set[str] = set()
    passes = sorted({r.pass_no for r in ok})
    for p in passes:
        mine = [r for r in ok if r.pass_no == p]
        at = ref
        if p == passes[0]:
            own, _ = _fixed_point(sorted(r.busbw or 0.0 for r in mine), cut)
            if not _shared([r for r in mine if (r.busbw or 0.0) >= cut * own]):
                at = own
        else:
            controls = sorted(r.busbw or 0.0 for r in mine if r.a in cleared and r.b in cleared)
            if len(controls) >= 2:
                level_p, start = _fixed_point(controls, cut)
                if len(controls) - start >= 2:
                    at = out[p] = level_p
        cleared.update(n for r in mine if (r.busbw or 0.0) >= cut * at for n in (r.a, r.b))
    return out


def judged_z(count: int) -> float:
    """The noise sigmas below the level that call a node bad when `count` nodes are judged:
    a one-sided Gaussian tail of FALSE_BAD / count (Bonferroni), never below NOISE_Z: 3.7 for
    one node judged, 4.3 for 10, 4.9 for 200. A fixed 3.5 called 3 healthy nodes bad in
    benchmarks/badnode_sim.py's 72 runs of 1% and 5% bad nodes at 5-20% noise; this, none."""
    return max(NOISE_Z, -NormalDist().inv_cdf(FALSE_BAD / max(count, 1)))


def judged_flag(lv: Level, threshold: float, z: float) -> float:
    """The fraction of the level below which one test calls a node bad at `z` sigmas: the
    threshold, widened to z x the measured noise (never below MIN_FLAG)."""
    if lv.noise is None:
        return lv.flag
    return max(MIN_FLAG, min(threshold, 1.0 - z * lv.noise))


def by_node(results: Sequence[PairResult]) -> dict[str, list[PairResult]]:
    out: dict[str, list[PairResult]] = defaultdict(list)
    for r in results:
        out[r.a].append(r)
        out[r.b].append(r)
    return out


__all__ = [
    "CUT_FLOOR",
    "FALSE_BAD",
    "MIN_FLAG",
    "NOISE_MIN_TESTS",
    "NOISE_WINDOW",
    "NOISE_Z",
    "Level",
    "PairResult",
    "by_node",
    "failed_test",
    "judged_flag",
    "judged_z",
    "level",
]
