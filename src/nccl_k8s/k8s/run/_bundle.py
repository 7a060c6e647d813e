"""The debug bundle: everything needed to tell why a run did what it did, in one .tar.gz to
attach to a ticket, read without access to the cluster.

    <run-id>/README.txt         what is in it, when and from where it was taken, what was not
                                available (a pod that never started has no log)
    <run-id>/doctor.txt, .json  the `doctor --run` table
    <run-id>/objects/*.yaml     every object of the run: workload, Service, ConfigMap (the
                                engine's zipapp bytes elided), every pod, and its optional
                                kinds' objects (PodGroup, PodMonitor, ComputeDomain ...); the
                                values of the user's --env redacted unless show_env (they
                                may be secrets; the names and the presets' values are kept)
    <run-id>/events.yaml        the events about them
    <run-id>/logs/<pod>.log     every pod's log, and <pod>.previous.log where it restarted
    <run-id>/nodes/<node>.yaml  the nodes the pods were placed on

Read-only, and taken while the run is still there: `deploy --bundle-on-failure` writes it
before a failed run's objects are deleted. A failed Job deletes its pods that were still
running by then, the culprit among them at times (it failed first, but its pod had not yet
said so when another's failure failed the Job): deploy hands over what its monitor saw, and
such pods are kept as last seen, the culprit's log as the lines the failure message quotes
(README.txt says which).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import functools
import io
import json
import os
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from nccl_k8s.errors import ClusterError, NotFound
from nccl_k8s.k8s.api._client import ClientSettings, KubeClient
from nccl_k8s.k8s.api._sync import run_sync
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.rendering._names import CONTAINER_NAME, USER_ENV_ANNOTATION
from nccl_k8s.k8s.run._explain import gather, table_text
from nccl_k8s.k8s.run._plumbing import RUN_KINDS, bounded, namespace_of, resolve_run, run_labels
from nccl_k8s.k8s.run._verdicts import node_objects
from nccl_k8s.spec import CUSTOM_KINDS


@dataclasses.dataclass(frozen=True)
class Bundled:
    run_id: str
    namespace: str
    path: Path
    objects: int
    pods: int
    events: int
    logs: int
    nodes: int
    missing: list[str]
    """What could not be read, and why (one line each; also in README.txt)."""


def _yaml(obj: Any) -> bytes:
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, width=100).encode()


def _elide(obj: Obj) -> Obj:
    """A ConfigMap without its binary payload (the engine zipapp: kilobytes of base64 that say
    nothing about the run), its size kept."""
    if obj.get("kind") != "ConfigMap" or not obj.get("binaryData"):
        return obj
    out = dict(obj)
    out["binaryData"] = {
        k: f"<elided by nccl-k8s bundle: {len(v) * 3 // 4} bytes>"
        for k, v in obj["binaryData"].items()
    }
    return out


#: What a redacted --env value reads in a bundle.
REDACTED_ENV = "<redacted by nccl-k8s bundle: --show-env keeps it>"
#: kubectl's client-side apply copy of the whole object (--env values included).
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def redact_env(obj: Obj) -> Obj:
    """`obj` with the values of the user's --env (its pods' USER_ENV_ANNOTATION names) replaced
    by REDACTED_ENV in every container, and kubectl's last-applied copy of it elided."""
    out = copy.deepcopy(obj)
    annotations = (out.get("metadata") or {}).get("annotations") or {}
    if LAST_APPLIED in annotations:
        annotations[LAST_APPLIED] = "<elided by nccl-k8s bundle: it repeats the object>"
    spec = out.get("spec") or {}
    pod = out if out.get("kind") == "Pod" else spec.get("template") or {}
    given = ((pod.get("metadata") or {}).get("annotations") or {}).get(USER_ENV_ANNOTATION)
    names = set(str(given).split(",")) if given else set()
    body = pod.get("spec") or {}
    for c in (body.get("initContainers") or []) + (body.get("containers") or []):
        for e in c.get("env") or []:
            if e.get("name") in names and "value" in e:
                e["value"] = REDACTED_ENV
    return out


#: (kind, apiVersion) of what the bundle keeps: the run's own kinds, its pods, and every optional
#: kind a run creates (spec.CUSTOM_KINDS: PodGroup, PodMonitor, ComputeDomain ...).
BUNDLED_KINDS: tuple[tuple[Any, str | None], ...] = (
    *((k, None) for k in (*RUN_KINDS, "Pod")),
    *((k.kind, k.api_version) for k in CUSTOM_KINDS if k.created),
)


async def _objects(kc: KubeClient, ns: str, run_id: str, missing: list[str]) -> list[Obj]:
    labels = run_labels(run_id)
    kinds = BUNDLED_KINDS

    async def one(kind: Any, api_version: str | None) -> list[Obj]:
        try:
            items, _ = await kc.list(kind, namespace=ns, labels=labels, api_version=api_version)
        except NotFound:  # a custom kind the cluster does not serve
            return []
        except ClusterError as e:
            missing.append(f"{kind} objects: {e}")
            return []
        return items

    found = await asyncio.gather(*(one(k, v) for k, v in kinds))
    return [_elide(o) for items in found for o in items]


async def _logs(kc: KubeClient, ns: str, pods: list[Obj], missing: list[str]) -> dict[str, str]:
    """file name -> log text, for every pod (and its previous run where it restarted)."""
    asks: list[tuple[str, str, bool]] = []
    for pod in pods:
        name = str(pod["metadata"]["name"])
        asks.append((name, f"{name}.log", False))
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        if any(int(cs.get("restartCount") or 0) > 0 for cs in statuses):
            asks.append((name, f"{name}.previous.log", True))

    async def one(pod: str, file: str, previous: bool) -> tuple[str, str | None]:
        try:
            text = await kc.logs(pod, namespace=ns, container=CONTAINER_NAME, previous=previous)
        except ClusterError as e:
            missing.append(f"logs/{file}: {str(e).splitlines()[0]}")
            return file, None
        return file, text

    got = await bounded(16, [functools.partial(one, *a) for a in asks])
    return {file: text for file, text in got if text is not None}


def _readme(
    run_id: str,
    ns: str,
    server: str,
    counts: dict[str, int],
    missing: list[str],
    gone: list[str],
    *,
    show_env: bool,
) -> str:
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    lines = [
        f"nccl-k8s debug bundle of run {run_id} in namespace {ns}",
        f"taken {stamp} from {server}",
        "",
        "doctor.txt, doctor.json  why each pod is where it is (`nccl-k8s doctor --run`)",
        f"objects/                {counts['objects']} objects of the run as YAML ({counts['pods']} pods)",
        f"events.yaml             {counts['events']} events about them",
        f"logs/                   {counts['logs']} pod logs (.previous.log: the run before a restart)",
        f"nodes/                  {counts['nodes']} nodes the pods were placed on",
        "",
        "The engine zipapp in the ConfigMap's binaryData is elided (its size is kept).",
        "The values of --env are kept (bundle --show-env)."
        if show_env
        else "The values of --env are redacted (they may be secrets; bundle --show-env keeps them).",
    ]
    if gone:
        lines += ["", "Kept from what the deploy saw:", *(f"  {g}" for g in gone)]
    if missing:
        lines += ["", "Not available:", *(f"  {m}" for m in missing)]
    return "\n".join(lines) + "\n"


def _tar(path: Path, root: str, files: dict[str, bytes]) -> None:
    """Write the archive atomically: a reader never sees half a bundle. Its directory must
    exist (the CLI checked it before reading the run; nothing is created on a typo)."""
    from nccl_k8s.results.schema import umask_mode

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, umask_mode())  # as open() would: mkstemp's 0600 hides it from teammates
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            now = time.time()
            for name, data in files.items():
                info = tarfile.TarInfo(f"{root}/{name}")
                info.size, info.mtime, info.mode = len(data), int(now), 0o644
                tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def gone_pods(
    seen: dict[str, Obj], present: set[str], culprit: str | None, tail: list[str]
) -> tuple[list[Obj], dict[str, str], list[str]]:
    """The pods seen that the API no longer has (as last seen), the culprit's log from the
    lines the failure quotes (`tail`: a header, then lines indented by two spaces), and what
    README.txt says of them."""
    gone = [_elide(p) for name, p in sorted(seen.items()) if name not in present]
    logs: dict[str, str] = {}
    notes = [
        f"objects/pod-{p['metadata']['name']}.yaml: gone when the bundle was taken (a failed "
        "Job deletes its pods still running); as the deploy last saw it"
        for p in gone
    ]
    if culprit is not None and culprit not in present and tail[1:]:
        logs[f"{culprit}.log"] = "".join(line.removeprefix("  ") + "\n" for line in tail[1:])
        notes.append(
            f"logs/{culprit}.log: only the last {len(tail) - 1} lines, as the failure quoted "
            "them (the pod was gone)"
        )
    return gone, logs, notes


async def write_bundle(
    kc: KubeClient,
    ns: str,
    run_id: str,
    path: Path,
    *,
    seen: dict[str, Obj] | None = None,
    culprit: str | None = None,
    tail: list[str] | None = None,
    show_env: bool = False,
) -> Bundled:
    """Read everything about the run and write it to `path` (.tar.gz). `seen`, `culprit` and
    `tail`: what a monitor saw of the failed run (gone_pods); `show_env`: keep the values of
    the user's --env (redact_env otherwise)."""
    missing: list[str] = []
    explained = await gather(kc, ns, run_id)  # NotFound when there is no such run
    objects = await _objects(kc, ns, run_id, missing)
    pods = [o for o in objects if o.get("kind") == "Pod"]
    present = {str(p["metadata"]["name"]) for p in pods}
    gone, gone_logs, gone_notes = gone_pods(seen or {}, present, culprit, tail or [])
    objects += gone
    names = {str(o["metadata"]["name"]) for o in objects}
    uids = {str(o["metadata"].get("uid")) for o in objects}
    try:
        events, _ = await kc.list("Event", namespace=ns)
    except ClusterError as e:
        events = []
        missing.append(f"events: {e}")
    events = [
        e
        for e in events
        if (e.get("involvedObject") or {}).get("name") in names
        or (e.get("involvedObject") or {}).get("uid") in uids
    ]
    events.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    logs, nodes = await asyncio.gather(
        _logs(kc, ns, pods, missing),
        node_objects(
            kc, {str(n) for p in pods + gone if (n := (p.get("spec") or {}).get("nodeName"))}
        ),
    )
    logs.update(gone_logs)
    files: dict[str, bytes] = {
        "doctor.txt": table_text(explained).encode(),
        "doctor.json": (json.dumps(explained.to_dict(), indent=1) + "\n").encode(),
    }
    for obj in objects:
        kind, name = str(obj.get("kind")).lower(), obj["metadata"]["name"]
        files[f"objects/{kind}-{name}.yaml"] = _yaml(obj if show_env else redact_env(obj))
    files["events.yaml"] = _yaml(events)
    for file, text in logs.items():
        files[f"logs/{file}"] = text.encode()
    for name, node in nodes.items():
        if node is None:
            missing.append(f"nodes/{name}.yaml: could not be read")
            continue
        files[f"nodes/{name}.yaml"] = _yaml(node)
    counts = {
        "objects": len(objects),
        "pods": len(pods) + len(gone),
        "events": len(events),
        "logs": len(logs),
        "nodes": sum(1 for n in nodes.values() if n is not None),
    }
    readme = _readme(run_id, ns, kc.server, counts, missing, gone_notes, show_env=show_env)
    files = {"README.txt": readme.encode(), **files}
    await asyncio.to_thread(_tar, path, run_id, files)
    return Bundled(run_id, ns, path, missing=missing, **counts)


def bundle_path(run_id: str) -> Path:
    """Where a run's bundle goes when no path is given: the current directory."""
    return Path(f"{run_id}.bundle.tar.gz")


def bundle(
    run_id: str | None = None,
    *,
    client: ClientSettings,
    namespace: str | None = None,
    path: Path | None = None,
    show_env: bool = False,
) -> Bundled:
    """Write the run's debug bundle (the latest run in the namespace without `run_id`) to
    `path`, by default `<run-id>.bundle.tar.gz` in the current directory; the values of the
    user's --env redacted unless `show_env`."""

    async def main(kc: KubeClient) -> Bundled:
        ns = await namespace_of(kc, namespace)
        rid = await resolve_run(kc, ns, run_id)
        return await write_bundle(kc, ns, rid, path or bundle_path(rid), show_env=show_env)

    return run_sync(main, client)


__all__ = [
    "BUNDLED_KINDS",
    "REDACTED_ENV",
    "Bundled",
    "bundle",
    "bundle_path",
    "redact_env",
    "write_bundle",
]
