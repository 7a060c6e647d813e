"""The fleet's verdicts before a run (issue 38): the nodes the run may land on against their last
`nodes check` (the labels of docs/fleet.md, read by k8s.rendering._health as --healthy-only's
affinity reads them). Pure: Node objects and the RunSpec in.

- doctor's `node-health` check: without --healthy-only it warns when the run may land on a
  node checked bad, never checked, or checked longer ago than --healthy-within, naming them;
  with it, it says how many nodes qualify against how many the run needs (fail: too few), and
  which are kept off. On a cluster where no node carries the label, no check has run: doctor
  says nothing of it (a warning every node shares tells one node from no other), but with
  --healthy-only, where no node qualifies.
- deploy's count (`healthy_shortfall`): with --healthy-only, too few nodes that qualify is one
  line before anything is created, where the nodes can be listed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.preflight._nodefit import place
from nccl_k8s.k8s.preflight._preflight import Check, Read
from nccl_k8s.k8s.rendering._health import Health, healths
from nccl_k8s.k8s.rendering._nodepolicy import NODE_LABEL_KEY
from nccl_k8s.spec import RunSpec

NAME = "node-health"
#: Nodes named one by one in a line; the rest are counted.
MOST = 8


def _window(spec: RunSpec, now: float) -> int:
    """The window's start: --healthy-only's (fixed when the spec was built), else now's."""
    return (
        spec.healthy_since if spec.healthy_since is not None else int(now) - spec.healthy_within_s
    )


def _within(spec: RunSpec) -> str:
    """The window as one would type it: 86400 -> 1d, 5400 -> 90m."""
    s = spec.healthy_within_s
    unit, size = next(
        (u, n) for u, n in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)) if s % n == 0
    )
    return f"{s // size}{unit}"


def candidates(spec: RunSpec, nodes: Sequence[Obj]) -> tuple[list[Health], list[Health]]:
    """(qualify, kept off): the nodes that could take a pod of the run but for their check
    labels (node fit's filters, the health stage left out), split by --healthy-only's rule."""
    usable = {v.name for v in place(spec, nodes, skip=("health",)).eligible}
    since = _window(spec, time.time())
    judged = healths((n for n in nodes if n["metadata"]["name"] in usable), since)
    return [h for h in judged if h.ok], [h for h in judged if not h.ok]


def _enough(spec: RunSpec, nodes: Sequence[Obj]) -> bool:
    """The nodes that qualify hold the run's pods (one each with --spread required, else as
    many as their GPUs allow: node fit's count, with its health stage)."""
    return place(spec, nodes).fits


def _kept_off(off: Sequence[Health], now: float) -> str:
    """`node-3: checked bad at ... (2.0h ago); 5 nodes never checked`."""
    never = [h.node for h in off if h.verdict is None]
    named = [h for h in off if h.verdict is not None]
    bad = sorted(named, key=lambda h: (h.verdict != "bad", h.node))  # bad ones first
    parts = [f"{h.node}: {h.why(now)}" for h in bad[:MOST]]
    if len(bad) > MOST:
        parts.append(f"{len(bad) - MOST} more checked but not good within the window")
    if never:
        shown = ", ".join(never[:MOST]) + (" ..." if len(never) > MOST else "")
        parts.append(f"{len(never)} node{'s' if len(never) != 1 else ''} never checked ({shown})")
    return "; ".join(parts)


def check_fleet(spec: RunSpec, nodes: Read) -> Check | None:
    """doctor's node-health check (module docstring); None where the nodes are unreadable
    (the nodes check already says so)."""
    if nodes.items is None:
        return None
    now = time.time()
    within = f"within --healthy-within {_within(spec)}"
    if not any(NODE_LABEL_KEY in (n["metadata"].get("labels") or {}) for n in nodes.items):
        if not spec.healthy_only:
            return None  # no check has run here: nothing to tell one node from another by
        return Check(
            NAME,
            "fail",
            f"--healthy-only: no node carries {NODE_LABEL_KEY}: no `nodes check --label` has "
            "run on this cluster",
            "nccl-k8s nodes check --label (or nodes schedule: docs/fleet.md) writes it",
        )
    ok, off = candidates(spec, nodes.items)
    usable = len(ok) + len(off)
    if spec.healthy_only:
        if _enough(spec, nodes.items):
            said = f"; kept off: {_kept_off(off, now)}" if off else ""
            return Check(
                NAME,
                "pass",
                f"{len(ok)} of {usable} nodes the run may use were checked good {within} "
                f"(it needs {spec.nodes}){said}",
            )
        return Check(
            NAME,
            "fail",
            shortfall_text(spec, ok, off, now),
            "check them (nccl-k8s nodes check --label), or widen --healthy-within",
        )
    if not off:
        return Check(NAME, "pass", f"all {usable} nodes the run may use were checked good {within}")
    return Check(
        NAME,
        "warn",
        f"the run may land on nodes not checked good {within}: {_kept_off(off, now)}",
        "--healthy-only keeps its pods off them; nccl-k8s nodes check --label checks them",
    )


def shortfall_text(spec: RunSpec, ok: Sequence[Health], off: Sequence[Health], now: float) -> str:
    kept = f" (kept off: {_kept_off(off, now)})" if off else ""
    return (
        f"--healthy-only: {len(ok)} of {len(ok) + len(off)} nodes the run may use were checked "
        f"good within --healthy-within {_within(spec)}, the run needs {spec.nodes}{kept}"
    )


def healthy_shortfall(spec: RunSpec, nodes: Sequence[Obj]) -> str | None:
    """deploy --healthy-only: why too few nodes qualify, in one line; None when enough do."""
    if spec.healthy_since is None:
        return None
    ok, off = candidates(spec, nodes)
    if _enough(spec, nodes):
        return None
    return shortfall_text(spec, ok, off, time.time())


__all__ = ["NAME", "candidates", "check_fleet", "healthy_shortfall", "shortfall_text"]
