"""Issue 11: `--gang volcano|coscheduling` PodGroups against the schedulers' CRD schemas, and the
rendered pods against the official Pod Security Standards (tests/cluster/admission.py). Issue 13:
`--pod-monitor`'s PodMonitor against the Prometheus Operator's CRD schema, the same way.

The PodGroups are applied to a test cluster serving the two CRDs (tests/data/crds: Volcano's and
scheduler-plugins' own CRDs, verbatim): the API server prunes, defaults and validates
them against those schemas, so a wrong field or type is a 400/422 here as on a real cluster."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cluster import admission, crds
from tests.cluster.cluster import Cluster
from tests.conftest import fresh_namespace
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.k8s import ClientSettings, render
from nccl_k8s.k8s.api._client import KubeClient
from nccl_k8s.k8s.rendering._presets import pod_security_level
from nccl_k8s.spec import GANGS, build_run_spec

CRDS = Path(__file__).parent / "data" / "crds"
GANG_SCHEDULERS = ("default-scheduler", "volcano", "scheduler-plugins-scheduler", "koord-scheduler")
#: --gang -> the CRD of its PodGroup under tests/data/crds.
GANG_CRDS = {
    "volcano": "volcano-podgroups.yaml",
    "coscheduling": "coscheduling-podgroups.yaml",
    "koordinator": "koordinator-podgroups.yaml",
}


def _crd_schema(name: str) -> dict[str, Any]:
    (crd,) = crds.published(name)
    return crds.storage_schema(crd)


@pytest.mark.parametrize(("gang", "crd"), sorted(GANG_CRDS.items()))
@pytest.mark.parametrize("shape", [{"world_size": 16}, {"world_size": 6, "gpus_per_node": 3}])
def test_rendered_pod_groups_pass_their_crd_schema(
    gang: str, crd: str, shape: dict[str, Any]
) -> None:
    spec = build_run_spec(run_id="g", gang=gang, priority_class="hi", **shape)
    group = next(o for o in render(spec) if o["kind"] == "PodGroup")
    schema = _crd_schema(crd)
    assert crds.schema_causes(group, schema) == []
    assert crds.unknown_fields(group, schema) == []  # nothing a real API server would prune


@pytest.fixture(scope="module")
def gang_cluster(cluster_factory: Callable[..., Cluster]) -> Cluster:
    c = cluster_factory(nodes=2, gpus_per_node=1, schedulers=GANG_SCHEDULERS)
    crds.install_published(c.store)
    return c


@pytest.fixture
def ns(gang_cluster: Cluster) -> Iterator[str]:
    with fresh_namespace(gang_cluster, "gang") as name:
        yield name


def test_every_gang_of_the_table_has_its_crd_here() -> None:
    assert sorted(GANG_CRDS) == sorted(GANGS)
    for gang, crd in GANG_CRDS.items():
        (doc,) = crds.published(crd)
        entry = GANGS[gang]
        assert doc["metadata"]["name"] == f"{entry.plural}.{entry.group}"
        assert doc["spec"]["names"]["kind"] == entry.kind
        assert entry.version in [v["name"] for v in doc["spec"]["versions"] if v["served"]]


@pytest.mark.parametrize("gang", sorted(GANG_CRDS))
def test_the_api_server_accepts_the_pod_group_through_our_client(
    gang_cluster: Cluster, ns: str, gang: str
) -> None:
    spec = build_run_spec(
        world_size=2, gpus_per_node=1, run_id=f"pg-{gang[:4]}", namespace=ns, gang=gang
    )
    group = next(o for o in render(spec) if o["kind"] == "PodGroup")

    async def roundtrip() -> tuple[Any, Any, bool, Any]:
        async with KubeClient.connect(
            ClientSettings(kubeconfig=str(gang_cluster.kubeconfig))
        ) as kc:
            applied = await kc.apply(group)
            got = await kc.get(
                "PodGroup", spec.run_id, namespace=ns, api_version=group["apiVersion"]
            )
            gone = await kc.delete(
                "PodGroup", spec.run_id, namespace=ns, api_version=group["apiVersion"]
            )
            after = await kc.get(
                "PodGroup", spec.run_id, namespace=ns, api_version=group["apiVersion"]
            )
            return applied, got, gone, after

    applied, got, gone, after = asyncio.run(roundtrip())
    assert applied["spec"]["minMember"] == 2 == got["spec"]["minMember"]
    assert got["spec"]["minResources"] == {"nvidia.com/gpu": "2", "cpu": "4", "memory": "24Gi"}
    assert gone is True and after is None


def test_deploy_with_a_gang_creates_the_group_the_workload_owns(
    gang_cluster: Cluster, ns: str, tmp_path: Path
) -> None:
    argv = [
        "deploy", "--kubeconfig", str(gang_cluster.kubeconfig), "-n", ns, "--run-id", "gangrun",
        "--world-size", "2", "--gpus-per-node", "1", "--gang", "volcano", "--no-wait",
        "--", "--backend", "gloo", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0",
    ]  # fmt: skip
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    group = gang_cluster.store.get("podgroups.scheduling.volcano.sh", ns, "gangrun")
    job = gang_cluster.store.get("jobs", ns, "gangrun")
    assert group["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    template = job["spec"]["template"]
    assert template["spec"]["schedulerName"] == "volcano"
    assert template["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "gangrun"
    # Deleting the workload takes the group with it (the garbage collector's cascade).
    gang_cluster.store.delete("jobs", ns, "gangrun")
    with pytest.raises(Exception, match="not found"):
        gang_cluster.store.get("podgroups.scheduling.volcano.sh", ns, "gangrun")


def test_deploy_with_koordinator_binds_the_pods_by_its_label(
    gang_cluster: Cluster, ns: str
) -> None:
    argv = [
        "deploy", "--kubeconfig", str(gang_cluster.kubeconfig), "-n", ns, "--run-id", "koordrun",
        "--world-size", "2", "--gpus-per-node", "1", "--gang", "koordinator", "--no-wait",
        "--", "--backend", "gloo", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0",
    ]  # fmt: skip
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    group = gang_cluster.store.get("podgroups.scheduling.sigs.k8s.io", ns, "koordrun")
    assert group["spec"]["minMember"] == 2
    template = gang_cluster.store.get("jobs", ns, "koordrun")["spec"]["template"]
    assert template["spec"]["schedulerName"] == "koord-scheduler"
    assert template["metadata"]["labels"]["pod-group.scheduling.sigs.k8s.io"] == "koordrun"


def test_deploy_names_a_missing_crd(cluster: Cluster, namespace: str) -> None:
    argv = [
        "deploy", "--kubeconfig", str(cluster.kubeconfig), "-n", namespace, "--run-id", "nocrd",
        "--world-size", "2", "--gpus-per-node", "1", "--gang", "coscheduling", "--no-wait",
    ]  # fmt: skip
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 1, result.output
    assert "does not serve PodGroup scheduling.x-k8s.io/v1alpha1" in result.output
    assert "CustomResourceDefinition is not installed" in result.output
    # Nothing of the run is left (the deploy undoes what it created).
    assert (
        cluster.store.list(
            "configmaps", namespace, label_selector="app.kubernetes.io/instance=nocrd"
        )[0]
        == []
    )


# ---- --pod-monitor: the Prometheus Operator's PodMonitor (issue 13) --------------------------


@pytest.mark.parametrize("workload", ["job", "statefulset"])
def test_rendered_pod_monitor_passes_its_crd_schema(workload: str) -> None:
    spec = build_run_spec(run_id="pm", world_size=16, workload=workload, pod_monitor=True)
    objs = render(spec)
    monitor = next(o for o in objs if o["kind"] == "PodMonitor")
    schema = _crd_schema("monitoring-podmonitors.yaml")
    assert crds.schema_causes(monitor, schema) == []
    assert crds.unknown_fields(monitor, schema) == []
    # It selects exactly the run's pods, by the port name their container declares.
    template = objs[-1]["spec"]["template"]
    labels = template["metadata"]["labels"]
    assert all(labels[k] == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    names = {p["name"] for p in template["spec"]["containers"][0]["ports"]}
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] in names


def test_deploy_with_a_pod_monitor_creates_it_owned_by_the_workload(
    gang_cluster: Cluster, ns: str
) -> None:
    argv = [
        "deploy", "--kubeconfig", str(gang_cluster.kubeconfig), "-n", ns, "--run-id", "pmrun",
        "--world-size", "2", "--gpus-per-node", "1", "--pod-monitor", "--label", "release=prom",
        "--no-wait", "--", "--backend", "gloo", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0",
    ]  # fmt: skip
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert "PodMonitor/pmrun" in result.output
    monitor = gang_cluster.store.get("podmonitors.monitoring.coreos.com", ns, "pmrun")
    job = gang_cluster.store.get("jobs", ns, "pmrun")
    assert monitor["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert monitor["metadata"]["labels"]["release"] == "prom"  # what a Prometheus selects by
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics"}]


def test_deploy_names_a_missing_prometheus_operator(cluster: Cluster, namespace: str) -> None:
    argv = [
        "deploy", "--kubeconfig", str(cluster.kubeconfig), "-n", namespace, "--run-id", "nopm",
        "--world-size", "2", "--gpus-per-node", "1", "--pod-monitor", "--no-wait",
    ]  # fmt: skip
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 1, result.output
    assert "does not serve PodMonitor monitoring.coreos.com/v1" in result.output
    assert "install the Prometheus Operator, or deploy without --pod-monitor" in result.output
    labels = "app.kubernetes.io/instance=nopm"
    assert cluster.store.list("services", namespace, label_selector=labels)[0] == []


# ---- Pod Security Standards -----------------------------------------------------------------


def _pod(**options: Any) -> dict[str, Any]:
    return render(build_run_spec(run_id="psa", world_size=16, **options))[-1]["spec"]["template"][
        "spec"
    ]  # type: ignore[no-any-return]


PROFILES: dict[str, dict[str, Any]] = {
    "socket": {},
    "socket+host-network": {"host_network": True},
    "rdma": {"network": "ib", "rdma_resource": ["rdma/ib=1"]},
    "host": {"security": "host", "network": "roce", "rdma_resource": ["rdma/roce=1"]},
    "privileged": {"security": "privileged"},
}


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_each_profile_passes_exactly_the_level_render_declares(profile: str) -> None:
    options = PROFILES[profile]
    declared = pod_security_level(build_run_spec(run_id="psa", world_size=16, **options))
    pod = _pod(**options)
    passes = [lv for lv in admission.LEVELS if not admission.violations(pod, lv)]
    assert declared == passes[-1]  # the strictest level the official rules let through


@pytest.mark.parametrize(
    ("options", "level"),
    [
        ({"pod_annotation": ["container.apparmor.security.beta.kubernetes.io/bench=unconfined"]}, "privileged"),
        ({"annotation": ["container.apparmor.security.beta.kubernetes.io/bench=unconfined"]}, "privileged"),
        ({"pod_annotation": ["container.apparmor.security.beta.kubernetes.io/bench=runtime/default"]}, "restricted"),
        ({"pod_annotation": ["container.apparmor.security.beta.kubernetes.io/bench=localhost/nccl"]}, "restricted"),
    ],
)  # fmt: skip
def test_the_level_counts_the_users_annotations(options: dict[str, Any], level: str) -> None:
    """Issue 36: an AppArmor annotation that makes the bench container unconfined rendered
    "restricted"; the level render declares is the one the official rules give the pod."""
    spec = build_run_spec(run_id="psa", world_size=16, **options)
    template = render(spec)[-1]["spec"]["template"]
    passes = [
        lv
        for lv in admission.LEVELS
        if not admission.violations(template["spec"], lv, template["metadata"])
    ]
    assert pod_security_level(spec) == passes[-1] == level


def test_socket_passes_restricted_and_the_others_say_why_not() -> None:
    assert admission.violations(_pod(**PROFILES["socket"]), "restricted") == []
    assert admission.violations(_pod(**PROFILES["rdma"]), "baseline") == [
        'non-default capabilities (container "bench" must not include "IPC_LOCK" in '
        "securityContext.capabilities.add)"
    ]
    host = admission.violations(_pod(**PROFILES["host"]), "baseline")
    assert host[0].startswith("non-default capabilities")  # in check-id order, as upstream
    assert host[1] == "host namespaces (hostNetwork=true, hostIPC=true)"
    # Under hostNetwork both the rendezvous and the metrics port are the node's.
    assert re.fullmatch(r'hostPorts? \(container "bench" uses hostPorts \d+, 8080\)', host[2])
    assert admission.violations(_pod(**PROFILES["privileged"]), "baseline") == [
        'privileged (container "bench" must not set securityContext.privileged=true)'
    ]
