"""Server-side printing (`meta.k8s.io/v1 Table`) so `kubectl get` shows the familiar columns.

kubectl asks for a Table and prints whatever columns the server sends; without it every resource
shows only NAME and AGE. The columns here follow kube-apiserver's printers for the kinds the
project's users look at (pods, nodes, jobs, statefulsets, services, events).
"""

from __future__ import annotations

import time
from calendar import timegm
from collections.abc import Callable
from typing import Any

from tests.cluster.store import clone

Obj = dict[str, Any]


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def _age(stamp: str | None) -> str:
    if not stamp:
        return "<unknown>"
    try:
        t = timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return "<unknown>"
    s = max(0, int(time.time() - t))
    if s < 120:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 48 * 3600:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def _pod(o: Obj) -> list[Any]:
    st = o.get("status") or {}
    cs = st.get("containerStatuses") or []
    total = len((o.get("spec") or {}).get("containers") or [])
    ready = sum(1 for c in cs if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in cs)
    status = st.get("reason") or st.get("phase", "Unknown")
    # As kubectl's pod printer: the last container with a waiting or terminated state names it.
    for c in reversed(cs):
        state = c.get("state") or {}
        waiting, term = state.get("waiting") or {}, state.get("terminated") or {}
        if waiting.get("reason"):
            status = waiting["reason"]
            break
        if term:
            status = term.get("reason") or (
                f"Signal:{term['signal']}"
                if term.get("signal")
                else f"ExitCode:{term.get('exitCode')}"
            )
            break
    if o["metadata"].get("deletionTimestamp"):
        status = "Terminating"
    return [
        f"{ready}/{total}",
        status,
        restarts,
        st.get("podIP") or "<none>",
        (o.get("spec") or {}).get("nodeName") or "<none>",
    ]


def _node(o: Obj) -> list[Any]:
    conds = (o.get("status") or {}).get("conditions") or []
    ready = next((c for c in conds if c.get("type") == "Ready"), None)
    status = "Ready" if ready and ready.get("status") == "True" else "NotReady"
    if (o.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    labels = o["metadata"].get("labels") or {}
    roles = ",".join(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    info = (o.get("status") or {}).get("nodeInfo") or {}
    return [status, roles or "<none>", info.get("kubeletVersion", "")]


def _job(o: Obj) -> list[Any]:
    st = o.get("status") or {}
    spec = o.get("spec") or {}
    conds = {c.get("type"): c.get("status") for c in st.get("conditions") or []}
    if conds.get("Complete") == "True":
        status = "Complete"
    elif conds.get("Failed") == "True":
        status = "Failed"
    elif spec.get("suspend"):
        status = "Suspended"
    else:
        status = "Running"
    completions = spec.get("completions")
    shown = f"{st.get('succeeded', 0)}/{completions if completions is not None else 1}"
    return [status, shown]


def _sts(o: Obj) -> list[Any]:
    st = o.get("status") or {}
    return [f"{st.get('readyReplicas', 0)}/{(o.get('spec') or {}).get('replicas', 1)}"]


def _svc(o: Obj) -> list[Any]:
    spec = o.get("spec") or {}
    ports = ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in spec.get("ports") or [])
    return [
        spec.get("type", "ClusterIP"),
        spec.get("clusterIP", "<none>"),
        "<none>",
        ports or "<none>",
    ]


def _event(o: Obj) -> list[Any]:
    io = o.get("involvedObject") or {}
    return [
        o.get("type", ""),
        o.get("reason", ""),
        f"{(io.get('kind') or '').lower()}/{io.get('name', '')}",
        o.get("message", ""),
    ]


def _cm(o: Obj) -> list[Any]:
    return [len(o.get("data") or {}) + len(o.get("binaryData") or {})]


def _ns(o: Obj) -> list[Any]:
    return [(o.get("status") or {}).get("phase", "Active")]


_S, _I = "string", "integer"
# kind -> (columns after NAME, printer, column index after which AGE goes); priority 1 = -o wide
_COLUMNS: dict[str, tuple[list[tuple[str, str, int]], Callable[[Obj], list[Any]], int]] = {
    "Pod": (
        [("Ready", _S, 0), ("Status", _S, 0), ("Restarts", _I, 0), ("IP", _S, 1), ("Node", _S, 1)],
        _pod,
        3,
    ),
    "Node": ([("Status", _S, 0), ("Roles", _S, 0), ("Version", _S, 0)], _node, 2),
    "Job": ([("Status", _S, 0), ("Completions", _S, 0)], _job, 2),
    "StatefulSet": ([("Ready", _S, 0)], _sts, 1),
    "Service": (
        [("Type", _S, 0), ("Cluster-IP", _S, 0), ("External-IP", _S, 0), ("Port(s)", _S, 0)],
        _svc,
        4,
    ),
    "Event": (
        [("Type", _S, 0), ("Reason", _S, 0), ("Object", _S, 0), ("Message", _S, 0)],
        _event,
        0,
    ),
    "ConfigMap": ([("Data", _I, 0)], _cm, 1),
    "Namespace": ([("Status", _S, 0)], _ns, 1),
}


def wants_metadata(accept: str) -> str | None:
    """`PartialObjectMetadata` or `...List` when the client asked for metadata alone (client-go's
    metadata client: `application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1`)."""
    for media in accept.split(","):
        for param in media.split(";"):
            key, _, value = param.strip().partition("=")
            if key == "as" and value in ("PartialObjectMetadata", "PartialObjectMetadataList"):
                return value
    return None


def partial(o: Obj) -> Obj:
    """The object as `PartialObjectMetadata`: its metadata (a copy) and nothing else."""
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": clone(o.get("metadata") or {}),
    }


def _defs(kind: str) -> list[tuple[str, str, int]]:
    cols, _, age_at = _COLUMNS.get(kind, ([], lambda o: [], 0))
    if kind == "Event":
        return [("Last Seen", _S, 0), *cols, ("Name", _S, 1)]
    return [("Name", _S, 0), *cols[:age_at], ("Age", _S, 0), *cols[age_at:]]


def row(o: Obj, kind: str, include: str = "Metadata") -> Obj:
    """One object's row: its cells, and (`includeObject`, kube-apiserver's default Metadata) its
    metadata, the whole object, or nothing. Copies what it keeps (the store calls it under its
    lock in place of a full copy)."""
    _, printer, age_at = _COLUMNS.get(kind, ([], lambda o: [], 0))
    meta = o.get("metadata") or {}
    cells = printer(o)
    if kind == "Event":
        out = [_age(o.get("lastTimestamp") or meta.get("creationTimestamp")), *cells]
        out.append(meta.get("name", ""))
    else:
        out = [meta.get("name", ""), *cells[:age_at], _age(meta.get("creationTimestamp")),
               *cells[age_at:]]  # fmt: skip
    got: Obj = {"cells": out}
    if include == "Metadata":
        got["object"] = partial(o)
    elif include == "Object":
        got["object"] = clone(o)
    return got


def table(items: list[Obj], rv: str | None, cont: str | None = None, kind: str = "") -> Obj:
    kind = kind or (items[0].get("kind", "") if items else "")
    return rows_table([row(o, kind) for o in items], rv, cont, kind)


def rows_table(rows: list[Obj], rv: str | None, cont: str | None, kind: str) -> Obj:
    defs = _defs(kind)
    metadata: Obj = {"resourceVersion": rv or ""}
    if cont:
        metadata["continue"] = cont
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": [
            {
                "name": name,
                "type": typ,
                "format": "name" if name == "Name" else "",
                "description": "",
                "priority": prio,
            }
            for name, typ, prio in defs
        ],
        "rows": rows,
    }
