"""Issue 19: the pods' requests and limits are stated once (rendering's pod_resources); what node
fit places, what doctor counts against quotas and limit ranges, and what the PodGroup sums are
what the rendered pod asks for."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from nccl_k8s.k8s import render
from nccl_k8s.k8s.preflight._nodefit import place, pod_requests
from nccl_k8s.k8s.preflight._preflight import quota_needs
from nccl_k8s.spec import build_run_spec, quantity_value

SPECS: dict[str, dict[str, Any]] = {
    "defaults": {"world_size": 16},
    "one-gpu-pods": {"world_size": 4, "gpus_per_node": 1},
    "cpu-and-memory": {"world_size": 16, "cpu": "12500m", "memory": "200Gi", "shm_size": "64Gi"},
    "guaranteed": {"world_size": 16, "cpu": "32", "memory": "96Gi", "qos": "guaranteed"},
    "rdma": {
        "world_size": 16,
        "network": "ib",
        "rdma_resource": ["rdma/ib=1", "nvidia.com/hostdev=4"],
    },
    "other-gpu-resource": {"world_size": 6, "gpus_per_node": 3, "gpu_resource": "amd.com/gpu"},
    "statefulset": {
        "world_size": 16,
        "workload": "statefulset",
        "memory": "10.5G",
        "shm_size": "1Gi",
    },
}


def _rendered(options: dict[str, Any]) -> tuple[dict[str, Fraction], dict[str, Fraction]]:
    spec = build_run_spec(run_id="res", **options)
    container = render(spec)[-1]["spec"]["template"]["spec"]["containers"][0]
    res = container["resources"]
    return (
        {k: quantity_value(v) for k, v in res["requests"].items()},
        {k: quantity_value(v) for k, v in res["limits"].items()},
    )


@pytest.mark.parametrize("name", sorted(SPECS))
def test_node_fit_asks_what_the_rendered_pod_requests(name: str) -> None:
    spec = build_run_spec(run_id="res", **SPECS[name])
    requests, _ = _rendered(SPECS[name])
    assert pod_requests(spec) == requests


@pytest.mark.parametrize("name", sorted(SPECS))
def test_doctor_counts_the_rendered_requests_and_limits_against_quotas(name: str) -> None:
    spec = build_run_spec(run_id="res", **SPECS[name])
    requests, limits = _rendered(SPECS[name])
    needs = quota_needs(spec)
    for resource, value in requests.items():
        assert needs[f"requests.{resource}"] == value * spec.nodes
    for resource in ("cpu", "memory"):
        assert needs.get(f"limits.{resource}") == (
            limits[resource] * spec.nodes if resource in limits else None
        )


def test_the_rule_itself() -> None:
    requests, limits = _rendered(SPECS["rdma"])
    # Devices are requested = limited; memory is limited; CPU only requested (burstable).
    assert requests == {
        "nvidia.com/gpu": 8,
        "rdma/ib": 1,
        "nvidia.com/hostdev": 4,
        "cpu": 16,
        "memory": quantity_value("40Gi"),  # 4Gi per GPU + the 8Gi of /dev/shm
    }
    assert limits == {k: v for k, v in requests.items() if k != "cpu"}
    guaranteed_requests, guaranteed_limits = _rendered(SPECS["guaranteed"])
    assert (
        guaranteed_limits
        == guaranteed_requests
        == {
            "nvidia.com/gpu": 8,
            "cpu": 32,
            "memory": quantity_value("96Gi"),
        }
    )


def test_node_fit_drops_a_node_short_of_the_rendered_memory_request() -> None:
    spec = build_run_spec(run_id="res", **SPECS["cpu-and-memory"])
    requests, _ = _rendered(SPECS["cpu-and-memory"])

    def node(name: str, memory: Fraction) -> dict[str, Any]:
        allocatable = {"nvidia.com/gpu": "8", "cpu": "64", "memory": str(int(memory))}
        return {
            "metadata": {"name": name},
            "status": {
                "allocatable": allocatable,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }

    placed = place(
        spec, [node("enough", requests["memory"]), node("short", requests["memory"] - 1)]
    )
    assert [v.name for v in placed.eligible] == ["enough"]
    assert placed.dropped == {"short": ("fit", "less than 200Gi memory allocatable")}
