"""Shapes shared by the k8s modules: plain API objects and the closed sets of kinds and phases."""

from __future__ import annotations

import datetime
from typing import Any, Literal


def timestamp(text: object) -> datetime.datetime | None:
    """An API object's RFC 3339 time (`2026-12-03T12:00:00Z`); None when absent or malformed."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


#: An API object as the server sends it (the plain JSON dict); the only form above api._client.
Obj = dict[str, Any]

#: The kinds this tool reads or writes.
Kind = Literal[
    "ConfigMap",
    "Service",
    "Pod",
    "Namespace",
    "Node",
    "Event",
    "Job",
    "StatefulSet",
    "PodGroup",
    "ResourceQuota",
    "LimitRange",
    "Lease",
    "LocalQueue",
    "PodMonitor",
    "ComputeDomain",
    "DaemonSet",
    "CustomResourceDefinition",
    "ResourceSlice",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "CronJob",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
]

#: A pod's phase as Kubernetes reports it.
PodPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"]

#: A run's phase as `status` and `list` show it. Job runs: Pending, Running, Succeeded, Failed,
#: Unschedulable (every problem is a scheduling one), Failing (a pod failed, the Job has not
#: yet), Suspended (e.g. waiting for Kueue admission). StatefulSet runs: Pending, Running,
#: Degraded. Orphaned: the workload is gone but other objects of the run remain.
RunPhase = Literal[
    "Pending",
    "Running",
    "Succeeded",
    "Failed",
    "Unschedulable",
    "Failing",
    "Suspended",
    "Degraded",
    "Orphaned",
]

__all__ = ["Kind", "Obj", "PodPhase", "RunPhase"]
