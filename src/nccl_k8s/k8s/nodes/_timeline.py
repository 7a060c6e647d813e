"""`nodes history`: the namespace's recorded checks (nodes._history) turned per node into its
verdicts and busbw over time, newest first, and one line of what changed since its last good
check ("bad since 2026-12-07T14:00:05Z (last good 2026-12-07T08:00:02Z, 42.1 GB/s; now 9.8
GB/s)"). Pure but for node_history, which reads the ConfigMap (one get).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Sequence
from typing import Any

from nccl_k8s.errors import UsageError
from nccl_k8s.k8s.api._client import ClientSettings
from nccl_k8s.k8s.api._sync import run_sync
from nccl_k8s.k8s.nodes._history import HISTORY_NAME, Check, read_history_async


@dataclasses.dataclass(frozen=True)
class Entry:
    """One check of one node."""

    at: int
    """When the check ended, unix seconds."""
    run_id: str
    verdict: str
    busbw: float | None
    """GB/s: the median of the node's tests; None when none measured one."""

    @property
    def when(self) -> str:
        """`at` in UTC, ISO 8601 (`2026-12-07T14:00:05Z`)."""
        return iso(self.at)

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "time": self.when, "run_id": self.run_id,
                "verdict": self.verdict, "busbw": self.busbw}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class NodeTimeline:
    node: str
    entries: list[Entry]
    """Newest first."""
    change: str
    """What changed since the node's last good check (change_of)."""


@dataclasses.dataclass(frozen=True)
class NodeHistory:
    namespace: str
    checks: int
    """Checks the history holds (those that tested none of the asked node included)."""
    nodes: list[NodeTimeline]

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "configmap": HISTORY_NAME,
            "checks": self.checks,
            "nodes": [
                {"node": t.node, "change": t.change, "history": [e.to_dict() for e in t.entries]}
                for t in self.nodes
            ],
        }


def iso(at: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def _bw(busbw: float | None) -> str:
    return "no busbw measured" if busbw is None else f"{busbw:.1f} GB/s"


def change_of(entries: Sequence[Entry]) -> str:
    """What changed since the last good check, from the node's entries (newest first): a
    node that is not good now says since when and its last good check's busbw against now's;
    a good one since when it has been good, and what it was before."""
    latest = entries[0]
    good_now = latest.verdict == "good"
    streak = 0
    while streak < len(entries) and (entries[streak].verdict == "good") == good_now:
        streak += 1
    since = iso(entries[streak - 1].at)
    before = entries[streak] if streak < len(entries) else None
    if good_now:
        text = f"good since {since}, now {_bw(latest.busbw)}"
        if before is not None:
            text += f" ({before.verdict} at {iso(before.at)}, {_bw(before.busbw)})"
        return text
    same = {e.verdict for e in entries[:streak]} == {latest.verdict}
    word = latest.verdict if same else f"not good (now {latest.verdict})"
    if before is None:
        return f"{word} since {since} (never good in the history; now {_bw(latest.busbw)})"
    return (
        f"{word} since {since} (last good {iso(before.at)}, {_bw(before.busbw)}; "
        f"now {_bw(latest.busbw)})"
    )


def _natural(name: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def timelines(checks: Sequence[Check], namespace: str, node: str | None = None) -> NodeHistory:
    """Per node (or the one asked for), its entries newest first and its change line; a node
    no recorded check tested is bad input (UsageError naming the nodes there are)."""
    per: dict[str, list[Entry]] = {}
    for c in sorted(checks, key=lambda c: -c.at):
        for name, (verdict, busbw) in c.nodes.items():
            per.setdefault(name, []).append(Entry(c.at, c.run_id, verdict, busbw))
    if node is not None and node not in per:
        known = ", ".join(sorted(per, key=_natural)) or "none"
        raise UsageError(
            f"--node {node!r}: no check in the history of namespace {namespace} tested it "
            f"(nodes there: {known})",
            key="--node",
        )
    names = [node] if node is not None else sorted(per, key=_natural)
    out = [NodeTimeline(n, per[n], change_of(per[n])) for n in names]
    return NodeHistory(namespace, len(checks), out)


def node_history(
    *, client: ClientSettings, namespace: str | None = None, node: str | None = None
) -> NodeHistory:
    """`nodes history`: the namespace's history (one ConfigMap get), per node."""

    async def read(kc: Any) -> NodeHistory:
        ns = namespace or kc.namespace
        return timelines(await read_history_async(kc, ns), ns, node)

    return run_sync(read, client)


__all__ = ["Entry", "NodeHistory", "NodeTimeline", "change_of", "iso", "node_history", "timelines"]
