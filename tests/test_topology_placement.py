"""Issue 37, the rendering side: each platform names its topology labels coarse to fine
(spec.platforms, the entry's `topology`), `--topology auto|none|LABEL[,LABEL]` picks them and
`--placement required|preferred` how hard the pods are held to one domain: Kueue's TAS
annotations under --queue, pod affinity otherwise; eks-efa always one zone, --compute-domain
always one NVLink clique. Render-level only (no pods run)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.errors import UsageError
from nccl_k8s.k8s import render
from nccl_k8s.spec import build_run_spec, with_platform
from nccl_k8s.spec.platforms import PLATFORMS, TOPOGRAPH_LABELS, ZONE_LABEL


def load_yaml_docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


SELECTOR = {
    "app.kubernetes.io/name": "nccl-k8s",
    "app.kubernetes.io/instance": "topo",
    "app.kubernetes.io/component": "worker",
}
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"


def _template(platform: str = "generic", **options: object) -> dict[str, Any]:
    options.setdefault("world_size", 16)
    spec = build_run_spec(run_id="topo", **options)  # type: ignore[arg-type]
    if platform != "generic":
        spec = with_platform(spec, platform, devices=8, instance_type=None)
    job = next(o for o in render(spec) if o["kind"] == "Job")
    return job["spec"]["template"]  # type: ignore[no-any-return]


def _keys(terms: list[dict[str, Any]]) -> list[str]:
    return [t.get("podAffinityTerm", t)["topologyKey"] for t in terms]


def test_every_platform_names_its_topology_coarse_to_fine() -> None:
    assert set(PLATFORMS) == {
        "generic", "eks-efa", "gke-tcpx", "gke-tcpxo", "gke-rdma", "coreweave", "nebius",
        "together", "aks-ib", "oke-roce",
    }  # fmt: skip
    for p in PLATFORMS.values():
        assert p.topology, p.name
        assert len(set(p.topology)) == len(p.topology), p.name
    assert PLATFORMS["generic"].topology == (ZONE_LABEL, *TOPOGRAPH_LABELS)
    assert PLATFORMS["eks-efa"].topology == tuple(
        f"topology.k8s.aws/network-node-layer-{n}" for n in (1, 2, 3, 4)
    )
    for gke in ("gke-tcpx", "gke-tcpxo", "gke-rdma"):
        assert PLATFORMS[gke].topology == (
            "cloud.google.com/gce-topology-block",
            "cloud.google.com/gce-topology-subblock",
            "cloud.google.com/gce-topology-host",
        )
    assert PLATFORMS["aks-ib"].topology[-1] == "ib/torset"


def test_preferred_is_the_default_one_weighted_term_per_level_finer_heavier() -> None:
    affinity = _template(platform="gke-tcpxo")["spec"]["affinity"]["podAffinity"]
    assert REQUIRED not in affinity
    terms = affinity[PREFERRED]
    assert _keys(terms) == list(PLATFORMS["gke-tcpxo"].topology)
    weights = [t["weight"] for t in terms]
    assert weights == sorted(weights) and weights[-1] == 100 and weights[0] >= 1
    assert all(t["podAffinityTerm"]["labelSelector"]["matchLabels"] == SELECTOR for t in terms)


def test_required_holds_every_pod_in_one_domain_of_the_coarsest_level() -> None:
    affinity = _template(
        topology="cloud.google.com/gce-topology-block,cloud.google.com/gce-topology-subblock",
        placement="required",
    )["spec"]["affinity"]["podAffinity"]
    assert affinity == {
        REQUIRED: [
            {
                "labelSelector": {"matchLabels": SELECTOR},
                "topologyKey": "cloud.google.com/gce-topology-block",
            }
        ]
    }


def test_eks_efa_keeps_every_pod_in_one_zone_whatever_the_topology_says() -> None:
    for options in ({}, {"topology": "none"}, {"placement": "required"}):
        affinity = _template(platform="eks-efa", **options)["spec"]["affinity"]["podAffinity"]
        assert affinity[REQUIRED][0] == {
            "labelSelector": {"matchLabels": SELECTOR},
            "topologyKey": "topology.kubernetes.io/zone",
        }, options
    # Other platforms have no such rule.
    assert REQUIRED not in _template(platform="gke-tcpxo")["spec"]["affinity"]["podAffinity"]


def test_render_cli_eks_efa_keeps_every_pod_in_one_zone() -> None:
    out = CliRunner().invoke(
        app,
        [
            "render",
            "--world-size",
            "16",
            "--platform",
            "eks-efa",
            "--instance-type",
            "p5.48xlarge",
            "--run-id",
            "topo",
        ],
    )
    assert out.exit_code == 0, out.output
    job = next(d for d in load_yaml_docs(out.output) if d["kind"] == "Job")
    terms = job["spec"]["template"]["spec"]["affinity"]["podAffinity"][REQUIRED]
    assert {"labelSelector": {"matchLabels": SELECTOR}, "topologyKey": ZONE_LABEL} in terms


def test_queued_run_carries_kueue_required_topology_and_no_topology_affinity() -> None:
    template = _template(
        queue="q", topology="cloud.google.com/gce-topology-block", placement="required"
    )
    assert template["metadata"]["annotations"][KUEUE_REQUIRED] == (
        "cloud.google.com/gce-topology-block"
    )
    assert KUEUE_PREFERRED not in template["metadata"]["annotations"]
    assert "podAffinity" not in template["spec"]["affinity"]  # Kueue places the pods


def test_queued_preferred_names_the_finest_level() -> None:
    template = _template(queue="q", topology="a.example/block,a.example/rack")
    assert template["metadata"]["annotations"][KUEUE_PREFERRED] == "a.example/rack"
    assert KUEUE_REQUIRED not in template["metadata"]["annotations"]


def test_queued_with_auto_places_by_affinity_not_by_a_level_kueue_may_lack() -> None:
    template = _template(queue="q")
    assert not {KUEUE_REQUIRED, KUEUE_PREFERRED} & set(template["metadata"]["annotations"])
    assert PREFERRED in template["spec"]["affinity"]["podAffinity"]


def test_render_cli_queue_topology_required_carries_the_kueue_annotation() -> None:
    out = CliRunner().invoke(
        app,
        [
            "render",
            "--world-size",
            "16",
            "--queue",
            "q",
            "--topology",
            "cloud.google.com/gce-topology-block",
            "--placement",
            "required",
        ],
    )
    assert out.exit_code == 0, out.output
    job = next(d for d in load_yaml_docs(out.output) if d["kind"] == "Job")
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert annotations[KUEUE_REQUIRED] == "cloud.google.com/gce-topology-block"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"


def test_none_renders_no_topology_placement_and_one_pod_needs_none() -> None:
    assert "podAffinity" not in _template(topology="none")["spec"]["affinity"]
    assert "podAffinity" not in _template(world_size=8)["spec"]["affinity"]


def test_compute_domain_keeps_its_clique_through_the_same_rule() -> None:
    affinity = _template(compute_domain=True, topology="none")["spec"]["affinity"]["podAffinity"]
    assert _keys(affinity[REQUIRED]) == ["nvidia.com/gpu.clique"]
    both = _template(compute_domain=True, placement="required", topology="x.example/rack")
    assert _keys(both["spec"]["affinity"]["podAffinity"][REQUIRED]) == [
        "nvidia.com/gpu.clique",
        "x.example/rack",
    ]


@pytest.mark.parametrize("bad", ["", "a b", "auto,", "-x"])
def test_a_topology_that_is_no_label_key_is_refused_in_one_line(bad: str) -> None:
    with pytest.raises(UsageError, match=r"^--topology .*; expected auto, none or label keys"):
        build_run_spec(world_size=16, topology=bad)


def test_placement_is_one_of_two() -> None:
    with pytest.raises(UsageError, match="--placement"):
        build_run_spec(world_size=16, placement="always")


# --- Kueue's own Topology CRD and the upstream schemas ------------------------------------------


def test_kueue_topology_crd_is_served_and_takes_each_platforms_levels() -> None:
    """tests/data/crds/kueue-topologies.yaml (Kueue v0.19.2, verbatim; SOURCES.md), which the
    test cluster serves (crds.install_published): a Topology whose levels are a platform's
    labels passes Kueue's own schema, so --topology auto's levels can be a TAS Topology's."""
    from tests.cluster import crds

    (crd,) = crds.published("kueue-topologies.yaml")
    assert crd["metadata"]["name"] == "topologies.kueue.x-k8s.io"
    schema = crds.storage_schema(crd)
    for platform in PLATFORMS.values():
        levels = [{"nodeLabel": key} for key in (*platform.topology, "kubernetes.io/hostname")]
        topology = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Topology",
            "metadata": {"name": platform.name},
            "spec": {"levels": levels},
        }
        assert crds.schema_causes(topology, schema) == [], platform.name
        assert crds.unknown_fields(topology, schema) == [], platform.name


@pytest.mark.parametrize("version", ["1.29", "1.37"])
@pytest.mark.parametrize(
    "options",
    [
        {"queue": "q", "topology": "cloud.google.com/gce-topology-block", "placement": "required"},
        {
            "queue": "q",
            "topology": "cloud.google.com/gce-topology-block",
            "workload": "statefulset",
        },
        {"placement": "required"},
        {"topology": "none"},
        {},
    ],
)
def test_the_placed_objects_pass_the_upstream_schemas(
    version: str, options: dict[str, Any]
) -> None:
    for platform in ("generic", "eks-efa"):
        spec = build_run_spec(world_size=16, run_id="topo", **options)
        if platform != "generic":
            spec = with_platform(spec, platform, devices=8, instance_type=None)
        for obj in render(spec):
            if obj["kind"] == "ComputeDomain":
                continue
            kubernetes_validate.validate(obj, version, strict=True)
