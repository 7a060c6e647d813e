"""Issue 37, rank order = topology order under torchrun (the default launcher): the placement
step each pod runs before torchrun (nccl_k8s.launch._place) and the command deploy renders for
it. The end-to-end run is tests/test_rank_order_e2e.py.

Several step processes on loopback play the pods of one run, from the engine zipapp alone
(`python -S`: no site-packages, no torch, as a stock image's python3 with the zipapp on
PYTHONPATH); `torchrun` is a stand-in on PATH that prints the argv it was given, which is what
the step hands torchrun.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from typing import Any

import kubernetes_validate
import pytest
from tests._helpers import free_port, held_port

from nccl_k8s.bench.config import NODE_NAME_ENV, POD_IP_ENV, RANK_PLAN_ENV
from nccl_k8s.k8s.rendering._launcher import placement_port
from nccl_k8s.k8s.rendering._manifests import render
from nccl_k8s.k8s.rendering._topology import with_rank_plan
from nccl_k8s.k8s.rendering._zipapp import ZIPAPP_NAME, build_zipapp
from nccl_k8s.k8s.run._culprit import gpus_per_pod, parse_rendezvous
from nccl_k8s.spec import MASTER_PORT_MIN, MASTER_PORT_SPAN, build_run_spec

BLOCK = "fabric.topograph.run/tier-1"
#: torchrun's flags as rendered behind the step (no --node-rank or --master-addr: it adds them).
TORCHRUN = ["torchrun", "--nnodes=3", "--nproc-per-node=1", "--master-port=29500", "-m", "x"]


@pytest.fixture(scope="module")
def pod_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A pod's environment: the engine zipapp alone, and a `torchrun` that prints its argv."""
    tmp = tmp_path_factory.mktemp("place")
    (tmp / ZIPAPP_NAME).write_bytes(build_zipapp())
    fake = tmp / "bin" / "torchrun"
    fake.parent.mkdir()
    fake.write_text(f"#!{sys.executable} -S\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    return {"PYTHONPATH": str(tmp / ZIPAPP_NAME), "PATH": f"{fake.parent}:{os.environ['PATH']}"}


def run_pods(
    pod_env: dict[str, str], landed: list[str], plan: list[str], *, rdzv: int = 60
) -> list[subprocess.CompletedProcess[str]]:
    """One step process per pod (pod i on node landed[i], address 10.0.0.<i+1>), all at once."""
    port = free_port()
    value = json.dumps({"levels": [BLOCK], "nodes": [[n, ["b"]] for n in plan]})
    procs = []
    for i, node in enumerate(landed):
        env = {**pod_env, NODE_NAME_ENV: node, POD_IP_ENV: f"10.0.0.{i + 1}", RANK_PLAN_ENV: value}
        flags = [f"--nnodes={len(landed)}", f"--node-rank={i}", "--master-addr=127.0.0.1"]
        flags += [f"--port={port}", f"--rdzv-timeout={rdzv}"]
        argv = [sys.executable, "-S", "-m", "nccl_k8s.launch._place", *flags, "--", *TORCHRUN]
        pipe = subprocess.PIPE
        procs.append(subprocess.Popen(argv, stdout=pipe, stderr=pipe, text=True, env=env))
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


def test_each_pod_starts_torchrun_with_its_node_rank_and_the_address_of_node_rank_0(
    pod_env: dict[str, str],
) -> None:
    # pod 0 on the plan's last node: pod 1 (10.0.0.2, on n-a) gets node rank 0 and hosts
    # torchrun's store, though pod 0 hosted the placement step's
    done = run_pods(pod_env, ["n-c", "n-a", "n-b"], ["n-a", "n-b", "n-c"])
    argvs = [json.loads(p.stdout) for p in done]
    assert [p.returncode for p in done] == [0, 0, 0], [p.stderr for p in done]
    for argv, rank in zip(argvs, [2, 0, 1], strict=True):
        assert argv == [f"--node-rank={rank}", "--master-addr=10.0.0.2", *TORCHRUN[1:]]
    assert [p.stderr for p in done] == [
        f"nccl-k8s launcher: node rank {r} on node {n}; rank order: topology (the deployer's "
        "plan)\n"
        for r, n in [(2, "n-c"), (0, "n-a"), (1, "n-b")]
    ]


def test_a_pod_off_the_plan_puts_the_run_in_completion_index_order(
    pod_env: dict[str, str],
) -> None:
    done = run_pods(pod_env, ["n-c", "x9", "n-b"], ["n-a", "n-b", "n-c"])
    assert [json.loads(p.stdout)[:2] for p in done] == [
        [f"--node-rank={i}", "--master-addr=10.0.0.1"] for i in range(3)
    ]
    why = "rank order: completion index (node x9 is not in the deployer's topology plan)"
    assert all(p.stderr.strip().endswith(why) for p in done)


def test_a_placement_port_already_taken_is_one_line_naming_it(pod_env: dict[str, str]) -> None:
    with held_port() as port:
        run = subprocess.run(
            [sys.executable, "-S", "-m", "nccl_k8s.launch._place", "--nnodes=2", "--node-rank=0",
             "--master-addr=127.0.0.1", f"--port={port}", "--rdzv-timeout=5", "--", *TORCHRUN],
            capture_output=True, text=True, timeout=60, env=pod_env,
        )  # fmt: skip
    assert run.returncode == 1 and run.stdout == ""  # torchrun never ran
    assert run.stderr.strip().startswith(
        f"nccl-k8s launcher: rendezvous: port {port}, this run's placement port, is already in "
        "use where this pod listens"
    )
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_a_pod_that_never_joins_is_named_in_the_direct_launchers_words(
    pod_env: dict[str, str],
) -> None:
    """Pod 0 waits the run's rendezvous timeout for the others, then fails in torch's TCPStore
    words, which k8s.run's culprit reads to name the pods that never came; nothing starts."""
    port = free_port()
    run = subprocess.run(
        [sys.executable, "-S", "-m", "nccl_k8s.launch._place", "--nnodes=3", "--node-rank=0",
         "--master-addr=127.0.0.1", f"--port={port}", "--rdzv-timeout=1", "--", *TORCHRUN],
        capture_output=True, text=True, timeout=60, env={**pod_env, NODE_NAME_ENV: "n-a"},
    )  # fmt: skip
    assert run.returncode == 1 and run.stdout == ""  # torchrun never ran
    assert run.stderr.strip() == (
        "nccl-k8s launcher: rendezvous: Timed out after 1 seconds waiting for clients. "
        "1/3 clients joined."
    )
    rdzv = parse_rendezvous(run.stderr)
    assert rdzv is not None and (rdzv.joined, rdzv.total) == (1, 3)
    # a pod whose index 0 never comes fails in one line, as the direct launcher's does
    alone = subprocess.run(
        [sys.executable, "-S", "-m", "nccl_k8s.launch._place", "--nnodes=2", "--node-rank=1",
         "--master-addr=127.0.0.1", f"--port={port}", "--rdzv-timeout=1", "--", *TORCHRUN],
        capture_output=True, text=True, timeout=60, env=pod_env,
    )  # fmt: skip
    assert alone.returncode == 1 and alone.stdout == ""
    assert alone.stderr.startswith("nccl-k8s launcher: rendezvous: cannot reach node 0's store")


def test_a_pod_waiting_when_pod_0_gives_up_fails_in_one_line(pod_env: dict[str, str]) -> None:
    """Pod 1 joined, pod 2 never came: pod 0 gives up after the timeout and pod 1, which lost
    pod 0's store, says so in the launcher's one rendezvous line (no traceback)."""
    port = free_port()

    def pod(index: int, rdzv: int) -> subprocess.Popen[str]:
        argv = [sys.executable, "-S", "-m", "nccl_k8s.launch._place", "--nnodes=3",
                f"--node-rank={index}", "--master-addr=127.0.0.1", f"--port={port}",
                f"--rdzv-timeout={rdzv}", "--", *TORCHRUN]  # fmt: skip
        pipe = subprocess.PIPE
        return subprocess.Popen(argv, stdout=pipe, stderr=pipe, text=True, env=pod_env)

    first, waiting = pod(0, 2), pod(1, 60)
    _, err0 = first.communicate(timeout=60)
    out1, err1 = waiting.communicate(timeout=60)
    assert first.returncode == 1 and "2/3 clients joined." in err0
    assert waiting.returncode == 1 and out1 == ""
    assert err1.startswith("nccl-k8s launcher: rendezvous: ") and len(err1.splitlines()) == 1


def _bench(objs: list[dict[str, Any]]) -> dict[str, Any]:
    job = next(o for o in objs if o["kind"] == "Job")
    container: dict[str, Any] = job["spec"]["template"]["spec"]["containers"][0]
    return container


PLANNED = [("n1", ("a",)), ("n2", ("b",))]


@pytest.mark.parametrize("metrics", ["8080", "0"])
def test_a_planned_torchrun_job_starts_torchrun_behind_the_placement_step(metrics: str) -> None:
    spec = build_run_spec(run_id="plan", world_size=16, gpus_per_node=8, metrics_port=metrics)
    objs = render(spec)
    plain = _bench(objs)
    assert plain["args"][0] == "torchrun"  # render reads no nodes: no plan, torchrun's command
    planned = _bench(with_rank_plan(spec, objs, (BLOCK,), PLANNED))
    port, master = spec.master_port, placement_port(spec)
    assert planned["args"][: planned["args"].index("--max-restarts=0")] == [
        "python3", "-m", "nccl_k8s.launch._place", "--nnodes=2",
        "--node-rank=$(JOB_COMPLETION_INDEX)", "--master-addr=plan-0.plan", f"--port={master}",
        "--rdzv-timeout=900", "--", "torchrun", "--nnodes=2", "--nproc-per-node=8",
        f"--master-port={port}", "--rdzv-conf=timeout=900",
    ]  # fmt: skip
    tail = plain["args"][plain["args"].index("--max-restarts=0") :]
    assert planned["args"][-len(tail) :] == tail  # the engine flags unchanged
    names = [e["name"] for e in planned["env"]]
    assert names.count(POD_IP_ENV) == 1 and RANK_PLAN_ENV in names
    pod_ip = next(e for e in planned["env"] if e["name"] == POD_IP_ENV)
    assert pod_ip["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert gpus_per_pod([{"spec": {"containers": [planned]}}]) == 8  # the culprit still reads G
    assert "placement" not in {p["name"] for p in planned.get("ports", [])}


def test_under_host_networking_the_steps_port_is_declared_as_a_host_port() -> None:
    spec = build_run_spec(run_id="plan", world_size=16, gpus_per_node=8, security="host")
    objs = with_rank_plan(spec, render(spec), (BLOCK,), PLANNED)
    planned = _bench(objs)
    port = placement_port(spec)
    assert {"name": "placement", "containerPort": port, "hostPort": port, "protocol": "TCP"} in (
        planned["ports"]
    )
    job = next(o for o in objs if o["kind"] == "Job")
    kubernetes_validate.validate(job, "1.35", strict=True)  # the upstream schema takes it


def test_no_port_a_host_network_pod_binds_is_in_the_ephemeral_or_nodeport_range() -> None:
    # Under host networking (and on the test cluster, whose pods share the machine's stack) the
    # pods bind on the node's own stack: a port in Linux's ephemeral range (32768-60999) may be
    # held by any outgoing connection there, and the bind then fails "Address already in use"
    # (the placement port was the master port + 10000, 30000-39999, and CI saw exactly that);
    # 30000-32767 is the NodePort range. The run ids span the whole master range (their hash).
    ports: set[int] = set()
    for i in range(40):
        spec = build_run_spec(run_id=f"p{i}", world_size=16, gpus_per_node=8, security="host")
        bench = _bench(with_rank_plan(spec, render(spec), (BLOCK,), PLANNED))
        host_ports = {p["hostPort"] for p in bench["ports"] if "hostPort" in p}
        assert {spec.master_port, placement_port(spec)} <= host_ports  # and the metrics port
        ports |= host_ports
    assert all(1024 <= port < 30000 for port in ports), sorted(ports)
    # every run id's: the master range, and the step's port (half the range away, wrapping)
    assert MASTER_PORT_MIN + MASTER_PORT_SPAN <= 30000
    for master in (MASTER_PORT_MIN, MASTER_PORT_MIN + MASTER_PORT_SPAN - 1):
        step = placement_port(dataclasses.replace(spec, master_port=master))
        assert MASTER_PORT_MIN <= step < MASTER_PORT_MIN + MASTER_PORT_SPAN and step != master


def test_a_platform_that_sources_a_script_keeps_it_before_the_step() -> None:
    spec = build_run_spec(run_id="plan", world_size=16, gpus_per_node=8, platform="gke-tcpxo")
    plain = _bench(render(spec))
    planned = _bench(with_rank_plan(spec, render(spec), (BLOCK,), PLANNED))
    at = plain["args"].index("torchrun")
    assert at > 0 and planned["args"][:at] == plain["args"][:at]  # the sourcing shell's words
    assert planned["args"][at : at + 3] == ["python3", "-m", "nccl_k8s.launch._place"]


def test_the_direct_launcher_is_left_as_it_was() -> None:
    spec = build_run_spec(run_id="plan", world_size=16, gpus_per_node=8, launcher="direct")
    plain = _bench(render(spec))
    planned = _bench(with_rank_plan(spec, render(spec), (BLOCK,), PLANNED))
    assert planned["args"] == plain["args"]
