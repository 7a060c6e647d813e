"""`nodes check`: find the bad nodes by 2-node tests. The plan and the verdicts are
k8s._badnodes' (pure); this module runs the tests and writes the verdicts to the nodes.

Each test is a real run of the deploy flags given, with 2 pods pinned to its two nodes (node
affinity on metadata.name, RunSpec.node_names): `deploy` follows it to its end (a failed run is
ended and named as any deploy's), `collect` reads its results into runs/<run-id>/ (each rank's
node named), `cleanup` removes it. Its score is the highest bus bandwidth it reached in its first
collective: the plateau of the large sizes, and robust to noise, which only ever lowers a
measurement. A test whose pods could not be scheduled is inconclusive, not a failure of either
node. The tests of a round run at once, at most `parallel` at a time (different nodes do not
share what they measure; a test box whose "nodes" share CPUs does, hence --parallel).

Candidates: the nodes (of `selector`, or the --node list) where a pod of the run would fit
(k8s._nodefit: GPUs, RDMA resources, --node-selector, taints, cpu and memory).

`--label` writes `nccl-k8s/node-check=good|bad` on the nodes with a verdict; `--taint` puts
`nccl-k8s/bad-node=true:NoSchedule` on bad nodes and takes it off nodes found good. Nothing else
of a node is touched (a taint list is written back with its other taints as they were, guarded
by the node's resourceVersion); `dry_run` only says what would be done.
"""

from __future__ import annotations

import dataclasses
import queue
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nccl_k8s.errors import (
    ClusterError,
    Conflict,
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
    confirm_pass,
    first_pass,
    second_pass,
    suspects,
    verdicts,
)
from nccl_k8s.k8s.preflight._nodefit import place
from nccl_k8s.k8s.run._cleanup import cleanup
from nccl_k8s.k8s.run._collect import collect
from nccl_k8s.k8s.run._deploy import deploy
from nccl_k8s.k8s.run._settings import WaitSettings
from nccl_k8s.spec import RUN_ID_MAX_LEN, RunSpec, master_port_for

LABEL_KEY = "nccl-k8s/node-check"
TAINT_KEY = "nccl-k8s/bad-node"
TAINT: Obj = {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}
#: The label every pair test's objects carry: which nodes check they belong to.
CHECK_LABEL = "nccl-k8s/nodes-check"

ProgressFn = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class PairTest:
    result: PairResult
    run_id: str
    seconds: float
    culprit_node: str | None = None
    """The node the failed run's message named as its culprit's, when it named one."""


@dataclasses.dataclass(frozen=True)
class NodesChecked:
    candidates: list[str]
    left_out: dict[str, str]
    """GPU nodes that are not candidates, and why (taint, too few GPUs ...)."""
    tests: list[PairTest]
    findings: Findings
    actions: list[str]
    """What --label/--taint did (or, with dry_run, would do)."""
    dry_run: bool

    @property
    def flagged(self) -> list[str]:
        return [v.node for v in self.findings.flagged]

    def to_dict(self) -> dict[str, Any]:
        f = self.findings
        return {
            "threshold": f.threshold,
            "reference_busbw": f.reference,
            "nodes": [dataclasses.asdict(v) for v in f.nodes],
            "slow_links": [dataclasses.asdict(link) for link in f.links],
            "tests": [
                {
                    **dataclasses.asdict(t.result),
                    "run_id": t.run_id,
                    "seconds": round(t.seconds, 1),
                    "culprit_node": t.culprit_node,
                }
                for t in self.tests
            ],
            "left_out": self.left_out,
            "actions": self.actions,
            "dry_run": self.dry_run,
        }


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
    """Runs 2-node tests (each a deploy, collect, cleanup), at most `parallel` at once, each on
    a daemon thread: an interrupted check removes its runs and exits without waiting for the
    threads still following them."""

    def __init__(
        self,
        spec: RunSpec,
        client: ClientSettings,
        settings: WaitSettings,
        runs_dir: Path | None,
        progress: ProgressFn,
    ) -> None:
        self.spec, self.client, self.settings = spec, client, settings
        self.runs_dir, self.progress = runs_dir, progress
        base = spec.run_id[: RUN_ID_MAX_LEN - 6].rstrip("-")
        self.base = base
        self.count = 0
        self.started: list[str] = []
        self.cancelled = threading.Event()
        self._creating: set[str] = set()
        """Runs whose objects are being created: abandon() waits for them, then removes all."""
        self._cond = threading.Condition()

    def _spec(self, a: str, b: str) -> RunSpec:
        self.count += 1
        rid = f"{self.base}-t{self.count}"
        self.started.append(rid)
        labels = (*self.spec.labels, (CHECK_LABEL, self.base))
        return dataclasses.replace(
            self.spec,
            run_id=rid,
            master_port=master_port_for(rid),
            node_names=(a, b),
            labels=labels,
        )

    def _created(self, rid: str) -> None:
        with self._cond:
            self._creating.discard(rid)
            self._cond.notify_all()

    def _deploy(self, spec: RunSpec) -> None:
        """deploy --wait, unless the check was interrupted (then _Cancelled, nothing left)."""
        rid = spec.run_id
        with self._cond:
            if self.cancelled.is_set():
                raise _Cancelled(rid)
            self._creating.add(rid)

        def deployed(_: Any) -> None:
            self._created(rid)
            if self.cancelled.is_set():
                raise _Cancelled(rid)  # stop following: abandon() removes the run

        try:
            deploy(
                spec, client=self.client, wait=True, wait_settings=self.settings,
                on_deployed=deployed,
            )  # fmt: skip
        finally:
            self._created(rid)

    def one(self, spec: RunSpec, pass_no: int) -> PairTest:
        a, b = spec.node_names
        start = time.monotonic()
        try:
            self._deploy(spec)
        except RunFailed as e:
            first = str(e).splitlines()[0].split(" (deleted what this deploy created")[0]
            # Our own monitor's words (k8s._verdicts) for pods that were never placed.
            never_ran = e.node is None and (
                "cannot be scheduled" in first or "no scheduler has picked up" in first
            )
            self._remove(spec)  # a test given up on (--test-timeout) is still there
            result = PairResult(a, b, None, error=first, pass_no=pass_no, inconclusive=never_ran)
            return PairTest(result, spec.run_id, time.monotonic() - start, e.node)
        try:
            got = collect(
                spec.run_id, client=self.client, namespace=spec.namespace, runs_dir=self.runs_dir
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
        finally:
            self._remove(spec)
        result = PairResult(a, b, score if error is None else None, error=error, pass_no=pass_no)
        return PairTest(result, spec.run_id, time.monotonic() - start)

    def _remove(self, spec: RunSpec) -> None:
        try:
            cleanup(spec.run_id, client=self.client, namespace=spec.namespace, timeout_s=60)
        except NotFound:
            pass  # a failed test's deploy has removed it already
        except ClusterError as e:
            self.progress(f"could not remove test run {spec.run_id}: {e}")

    def run(self, pairs: list[tuple[str, str]], pass_no: int, parallel: int) -> list[PairTest]:
        specs = [self._spec(a, b) for a, b in pairs]
        slots = threading.Semaphore(max(1, parallel))
        done: queue.Queue[tuple[int, PairTest | None, BaseException | None]] = queue.Queue()

        def work(i: int, spec: RunSpec) -> None:
            try:
                with slots:
                    done.put((i, self.one(spec, pass_no), None))
            except BaseException as e:  # handed to the main thread, which raises it
                done.put((i, None, e))

        for i, spec in enumerate(specs):
            name = f"nccl-k8s-test-{spec.run_id}"
            threading.Thread(target=work, args=(i, spec), name=name, daemon=True).start()
        out: list[PairTest | None] = [None] * len(specs)
        for _ in specs:
            i, test, error = done.get()
            if error is not None:
                raise error
            assert test is not None
            self.progress(_said(test))
            out[i] = test
        return [t for t in out if t is not None]

    def abandon(self) -> None:
        """Interrupted: stop every test, wait (briefly) for those creating their objects, then
        remove every test run this check started (best effort)."""
        self.cancelled.set()
        with self._cond:
            self._cond.wait_for(lambda: not self._creating, timeout=30)
        for rid in self.started:
            try:
                cleanup(rid, client=self.client, namespace=self.spec.namespace, timeout_s=30)
            except (ClusterError, UsageError):
                continue


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
    parallel: int = 4,
    threshold: float = 0.9,
    label: bool = False,
    taint: bool = False,
    dry_run: bool = False,
    wait_settings: WaitSettings | None = None,
    runs_dir: Path | None = None,
    progress: ProgressFn | None = None,
) -> NodesChecked:
    """Test the candidate nodes in pairs (two round-robin rounds, then each suspect with a
    known-good node), give every node a verdict, and with `label`/`taint` write them."""
    say = progress or (lambda text: None)
    nodes = run_sync(lambda kc: kc.list("Node", label_selector=selector), client)[0]
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
    runner = _Runner(spec, client, wait_settings or WaitSettings(), runs_dir, say)
    try:
        tests: list[PairTest] = []
        for i, pairs in enumerate(first_pass(candidates), start=1):
            say(f"pass 1, round {i}: {', '.join(f'{a} + {b}' for a, b in pairs)}")
            tests += runner.run(pairs, 1, parallel)
        results = [t.result for t in tests]
        sus, good = suspects(candidates, results, threshold)
        pairs2 = second_pass(sus, good, results)
        if pairs2:
            say(f"pass 2: {', '.join(f'{a} + {b}' for a, b in pairs2)}")
            tests += runner.run(pairs2, 2, parallel)
        pairs3 = confirm_pass(candidates, [t.result for t in tests], threshold)
        if pairs3:
            say(f"pass 3 (slow retests, once more): {', '.join(f'{a} + {b}' for a, b in pairs3)}")
            tests += runner.run(pairs3, 3, parallel)
    except BaseException:
        runner.abandon()
        raise
    findings = verdicts(candidates, [t.result for t in tests], threshold)
    actions: list[str] = []
    if label or taint:
        actions = run_sync(
            lambda kc: _write_verdicts(kc, findings, label=label, taint=taint, dry_run=dry_run),
            client,
        )
    return NodesChecked(candidates, left_out, tests, findings, actions, dry_run)


async def _write_verdicts(
    kc: KubeClient, findings: Findings, *, label: bool, taint: bool, dry_run: bool
) -> list[str]:
    """Label (and taint) the nodes with a verdict; what was done, one line each."""
    done: list[str] = []
    would = "would " if dry_run else ""
    for v in findings.nodes:
        if v.verdict == "unknown":
            continue
        try:
            if label:
                did = f"{would}label node {v.node} {LABEL_KEY}={v.verdict}"
                if not dry_run:
                    patch = {"metadata": {"labels": {LABEL_KEY: v.verdict}}}
                    await kc.patch("Node", v.node, patch)
                done.append(did)
            if taint:
                change = await _set_taint(kc, v.node, v.verdict == "bad", dry_run=dry_run)
                if change:
                    done.append(f"{would}{change}")
        except ClusterError as e:  # the verdicts stand; say what could not be written
            done.append(f"could not write the verdict to node {v.node}: {e}")
    return done


async def _set_taint(kc: KubeClient, node: str, on: bool, *, dry_run: bool) -> str | None:
    """Add or remove our taint, leaving every other taint as it is; None when nothing changes."""
    for _ in range(5):
        obj = await kc.get("Node", node)
        if obj is None:
            return None
        taints = list((obj.get("spec") or {}).get("taints") or [])
        has = any(t.get("key") == TAINT_KEY for t in taints)
        if has == on:
            return None
        what = f"taint node {node} {TAINT_KEY}=true:NoSchedule" + ("" if on else "-")
        if dry_run:
            return what
        new = [*taints, dict(TAINT)] if on else [t for t in taints if t.get("key") != TAINT_KEY]
        patch = {
            "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
            "spec": {"taints": new},
        }
        try:
            await kc.patch("Node", node, patch)
        except Conflict:
            continue  # the node changed meanwhile: read it again
        return what
    raise ClusterError(f"node {node} kept changing: its taint {TAINT_KEY} was not written")


__all__ = [
    "CHECK_LABEL",
    "LABEL_KEY",
    "TAINT",
    "TAINT_KEY",
    "NodesChecked",
    "PairTest",
    "nodes_check",
]
