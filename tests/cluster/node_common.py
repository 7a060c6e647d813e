"""Helpers the scheduler, controllers and kubelet share: quantities, selectors, conditions, time.

They live apart from the store (owner A) because they read Kubernetes objects the way the node-side
components do (a pod's resource requests, a LabelSelector object, a NodeSelectorRequirement), which
the store's string selectors never need. Everything here is pure and works on plain dicts.
"""

from __future__ import annotations

import datetime as _dt
import random
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

Obj = dict[str, Any]


class StoreLike(Protocol):
    """The part of tests.cluster.store.Store the scheduler, controllers and kubelet use (INTERFACE.md)."""

    def get(self, resource: str, namespace: str | None, name: str) -> Obj: ...
    def list(
        self,
        resource: str,
        namespace: str | None = None,
        label_selector: Any = None,
        field_selector: Any = None,
    ) -> tuple[list[Obj], str]: ...
    def create(self, resource: str, obj: Obj) -> Obj: ...
    def mutate(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        fn: Callable[[Obj], Any],
        *,
        subresource: str | None = None,
    ) -> Obj: ...
    def delete(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        *,
        propagation: str = ...,
        grace_period_s: int | None = ...,
    ) -> Obj: ...
    def finalize_delete(self, resource: str, namespace: str | None, name: str) -> None: ...
    def subscribe(self, callback: Callable[[str, str, Obj], None]) -> None: ...
    def record_event(
        self, involved: Obj, reason: str, message: str, *, type: str = ..., component: str = ...
    ) -> Obj | None: ...


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_DECIMAL |= {"P": 1e15, "E": 1e18}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")

# Characters the apiserver uses for generateName suffixes (no vowels, no look-alikes).
_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def now_iso() -> str:
    """RFC 3339 with second precision and a Z, as kube-apiserver writes metav1.Time."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(value: str | None) -> float | None:
    """Seconds since the epoch for a metav1.Time string, None when absent or unreadable."""
    if not value:
        return None
    try:
        return _dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def random_suffix(n: int = 5) -> str:
    return "".join(random.choice(_SUFFIX_CHARS) for _ in range(n))


def parse_quantity(value: Any) -> float:
    """A resource.Quantity ("500m", "1Gi", "2", 8) as a float in base units.

    Floats are exact enough here: the scheduler only compares sums of a few dozen requests.
    """
    if isinstance(value, (int, float)):
        return float(value)
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise ValueError(
            f"quantity {value!r}: expected a number with an optional suffix (1Gi, 500m)"
        )
    number, suffix = float(m.group(1)), m.group(2)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    raise ValueError(f"quantity {value!r}: unknown suffix {suffix!r}")


def container_requests(container: Mapping[str, Any]) -> dict[str, float]:
    """Requests of one container; limits stand in where requests are absent (as the API defaults)."""
    resources = container.get("resources") or {}
    out = {k: parse_quantity(v) for k, v in (resources.get("limits") or {}).items()}
    out.update({k: parse_quantity(v) for k, v in (resources.get("requests") or {}).items()})
    return out


def pod_requests(pod: Mapping[str, Any]) -> dict[str, float]:
    """What the scheduler charges a node for a pod: sum over containers, at least each init
    container (they run one at a time before the others), plus spec.overhead."""
    spec = pod.get("spec") or {}
    total: dict[str, float] = {}
    for c in spec.get("containers") or []:
        for k, v in container_requests(c).items():
            total[k] = total.get(k, 0.0) + v
    for c in spec.get("initContainers") or []:
        for k, v in container_requests(c).items():
            total[k] = max(total.get(k, 0.0), v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, 0.0) + parse_quantity(v)
    return total


def match_expression(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """One LabelSelectorRequirement or NodeSelectorRequirement (which adds Gt and Lt)."""
    key, op = expr.get("key", ""), expr.get("operator", "")
    values = [str(v) for v in expr.get("values") or []]
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def match_label_selector(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector; an empty selector matches everything, a null one nothing."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    return all(match_expression(e, labels) for e in selector.get("matchExpressions") or [])


def set_condition(
    conditions: list[Obj],
    type_: str,
    status: str,
    *,
    reason: str | None = None,
    message: str | None = None,
    probe_time: bool = False,
) -> bool:
    """Set one condition in place; lastTransitionTime moves only when the status flips.

    Returns whether anything changed, so callers can skip a write that would only bump the
    resourceVersion and wake every watcher for nothing.
    """
    now = now_iso()
    for cond in conditions:
        if cond.get("type") != type_:
            continue
        changed = (
            cond.get("status") != status
            or cond.get("reason") != reason
            or cond.get("message") != message
        )
        if cond.get("status") != status:
            cond["lastTransitionTime"] = now
        cond["status"] = status
        _set_or_drop(cond, "reason", reason)
        _set_or_drop(cond, "message", message)
        if probe_time and changed:
            cond["lastProbeTime"] = now
        return changed
    cond = {"type": type_, "status": status, "lastTransitionTime": now}
    cond["lastProbeTime"] = now if probe_time else None
    _set_or_drop(cond, "reason", reason)
    _set_or_drop(cond, "message", message)
    conditions.append(cond)
    return True


def _set_or_drop(obj: Obj, key: str, value: str | None) -> None:
    if value is None:
        obj.pop(key, None)
    else:
        obj[key] = value


def get_condition(obj: Mapping[str, Any], type_: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def condition_true(obj: Mapping[str, Any], type_: str) -> bool:
    cond = get_condition(obj, type_)
    return bool(cond and cond.get("status") == "True")


def pod_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid and r.get("controller") for r in refs)


def controller_ref(obj: Mapping[str, Any]) -> Obj | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def meta_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


def first(items: Iterable[Any], pred: Callable[[Any], bool]) -> Any | None:
    for item in items:
        if pred(item):
            return item
    return None
