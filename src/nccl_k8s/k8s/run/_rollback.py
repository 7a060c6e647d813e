"""A deploy's roll-back by the run's identity, not by which create replies arrived.

An interrupt (Ctrl-C, SIGTERM) or a failure in the create phase may come while a create is on
its way: the server may make the object after the client has stopped waiting, and a roll-back
that deletes only the objects whose reply arrived leaves a lone ConfigMap, or a Job whose pods
go on running to their deadline. So each object this deploy creates carries this attempt's mark
(ATTEMPT_ANNOTATION, a random value per deploy), the create that was on its way is waited for
(bounded) before rolling back, and the roll-back lists each kind the deploy creates by the run's
labels and deletes, each by its uid, what carries this attempt's mark (or whose uid a reply
gave): another deploy's objects of the same run id (a concurrent winner) carry another mark and
stay.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from nccl_k8s.errors import ClusterError
from nccl_k8s.k8s.api._client import KubeClient
from nccl_k8s.k8s.api._types import Kind, Obj
from nccl_k8s.k8s.run._outcomes import Created
from nccl_k8s.k8s.run._plumbing import run_labels

#: On every object a deploy creates (not in what `render` prints): which deploy attempt made it.
ATTEMPT_ANNOTATION = "nccl-k8s/deploy-attempt"
#: How long an interrupted deploy waits for the reply of the create it had sent (the request's
#: own timeout bounds it too): long enough for a slow API server, short for a user's Ctrl-C.
SETTLE_S = 30.0

T = TypeVar("T")


def new_attempt() -> str:
    return secrets.token_hex(8)


def marked(obj: Obj, attempt: str) -> Obj:
    """A copy of `obj` whose metadata carries the attempt's mark."""
    meta = dict(obj["metadata"])
    meta["annotations"] = {**(meta.get("annotations") or {}), ATTEMPT_ANNOTATION: attempt}
    return {**obj, "metadata": meta}


async def settled(request: Awaitable[T]) -> T:
    """Await a request that an interrupt must not cut off: on cancellation, wait (bounded) for
    its reply first, so that the roll-back sees what the server made, then cancel on."""
    task = asyncio.ensure_future(request)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(task), SETTLE_S)
        raise


async def roll_back(
    kc: KubeClient,
    namespace: str,
    run_id: str,
    objs: Sequence[Obj],
    attempt: str,
    created: Sequence[Created],
) -> list[str]:
    """Delete, newest kind first and each by its uid, every object of run `run_id` (by its
    labels, per kind `objs` has) that this attempt made, then the namespace if it made one.
    Best effort: a failure here must not hide the error that caused it. Returns `Kind/name` of
    what was deleted."""
    known = {c.uid for c in created}
    gone: list[str] = []
    kinds: dict[tuple[Kind, str | None], None] = {}
    for obj in objs:
        kinds[(obj["kind"], obj.get("apiVersion"))] = None
    for kind, api_version in reversed(list(kinds)):
        found: list[Obj] = []
        with contextlib.suppress(ClusterError):
            found, _ = await kc.list(
                kind, namespace=namespace, labels=run_labels(run_id), api_version=api_version
            )
        for o in found:
            if not _ours(o, attempt, known):
                continue
            name, uid = o["metadata"]["name"], o["metadata"].get("uid")
            with contextlib.suppress(ClusterError):  # Conflict: replaced meanwhile, not ours
                if await kc.delete(
                    kind, name, namespace=namespace, uid=uid, api_version=api_version
                ):
                    gone.append(f"{kind}/{name}")
    # What a reply named and the lists did not find (a list refused or failed), by its uid;
    # then the namespace this deploy made, if it did.
    for c in reversed(created):
        if str(c) in gone:
            continue
        with contextlib.suppress(ClusterError):
            ns = None if c.kind == "Namespace" else namespace
            if await kc.delete(c.kind, c.name, namespace=ns, uid=c.uid, api_version=c.api_version):
                gone.append(str(c))
    return gone


def _ours(obj: Obj, attempt: str, known: set[str]) -> bool:
    meta: Any = obj.get("metadata") or {}
    return (
        meta.get("uid") in known
        or (meta.get("annotations") or {}).get(ATTEMPT_ANNOTATION) == attempt
    )


def removed_text(run_id: str, gone: Sequence[str]) -> str:
    """What a roll-back did, for the message."""
    if not gone:
        return f"run {run_id}: nothing of it was created, nothing is left"
    return f"run {run_id} rolled back: deleted {', '.join(gone)}; nothing of it is left"


__all__ = [
    "ATTEMPT_ANNOTATION",
    "marked",
    "new_attempt",
    "removed_text",
    "roll_back",
    "settled",
]
