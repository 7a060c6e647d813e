"""The labels and metadata every object of a run carries (rendering._manifests and the
objects rendered beside it). Pure."""

from __future__ import annotations

from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.rendering._names import APP_NAME, RENDERED_ANNOTATION, WORKER
from nccl_k8s.spec import LABEL_COMPONENT, LABEL_INSTANCE, LABEL_MANAGED_BY, LABEL_NAME, RunSpec


def common_labels(spec: RunSpec) -> dict[str, str]:
    """The labels every object of the run carries: user labels, then ours (ours cannot be
    overridden; the spec refuses user labels with these keys)."""
    labels = dict(spec.labels)
    labels.update(
        {
            LABEL_NAME: APP_NAME,
            LABEL_INSTANCE: spec.run_id,
            LABEL_MANAGED_BY: APP_NAME,
        }
    )
    return labels


def selector_labels(spec: RunSpec) -> dict[str, str]:
    """What selects the run's pods (Service, StatefulSet selector, anti-affinity)."""
    return {LABEL_NAME: APP_NAME, LABEL_INSTANCE: spec.run_id, LABEL_COMPONENT: WORKER}


def object_metadata(spec: RunSpec, name: str, **extra_labels: str) -> Obj:
    """An object's metadata: its name, the run's namespace, the run's labels (plus the
    component's), the user's annotations and the render mark that cleanup honours."""
    meta: Obj = {"name": name}
    if spec.namespace is not None:
        meta["namespace"] = spec.namespace
    meta["labels"] = {**common_labels(spec), **extra_labels}
    meta["annotations"] = {**dict(spec.annotations), RENDERED_ANNOTATION: spec.run_id}
    return meta


__all__ = ["common_labels", "object_metadata", "selector_labels"]
