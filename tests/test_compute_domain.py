"""Issue 20, `--compute-domain` (GB200/GB300 NVL72 through NVIDIA's DRA driver): the rendered
ComputeDomain, the pods' claim of its channel, the clique affinity and NCCL's MNNVL settings,
each named as the driver's docs and the vendors' GB200 references write them (docs/platforms.md
lists the sources), and the objects against the driver's own CRD (tests/data/crds, verbatim from
NVIDIA/k8s-dra-driver-gpu v0.4.0) and the Kubernetes 1.34 schemas."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml
from tests.cluster import crds
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.k8s import render
from nccl_k8s.spec import build_run_spec

#: The selector of the run's pods (app.kubernetes.io/* labels of `cd-run`'s workers).
SELECTOR = {
    "app.kubernetes.io/name": "nccl-k8s",
    "app.kubernetes.io/instance": "cd-run",
    "app.kubernetes.io/component": "worker",
}


def _objs(**extra: Any) -> dict[str, Any]:
    spec = build_run_spec(
        world_size=16, gpus_per_node=4, run_id="cd-run", namespace="bench", **extra
    )
    return {o["kind"]: o for o in render(spec)}


def _pod(objs: dict[str, Any]) -> dict[str, Any]:
    workload = objs.get("Job") or objs["StatefulSet"]
    return workload["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def test_the_compute_domain_names_the_template_the_pods_claim() -> None:
    objs = _objs(compute_domain=True)
    domain = objs["ComputeDomain"]
    assert domain["apiVersion"] == "resource.nvidia.com/v1beta1"
    assert domain["metadata"]["name"] == "cd-run"
    assert domain["metadata"]["namespace"] == "bench"
    assert domain["metadata"]["labels"]["app.kubernetes.io/instance"] == "cd-run"
    # 16 ranks, 4 GPUs per node: 4 pods, one per node, so 4 IMEX daemons.
    assert domain["spec"] == {
        "numNodes": 4,
        "channel": {"resourceClaimTemplate": {"name": "cd-run-channel"}},
    }
    pod = _pod(objs)
    assert pod["resourceClaims"] == [
        {"name": "compute-domain-channel", "resourceClaimTemplateName": "cd-run-channel"}
    ]
    bench = pod["containers"][0]
    assert bench["resources"]["claims"] == [{"name": "compute-domain-channel"}]
    # The GPUs are still the device plugin's, as in the driver's demos.
    assert bench["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_the_domain_is_applied_before_the_workload_that_claims_from_it() -> None:
    kinds = [o["kind"] for o in render(build_run_spec(world_size=8, compute_domain=True))]
    assert kinds.index("ComputeDomain") < kinds.index("Job")


def test_every_pod_must_share_one_nvlink_clique_with_the_others() -> None:
    pod = _pod(_objs(compute_domain=True))
    terms = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == [
        {"labelSelector": {"matchLabels": SELECTOR}, "topologyKey": "nvidia.com/gpu.clique"}
    ]
    # Still one pod per node.
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}


def test_nccl_runs_with_mnnvl_required_and_cumem_on_and_the_users_env_wins() -> None:
    env = _env(_pod(_objs(compute_domain=True)))
    assert env["NCCL_MNNVL_ENABLE"] == "1"
    assert env["NCCL_CUMEM_ENABLE"] == "1"
    mine = _env(_pod(_objs(compute_domain=True, env=["NCCL_MNNVL_ENABLE=2"])))
    assert mine["NCCL_MNNVL_ENABLE"] == "2"


def test_without_the_switch_nothing_of_it_is_rendered() -> None:
    objs = _objs()
    assert "ComputeDomain" not in objs
    pod = _pod(objs)
    assert "resourceClaims" not in pod
    # Only the topology's preferred terms (rendering._topology): no required clique.
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in pod["affinity"]["podAffinity"]
    assert "claims" not in pod["containers"][0]["resources"]
    assert "NCCL_MNNVL_ENABLE" not in _env(pod)


def test_a_statefulset_run_claims_the_same_way() -> None:
    objs = _objs(compute_domain=True, workload="statefulset")
    assert objs["ComputeDomain"]["spec"]["numNodes"] == 4
    assert _pod(objs)["resourceClaims"][0]["resourceClaimTemplateName"] == "cd-run-channel"


@pytest.mark.parametrize("shape", [{"world_size": 16, "gpus_per_node": 4}, {"world_size": 72}])
def test_the_compute_domain_passes_the_drivers_crd(shape: dict[str, Any]) -> None:
    (crd,) = crds.published("nvidia-computedomains.yaml")
    assert crd["metadata"]["name"] == "computedomains.resource.nvidia.com"
    domain = next(
        o
        for o in render(build_run_spec(compute_domain=True, **shape))
        if o["kind"] == "ComputeDomain"
    )
    schema = crds.storage_schema(crd)
    assert crds.schema_causes(domain, schema) == []
    assert crds.unknown_fields(domain, schema) == []  # nothing a real API server would prune


def test_a_field_the_crd_lacks_is_seen() -> None:
    """The check above can fail: a misspelt field is an unknown field of the CRD."""
    (crd,) = crds.published("nvidia-computedomains.yaml")
    domain = _objs(compute_domain=True)["ComputeDomain"]
    domain["spec"]["channel"]["resourceClaimTemplates"] = domain["spec"]["channel"].pop(
        "resourceClaimTemplate"
    )
    schema = crds.storage_schema(crd)
    assert crds.unknown_fields(domain, schema) == ["spec.channel.resourceClaimTemplates"]
    assert crds.schema_causes(domain, schema)  # and the required template is missing


@pytest.mark.parametrize("version", ["1.34", "1.37"])
@pytest.mark.parametrize("workload", ["job", "statefulset"])
def test_the_pods_pass_the_kubernetes_schemas_with_their_claims(
    version: str, workload: str
) -> None:
    for obj in _objs(compute_domain=True, workload=workload).values():
        if obj["kind"] == "ComputeDomain":
            continue
        kubernetes_validate.validate(obj, version, strict=True)


def test_render_prints_the_compute_domain() -> None:
    result = CliRunner().invoke(
        app,
        [
            "render",
            "--world-size",
            "8",
            "--gpus-per-node",
            "4",
            "--run-id",
            "cdr",
            "--compute-domain",
        ],
    )
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.output) if d]
    domain = next(d for d in docs if d["kind"] == "ComputeDomain")
    assert domain["spec"]["channel"]["resourceClaimTemplate"]["name"] == "cdr-channel"
    job = next(d for d in docs if d["kind"] == "Job")
    claims = job["spec"]["template"]["spec"]["resourceClaims"]
    assert claims == [
        {"name": "compute-domain-channel", "resourceClaimTemplateName": "cdr-channel"}
    ]
