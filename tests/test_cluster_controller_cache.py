"""The test cluster's controllers keep their own index of pods by owner, fed by events. A pod's
DELETED can come before the controller's own delete call has returned (the kubelet ends a pod at
once; seen beside two CPU hogs in issue 19's suite runs): the terminating copy that call then
records must not bring the pod back, or the StatefulSet's status counts it forever."""

from __future__ import annotations

from typing import Any

from tests.cluster.controllers import StatefulSetController


def _pod(rv: int, **meta: Any) -> dict[str, Any]:
    owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "sts-1"}
    return {
        "metadata": {
            "name": "web-1",
            "namespace": "ns",
            "uid": "pod-1",
            "resourceVersion": str(rv),
            "ownerReferences": [{**owner, "controller": True}],
            **meta,
        }
    }


def test_a_deleted_pod_stays_gone_when_the_delete_calls_terminating_copy_comes_after() -> None:
    c = StatefulSetController(store=None)  # type: ignore[arg-type]  # the index needs no store
    c._cache_pod("ADDED", _pod(5))
    assert [p["metadata"]["name"] for p in c._owned_pods("ns", "sts-1", None)] == ["web-1"]
    c._cache_pod("DELETED", _pod(7, deletionTimestamp="2026-12-04T13:00:00Z"))
    c._cache_pod("MODIFIED", _pod(6, deletionTimestamp="2026-12-04T13:00:00Z"))
    assert c._owned_pods("ns", "sts-1", None) == []
