"""Issue 35, "pair tests measure the network": on two nodes NCCL may pick Tree (or NVLS and
CollNet where the fabric has them), whose busbw can exceed what the NIC carries
(NVIDIA/nccl-tests#196); every pair test of `nodes check` runs with NCCL_ALGO=Ring unless the
user set it, and the check says what it fixed. Read off the rendered pods, as kubectl would
show them."""

from __future__ import annotations

from typing import Any

from nccl_k8s.k8s.nodes._pairspec import pair_test_port, pair_test_spec
from nccl_k8s.k8s.rendering._manifests import render
from nccl_k8s.spec import MASTER_PORT_MIN, MASTER_PORT_SPAN, build_run_spec


def pod_env(spec: Any) -> list[dict[str, str]]:
    envs = []
    for obj in render(spec):
        tmpl = obj.get("spec", {}).get("template")
        if obj["kind"] in ("Job", "StatefulSet") and tmpl:
            for c in tmpl["spec"]["containers"]:
                envs.append({e["name"]: e.get("value", "") for e in c.get("env") or []})
    assert envs, "no pod template rendered"
    return envs


def spec_of(*engine: str, env: tuple[str, ...] = ()) -> Any:
    return build_run_spec(world_size=2, gpus_per_node=1, run_id="pair", env=env, engine_args=engine)


def test_a_pair_test_runs_nccl_on_ring_and_says_so() -> None:
    spec, fixed = pair_test_spec(spec_of("--ops", "all_reduce", "-b", "64M", "-e", "1G"))
    assert fixed == {"NCCL_ALGO": "Ring"}
    assert all(env.get("NCCL_ALGO") == "Ring" for env in pod_env(spec))


def test_the_users_algorithm_is_kept_and_nothing_is_said() -> None:
    spec, fixed = pair_test_spec(spec_of("-b", "64M", "-e", "1G", env=("NCCL_ALGO=Tree",)))
    assert fixed == {}
    assert all(env.get("NCCL_ALGO") == "Tree" for env in pod_env(spec))


def test_gloo_pair_tests_set_no_nccl_algorithm() -> None:
    spec, fixed = pair_test_spec(spec_of("--backend", "gloo", "-b", "32M", "-e", "64M"))
    assert fixed == {}
    assert all("NCCL_ALGO" not in env for env in pod_env(spec))


def test_a_pair_test_gets_no_topology_placement_the_check_chose_its_nodes() -> None:
    # Issue 37: with --placement required a test across two domains would stay Pending; the
    # check pins each test to its two nodes, chosen by the topology itself.
    spec = build_run_spec(
        world_size=2,
        gpus_per_node=1,
        run_id="pair",
        topology="cloud.google.com/gce-topology-block",
        placement="required",
        engine_args=("--backend", "gloo"),
    )
    assert any(
        "podAffinity" in (o["spec"]["template"]["spec"].get("affinity") or {})
        for o in render(spec)
        if o["kind"] in ("Job", "StatefulSet")
    )
    tested, _ = pair_test_spec(spec)
    for obj in render(tested):
        if obj["kind"] in ("Job", "StatefulSet"):
            assert "podAffinity" not in (obj["spec"]["template"]["spec"].get("affinity") or {})


def test_no_two_tests_of_one_check_share_a_master_port() -> None:
    # A check runs up to thousands of pair tests, many at once; a node's next test may start
    # while its last test's pods still terminate. Their ports: all distinct, all in the range.
    for base in ("nccl-check-a", "nccl-check-b", "x"):
        ports = [pair_test_port(base, n) for n in range(1, MASTER_PORT_SPAN + 1)]
        assert len(set(ports)) == MASTER_PORT_SPAN
        assert all(MASTER_PORT_MIN <= p < MASTER_PORT_MIN + MASTER_PORT_SPAN for p in ports)
