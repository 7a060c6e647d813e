"""The test cluster serves GKE's multi-network kinds (issue 20): Network and GKENetworkParamSet,
by Google's own CRDs (tests/data/crds/gke-*.yaml, verbatim from GoogleCloudPlatform/
gke-networking-api), so doctor's GKE prerequisites (the Networks the pods name in
networking.gke.io/interfaces) can be created, found and found missing there. The objects are
those of Google's A4X guide ("Create the GKE network objects")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from tests.cluster import crds
from tests.cluster.cluster import Cluster
from tests.conftest import Api

BASE = "/apis/networking.gke.io/v1"


@pytest.fixture(scope="module")
def gke_cluster(cluster_factory: Callable[..., Cluster]) -> Cluster:
    c = cluster_factory(nodes=1, gpus_per_node=1, components=False)
    for file in ("gke-networks.yaml", "gke-gkenetworkparamsets.yaml"):
        for crd in crds.published(file):
            c.store.create("customresourcedefinitions", crd)
    return c


def _params(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "networking.gke.io/v1", "kind": "GKENetworkParamSet",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def _network(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "networking.gke.io/v1", "kind": "Network", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


def test_the_rdma_networks_of_googles_guide_are_served(gke_cluster: Cluster) -> None:
    api = Api(gke_cluster.url)
    code, _ = api.post(
        f"{BASE}/gkenetworkparamsets",
        _params("rdma-0", vpc="a4x-rdma-net", vpcSubnet="a4x-rdma-sub-0", deviceMode="RDMA"),
    )
    assert code == 201
    ref = {"group": "networking.gke.io", "kind": "GKENetworkParamSet", "name": "rdma-0"}
    code, _ = api.post(f"{BASE}/networks", _network("rdma-0", type="Device", parametersRef=ref))
    assert code == 201
    code, got = api.get(f"{BASE}/networks/rdma-0")  # cluster-scoped, as on GKE
    assert code == 200 and got["spec"]["parametersRef"]["name"] == "rdma-0"
    assert api.get(f"{BASE}/networks/rdma-1")[0] == 404  # what doctor reports missing


def test_a_malformed_network_is_refused_by_googles_schema(gke_cluster: Cluster) -> None:
    api = Api(gke_cluster.url)
    code, status = api.post(f"{BASE}/networks", _network("bad", type="Fabric"))
    assert (code, status["reason"]) == (422, "Invalid"), status
    assert "spec.type" in status["message"] and "Device" in status["message"]
    code, status = api.post(
        f"{BASE}/gkenetworkparamsets", _params("bad", vpc="v", deviceMode="InfiniBand")
    )
    assert (code, status["reason"]) == (422, "Invalid"), status
