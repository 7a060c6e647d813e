"""A run's gang (`--gang`): the PodGroup and what binds the pods to it, both read off the
scheduler's entry in the gang table (nccl_k8s.spec.GANGS), so a new scheduler is an entry there.

The PodGroup is named after the run, minMember = pods and, where the kind has the field, the
sum of every pod's requests as minResources, so the scheduler (and Volcano's queue) admits the
run only when the whole of it fits; the pods carry the scheduler's name and the label or
annotation naming their group.
"""

from __future__ import annotations

from fractions import Fraction

from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.rendering._resources import pod_resources
from nccl_k8s.spec import GANGS, RunSpec, bytes_quantity, cpu_quantity


def scheduler_name(spec: RunSpec) -> str | None:
    """The schedulerName the pods ask for; None for the cluster's default scheduler."""
    gang = GANGS[spec.gang].scheduler if spec.gang is not None else None
    return spec.scheduler_name or gang


def gang_binding(spec: RunSpec) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) a pod carries to join the run's group; empty without --gang."""
    if spec.gang is None:
        return {}, {}
    gang = GANGS[spec.gang]
    bound = {gang.bind_key: spec.run_id}
    return (bound, {}) if gang.bind == "label" else ({}, bound)


def _total(name: str, amount: Fraction) -> str:
    if name == "memory":
        return bytes_quantity(amount)
    if name == "cpu":
        return cpu_quantity(amount)
    return str(int(amount))


def pod_group_spec(spec: RunSpec) -> Obj:
    """The PodGroup's spec, field by field as the scheduler's entry names them."""
    if spec.gang is None:
        raise ValueError("pod_group_spec needs a RunSpec with a gang")
    gang = GANGS[spec.gang]
    out: Obj = {gang.min_member_field: spec.nodes}
    if gang.min_resources_field is not None:
        requests, _ = pod_resources(spec).amounts()
        out[gang.min_resources_field] = {
            name: _total(name, value * spec.nodes) for name, value in requests.items()
        }
    if gang.priority_class_field is not None and spec.priority_class is not None:
        out[gang.priority_class_field] = spec.priority_class
    out.update(gang.fixed)
    return out


__all__ = ["gang_binding", "pod_group_spec", "scheduler_name"]
