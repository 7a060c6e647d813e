"""Issue 20 on the test cluster: `--platform auto` reads the nodes (acceptance 2), doctor checks a
platform's prerequisites (acceptance 4), and a deploy rendered for a platform whose ranks used
another fabric fails naming them (acceptance 5, second half).

The nodes are provisioned as each platform's vendor does, from its entry (`provision`): the
labels, allocatable extended resources and DRA ResourceSlices its `detect` names. Every entry
of the table with detection facts is covered, whichever vendor module it comes from.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cluster.cluster import Cluster
from tests.e2e_helpers import cli, engine_zipapp_with

from nccl_k8s.spec.platforms import PLATFORMS, Platform

NODES = ("node-0", "node-1", "node-2")


@pytest.fixture(scope="module")
def cluster(cluster_factory: Callable[..., Cluster]) -> Cluster:
    return cluster_factory(nodes=len(NODES), gpus_per_node=8)


@pytest.fixture
def nodes(cluster: Cluster) -> Iterator[Cluster]:
    """The cluster, its nodes and ResourceSlices put back as they were after the test."""
    before = {n: cluster.store.get("nodes", None, n) for n in NODES}
    try:
        yield cluster
    finally:
        for name, node in before.items():

            def restore(n: dict[str, Any], node: dict[str, Any] = node) -> None:
                n["metadata"]["labels"] = node["metadata"]["labels"]
                n["status"]["allocatable"] = node["status"]["allocatable"]
                n["status"]["capacity"] = node["status"]["capacity"]

            cluster.store.mutate("nodes", None, name, restore)
        for s in cluster.store.list("resourceslices", None)[0]:
            cluster.store.delete("resourceslices", None, s["metadata"]["name"])
        for d in cluster.store.list("daemonsets", "kube-system")[0]:
            cluster.store.delete("daemonsets", "kube-system", d["metadata"]["name"])


def detectable() -> list[Platform]:
    return [
        p for p in PLATFORMS.values() if p.detect.labels or p.detect.resources or p.detect.drivers
    ]


def provision(platform: Platform) -> tuple[dict[str, str], dict[str, str], tuple[str, ...]]:
    """Labels, allocatable and DRA drivers of a node of the platform, as its vendor sets them up."""
    labels = {k: (v[0] if v else "present") for k, v in platform.detect.labels.items()}
    typed = platform.instance(labels.get("node.kubernetes.io/instance-type", ""))
    instance = typed or (platform.instances[0] if platform.instances else None)
    count = str(instance.devices) if instance else "8"
    allocatable = {r: count for r in platform.detect.resources}
    if platform.resource:
        allocatable[platform.resource] = count
    for name, amount in platform.extra_resources.items():
        allocatable[name] = "64Gi" if name.startswith("hugepages") else amount
    return labels, allocatable, platform.detect.drivers


def set_node(
    c: Cluster,
    name: str,
    labels: dict[str, str] | None = None,
    allocatable: dict[str, str] | None = None,
    drivers: tuple[str, ...] = (),
) -> None:
    def edit(n: dict[str, Any]) -> None:
        n["metadata"]["labels"].update(labels or {})
        for side in ("allocatable", "capacity"):
            n["status"][side].update(allocatable or {})

    c.store.mutate("nodes", None, name, edit)
    for driver in drivers:
        c.store.create(
            "resourceslices",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-{driver.replace('/', '-')}-{uuid.uuid4().hex[:4]}"},
                "spec": {
                    "driver": driver,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": "dev-0"}],
                },
            },
        )


def deploy_choice(c: Cluster, ns: str, *extra: str) -> tuple[Any, dict[str, Any] | None]:
    """`deploy --no-wait` (platform auto), the Job it made, then the run removed."""
    rid = f"p-{uuid.uuid4().hex[:6]}"
    res = cli(c, "deploy", "-n", ns, "--run-id", rid, "--world-size", "16", "--gpus-per-node",
              "8", "--no-wait", *extra)  # fmt: skip
    jobs = c.store.list("jobs", ns)[0]
    job = next((j for j in jobs if j["metadata"]["name"] == rid), None)
    cli(c, "cleanup", "-n", ns, "--run", rid)
    return res, job


@pytest.mark.parametrize("platform", detectable(), ids=lambda p: p.name)
def test_auto_picks_each_platform_from_nodes_provisioned_as_it(
    nodes: Cluster, namespace: str, platform: Platform
) -> None:
    labels, allocatable, drivers = provision(platform)
    for name in NODES:
        set_node(nodes, name, labels, allocatable, drivers)
    res, job = deploy_choice(nodes, namespace)
    assert res.exit_code == 0, res.output
    assert job is not None
    if platform.escalation:
        # Issue 36: auto never escalates to a privileged pod or the node's network silently: it
        # stays generic, names the platform the nodes look like, what its pods would need and
        # how to ask for it.
        said = " ".join(res.output.split())
        assert f"platform generic: the nodes look like {platform.name}: node node-0 " in said
        assert f"--platform {platform.name}" in said, res.output
        assert "nccl-k8s/platform" not in job["metadata"]["annotations"]
        pod = job["spec"]["template"]["spec"]
        assert not pod.get("hostNetwork")
        assert not any(
            (c.get("securityContext") or {}).get("privileged") for c in pod["containers"]
        )
        return
    assert f"platform {platform.name}: node node-0 " in res.output, res.output
    assert "and 2 more node(s) alike" in res.output
    assert job["metadata"]["annotations"]["nccl-k8s/platform"] == platform.name


def test_auto_gives_generic_with_its_reason(nodes: Cluster, namespace: str) -> None:
    plain, _ = deploy_choice(nodes, namespace)
    assert plain.exit_code == 0, plain.output
    assert (
        "platform generic: no GPU node (node-0, node-1, node-2) carries the labels, resources "
        "or DRA drivers of a known platform"
    ) in plain.output
    p5 = {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    set_node(nodes, "node-1", p5, {"vpc.amazonaws.com/efa": "32", "hugepages-2Mi": "10Gi"})
    mixed, job = deploy_choice(nodes, namespace)
    assert mixed.exit_code == 0, mixed.output
    assert (
        "platform generic: the GPU nodes differ (node-1 look like eks-efa; node-0, node-2 like "
        "no known platform)"
    ) in mixed.output.replace("\n", " ")
    assert job is not None and "nccl-k8s/platform" not in job["metadata"]["annotations"]
    # Only the nodes the run may use count: pinned to the EFA node, it is EKS with EFA.
    pinned, _ = deploy_choice(nodes, namespace, "--node", "node-1", "--spread", "none",
                              "--world-size", "8")  # fmt: skip
    assert (
        "platform eks-efa: node node-1 has vpc.amazonaws.com/efa: 32, is labelled "
        "node.kubernetes.io/instance-type=p5.48xlarge"
    ) in pinned.output
    for name in NODES:
        set_node(nodes, name, allocatable={"nvidia.com/gpu": "0"})
    cpu, _ = deploy_choice(nodes, namespace)
    assert "platform generic: none of the 3 node(s) has nvidia.com/gpu allocatable" in cpu.output


def _doctor(c: Cluster, ns: str) -> dict[str, dict[str, Any]]:
    res = cli(c, "doctor", "-n", ns, "--world-size", "16", "--gpus-per-node", "8", "-o", "json")
    return {check["name"]: check for check in json.loads(res.stdout)["checks"]}


def test_doctor_fails_a_missing_efa_device_plugin_with_its_hint(
    nodes: Cluster, namespace: str
) -> None:
    # p5 nodes as EKS makes them, without the EFA device plugin: no EFA devices allocatable.
    for name in NODES:
        set_node(nodes, name, {"node.kubernetes.io/instance-type": "p5.48xlarge"})
    checks = _doctor(nodes, namespace)
    assert checks["platform"]["message"].startswith(
        "eks-efa: node node-0 is labelled node.kubernetes.io/instance-type=p5.48xlarge"
    )
    efa = checks["eks-efa:vpc.amazonaws.com/efa"]
    assert efa["status"] == "fail"
    assert "none of the 3 GPU node(s) has vpc.amazonaws.com/efa allocatable" in efa["message"]
    assert "helm install efa eks/aws-efa-k8s-device-plugin -n kube-system" in efa["hint"]
    plugin = checks["eks-efa:aws-efa-k8s-device-plugin"]
    assert plugin["status"] == "warn" and "not installed" in plugin["message"]
    assert checks["eks-efa:hugepages-2Mi"]["status"] == "fail"

    # The device plugin installed (its Helm release's DaemonSet, ready) and the devices there.
    nodes.store.create("daemonsets", {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "efa-aws-efa-k8s-device-plugin", "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"name": "efa"}},
                 "template": {"metadata": {"labels": {"name": "efa"}},
                              "spec": {"containers": [{"name": "p", "image": "x"}]}}},
        "status": {"numberReady": 3, "desiredNumberScheduled": 3, "currentNumberScheduled": 3,
                   "numberMisscheduled": 0},
    })  # fmt: skip
    for name in NODES:
        set_node(nodes, name, allocatable={"vpc.amazonaws.com/efa": "32", "hugepages-2Mi": "10Gi"})
    checks = _doctor(nodes, namespace)
    assert checks["eks-efa:vpc.amazonaws.com/efa"]["status"] == "pass"
    assert "3 of 3 GPU node(s)" in checks["eks-efa:vpc.amazonaws.com/efa"]["message"]
    plugin = checks["eks-efa:aws-efa-k8s-device-plugin"]
    assert plugin["status"] == "pass"
    assert "kube-system/efa-aws-efa-k8s-device-plugin: 3 ready" in plugin["message"]
    assert checks["eks-efa:hugepages-2Mi"]["status"] == "pass"


#: Each rank prints NCCL INFO lines as NCCL does for a communicator of two ranks a node (one node:
#: P2P only) on the network named by TEST_NET (how NCCL prints them: tests/data/nccl-logs, aws-ofi-nccl-24_horovod_efa_ring_ompi).
FAKE_NCCL = """\
import os as _os, socket as _socket
if _os.environ.get("TEST_NET") and _os.environ.get("LOCAL_RANK") is not None:
    _r, _w, _l = (int(_os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    _n = _os.environ["TEST_NET"]
    _h = f"{_socket.gethostname()}:{_os.getpid()}:{_os.getpid()} [{_l}] NCCL INFO "
    _nodes = _w // 2  # two ranks a node: one node prints no NET connection
    _lines = [f"Using network {_n}",
              f"comm 0x1 rank {_r} nRanks {_w} nNodes {_nodes} localRanks 2 localRank {_l} MNNVL 0",
              f"Channel 00/0 : {_r}[{_l}] -> {(_r + 2) % _w}[{_l}] [send] via NET/{_n}/0"
              if _nodes > 1 else f"Channel 00/0 : {_r}[{_l}] -> {(_r + 1) % _w}[{1 - _l}] via P2P/CUMEM"]
    if _n == "AWS Libfabric":
        _lines.insert(0, "NET/OFI Selected Provider is efa (found 4 nics)")
    print("".join(_h + x + "\\n" for x in _lines), end="", flush=True)
"""


def test_a_run_rendered_for_efa_that_used_sockets_fails_naming_ranks_and_hosts(
    nodes: Cluster, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nccl_k8s.k8s.rendering._manifests as manifests

    zipapp = engine_zipapp_with(tmp_path, FAKE_NCCL)
    monkeypatch.setattr(manifests, "engine_zipapp", lambda: zipapp)
    monkeypatch.setenv("NCCL_K8S_RUNS_DIR", str(tmp_path / "runs"))
    # p5 nodes with the EFA device plugin, in one zone as EKS labels every node (eks-efa's pods
    # require one zone: EFA does not cross availability zones).
    p5 = {
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "topology.kubernetes.io/zone": "us-east-2a",
    }
    for name in NODES:
        set_node(nodes, name, p5, {"vpc.amazonaws.com/efa": "32", "hugepages-2Mi": "10Gi"})

    def deploy(net: str, world: str = "4") -> tuple[str, Any]:
        rid = f"f-{uuid.uuid4().hex[:6]}"
        res = cli(nodes, "deploy", "-n", namespace, "--run-id", rid, "--world-size", world,
                  "--gpus-per-node", "2", "--env", f"TEST_NET={net}", "--timeout", "240s",
                  "--", "--backend", "gloo", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0")  # fmt: skip
        return rid, res

    rid, sockets = deploy("Socket")
    assert sockets.exit_code == 1, sockets.output
    pods = nodes.store.list("pods", namespace, label_selector=f"app.kubernetes.io/instance={rid}")
    hosts = sorted({p["spec"]["hostname"] if p["spec"].get("hostname") else p["metadata"]["name"]
                    for p in pods[0]})  # fmt: skip
    text = " ".join(sockets.output.split())
    assert "platform eks-efa: node node-0 has vpc.amazonaws.com/efa: 32" in text
    assert (
        f"rendered for eks-efa, but ranks 0-3 (hosts {', '.join(hosts)}) used NET/Socket: the "
        "image has no aws-ofi-nccl" in text
    ), text
    # The pods were rendered with NCCL's INFO lines on for INIT and NET, and the EFA devices.
    job = nodes.store.get("jobs", namespace, rid)
    bench = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in bench["env"]}
    assert (env["NCCL_DEBUG"], env["NCCL_DEBUG_SUBSYS"]) == ("INFO", "INIT,NET")
    assert bench["resources"]["limits"]["vpc.amazonaws.com/efa"] == "8"  # 2 of 8 GPUs of a p5
    results = cli(nodes, "results", "-n", namespace, "--run", rid, "-o", "json")
    saved = json.loads((tmp_path / "runs" / rid / "results.json").read_text())
    assert (saved["meta"]["fabric"], saved["meta"]["platform"]) == ("socket", "eks-efa"), results

    rid, efa = deploy("AWS Libfabric")
    assert efa.exit_code == 0, efa.output
    # One node sends nothing over EFA: its logs cannot show the fabric, and the deploy does not
    # fail it for that (the gate is for runs that span nodes; `diagnose --platform` fails it).
    _, one_node = deploy("Socket", world="2")
    assert one_node.exit_code == 0, one_node.output
    cli(nodes, "results", "-n", namespace, "--run", rid)
    saved = json.loads((tmp_path / "runs" / rid / "results.json").read_text())
    assert (saved["meta"]["fabric"], saved["meta"]["platform"]) == ("efa", "eks-efa")
