"""The gang scheduler table: every scheduler `--gang NAME` can target, one entry each.

An entry states the facts of one scheduler as its project documents them: the PodGroup kind it
reads (API group and version, kind, plural), the schedulerName its pods ask for, how a pod joins
its group (a label or an annotation whose value is the group's name, the run id here), which
PodGroup spec fields take the run's pod count, the total of its pods' requests and its
--priority-class, and any constant fields the scheduler needs. Every reader takes its facts from
here: --gang's choices and help (spec), the PodGroup and the pods' binding (rendering), the
optional-kinds table (spec._kinds derives each PodGroup's entry from here, with its CRD's source),
which the API client, rbac, doctor's CRD check, cleanup and the debug bundle read.

It lives in spec, not in the Kubernetes layer, because the option's choices come from it and spec
sits below k8s; it holds facts only (strings), the objects are rendered by k8s.rendering. A new
gang scheduler is one entry here plus its tests (its CRD under tests/data/crds).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

#: The kinds a gang entry may name: the API client knows its kinds by name (api._types.Kind),
#: and every gang scheduler so far calls its group a PodGroup.
GroupKind = Literal["PodGroup"]

#: A --gang value: a key of GANGS (a str, not a Literal, so that the table alone defines the set;
#: the option's parser admits only the table's keys).
Gang = str


@dataclasses.dataclass(frozen=True, kw_only=True)
class GangScheduler:
    """One gang scheduler: the PodGroup it reads and how the run's pods join it."""

    name: str
    """The --gang value."""
    shown: str
    """How messages name the project (doctor: `<shown> is not installed`)."""
    api_version: str
    """The PodGroup's apiVersion, `group/version`."""
    scheduler: str
    """The schedulerName the pods ask for (--scheduler overrides it)."""
    bind: Literal["label", "annotation"]
    """Where a pod names its group: a label or an annotation, whose value is the group name."""
    bind_key: str
    """That label's or annotation's key."""
    kind: GroupKind = "PodGroup"
    plural: str = "podgroups"
    """The resource's plural: its URL and its CRD's name (`<plural>.<group>`)."""
    min_member_field: str = "minMember"
    """The PodGroup spec field that takes the number of pods that must be placed together."""
    min_resources_field: str | None = "minResources"
    """The spec field that takes the sum of the pods' requests; None where the kind has none."""
    priority_class_field: str | None = None
    """The spec field that takes --priority-class; None where the kind has none."""
    fixed: tuple[tuple[str, str], ...] = ()
    """Spec fields the scheduler needs that do not depend on the run (field, value)."""
    crd_project: str
    """The repository whose CRD defines the PodGroup (its copy: tests/data/crds)."""
    crd_path: str
    """That CRD's file in the repository."""

    @property
    def group(self) -> str:
        return self.api_version.split("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.split("/")[1]

    @property
    def resource(self) -> str:
        """`podgroups.scheduling.volcano.sh/v1beta1`: the resource as doctor names it."""
        return f"{self.plural}.{self.group}/{self.version}"


#: Volcano: the annotation scheduling.k8s.io/group-name, schedulerName "volcano"; its PodGroup
#: has priorityClassName (volcano-sh/volcano, config/crd/volcano/bases/
#: scheduling.volcano.sh_podgroups.yaml). Coscheduling: the label scheduling.x-k8s.io/pod-group
#: (kubernetes-sigs/scheduler-plugins, pkg/coscheduling/README.md), installed as a second
#: scheduler under the name of its Helm chart's default, "scheduler-plugins-scheduler"
#: (manifests/install/charts/as-a-second-scheduler/values.yaml). Koordinator (v1.8.0): the
#: scheduler-plugins PodGroup of its original group, scheduling.sigs.k8s.io/v1alpha1, joined by
#: the label pod-group.scheduling.sigs.k8s.io (docs/proposals/scheduling/
#: 20220901-gang-scheduling.md; apis/thirdparty/scheduler-plugins/.../v1alpha1/types.go,
#: PodGroupLabel), scheduled by "koord-scheduler" (config/manager/scheduler-config.yaml).
GANGS: dict[Gang, GangScheduler] = {
    g.name: g
    for g in (
        GangScheduler(
            name="volcano",
            shown="Volcano",
            api_version="scheduling.volcano.sh/v1beta1",
            scheduler="volcano",
            bind="annotation",
            bind_key="scheduling.k8s.io/group-name",
            priority_class_field="priorityClassName",
            crd_project="volcano-sh/volcano",
            crd_path="config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml",
        ),
        GangScheduler(
            name="coscheduling",
            shown="the scheduler-plugins coscheduling plugin",
            api_version="scheduling.x-k8s.io/v1alpha1",
            scheduler="scheduler-plugins-scheduler",
            bind="label",
            bind_key="scheduling.x-k8s.io/pod-group",
            crd_project="kubernetes-sigs/scheduler-plugins",
            crd_path="manifests/coscheduling/crd.yaml",
        ),
        GangScheduler(
            name="koordinator",
            shown="Koordinator",
            api_version="scheduling.sigs.k8s.io/v1alpha1",
            scheduler="koord-scheduler",
            bind="label",
            bind_key="pod-group.scheduling.sigs.k8s.io",
            crd_project="koordinator-sh/koordinator",
            crd_path="config/crd/bases/scheduling.sigs.k8s.io_podgroups.yaml",
        ),
    )
}


def gang_help() -> str:
    """--gang's help line, naming every scheduler of the table."""
    names = [g.shown for g in GANGS.values()]
    listed = " or of ".join([", of ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    return f"Gang-schedule the pods (all or none) with a PodGroup of {listed}."


__all__ = ["GANGS", "Gang", "GangScheduler", "GroupKind", "gang_help"]
