"""What every pair test of `nodes check` runs: the check's spec, with what it fixes so that a
pair's bus bandwidth measures the link between its two nodes, and its master port; and the
Schedule `nodes schedule` prints for a check, cut to what its pair tests make."""

from __future__ import annotations

import dataclasses

from nccl_k8s.k8s.rendering._manifests import render
from nccl_k8s.k8s.rendering._netpolicy import renders_network_policy
from nccl_k8s.k8s.rendering._schedule import Schedule
from nccl_k8s.spec import MASTER_PORT_MIN, MASTER_PORT_SPAN, RunSpec, master_port_for

#: What a pair test fixes unless the user set it (--env): on two nodes NCCL may pick Tree, or
#: NVLS/CollNet where the fabric has them, whose bus bandwidth can exceed what the NIC carries
#: (NVIDIA/nccl-tests#196); Ring sends every byte over the link between the two nodes, so a
#: pair's busbw measures that link.
PAIR_ENV = {"NCCL_ALGO": "Ring"}


def pair_test_spec(spec: RunSpec) -> tuple[RunSpec, dict[str, str]]:
    """The spec every pair test runs, and what it fixed: PAIR_ENV's settings the user did not
    set, for an engine that may use NCCL (--backend gloo measures no NCCL algorithm). A pair
    test is pinned to its two nodes, which the check chose by the topology itself
    (nodes._domains): it gets no topology placement (--placement required would keep a test
    across two domains Pending), only the fabric's rules (rendering._topology.fabric_levels)."""
    from nccl_k8s.bench.config import parse_args

    spec = dataclasses.replace(spec, topology="none")
    if parse_args([str(a) for a in spec.engine_args]).backend == "gloo":
        return spec, {}
    theirs = {k for k, _ in spec.env}
    fixed = {k: v for k, v in PAIR_ENV.items() if k not in theirs}
    return dataclasses.replace(spec, env=(*spec.env, *fixed.items())), fixed


def pair_test_port(base: str, count: int) -> int:
    """The master port of a check's `count`-th test: the next port after the check's own
    (master_port_for its base run id) for each test, so that no two tests of one check share
    one (on one node, a test's port is never the one its previous test's terminating pods may
    still hold; where pods share a stack, as on the test cluster, concurrent tests never
    collide), wrapping inside the master range."""
    return MASTER_PORT_MIN + (master_port_for(base) - MASTER_PORT_MIN + count) % MASTER_PORT_SPAN


def scheduled_check(
    name: str,
    namespace: str,
    cron: str,
    image: str,
    args: tuple[str, ...],
    check: RunSpec | None = None,
) -> Schedule:
    """`nodes schedule`'s Schedule of a check run with `args`, whose deploy options build
    `check` (nodes check's own RunSpec). Its pair tests' spec is rendered once, so what render
    refuses (--network-policy on with host networking ...) is a UsageError now, not a failed Job
    at the first run; the Role grants the tests' NetworkPolicy only where they make one (the
    renderer's rule: not on the node's network, nor with --network-policy off). Without
    `check`, the widest grants."""
    policy = True
    if check is not None:
        pair, _ = pair_test_spec(check)
        render(pair)
        policy = renders_network_policy(pair)
    return Schedule(name, namespace, cron, image, args, network_policy=policy)
