"""doctor's checks of a platform's prerequisites: what a run on that platform needs from the
cluster that the API shows (spec.platforms' `Prerequisite`: a DaemonSet with ready pods, a CRD,
an extended resource allocatable on the nodes, a DRA driver's ResourceSlices, a cluster-scoped
object), each pass, or its severity (fail or warn) with the entry's hint.

`read` asks the API for what the entry's prerequisites name (at once); `check` is pure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import cast

from nccl_k8s.errors import Forbidden, NotFound
from nccl_k8s.k8s.api._client import KubeClient
from nccl_k8s.k8s.api._kinds import cluster_object
from nccl_k8s.k8s.api._types import Kind, Obj
from nccl_k8s.k8s.preflight._nodefit import node_view
from nccl_k8s.k8s.preflight._preflight import Check, Read, Status
from nccl_k8s.spec import RunSpec
from nccl_k8s.spec.platforms import Platform, Prerequisite


async def _one(kc: KubeClient, p: Prerequisite) -> Read:
    try:
        if p.kind == "daemonset":
            got = await kc.list("DaemonSet", namespace=p.namespace, all_namespaces=not p.namespace)
            return Read(items=got[0])
        if p.kind == "crd":
            crd = await kc.get("CustomResourceDefinition", p.name)
            return Read(items=[crd] if crd else [])
        if p.kind == "driver":
            return Read(items=(await kc.list("ResourceSlice"))[0])
        if p.kind == "object":
            assert p.api is not None, f"{p.name}: an object prerequisite names its api"
            kind, api_version = cluster_object(p.api)
            obj = await kc.get(cast(Kind, kind), p.name, api_version=api_version)
            return Read(items=[obj] if obj else [])
    except Forbidden:
        return Read(forbidden=True)
    except NotFound:
        return Read(absent=True)
    return Read(items=[])  # resource: the nodes doctor has read already


async def read(kc: KubeClient, platform: Platform) -> list[Read]:
    """What each of the platform's prerequisites needs read, in the entry's order."""
    return list(await asyncio.gather(*(_one(kc, p) for p in platform.prerequisites)))


def _named(p: Prerequisite, ds: Obj) -> bool:
    """A DaemonSet of the add-on: Helm names it `<release>-<chart>`, other installers add a
    suffix (`aws-efa-k8s-device-plugin-daemonset`), so the entry's name is a part of it."""
    return p.name in str((ds.get("metadata") or {}).get("name", ""))


def _missing(platform: Platform, p: Prerequisite, message: str) -> Check:
    return Check(f"{platform.name}:{p.name}", p.severity, message, p.hint)


def _daemonset(platform: Platform, p: Prerequisite, got: list[Obj]) -> Check:
    where = f" in namespace {p.namespace}" if p.namespace else ""
    found = [d for d in got if _named(p, d)]
    if not found:
        return _missing(platform, p, f"no DaemonSet named like {p.name}{where}: {p.what} is "
                        "not installed")  # fmt: skip
    ready = [d for d in found if int((d.get("status") or {}).get("numberReady") or 0) > 0]
    names = ", ".join(
        f"{(d['metadata'].get('namespace') or '')}/{d['metadata']['name']}" for d in found
    )
    if not ready:
        return _missing(platform, p, f"{p.what} ({names}) has no ready pod")
    pods = sum(int((d.get("status") or {}).get("numberReady") or 0) for d in ready)
    return Check(f"{platform.name}:{p.name}", "pass", f"{p.what} runs ({names}: {pods} ready)")


def _resource(platform: Platform, p: Prerequisite, spec: RunSpec, nodes: Sequence[Obj]) -> Check:
    gpu = [v for v in map(node_view, nodes) if v.has(spec.gpu_resource) > 0]
    having = [v for v in gpu if v.has(p.name) > 0]
    if not having:
        return _missing(
            platform, p, f"none of the {len(gpu)} GPU node(s) has {p.name} allocatable: "
            f"{p.what} missing"
        )  # fmt: skip
    shown = ", ".join(f"{v.name}: {v.allocatable[p.name]}" for v in having[:3])
    more = f" and {len(having) - 3} more" if len(having) > 3 else ""
    status: Status = "pass" if len(having) == len(gpu) else "warn"
    return Check(
        f"{platform.name}:{p.name}",
        status,
        f"{len(having)} of {len(gpu)} GPU node(s) have {p.name} allocatable ({shown}{more})",
        "" if status == "pass" else p.hint,
    )


def _driver(platform: Platform, p: Prerequisite, got: list[Obj]) -> Check:
    nodes = {
        str((s.get("spec") or {}).get("nodeName") or "")
        for s in got
        if (s.get("spec") or {}).get("driver") == p.name
    }
    if not nodes:
        return _missing(platform, p, f"no ResourceSlice of the DRA driver {p.name}: {p.what} "
                        "publishes no devices")  # fmt: skip
    named = sorted(n for n in nodes if n)
    where = f" for {len(named)} node(s)" if named else ""
    return Check(f"{platform.name}:{p.name}", "pass", f"{p.what} publishes ResourceSlices{where}")


def check(platform: Platform, spec: RunSpec, reads: Sequence[Read], nodes: Read) -> list[Check]:
    """Each prerequisite of the platform: pass, or its severity with its hint."""
    out: list[Check] = []
    for p, r in zip(platform.prerequisites, reads, strict=True):
        name = f"{platform.name}:{p.name}"
        if p.kind == "resource":
            r = nodes
        if r.forbidden:
            out.append(Check(name, "warn", f"may not read what shows {p.what} (RBAC): not "
                             "checked"))  # fmt: skip
        elif r.absent or r.items is None:
            out.append(_missing(platform, p, f"the cluster does not serve what {p.what} needs"))
        elif p.kind == "daemonset":
            out.append(_daemonset(platform, p, r.items))
        elif p.kind == "resource":
            out.append(_resource(platform, p, spec, r.items))
        elif p.kind == "driver":
            out.append(_driver(platform, p, r.items))
        elif r.items:  # crd, object: it exists
            out.append(Check(name, "pass", f"{p.what} ({p.kind} {p.name}) exists"))
        else:
            out.append(_missing(platform, p, f"no {p.kind} {p.name}: {p.what} missing"))
    return out


__all__ = ["check", "read"]
