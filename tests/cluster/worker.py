"""The controllers' common life: subscribe to the store, replay what is there, run threads
that wait on one condition; stop() wakes them, unsubscribes and joins them. The scheduler, the
Job and StatefulSet controllers and the resourceclaim controller are each one of these."""

from __future__ import annotations

import threading
from collections.abc import Callable

from tests.cluster.node_common import Obj, StoreLike


class StoreWorker:
    """start() / stop() for a store subscriber with threads of its own. A subclass gives
    `_on_change` (the store's callback), `_prime` (what is already in the store, replayed after
    subscribing) and `_loops` (its threads: name and target); its loops wait on `_cond` and
    return once `_stopping` is set."""

    def __init__(self, store: StoreLike) -> None:
        self._store = store
        self._cond = threading.Condition()
        self._stopping = False
        self._threads: list[threading.Thread] = []

    def _on_change(self, etype: str, resource: str, obj: Obj) -> None:
        raise NotImplementedError

    def _prime(self) -> None:
        """Feed what the store holds already through `_on_change` (or its own index)."""

    def _loops(self) -> list[tuple[str, Callable[[], None]]]:
        raise NotImplementedError

    def start(self) -> None:
        self._store.subscribe(self._on_change)
        self._prime()
        for name, target in self._loops():
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        unsubscribe = getattr(self._store, "unsubscribe", None)
        if unsubscribe is not None:
            unsubscribe(self._on_change)
        for thread in self._threads:
            thread.join(timeout=10)
