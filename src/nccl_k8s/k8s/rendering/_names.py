"""The names and keys a run's objects carry that code other than the renderer reads: what the
container is called (logs are read from it), the app name our labels carry, the annotations
written on the workload. Constants only, so a reader of one name does not import the renderer.

The label keys themselves are the spec's (nccl_k8s.spec.LABEL_*): the spec refuses user labels
with those keys.
"""

from __future__ import annotations

#: The value of app.kubernetes.io/name and app.kubernetes.io/managed-by on every object of a run.
APP_NAME = "nccl-k8s"

#: The engine's container in every pod (the one whose log holds the results).
CONTAINER_NAME = "bench"

#: On the workload: the strictest Pod Security Admission level its pods pass, so a namespace's
#: `pod-security.kubernetes.io/enforce` label can be checked against it before pods are refused.
PSA_ANNOTATION = "nccl-k8s/pod-security"

#: The annotation a stopped Job carries: why nccl-k8s stopped it (its Failed condition then says
#: DeadlineExceeded, which is how it was stopped, not why).
STOPPED_ANNOTATION = "nccl-k8s/stopped-because"

__all__ = ["APP_NAME", "CONTAINER_NAME", "PSA_ANNOTATION", "STOPPED_ANNOTATION"]
