"""`nodes check --pairing`: the pair tests planned by the network's topology, and the verdict on
the links between its domains, pure.

A 2-node test across a slow spine link is slow whichever nodes it pairs, so a check that pairs
nodes regardless of where they sit reads a slow link between two blocks as a few slow nodes.
The topology labels (rendering._topology.topology_levels: the platform's entry, or --topology)
put each node in a domain, its finest: the values of those labels it carries, coarse to fine.

- `intra`: the bad-node search (nodes._badnodes: pass 1, the retests, the verdicts) runs inside
  each domain: pass 1 pairs the nodes of each domain with each other, and a retest gives a
  suspect a cleared partner of its own domain, so a slow link cannot taint a node. A node alone
  in its domain has no partner there: the lone nodes are paired with each other (across domains,
  so their verdicts cannot rule out a link; said in the report).
- `auto` (the default): `intra`, then the tests across domains (`cross_rounds`): for every two
  domains, up to CROSS_PER_LINK tests between their good nodes, each pair of nodes distinct; then
  `link_verdicts`: when every test across two domains is slow (below the level's cut, or failed)
  while the nodes at both ends are good (their tests inside their domains hold the level), the
  link between the two domains is slow, with the numbers, and no node is blamed. Tests across
  that are slow while other tests between the same two domains hold the level are slow links
  between two nodes, as `--links` reports them.
- `inter`: the search as without topology (every test counts for its nodes), pass 1 pairing each
  node with one in another domain where it can (nodes in domain order; the circle method pairs
  the first with the last).

With fewer than two domains (no labels, `--topology none`) every pairing is the check without
topology. `matrix` is the domain-by-domain table of the best busbw measured.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Literal

from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.nodes._badnodes import MAX_PASSES, Findings, first_pass, next_round
from nccl_k8s.k8s.nodes._level import Level, PairResult, level

Pairing = Literal["intra", "inter", "auto"]
PAIRINGS: tuple[Pairing, ...] = ("intra", "inter", "auto")
#: Tests across two domains at most: two, between distinct nodes, so that one pair's own cable
#: does not read as the domains' link, and a check of many domains stays one round per pair of them.
CROSS_PER_LINK = 2
#: The domain of the nodes that carry none of the topology labels.
UNLABELLED = "(unlabelled)"
#: The group the nodes alone in their domain are tested in (with each other).
ALONE = "(alone in their domain)"


def domains_of(nodes: Sequence[Obj], keys: Sequence[str]) -> dict[str, str]:
    """node name -> its finest domain: the values of the topology labels it carries, coarse to
    fine, joined by '/' (a node with none of them: UNLABELLED)."""
    out: dict[str, str] = {}
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        values = [str(labels[k]) for k in keys if k in labels]
        out[node["metadata"]["name"]] = "/".join(values) if values else UNLABELLED
    return out


def topology_applies(domain_of: Mapping[str, str], candidates: Sequence[str]) -> bool:
    """Whether the candidates span two domains or more (else pairing changes nothing)."""
    return len({domain_of.get(n, UNLABELLED) for n in candidates}) > 1


def groups(candidates: Sequence[str], domain_of: Mapping[str, str]) -> dict[str, list[str]]:
    """The groups the bad-node search runs in under `intra`: each domain of two candidates or
    more, and the lone nodes together (ALONE), in the candidates' order."""
    by: dict[str, list[str]] = {}
    for n in candidates:
        by.setdefault(domain_of.get(n, UNLABELLED), []).append(n)
    out = {d: ns for d, ns in by.items() if len(ns) > 1}
    alone = [ns[0] for ns in by.values() if len(ns) == 1]
    if alone:
        out[ALONE] = alone
    return out


def intra_plan(
    candidates: Sequence[str],
    results: Sequence[PairResult],
    threshold: float,
    pass_no: int,
    domain_of: Mapping[str, str],
    at_once: int | None = None,
) -> list[tuple[str, str]]:
    """Pass `pass_no`'s round under `intra`: _badnodes.plan run inside each group (the level
    from every group's tests: one fabric, one level); empty when the check is done."""
    if pass_no > MAX_PASSES:
        return []
    pairs: list[tuple[str, str]] = []
    for members in groups(candidates, domain_of).values():
        if pass_no == 1:
            rounds = first_pass(members)
            pairs += rounds[0] if rounds else []
        else:
            pairs += next_round(members, results, threshold, at_once)
    return pairs


def inter_order(candidates: Sequence[str], domain_of: Mapping[str, str]) -> list[str]:
    """The candidates in domain order (stable), so that pass 1's circle method (first with last)
    pairs nodes of different domains."""
    rank = {d: i for i, d in enumerate(dict.fromkeys(domain_of.get(n, "") for n in candidates))}
    return sorted(candidates, key=lambda n: rank[domain_of.get(n, "")])


def cross_rounds(
    good: Sequence[str], domain_of: Mapping[str, str], per_link: int = CROSS_PER_LINK
) -> list[list[tuple[str, str]]]:
    """Rounds of tests across domains among the `good` nodes: the domains paired by the circle
    method (each round's domain pairs disjoint, so its tests share no node), and for two
    domains up to `per_link` tests, their i-th good nodes together."""
    by: dict[str, list[str]] = {}
    for n in good:
        by.setdefault(domain_of.get(n, UNLABELLED), []).append(n)
    names = [d for d in by if d != UNLABELLED]
    out: list[list[tuple[str, str]]] = []
    for rnd in first_pass(names, rounds=len(names)):  # an odd count needs n rounds
        pairs = [p for a, b in rnd for p in list(zip(by[a], by[b], strict=False))[:per_link]]
        if pairs:
            out.append(pairs)
    return out


@dataclasses.dataclass(frozen=True)
class DomainLink:
    """A slow link between two domains: every test across them slow, their nodes good."""

    a: str
    b: str
    busbw: float | None
    """The median busbw (GB/s) of the tests across (failed ones as 0); None when all failed."""
    reference: float
    """The level inside the domains (GB/s), which the tests across fall short of."""
    tests: list[tuple[str, str, float | None]]
    why: str


def link_verdicts(
    intra: Sequence[PairResult],
    cross: Sequence[PairResult],
    findings: Findings,
    domain_of: Mapping[str, str],
    threshold: float,
) -> tuple[list[DomainLink], list[PairResult]]:
    """(the slow links between domains, the slow tests across between two good nodes that no
    domain link explains). Only tests whose two nodes are good count (a bad node explains its
    own tests); a domain link needs two such tests at the least, all slow."""
    lv = level(intra, threshold)
    if findings.reference is None or not lv.confirmed:
        return [], []
    good = {v.node for v in findings.nodes if v.verdict == "good"}
    by: dict[tuple[str, str], list[PairResult]] = {}
    for r in cross:
        if r.inconclusive or r.a not in good or r.b not in good:
            continue
        da, db = domain_of.get(r.a, UNLABELLED), domain_of.get(r.b, UNLABELLED)
        if da == db:
            continue
        key = (da, db) if da <= db else (db, da)
        by.setdefault(key, []).append(r if da <= db else dataclasses.replace(r, a=r.b, b=r.a))
    links: list[DomainLink] = []
    odd: list[PairResult] = []
    for (da, db), tests in sorted(by.items()):
        slow = [r for r in tests if not r.ok or lv.slow(r)]
        if len(tests) >= 2 and len(slow) == len(tests):
            links.append(_domain_link(da, db, tests, findings.reference, lv))
        else:
            odd += slow
    return links, odd


def _domain_link(
    da: str, db: str, tests: Sequence[PairResult], reference: float, lv: Level
) -> DomainLink:
    values = [r.busbw or 0.0 for r in tests]
    median = statistics.median(values) if any(r.ok for r in tests) else None
    each = ", ".join(
        f"{r.a} + {r.b}: {r.busbw:.3g} GB/s"
        if r.ok and r.busbw is not None
        else f"{r.a} + {r.b}: failed"
        for r in tests
    )
    cut = f"{lv.cut:.2g}"
    why = (
        f"slow between {da} and {db}: all {len(tests)} tests across ({each}) below "
        f"{cut} x the {reference:.3g} GB/s the good nodes reach inside their domains; no node "
        f"is to blame (each end holds the level inside its own domain)"
    )
    tests_out = [(r.a, r.b, r.busbw if r.ok else None) for r in tests]
    return DomainLink(da, db, median, reference, tests_out, why)


def matrix(
    results: Sequence[PairResult], domain_of: Mapping[str, str]
) -> tuple[list[str], dict[tuple[str, str], float]]:
    """(the domains in order, (domain, domain) -> the best busbw measured between them), both
    orders of each pair; a pair never measured is absent."""
    names = sorted({domain_of.get(n, UNLABELLED) for r in results for n in (r.a, r.b)})
    best: dict[tuple[str, str], float] = {}
    for r in results:
        if not r.ok or r.busbw is None:
            continue
        da, db = domain_of.get(r.a, UNLABELLED), domain_of.get(r.b, UNLABELLED)
        for key in ((da, db), (db, da)):
            best[key] = max(best.get(key, 0.0), r.busbw)
    return names, best


__all__ = [
    "ALONE",
    "CROSS_PER_LINK",
    "PAIRINGS",
    "UNLABELLED",
    "DomainLink",
    "Pairing",
    "cross_rounds",
    "domains_of",
    "groups",
    "inter_order",
    "intra_plan",
    "link_verdicts",
    "matrix",
    "topology_applies",
]
