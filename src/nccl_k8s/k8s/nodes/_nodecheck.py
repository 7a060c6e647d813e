"""`nodes check`: find the bad nodes by 2-node tests. The plan and the verdicts are
nodes._badnodes' (pure); this module runs the tests and writes the verdicts to the nodes.

Each test is a real run of the deploy flags given, with 2 pods pinned to its two nodes (node
affinity on metadata.name, RunSpec.node_names): `deploy` follows it to its end (a failed run is
ended and named as any deploy's), `collect` reads its results into runs/<run-id>/ (each rank's
node named), `cleanup` removes it. Its score is the highest bus bandwidth it reached in its first
collective: the plateau of the large sizes, and robust to noise, which only ever lowers a
measurement. A test whose pods could not be scheduled is inconclusive, not a failure of either
node. A round's pairs share no node, so the cluster can place them all: by default they run
all at once; `parallel` caps that (a test box whose "nodes" share CPUs needs it: different nodes
do not share what they measure, its "nodes" do). The whole check is one event loop over one
client: every test is a task composing the async cores of deploy, collect and cleanup (no
thread per test). A test holds up to STREAMS_PER_TEST of the client's connections at once, so
before the first round the client's pool is widened to carry the largest round (or `parallel`
tests), bounded only by the files this process may open (_capacity); a round larger than what
it carries runs in waves, said before it starts.

`pairing` (--pairing, nodes._domains): by the topology labels (the platform's, or --topology),
pass 1 pairs the nodes inside their finest domain and every retest stays there (intra, auto);
then (auto) tests across the domains among the good nodes tell a slow link between two domains
from a slow node. Only tests inside a domain judge a node; tests across judge the links.

`links` (--links): after the verdicts, rounds that cover every link among the good nodes (or a
random sample of such rounds), for a slow link between two good nodes; their cost is said
before they start.

Candidates: the nodes (of `selector`, or the --node list) where a pod of the run would fit
(preflight._nodefit: GPUs, RDMA resources, --node-selector, taints, cpu and memory).

`idle_only`, `within_s`, `max_nodes` (scheduled checks) test only the due candidates (nodes._due).

`--label` writes the verdict, its time, busbw and run id (nodes._labels) on the nodes with a
verdict and adds the check to the namespace's history (nodes._history); `--taint` puts
`nccl-k8s/bad-node=true:NoSchedule` on bad nodes and takes it off nodes found good. Nothing else
of a node is touched (a taint list is written back with its other taints as they were, guarded
by the node's resourceVersion); `dry_run` only says what would be done.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from nccl_k8s.errors import (
    ClusterError,
    NotFound,
    ResultsError,
    RunFailed,
    UsageError,
)
from nccl_k8s.k8s.api._client import ClientSettings, KubeClient
from nccl_k8s.k8s.api._sync import run_sync
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.nodes._badnodes import (
    Findings,
    PairResult,
    SlowLink,
    level,
    link_rounds,
    plan,
    verdicts,
)
from nccl_k8s.k8s.nodes._capacity import ProgressFn, capacity
from nccl_k8s.k8s.nodes._checked import NodesChecked, PairTest, Topology
from nccl_k8s.k8s.nodes._domains import (
    PAIRINGS,
    cross_rounds,
    domains_of,
    groups,
    inter_order,
    intra_plan,
    link_verdicts,
    topology_applies,
)
from nccl_k8s.k8s.nodes._due import due_async
from nccl_k8s.k8s.nodes._floor import cluster_floor, pair_floor
from nccl_k8s.k8s.nodes._history import record_check
from nccl_k8s.k8s.nodes._labels import CHECKED_AT_KEY, LABEL_KEY, TAINT, TAINT_KEY
from nccl_k8s.k8s.nodes._level import failed_test
from nccl_k8s.k8s.nodes._pairspec import pair_test_port, pair_test_spec
from nccl_k8s.k8s.preflight._nodefit import place
from nccl_k8s.k8s.preflight._platforms import resolve_async
from nccl_k8s.k8s.rendering._topology import topology_levels
from nccl_k8s.k8s.run._cleanup import cleanup_async
from nccl_k8s.k8s.run._collect import collect_async
from nccl_k8s.k8s.run._deploy import deploy_async
from nccl_k8s.k8s.run._plumbing import bounded
from nccl_k8s.k8s.run._settings import WaitSettings
from nccl_k8s.k8s.run._status import require_namespace_async
from nccl_k8s.results.floors import with_floor
from nccl_k8s.spec import RUN_ID_MAX_LEN, RunSpec

#: The label every pair test's objects carry: which nodes check they belong to.
CHECK_LABEL = "nccl-k8s/nodes-check"


def _natural(name: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def _score(run: Any) -> float | None:
    """The highest busbw (GB/s) of the run's first collective."""
    ops = run.ops()
    values = [r.busbw for r in run.rows if ops and r.op == ops[0] and r.busbw is not None]
    return max(values) if values else None


class _Cancelled(Exception):
    """The check was interrupted: a test stops following its run (abandon() removes it)."""


class _Runner:
    """Runs 2-node tests (each a deploy, collect, cleanup), at most `parallel` at once, each an
    asyncio task over the check's one client: an interrupted check cancels them, lets those
    creating their objects finish that, and removes every run it started."""

    def __init__(
        self,
        kc: KubeClient,
        spec: RunSpec,
        settings: WaitSettings,
        runs_dir: Path | None,
        progress: ProgressFn,
    ) -> None:
        self.kc, self.spec, self.settings = kc, spec, settings
        self.runs_dir, self.progress = runs_dir, progress
        base = spec.run_id[: RUN_ID_MAX_LEN - 6].rstrip("-")
        self.base = base
        self.count = 0
        self.started: list[str] = []
        self.cancelled = False
        self._creating: set[str] = set()
        """Runs whose objects are being created: abandon() waits for them, then removes all."""
        self._tasks: dict[asyncio.Task[PairTest], str] = {}
        self._removals: set[asyncio.Task[None]] = set()
        """Removals of ended tests, running beside the next ones; drain() waits for them."""
        self.at_once = 1
        """Tests the client carries at once (set by _capacity before the first round)."""

    def _spec(self, a: str, b: str) -> RunSpec:
        self.count += 1
        rid = f"{self.base}-t{self.count}"
        self.started.append(rid)
        labels = (*self.spec.labels, (CHECK_LABEL, self.base))
        return dataclasses.replace(
            self.spec,
            run_id=rid,
            master_port=pair_test_port(self.base, self.count),
            node_names=(a, b),
            labels=labels,
        )

    async def _deploy(self, spec: RunSpec) -> None:
        """deploy --wait, unless the check was interrupted (then _Cancelled, nothing left)."""
        rid = spec.run_id
        if self.cancelled:
            raise _Cancelled(rid)
        self._creating.add(rid)

        def deployed(_: Any) -> None:
            self._creating.discard(rid)
            if self.cancelled:
                raise _Cancelled(rid)  # stop following: abandon() removes the run

        try:
            await deploy_async(
                self.kc, spec, wait=True, wait_settings=self.settings, on_deployed=deployed
            )
        finally:
            self._creating.discard(rid)

    async def one(self, spec: RunSpec, pass_no: int) -> PairTest:
        a, b = spec.node_names
        start = time.monotonic()
        try:
            await self._deploy(spec)
        except RunFailed as e:
            await self._remove(spec)  # a test given up on (--test-timeout) is still there
            result = failed_test(a, b, e, pass_no)
            return PairTest(result, spec.run_id, time.monotonic() - start, e.node)
        deployed = time.monotonic() - start
        try:
            got = await collect_async(
                self.kc, spec.run_id, namespace=spec.namespace, runs_dir=self.runs_dir
            )
            wrong = sum(r.wrong or 0 for r in got.run.rows)
            score = _score(got.run)
            error = (
                f"{wrong} wrong elements"
                if wrong
                else None
                if score is not None
                else "no bus bandwidth in its results"
            )
        except ResultsError as e:
            score, error = None, str(e)
        except BaseException:
            await self._remove(spec)
            raise
        # The run has ended and its pods hold no GPU: its removal need not hold up the round.
        self._removals.add(asyncio.create_task(self._remove(spec)))
        result = PairResult(a, b, score if error is None else None, error=error, pass_no=pass_no)
        return PairTest(result, spec.run_id, time.monotonic() - start, deploy_s=deployed)

    async def drain(self) -> None:
        """Wait for the removals still running (each says what it could not remove)."""
        while self._removals:
            task = self._removals.pop()
            await task

    async def _remove(self, spec: RunSpec) -> None:
        try:
            await cleanup_async(self.kc, spec.run_id, namespace=spec.namespace, timeout_s=60)
        except NotFound:
            pass  # a failed test's deploy has removed it already
        except ClusterError as e:
            self.progress(f"could not remove test run {spec.run_id}: {e}")

    async def run(
        self, pairs: list[tuple[str, str]], pass_no: int, parallel: int
    ) -> list[PairTest]:
        """The round's tests, as tasks at most `parallel` at a time; each said as it ends.
        An error other than a test's own (a failed run is a result) ends the round with it."""
        specs = [self._spec(a, b) for a, b in pairs]
        slots = asyncio.Semaphore(max(1, parallel))

        async def guarded(spec: RunSpec) -> PairTest:
            async with slots:
                return await self.one(spec, pass_no)

        order: dict[asyncio.Task[PairTest], int] = {}
        for i, spec in enumerate(specs):
            task = asyncio.create_task(guarded(spec), name=f"nccl-k8s-test-{spec.run_id}")
            order[task] = i
            self._tasks[task] = spec.run_id
        out: list[PairTest | None] = [None] * len(specs)
        pending = set(order)
        while pending:
            # asyncio.wait, not gather: an interrupt cancels this wait, never the tests
            # themselves, which abandon() ends (letting runs being created finish that).
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=order.__getitem__):
                test = task.result()
                self.progress(_said(test))
                out[order[task]] = test
        return [t for t in out if t is not None]

    async def abandon(self) -> None:
        """Interrupted: stop every test, wait (briefly) for those creating their objects, then
        remove every test run this check started (best effort)."""
        self.cancelled = True
        for removal in self._removals:
            removal.cancel()  # every run started is removed below
        live = [t for t in self._tasks if not t.done()]
        creating = [t for t in live if self._tasks[t] in self._creating]
        for task in live:
            if task not in creating:
                task.cancel()
        if creating:
            await asyncio.wait(creating, timeout=30)  # they end with _Cancelled once created
        for task in creating:
            task.cancel()
        await asyncio.gather(*live, return_exceptions=True)

        async def remove(rid: str) -> None:
            with contextlib.suppress(ClusterError, UsageError):
                await cleanup_async(self.kc, rid, namespace=self.spec.namespace, timeout_s=30)

        await bounded(self.at_once, [functools.partial(remove, rid) for rid in self.started])


def _said(t: PairTest) -> str:
    r = t.result
    head = f"pass {r.pass_no}: {r.a} + {r.b}: "
    if r.ok:
        return f"{head}{r.busbw:.3g} GB/s ({t.seconds:.0f}s, run {t.run_id})"
    what = "could not run" if r.inconclusive else "failed"
    return f"{head}{what} ({t.seconds:.0f}s, run {t.run_id}): {r.error}"


def nodes_check(
    spec: RunSpec,
    *,
    client: ClientSettings,
    selector: str | None = None,
    parallel: int | None = None,
    threshold: float = 0.9,
    floor: float | None = None,
    links: int | Literal["all"] | None = None,
    pairing: str = "auto",
    label: bool = False,
    taint: bool = False,
    dry_run: bool = False,
    idle_only: bool = False,
    within_s: float | None = None,
    max_nodes: int | None = None,
    wait_settings: WaitSettings | None = None,
    runs_dir: Path | None = None,
    progress: ProgressFn | None = None,
) -> NodesChecked:
    """`nodes_check_async` over a client of its own, on one event loop."""
    return run_sync(
        lambda kc: nodes_check_async(
            kc,
            spec,
            selector=selector,
            parallel=parallel,
            threshold=threshold,
            floor=floor,
            links=links,
            pairing=pairing,
            label=label,
            taint=taint,
            dry_run=dry_run,
            idle_only=idle_only,
            within_s=within_s,
            max_nodes=max_nodes,
            wait_settings=wait_settings,
            runs_dir=runs_dir,
            progress=progress,
        ),
        client,
    )


async def _no_nodes(kc: KubeClient, selector: str | None) -> UsageError:
    """No node to test: none matches the selector (and how many the cluster has), or none at all."""
    if not selector:
        return UsageError("nodes check: the cluster has no nodes", key="--selector")
    every = len((await kc.list("Node"))[0])
    return UsageError(
        f"nodes check: no node matches --selector {selector!r} (the cluster has {every} "
        f"node{'s' if every != 1 else ''}; `kubectl get nodes --show-labels` lists their labels)",
        key="--selector",
    )


async def nodes_check_async(
    kc: KubeClient,
    spec: RunSpec,
    *,
    selector: str | None = None,
    parallel: int | None = None,
    threshold: float = 0.9,
    floor: float | None = None,
    links: int | Literal["all"] | None = None,
    pairing: str = "auto",
    label: bool = False,
    taint: bool = False,
    dry_run: bool = False,
    idle_only: bool = False,
    within_s: float | None = None,
    max_nodes: int | None = None,
    wait_settings: WaitSettings | None = None,
    runs_dir: Path | None = None,
    progress: ProgressFn | None = None,
) -> NodesChecked:
    """Test the candidate nodes in rounds of disjoint pairs (pass 1 pairs them off, each later
    pass retests what is open: _badnodes.plan), give every node a verdict, with `links` test the
    links among the good nodes too, with `label`/`taint` write the verdicts, and judge the
    cluster against `floor` (GB/s) or its platform's (nodes._floor). Every request
    goes through `kc`; interrupted (cancelled), it removes the test runs it started."""
    say = progress or (lambda text: None)
    if pairing not in PAIRINGS:
        raise UsageError(f"--pairing {pairing!r}: expected intra, inter or auto", key="--pairing")
    await require_namespace_async(kc, spec.namespace)  # before pass 1, over the check's client
    spec, nodes, candidates, left_out = await _candidates(kc, spec, selector, say)
    if idle_only or within_s is not None or max_nodes is not None:
        due = await due_async(kc, spec.gpu_resource, candidates, nodes, idle_only=idle_only,
                              within_s=within_s, max_nodes=max_nodes)  # fmt: skip
        left_out.update(due.skipped)
        if not (candidates := due.nodes):  # nothing due: a check that tested nothing
            return NodesChecked([], left_out, [], verdicts([], [], threshold), [], dry_run)
    keys = topology_levels(spec)  # before the pair tests' spec, which places by none
    spec, fixed = pair_test_spec(spec)
    spec = with_floor(spec)[0]  # --min-busbw auto: known (or refused) before any test
    expected = pair_floor(spec, floor)
    if fixed:
        said = " ".join(f"{k}={v}" for k, v in fixed.items())
        say(f"pair tests run with {said} (the link between the two nodes; --env sets another)")
    domain_of, by_topology = _domains(nodes, candidates, keys, pairing, say)
    runner = _Runner(kc, spec, wait_settings or WaitSettings(), runs_dir, say)
    at_once = runner.at_once = capacity(kc, len(candidates) // 2, parallel, say)
    inside = _inside(domain_of) if by_topology and pairing != "inter" else (lambda _: True)
    cross: list[PairTest] = []
    try:
        if not by_topology:
            tests = await _passes(runner, candidates, threshold, at_once, say)
        elif pairing == "inter":
            order = inter_order(candidates, domain_of)
            tests = await _passes(runner, order, threshold, at_once, say)
        else:
            planner = functools.partial(_intra_planner, domain_of=domain_of)
            tests = await _passes(runner, candidates, threshold, at_once, say, planner)
        findings = verdicts(candidates, [t.result for t in tests], threshold)
        if by_topology and pairing == "auto":
            cross = await _more_rounds(runner, _across(findings, domain_of), tests, at_once, say)
        if links is not None:
            more = await _links(runner, findings, tests + cross, links, at_once, say)
            tests += [t for t in more if inside(t.result)]
            cross += [t for t in more if not inside(t.result)]
            findings = verdicts(candidates, [t.result for t in tests], threshold)
        await runner.drain()
    except BaseException:
        await runner.abandon()
        raise
    topology = None
    if by_topology:
        topology = _topology(keys, pairing, domain_of, tests, cross, findings, threshold)
        tests += cross
    actions: list[str] = []
    if label or taint:  # the verdicts on the nodes; with --label, the namespace's history too
        actions = await record_check(kc, spec.namespace or kc.namespace, findings, runner.base, label=label, taint=taint, dry_run=dry_run)  # fmt: skip
    floor_of = cluster_floor(expected, findings, [t.result for t in tests])
    return NodesChecked(
        candidates, left_out, tests, findings, actions, dry_run, fixed, *floor_of, topology
    )


def _domains(
    nodes: list[Obj], candidates: list[str], keys: tuple[str, ...], pairing: str, say: ProgressFn
) -> tuple[dict[str, str], bool]:
    """Each candidate's topology domain, and whether pairing by domain applies (said if so)."""
    domain_of = domains_of([n for n in nodes if n["metadata"]["name"] in candidates], keys)
    by_topology = topology_applies(domain_of, candidates)
    if by_topology:
        count = len(set(domain_of.values()))
        say(f"pairing {pairing}: {count} domains by {', '.join(keys)}")
    return domain_of, by_topology


async def _candidates(
    kc: KubeClient, spec: RunSpec, selector: str | None, say: ProgressFn
) -> tuple[RunSpec, list[Obj], list[str], dict[str, str]]:
    """The nodes of `selector`, the spec with its platform resolved on them, the nodes where a
    pod of the run fits (at least 2, else a UsageError naming why) and the others with why."""
    try:
        nodes = (await kc.list("Node", label_selector=selector))[0]
    except ClusterError as e:
        if e.status != 400 or not selector:
            raise
        # Checked already (spec.label_selector); what this server still refuses is bad input too.
        raise UsageError(f"--selector {selector!r}: the API server refused it: {e}") from e
    if not nodes:
        raise await _no_nodes(kc, selector)
    resolved = await resolve_async(kc, spec, nodes)  # --platform auto: these nodes say
    spec = resolved.spec
    if resolved.note:
        say(resolved.note)
    placement = place(spec, nodes)
    candidates = sorted((v.name for v in placement.eligible), key=_natural)
    left_out = {name: why for name, (_, why) in sorted(placement.dropped.items())}
    if len(candidates) < 2:
        where = f" matching {selector!r}" if selector else ""
        out = "; ".join(f"{n}: {w}" for n, w in left_out.items()) or "no node has the GPUs"
        raise UsageError(
            f"nodes check needs at least 2 nodes where a pod of {spec.gpus_per_node} "
            f"{spec.gpu_resource} fits; {len(candidates)} of the nodes{where} do ({out})",
            key="--selector",
        )
    return spec, nodes, candidates, left_out


def _topology(
    keys: tuple[str, ...],
    pairing: str,
    domain_of: dict[str, str],
    tests: list[PairTest],
    cross: list[PairTest],
    findings: Findings,
    threshold: float,
) -> Topology:
    """The check's topology finding: the links between domains judged on the tests across."""
    found, odd = link_verdicts(
        [t.result for t in tests], [t.result for t in cross], findings, domain_of, threshold
    )
    slow = [SlowLink(r.a, r.b, r.busbw, _cross_why(r, findings)) for r in odd]
    return Topology(keys, pairing, domain_of, found, slow)


Planner = Callable[[list[str], list[PairResult], float, int, int], list[tuple[str, str]]]


def _intra_planner(
    nodes: list[str],
    results: list[PairResult],
    threshold: float,
    pass_no: int,
    at_once: int,
    *,
    domain_of: dict[str, str],
) -> list[tuple[str, str]]:
    return intra_plan(nodes, results, threshold, pass_no, domain_of, at_once)


def _inside(domain_of: dict[str, str]) -> Callable[[PairResult], bool]:
    """Whether a test is inside one group of the intra search (nodes._domains.groups)."""
    group = {n: g for g, members in groups(list(domain_of), domain_of).items() for n in members}
    return lambda r: group.get(r.a) == group.get(r.b)


def _cross_why(r: PairResult, findings: Findings) -> str:
    if not r.ok:
        return f"the test across domains between two good nodes failed: {r.error}"
    return (
        f"{r.busbw:.3g} GB/s across domains between two good nodes, below the cluster's "
        f"{findings.reference or 0.0:.3g} GB/s, while other tests between the two domains hold it"
    )


def _across(findings: Findings, domain_of: dict[str, str]) -> list[list[tuple[str, str]]]:
    """--pairing auto: the rounds across the domains among the good nodes (nodes._domains)."""
    return cross_rounds(findings.good, domain_of)


async def _more_rounds(
    runner: _Runner,
    rounds: list[list[tuple[str, str]]],
    tests: list[PairTest],
    parallel: int,
    say: ProgressFn,
    what: str = "across domains",
) -> list[PairTest]:
    """Rounds run after the passes (tests across domains, --links), numbered on from the last
    test's pass, each said first."""
    pass_no = max((t.result.pass_no for t in tests), default=0) + 1
    out: list[PairTest] = []
    for i, pairs in enumerate(rounds, start=pass_no):
        say(f"{what}, round {i - pass_no + 1}: {', '.join(f'{a} + {b}' for a, b in pairs)}")
        out += await runner.run(pairs, i, parallel)
    return out


async def _passes(
    runner: _Runner,
    candidates: list[str],
    threshold: float,
    parallel: int,
    say: ProgressFn,
    planner: Planner = plan,
) -> list[PairTest]:
    """Pass 1 pairs the nodes off; each later pass is one round of what is still open (each
    suspect with a distinct cleared node, the test that would confirm the level, the controls
    that fit beside them in its last wave): every test. `planner`: _badnodes.plan, or under
    --pairing intra/auto the same inside each domain (nodes._domains.intra_plan)."""
    tests: list[PairTest] = []
    pass_no = 1
    while pairs := planner(candidates, [t.result for t in tests], threshold, pass_no, parallel):
        lv = level([t.result for t in tests], threshold)
        cleared = lv.cleared if tests and lv.confirmed else set()  # else: confirmation tests
        said = [f"{a} + {b}" + (" (control)" if {a, b} <= cleared else "") for a, b in pairs]
        say(f"pass {pass_no}: {', '.join(said)}")
        tests += await runner.run(pairs, pass_no, parallel)
        pass_no += 1
    return tests


async def _links(
    runner: _Runner,
    findings: Findings,
    tests: list[PairTest],
    links: int | Literal["all"],
    parallel: int,
    say: ProgressFn,
) -> list[PairTest]:
    """--links: rounds over the good nodes covering every link (or `links` random rounds),
    leaving out the links already measured; the cost is said first."""
    good = findings.good
    done = {frozenset((t.result.a, t.result.b)) for t in tests if not t.result.inconclusive}
    rounds = link_rounds(good, sample=None if links == "all" else links)
    rounds = [r for r in ([p for p in rnd if frozenset(p) not in done] for rnd in rounds) if r]
    count = sum(len(r) for r in rounds)
    waves = sum(-(-len(r) // parallel) for r in rounds)
    say(
        f"--links {links}: {count} more tests among {len(good)} good nodes in {len(rounds)} "
        f"rounds, about {waves} x one pair test"
    )
    return await _more_rounds(runner, rounds, tests, parallel, say, "links")


__all__ = [
    "CHECKED_AT_KEY",
    "CHECK_LABEL",
    "LABEL_KEY",
    "TAINT",
    "TAINT_KEY",
    "NodesChecked",
    "PairTest",
    "nodes_check",
    "nodes_check_async",
]
