"""Issue 36: every pod-network run renders one NetworkPolicy (`--network-policy auto`, the
default; `on` refuses host networking, `off` renders none): ingress to the run's pods from the
run's own pods on every port (the rendezvous store and NCCL's ephemeral ports), the metrics port
from the `--metrics-from` peers (every namespace's pods when none is given), nothing else. It carries the run's labels and render mark,
so deploy owns it and `cleanup --run` deletes it, after deploy or after `render | kubectl apply`.
The test cluster stores it without enforcing it (no CNI): what is tested is the object, that
deploy makes it and a run still completes beside it, and that cleanup removes it."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import kubernetes_validate
import pytest
import yaml
from tests.cluster.cluster import Cluster
from tests.cluster.errors import ApiError
from tests.e2e_helpers import cli
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.k8s.api._kinds import plural as client_plural
from nccl_k8s.k8s.rendering._adopt import plural
from nccl_k8s.k8s.rendering._manifests import render
from nccl_k8s.spec import build_run_spec

SMALL = ["--world-size", "2", "--gpus-per-node", "1"]
ENGINE = ["--", "--backend", "gloo", "--ops", "all_reduce", "-b", "1K", "-e", "4K",
          "-c", "1", "-w", "1", "-n", "2"]  # fmt: skip
RUN = {"app.kubernetes.io/component": "worker", "app.kubernetes.io/instance": "np",
       "app.kubernetes.io/name": "nccl-k8s"}  # fmt: skip


def rendered(*flags: str) -> list[dict[str, Any]]:
    res = CliRunner().invoke(app, ["render", "--run-id", "np", *SMALL, *flags])
    assert res.exit_code == 0, res.output
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def policy_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    return policy


def test_the_policy_lets_in_the_runs_pods_and_the_metrics_scrapers_only() -> None:
    docs = rendered("--metrics-from", "namespace=monitoring",
                    "--metrics-from", "app=prometheus")  # fmt: skip
    assert [d["kind"] for d in docs] == ["ConfigMap", "NetworkPolicy", "Service", "Job"]
    policy = policy_of(docs)
    assert policy["apiVersion"] == "networking.k8s.io/v1"
    assert policy["metadata"]["name"] == "np"
    assert policy["metadata"]["labels"]["app.kubernetes.io/instance"] == "np"
    assert policy["metadata"]["annotations"]["nccl-k8s/rendered-for"] == "np"
    # It selects exactly the run's pods (the Job's template carries these labels).
    assert policy["spec"]["podSelector"] == {"matchLabels": RUN}
    pod_labels = docs[-1]["spec"]["template"]["metadata"]["labels"]
    assert RUN.items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress (DNS, the API) is left alone
    own, metrics = policy["spec"]["ingress"]
    assert own == {"from": [{"podSelector": {"matchLabels": RUN}}]}  # every port: no "ports"
    assert metrics == {
        "from": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
            {"podSelector": {"matchLabels": {"app": "prometheus"}}},
        ],
        "ports": [{"protocol": "TCP", "port": 8080}],
    }
    for version in ("1.33", "1.35"):
        kubernetes_validate.validate(policy, version, strict=True)


def test_by_default_the_policy_guards_the_store_and_leaves_the_metrics_port_to_the_cluster() -> (
    None
):
    """The default (auto) renders the policy on the pod network: no pod outside the run reaches
    the rendezvous store or NCCL's listeners; the metrics port stays open to every namespace's
    pods until --metrics-from narrows it; --metrics-port 0 leaves only the run's rule."""
    any_namespace = {"from": [{"namespaceSelector": {}}],
                     "ports": [{"protocol": "TCP", "port": 8080}]}  # fmt: skip
    for flags in ((), ("--network-policy", "auto"), ("--network-policy", "on")):
        policy = policy_of(rendered(*flags))
        assert policy["spec"]["ingress"] == [
            {"from": [{"podSelector": {"matchLabels": RUN}}]},
            any_namespace,
        ]
        kubernetes_validate.validate(policy, "1.35", strict=True)
    policy = policy_of(rendered("--metrics-port", "0"))
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": RUN}}]}]
    policy = policy_of(rendered("--metrics-port", "9100", "--metrics-from", "namespace=obs"))
    assert policy["spec"]["ingress"][1]["ports"] == [{"protocol": "TCP", "port": 9100}]
    assert "NetworkPolicy" not in [d["kind"] for d in rendered("--network-policy", "off")]


@pytest.mark.parametrize(
    "flags",
    [["--security", "host"], ["--host-network"],
     ["--platform", "oke-roce", "--instance-type", "BM.GPU.H100.8"]],
)  # fmt: skip
def test_on_the_nodes_network_auto_renders_no_policy(flags: list[str]) -> None:
    """A policy selects no pod on the node's network: auto renders none there (rather than a
    protection it is not); the same run on the pod network has one."""
    assert "NetworkPolicy" not in [d["kind"] for d in rendered(*flags)]
    assert "NetworkPolicy" in [d["kind"] for d in rendered()]


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--network-policy", "off", "--metrics-from", "namespace=monitoring"],
         ["--metrics-from", "--network-policy off"]),
        (["--metrics-port", "0", "--metrics-from", "namespace=m"],
         ["--metrics-from", "--metrics-port 0"]),
        (["--metrics-from", "monitoring"], ['"monitoring"', "KEY=VALUE"]),
        (["--metrics-from", "namespace=Not_A_Name"], ["Not_A_Name"]),
        (["--network-policy", "on", "--security", "host"], ["--network-policy on", "host network"]),
        (["--network-policy", "on", "--platform", "oke-roce", "--instance-type", "BM.GPU.H100.8"],
         ["--network-policy on", "host network"]),
        (["--network-policy", "yes"], ['"yes"', "auto, on, off"]),
    ],
)  # fmt: skip
def test_what_a_policy_cannot_say_is_refused_in_one_line(
    flags: list[str], words: list[str]
) -> None:
    """Host networking: a NetworkPolicy selects no pod on the node's network, so a policy there
    would be a protection it is not."""
    res = CliRunner().invoke(app, ["render", "--run-id", "np", *SMALL, *flags])
    assert res.exit_code == 2, res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    for w in words:
        assert w in res.output, res.output


def test_the_policys_plural_is_the_clients() -> None:
    """The adoption Role names it by plural: networkpolicies, not networkpolicys."""
    spec = build_run_spec(world_size=2, gpus_per_node=1, run_id="r")
    for obj in render(spec, adopt=True):
        assert plural(obj["kind"]) == client_plural(obj["kind"]), obj["kind"]


# ---- on the test cluster -----------------------------------------------------------------------


def _policy(cluster: Cluster, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return cluster.store.get("networkpolicies", ns, name)
    except ApiError:
        return None


def _left(cluster: Cluster, ns: str, rid: str) -> list[str]:
    items, _ = cluster.store.list("networkpolicies", ns,
                                  label_selector=f"app.kubernetes.io/instance={rid}")  # fmt: skip
    found = [o["metadata"]["name"] for o in items]
    return found + ([rid] if _policy(cluster, ns, rid) is not None and rid not in found else [])


@pytest.mark.slow
def test_deploy_makes_and_owns_the_policy_the_run_completes_and_cleanup_deletes_it(
    cluster: Cluster, namespace: str, runs_dir: Any
) -> None:
    ns, rid = namespace, f"np-{uuid.uuid4().hex[:6]}"
    res = cli(cluster, "deploy", "-n", ns, "--run-id", rid,
              "--metrics-from", "namespace=monitoring", *SMALL, *ENGINE)  # fmt: skip
    assert res.exit_code == 0, res.output
    policy = _policy(cluster, ns, rid)
    assert policy is not None
    assert [o["kind"] for o in policy["metadata"].get("ownerReferences", [])] == ["Job"]
    res = cli(cluster, "cleanup", "-n", ns, "--run", rid)
    assert res.exit_code == 0, res.output
    assert f"NetworkPolicy/{rid}" in res.output or _policy(cluster, ns, rid) is None
    assert _left(cluster, ns, rid) == []


@pytest.mark.slow
def test_render_kubectl_apply_then_cleanup_leaves_no_policy_and_spares_anothers(
    cluster: Cluster, namespace: str, kubectl: Callable[..., Any]
) -> None:
    ns, rid = namespace, f"np-{uuid.uuid4().hex[:6]}"
    # A policy of the same name that the run did not create: same labels, no render mark.
    cluster.store.create("networkpolicies", {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": f"{rid}-x", "namespace": ns,
                     "labels": {"app.kubernetes.io/instance": rid,
                                "app.kubernetes.io/managed-by": "nccl-k8s"}},
        "spec": {"podSelector": {}},
    })  # fmt: skip
    res = CliRunner().invoke(app, ["render", "-n", ns, "--run-id", rid,
                                   "--scheduler", "nobody", *SMALL, *ENGINE])  # fmt: skip
    assert res.exit_code == 0, res.output
    kubectl("apply", "-n", ns, "-f", "-", input=res.stdout, timeout_s=60)
    assert _policy(cluster, ns, rid) is not None
    res = cli(cluster, "cleanup", "-n", ns, "--run", rid)
    assert res.exit_code == 0, res.output
    assert _policy(cluster, ns, rid) is None
    assert _policy(cluster, ns, f"{rid}-x") is not None  # not the run's: untouched
