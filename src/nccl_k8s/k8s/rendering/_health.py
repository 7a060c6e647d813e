"""What a node's check labels say, and `--healthy-only`'s node affinity: one home for how the
verdict `nodes check --label` writes (`nccl-k8s/node-check`, `nccl-k8s/checked-at`: unix
seconds) is read back, by the scheduler (the affinity rendered here) and by this tool (deploy's
count of the nodes that qualify, doctor's warning, the scheduled check's due nodes) alike.

The affinity: in every required node selector term, `nccl-k8s/node-check In [good]` and
`nccl-k8s/checked-at Gt <healthy_since>`. Terms are ORed and a term's expressions ANDed
(NodeSelector, core/v1), so the two go into every term the pod already has (the --node term);
with none, one term of their own. Gt compares integers: "If the operator is Gt or Lt, the
values array must have a single element, which will be interpreted as an integer"
(NodeSelectorRequirement, Kubernetes API reference, core/v1), and a label that is no integer
never matches, as `last_check` reads it. A node with no labels matches neither.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.rendering._nodepolicy import NODE_CHECKED_AT_KEY, NODE_LABEL_KEY
from nccl_k8s.spec import RunSpec

GOOD = "good"


def last_check(node: Obj) -> tuple[str | None, int | None]:
    """(verdict, checked-at unix seconds) from the node's labels; None where absent or bad."""
    labels: Mapping[str, Any] = (node.get("metadata") or {}).get("labels") or {}
    verdict = labels.get(NODE_LABEL_KEY)
    at = str(labels.get(NODE_CHECKED_AT_KEY, ""))
    return (str(verdict) if verdict else None), (int(at) if at.isdigit() else None)


@dataclasses.dataclass(frozen=True)
class Health:
    """One node as --healthy-only sees it."""

    node: str
    verdict: str | None
    at: int | None
    ok: bool
    """The affinity admits it: checked good after the window's start."""

    def why(self, now: float) -> str:
        """Why it is kept off (or, when ok, its check): `checked bad at ... (3.2h ago)`."""
        if self.verdict is None:
            return "never checked"
        if self.at is None:
            return f"checked {self.verdict}, at no time it can read ({NODE_CHECKED_AT_KEY})"
        when = datetime.datetime.fromtimestamp(self.at, datetime.timezone.utc)
        age = (now - self.at) / 3600
        return f"checked {self.verdict} at {when:%Y-%m-%d %H:%M} UTC ({age:.1f}h ago)"


def health(node: Obj, since: int) -> Health:
    """The node against a window that starts at `since` (unix seconds), as the affinity
    decides it."""
    verdict, at = last_check(node)
    ok = verdict == GOOD and at is not None and at > since
    return Health(str((node.get("metadata") or {}).get("name")), verdict, at, ok)


def healths(nodes: Iterable[Obj], since: int) -> list[Health]:
    return [health(n, since) for n in nodes]


def healthy_expressions(since: int) -> list[Obj]:
    """The two requirements --healthy-only adds to every node selector term."""
    return [
        {"key": NODE_LABEL_KEY, "operator": "In", "values": [GOOD]},
        {"key": NODE_CHECKED_AT_KEY, "operator": "Gt", "values": [str(since)]},
    ]


def apply_healthy_only(spec: RunSpec, template: Obj) -> None:
    """--healthy-only: the requirements ANDed into every required node selector term of the
    pod template (a new term where it has none); nothing otherwise."""
    if spec.healthy_since is None:
        return
    affinity = template["spec"].setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.setdefault("nodeSelectorTerms", [])
    if not terms:
        terms.append({})
    for term in terms:
        term.setdefault("matchExpressions", []).extend(healthy_expressions(spec.healthy_since))


__all__ = [
    "GOOD",
    "Health",
    "apply_healthy_only",
    "health",
    "healths",
    "healthy_expressions",
    "last_check",
]
