"""Follow a set of objects by watch: list, watch from the list's resourceVersion, relist on 410.

`informer(source)` is the state machine every waiting command uses (deploy --wait, cleanup, the
absent-scheduler check): it keeps the current objects by name and yields an `Update` for every
change, with the whole current set attached, so callers decide on state rather than on single
events. It never sleeps to poll:

- start: list, yield a `synced` update with everything listed, remember the resourceVersion;
- watch from that version; each ADDED/MODIFIED/DELETED updates the set and is yielded;
  BOOKMARKs only advance the version;
- the server ends the stream (its timeout): watch again from the last version;
- no event for `inactivity_timeout_s`: the connection may be half-dead, so drop it and watch
  again from the last version (kopf's "inactivity timeout");
- 410 Gone (`Expired`): the version is too old, so relist and yield a `synced` update that
  replaces the set (objects deleted meanwhile disappear);
- the connection drops (`Unreachable`): watch again from the last version after a short,
  growing back-off; `max_reconnects` drops in a row without a single event give up and re-raise.

The source is a small protocol (`list`, `watch`) so tests drive the machine with scripted event
streams; `k8s.lifecycle` binds it to `KubeClient`. No HTTP here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

from nccl_k8s.errors import Expired, Unreachable
from nccl_k8s.k8s.api._types import Obj

T = TypeVar("T")


class WatchSource(Protocol):
    """What the informer needs: a list with its resourceVersion, and a watch from a version."""

    async def list(self) -> tuple[list[Obj], str]: ...

    def watch(self, resource_version: str) -> AsyncIterator[tuple[str, Obj]]: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class WatchSettings:
    """How patient a watch is."""

    inactivity_timeout_s: float = 60.0
    """Seconds without any event before the stream is presumed dead and re-opened from the last
    resourceVersion. A minute: pods of a running benchmark can be quiet that long, and a
    re-opened watch costs one request."""
    max_reconnects: int = 5
    """Dropped connections in a row (without an event in between) before giving up: a server
    that keeps dropping us is down, and the user should hear it rather than wait."""
    reconnect_backoff_s: float = 0.2
    """First pause before re-opening a dropped connection; doubles per drop in a row (0.2, 0.4,
    0.8 ... 3.2 s), so a restarting API server is not hammered."""


@dataclasses.dataclass(frozen=True)
class Update:
    """One change, and the objects as they are after it."""

    type: str
    """ADDED, MODIFIED, DELETED, or SYNCED (a list: `objects` replaced wholesale)."""
    obj: Obj | None
    """The object changed (None for SYNCED)."""
    objects: dict[str, Obj]
    """Every current object by name (the informer's own dict: read it, do not keep it)."""


async def within(awaitable: Awaitable[T], timeout_s: float) -> T:
    """`awaitable`'s result, or asyncio.TimeoutError after `timeout_s` (the awaitable is then
    cancelled).

    Not asyncio.wait_for: on Python 3.11 it swallows a cancellation that arrives just as the
    awaited thing completes (gh-86296), and a watch that delivers events while the run ends hit
    exactly that: the informer's task never stopped and deploy hung.
    """
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    except BaseException:
        task.cancel()
        raise
    if not done:
        task.cancel()
        await asyncio.wait({task}, timeout=_CANCEL_WAIT_S)
        raise asyncio.TimeoutError
    return task.result()


#: How long a timed-out read may take to unwind (close its response) before it is left behind.
_CANCEL_WAIT_S = 1.0


def _name(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def _rv(obj: Obj) -> str | None:
    rv = obj.get("metadata", {}).get("resourceVersion")
    return str(rv) if rv else None


async def informer(
    source: WatchSource,
    settings: WatchSettings | None = None,
    *,
    sleep: Callable[[float], Any] = asyncio.sleep,
) -> AsyncGenerator[Update, None]:
    """Updates for the source's objects, forever (the caller stops iterating when it is done)."""
    settings = settings or WatchSettings()
    objects: dict[str, Obj] = {}
    rv: str | None = None
    drops = 0
    while True:
        if rv is None:
            items, rv = await source.list()
            objects = {_name(o): o for o in items}
            yield Update("SYNCED", None, objects)
        stream = source.watch(rv)
        try:
            while True:
                try:
                    etype, obj = await within(stream.__anext__(), settings.inactivity_timeout_s)
                except StopAsyncIteration:
                    break  # the server's timeout: watch again from rv
                except asyncio.TimeoutError:
                    break  # quiet too long: re-open from rv
                drops = 0
                new_rv = _rv(obj)
                if new_rv:
                    rv = new_rv
                if etype == "BOOKMARK":
                    continue
                name = _name(obj)
                if etype == "DELETED":
                    objects.pop(name, None)
                else:
                    objects[name] = obj
                yield Update(etype, obj, objects)
        except Expired:
            rv = None  # too old: relist
        except Unreachable:
            drops += 1
            if drops > settings.max_reconnects:
                raise
            await sleep(settings.reconnect_backoff_s * 2 ** (drops - 1))
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]  # async generators have it


__all__ = ["Update", "WatchSettings", "WatchSource", "informer", "within"]
