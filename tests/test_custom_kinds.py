"""The optional kinds table (spec.CUSTOM_KINDS, issue 34): every entry has its project's CRD under
tests/data/crds (or is a built-in API group of Kubernetes), and every reader sees exactly the
table's kinds: the API client's resource classes, rbac, doctor's reads, cleanup and the bundle.
Nothing here names a kind: each check is derived from the table."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lightkube.core import resource as lk_resource
from tests.cluster import crds
from tests.cluster.cluster import Cluster
from tests.e2e_helpers import cli

from nccl_k8s.k8s import ClientSettings
from nccl_k8s.k8s.api._access import ACCESS, RENDER_APPLY
from nccl_k8s.k8s.api._client import KubeClient, load_config
from nccl_k8s.k8s.api._kinds import CLUSTER_SCOPED, CUSTOM, DEFAULT_VERSION, resource
from nccl_k8s.k8s.api._translate import not_served
from nccl_k8s.k8s.preflight._doctor import custom_reads
from nccl_k8s.k8s.run._bundle import BUNDLED_KINDS
from nccl_k8s.k8s.run._cleanup import DELETED_KINDS
from nccl_k8s.spec import (
    CUSTOM_KINDS,
    GANG_KINDS,
    GANGS,
    LOCAL_QUEUE,
    OPTIONS,
    TOPOLOGY,
    CustomKind,
    build_run_spec,
)

SOURCES = Path(__file__).parent / "data" / "crds" / "SOURCES.md"
#: API groups Kubernetes serves itself (no CRD): lightkube ships their models.
BUILT_IN_GROUPS = {"resource.k8s.io", "networking.k8s.io"}


def _ids(k: CustomKind) -> str:
    return k.resource


def _crd_of(k: CustomKind) -> dict[str, Any]:
    found = [c for c in crds.published() if c["metadata"]["name"] == k.crd_name]
    assert len(found) == 1, f"{k.crd_name}: expected its CRD under tests/data/crds"
    return found[0]


@pytest.mark.parametrize("k", CUSTOM_KINDS, ids=_ids)
def test_every_entry_has_its_projects_crd_or_is_built_in(k: CustomKind) -> None:
    if k.crd is None:
        assert k.group in BUILT_IN_GROUPS
        assert lk_resource.api_info(resource(k.kind, k.api_version)).plural == k.plural
        return
    crd = _crd_of(k)
    spec = crd["spec"]
    assert (spec["group"], spec["names"]["kind"], spec["names"]["plural"], spec["scope"]) == (
        k.group,
        k.kind,
        k.plural,
        k.scope,
    )
    served = [v["name"] for v in spec["versions"] if v.get("served")]
    assert k.version in served, f"{k.crd_name} serves {served}, not {k.version}"
    text = SOURCES.read_text() + "".join(p.read_text() for p in SOURCES.parent.glob("SOURCES-*.md"))
    assert k.crd.project in text and k.crd.path in text, f"{k.crd_name}: source not recorded"


def test_the_gang_entries_are_the_gang_tables() -> None:
    assert list(GANG_KINDS) == list(GANGS)
    for name, g in GANGS.items():
        k = GANG_KINDS[name]
        assert (k.api_version, k.kind, k.plural) == (g.api_version, g.kind, g.plural)
        assert k.flag == f"--gang {name}" and k in CUSTOM_KINDS


def test_the_client_has_one_resource_class_per_entry() -> None:
    assert set(CUSTOM) == {(k.api_version, k.kind) for k in CUSTOM_KINDS}
    for k in CUSTOM_KINDS:
        info = lk_resource.api_info(CUSTOM[(k.api_version, k.kind)])
        assert (info.resource.group, info.resource.version, info.resource.kind, info.plural) == (
            k.group,
            k.version,
            k.kind,
            k.plural,
        )
        assert (k.kind in CLUSTER_SCOPED) == (k.scope == "Cluster")
        if sum(o.kind == k.kind for o in CUSTOM_KINDS) == 1:
            assert DEFAULT_VERSION[k.kind] == k.api_version


def test_rbac_grants_exactly_what_each_entry_needs() -> None:
    groups = {(k.group, k.plural) for k in CUSTOM_KINDS}
    granted = {(a.group, a.resource) for a in ACCESS}
    assert groups <= granted
    for k in CUSTOM_KINDS:
        mine = [a for a in ACCESS if (a.group, a.resource) == (k.group, k.plural)]
        verbs = {v for a in mine if a.optional != RENDER_APPLY for v in a.verbs}
        scope = {a.scope for a in mine}
        assert scope == {"cluster" if k.scope == "Cluster" else "namespace"}
        if k.created:
            assert verbs == {"create", "delete", "list", "patch"}
            assert {v for a in mine if a.optional == RENDER_APPLY for v in a.verbs} == {"get"}
        else:
            assert verbs == {"list"}
        assert {a.optional for a in mine if a.optional != RENDER_APPLY} == {k.flag}


def test_cleanup_and_the_bundle_see_every_kind_a_run_creates() -> None:
    created = {(k.kind, k.api_version) for k in CUSTOM_KINDS if k.created}
    table = {(k.kind, k.api_version) for k in CUSTOM_KINDS}
    assert {key for key in DELETED_KINDS if key in table} == created
    assert {key for key in BUNDLED_KINDS if key in table} == created


def _spec_using(k: CustomKind) -> Any:
    """A spec whose options include the entry's flag (`--gang volcano`, `--pod-monitor`)."""
    flag, _, value = k.flag.partition(" ")
    value = value.split("|")[0]  # `--network-policy auto|on`: either value uses the kind
    option = next(o for o in OPTIONS if flag in o.flags)
    given: object = True if option.kind == "switch" else (value or "q")
    values: dict[str, Any] = {option.name: given}
    return build_run_spec(world_size="16", gpus_per_node="8", **values)


class _Lister:
    """A client that records what is listed (doctor's reads are the table's)."""

    namespace = "bench"

    def __init__(self) -> None:
        self.listed: list[tuple[str, str | None]] = []

    async def list(self, kind: str, *, api_version: str | None = None, **_: Any) -> Any:
        self.listed.append((kind, api_version))
        return [], ""


@pytest.mark.parametrize("k", [k for k in CUSTOM_KINDS if k.flag], ids=_ids)
def test_doctor_reads_the_kinds_a_run_uses(k: CustomKind) -> None:
    spec = _spec_using(k)
    used = [o for o in CUSTOM_KINDS if o.used(spec)]
    assert k in used
    kc = _Lister()

    async def read() -> None:
        asks = custom_reads(kc, spec, "bench")  # type: ignore[arg-type]  # the recorder
        await asyncio.gather(*asks.values())

    asyncio.run(read())
    read_kinds = set(kc.listed)
    # The LocalQueues are read with the admission reads (deploy's refusal reads them too).
    assert {(o.kind, o.api_version) for o in used if o is not LOCAL_QUEUE} <= read_kinds
    assert read_kinds <= {(o.kind, o.api_version) for o in used}


@pytest.mark.parametrize("k", [k for k in CUSTOM_KINDS if k.created], ids=_ids)
def test_a_refused_create_names_what_to_install(k: CustomKind) -> None:
    err = not_served("https://x", k.kind, k.api_version, "bench", "r1")
    assert str(err).endswith(f"{k.install}, or deploy without {k.flag.split()[0]}")


@pytest.mark.slow
def test_doctor_queue_names_kueues_topologies(cluster_factory: Callable[..., Cluster]) -> None:
    """The Topology entry's one use, over real HTTP: without Kueue's CRD doctor --queue says
    there is no Topology Aware Scheduling; with it and a Topology, it names the levels."""
    c = cluster_factory(nodes=1, gpus_per_node=1)
    flags = ["doctor", "-n", "default", "--queue", "q", "--world-size", "1", "--gpus-per-node", "1"]
    before = cli(c, *flags)
    assert "topology" in before.output and "no Topology Aware Scheduling" in before.output

    (crd,) = crds.published("kueue-topologies.yaml")
    c.store.create("customresourcedefinitions", crd)
    topology = {
        "apiVersion": TOPOLOGY.api_version,
        "kind": TOPOLOGY.kind,
        "metadata": {"name": "default"},
        "spec": {"levels": [{"nodeLabel": "cloud.example/block"},
                            {"nodeLabel": "kubernetes.io/hostname"}]},
    }  # fmt: skip
    config = load_config(ClientSettings(kubeconfig=str(c.kubeconfig)))

    async def create() -> None:
        async with KubeClient(config) as kc:
            await kc.create(topology)

    asyncio.run(create())
    after = cli(c, *flags)
    line = next(x for x in after.output.splitlines() if x.startswith("topology"))
    assert line.split()[1] == "pass", after.output
    assert "default (cloud.example/block > kubernetes.io/hostname)" in line
