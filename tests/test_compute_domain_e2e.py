"""Issue 20, acceptance 3: `deploy --compute-domain` on the test cluster. The cluster serves the
DRA driver's ComputeDomain CRD (verbatim, tests/data/crds) and resource.k8s.io/v1; the test plays
NVIDIA's DRA driver: its controller makes the domain's channel ResourceClaimTemplate, and its
allocation gives each pod's claim a channel. Until then the pods stay Pending with the
scheduler's reason; then they run, all in one NVLink clique (nvidia.com/gpu.clique), and
cleanup takes the domain with the run and nothing it did not create."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.cluster import crds, dra
from tests.cluster.cluster import Cluster
from tests.cluster.errors import ApiError
from tests.conftest import fresh_namespace
from tests.e2e_helpers import wait_for
from typer.testing import CliRunner

from nccl_k8s.cli.main import app

pytestmark = pytest.mark.slow

CLIQUE = "nvidia.com/gpu.clique"
#: node -> its NVLink partition, as GPU Feature Discovery labels MNNVL nodes
#: (`<cluster UUID>.<clique id>`): node-1 is in another rack's clique, node-4 has no MNNVL.
CLIQUES = {
    "node-0": "a1b2c3d4-e5f6-7890-abcd-ef1234567890.1",
    "node-1": "a1b2c3d4-e5f6-7890-abcd-ef1234567890.2",
    "node-2": "a1b2c3d4-e5f6-7890-abcd-ef1234567890.1",
    "node-3": "a1b2c3d4-e5f6-7890-abcd-ef1234567890.1",
}
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def nvl_cluster(cluster_factory: Callable[..., Cluster]) -> Cluster:
    c = cluster_factory(nodes=5, gpus_per_node=1)
    crds.install_published(c.store)
    for node, clique in CLIQUES.items():

        def label(obj: Obj, clique: str = clique) -> None:
            obj["metadata"].setdefault("labels", {})[CLIQUE] = clique

        c.store.mutate("nodes", None, node, label)
    return c


@pytest.fixture
def ns(nvl_cluster: Cluster) -> Iterator[str]:
    with fresh_namespace(nvl_cluster, "cd") as name:
        yield name


def _channel_template(domain: Obj) -> Obj:
    """The template the driver's controller makes for a domain
    (k8s-dra-driver-gpu v0.4.0, templates/compute-domain-workload-claim-template.tmpl.yaml)."""
    meta = domain["metadata"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": domain["spec"]["channel"]["resourceClaimTemplate"]["name"],
            "namespace": meta["namespace"],
            "labels": {"resource.nvidia.com/computeDomain": meta["uid"]},
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "channel",
                            "exactly": {
                                "deviceClassName": "compute-domain-default-channel.nvidia.com"
                            },
                        }
                    ],
                    "config": [
                        {
                            "requests": ["channel"],
                            "opaque": {
                                "driver": "compute-domain.nvidia.com",
                                "parameters": {
                                    "apiVersion": "resource.nvidia.com/v1beta1",
                                    "kind": "ComputeDomainChannelConfig",
                                    "domainID": meta["uid"],
                                    "allocationMode": "Single",
                                },
                            },
                        }
                    ],
                }
            }
        },
    }


def _pods(c: Cluster, ns: str, rid: str) -> list[Obj]:
    return c.store.list("pods", ns, label_selector=f"app.kubernetes.io/instance={rid}")[0]


def _scheduled_message(pod: Obj) -> str:
    conds = (pod.get("status") or {}).get("conditions") or []
    return next((c.get("message", "") for c in conds if c["type"] == "PodScheduled"), "")


def _message_of(c: Cluster, ns: str, name: str, word: str = "") -> Callable[[], str]:
    """The pod's PodScheduled message once it has `word` in it ("" until then)."""

    def message() -> str:
        text = _scheduled_message(c.store.get("pods", ns, name))
        return text if word in text else ""

    return message


def _job_complete(c: Cluster, ns: str, rid: str) -> bool:
    conds = c.store.get("jobs", ns, rid).get("status", {}).get("conditions") or []
    return any(x["type"] == "Complete" and x["status"] == "True" for x in conds)


def test_deploy_with_a_compute_domain_runs_once_the_driver_allocates_the_channels(
    nvl_cluster: Cluster, ns: str
) -> None:
    c, rid = nvl_cluster, "cdrun"
    argv = [
        "deploy", "--kubeconfig", str(c.kubeconfig), "-n", ns, "--run-id", rid,
        "--world-size", "2", "--gpus-per-node", "1", "--compute-domain", "--no-wait",
        "--", "--backend", "gloo", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0",
    ]  # fmt: skip
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert "ComputeDomain/cdrun" in result.output
    domain = c.store.get("computedomains.resource.nvidia.com", ns, rid)
    job = c.store.get("jobs", ns, rid)
    # Served by the driver's CRD (defaults filled in as the API server stores it), owned by
    # the Job like the run's other objects.
    assert domain["spec"]["numNodes"] == 2
    assert domain["spec"]["channel"]["allocationMode"] == "Single"
    assert domain["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]

    # No channel template yet (the driver's controller has not made it): Pending, and why.
    pods = wait_for("2 pods", lambda: len(_pods(c, ns, rid)) == 2 and _pods(c, ns, rid))
    for pod in pods:
        name = pod["metadata"]["name"]
        msg = wait_for(f"{name} unschedulable", _message_of(c, ns, name))
        assert msg == f'pod "{ns}/{name}": ResourceClaim not created yet'

    # The driver's controller makes the template: each pod gets its claim, still unallocated;
    # node-4 (no clique label) is refused by the affinity before the claims are looked at.
    c.store.create("resourceclaimtemplates", _channel_template(domain))
    for pod in pods:
        name = pod["metadata"]["name"]
        msg = wait_for(f"{name} waits for allocation", _message_of(c, ns, name, "allocate"))
        assert msg == (
            "0/5 nodes are available: 1 node(s) didn't match pod affinity rules, "
            "4 cannot allocate all claims."
        )
    claims = c.store.list("resourceclaims", ns)[0]
    assert len(claims) == 2
    assert {x["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] for x in claims} == {
        "compute-domain-default-channel.nvidia.com"
    }
    assert all(p["status"]["phase"] == "Pending" for p in _pods(c, ns, rid))

    # The driver allocates a channel to each claim: the pods run, in one clique.
    for claim in claims:
        dra.allocate(
            c.store, ns, claim["metadata"]["name"], node=None,
            driver="compute-domain.nvidia.com", device="channel-0", pool="imex",
        )  # fmt: skip
    wait_for("the Job completes", lambda: _job_complete(c, ns, rid), timeout_s=300)
    nodes = {p["spec"]["nodeName"] for p in _pods(c, ns, rid)}
    assert len(nodes) == 2
    assert {CLIQUES.get(n) for n in nodes} == {CLIQUES["node-0"]}  # one partition, MNNVL nodes
    for claim in c.store.list("resourceclaims", ns)[0]:
        assert [r["resource"] for r in claim["status"]["reservedFor"]] == ["pods"]

    # Cleanup: the run's domain goes with it; the driver's template and a user's domain stay.
    theirs = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {
            "name": "users-own",
            "namespace": ns,
            "labels": {"app.kubernetes.io/name": "nccl-k8s", "app.kubernetes.io/instance": rid},
        },
        "spec": {"channel": {"resourceClaimTemplate": {"name": "users-own-channel"}}},
    }
    c.store.create("computedomains.resource.nvidia.com", theirs)
    done = CliRunner().invoke(
        app, ["cleanup", "--kubeconfig", str(c.kubeconfig), "-n", ns, "--run", rid]
    )
    assert done.exit_code == 0, done.output
    wait_for("the run's domain deleted", lambda: _gone(c, ns, rid))
    assert c.store.get("computedomains.resource.nvidia.com", ns, "users-own")
    template = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    assert c.store.get("resourceclaimtemplates", ns, template)  # the driver's, not ours


def _gone(c: Cluster, ns: str, name: str) -> bool:
    try:
        c.store.get("computedomains.resource.nvidia.com", ns, name)
    except ApiError as e:
        return e.code == 404
    return False


def test_no_pod_lands_on_a_node_without_the_clique_label(nvl_cluster: Cluster, ns: str) -> None:
    """node-4 has free GPUs but no nvidia.com/gpu.clique: with the other nodes cordoned, the
    pods' required clique affinity keeps them Pending rather than off the NVLink fabric."""
    c, rid = nvl_cluster, "cdnolabel"

    def cordon(on: bool) -> None:
        def mark(obj: Obj) -> None:
            obj["spec"]["unschedulable"] = on

        for node in CLIQUES:
            c.store.mutate("nodes", None, node, mark)

    cordon(True)
    try:
        argv = [
            "deploy", "--kubeconfig", str(c.kubeconfig), "-n", ns, "--run-id", rid,
            "--world-size", "1", "--gpus-per-node", "1", "--compute-domain", "--no-wait",
        ]  # fmt: skip
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 0, result.output
        domain = c.store.get("computedomains.resource.nvidia.com", ns, rid)
        c.store.create("resourceclaimtemplates", _channel_template(domain))
        (pod,) = wait_for("1 pod", lambda: _pods(c, ns, rid))
        name = pod["metadata"]["name"]
        claim = wait_for(
            "its claim",
            lambda: c.store.get("pods", ns, name)["status"]["resourceClaimStatuses"][0],
        )
        dra.allocate(
            c.store, ns, claim["resourceClaimName"], node=None,
            driver="compute-domain.nvidia.com", device="channel-0", pool="imex",
        )  # fmt: skip
        msg = wait_for(
            "affinity refusal",
            lambda: (
                "affinity" in _scheduled_message(c.store.get("pods", ns, name))
                and _scheduled_message(c.store.get("pods", ns, name))
            ),
        )
        assert msg == (
            "0/5 nodes are available: 1 node(s) didn't match pod affinity rules, "
            "4 node(s) were unschedulable."
        )
    finally:
        cordon(False)


# ---- doctor --compute-domain -------------------------------------------------------------------


def _doctor(c: Cluster, ns: str, *args: str) -> dict[str, Obj]:
    argv = ["doctor", "--kubeconfig", str(c.kubeconfig), "-n", ns, "-o", "json", *args]
    res = CliRunner().invoke(app, argv)
    return {x["name"]: x for x in json.loads(res.output)["checks"]}


def test_doctor_fails_each_missing_piece_with_its_hint(cluster: Cluster, namespace: str) -> None:
    """A plain cluster: no driver CRD, no ResourceSlice, no clique label."""
    checks = _doctor(
        cluster, namespace, "--world-size", "8", "--gpus-per-node", "4", "--compute-domain"
    )
    crd = checks["compute-domain-crd"]
    assert crd["status"] == "fail"
    assert "does not serve ComputeDomain resource.nvidia.com/v1beta1" in crd["message"]
    assert "helm install nvidia-dra-driver-gpu nvidia/nvidia-dra-driver-gpu" in crd["hint"]
    driver = checks["compute-domain-driver"]
    assert driver["status"] == "fail"
    assert "no ResourceSlice of the DRA driver compute-domain.nvidia.com" in driver["message"]
    clique = checks["compute-domain-clique"]
    assert clique["status"] == "fail"
    assert "no node has the nvidia.com/gpu.clique label" in clique["message"]
    # Without the switch none of them is asked.
    plain = _doctor(cluster, namespace, "--world-size", "8", "--gpus-per-node", "4")
    assert not [n for n in plain if n.startswith("compute-domain")]


def test_doctor_passes_with_the_driver_and_names_a_clique_too_small(
    nvl_cluster: Cluster, ns: str
) -> None:
    c = nvl_cluster
    for node in ("node-0", "node-2"):
        c.store.create(
            "resourceslices",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{ns}-{node}-compute-domain.nvidia.com"},
                "spec": {
                    "driver": "compute-domain.nvidia.com",
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": "channel-0"}],
                },
            },
        )
    try:
        checks = _doctor(c, ns, "--world-size", "3", "--gpus-per-node", "1", "--compute-domain")
        assert checks["compute-domain-crd"]["status"] == "pass"
        driver = checks["compute-domain-driver"]
        assert (driver["status"], driver["message"]) == (
            "pass",
            "2 node(s) publish compute-domain.nvidia.com devices (node-0, node-2)",
        )
        assert checks["compute-domain-clique"]["status"] == "pass"
        # 4 pods, but the largest clique (node-0, node-2, node-3) has 3 nodes.
        four = _doctor(c, ns, "--world-size", "4", "--gpus-per-node", "1", "--compute-domain")
        clique = four["compute-domain-clique"]
        assert clique["status"] == "fail"
        assert clique["message"] == (
            "the run's 4 pods must share one NVLink clique, but the largest has 3 node(s) "
            f"(nvidia.com/gpu.clique={CLIQUES['node-0']})"
        )
        assert clique["hint"].startswith("use at most 3 nodes (--world-size 3)")
    finally:
        for node in ("node-0", "node-2"):
            c.store.delete("resourceslices", None, f"{ns}-{node}-compute-domain.nvidia.com")
