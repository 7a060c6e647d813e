"""The engine's own in-pod launcher (`deploy --launcher direct`, nccl_k8s.launch._pod): what each
pod runs instead of torchrun, as a user of the pods' logs and exit codes meets it.

Two launchers on this machine play two pods (node 0 and node 1 of one run, gloo ranks on CPU):
they meet through node 0's store, start their ranks with torchrun's environment, and end with the
run's code; a rank that fails ends its launcher with that rank's exit code and a line naming it.
The rendezvous runs from the engine zipapp alone (no site-packages: no torch), as on the slim
image. Rendering: the pods' command, and the culprit still reads G from it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests._helpers import free_port, held_port

from nccl_k8s.k8s import render
from nccl_k8s.k8s.rendering._wrapper import POD_WRAPPER
from nccl_k8s.k8s.rendering._zipapp import ZIPAPP_NAME, build_zipapp
from nccl_k8s.k8s.run._culprit import gpus_per_pod, parse_rendezvous
from nccl_k8s.launch._procs import Node, rank_env
from nccl_k8s.spec import build_run_spec

LAUNCHER = [sys.executable, "-m", "nccl_k8s.launch._pod"]
GLOO = ["--backend", "gloo", "-b", "1K", "-e", "4K", "-f", "4", "-n", "2", "-w", "1", "-T", "20"]


def node_argv(node: int, nodes: int, port: int, *, nproc: int = 2, rdzv: int = 120) -> list[str]:
    return [
        f"--nnodes={nodes}", f"--nproc-per-node={nproc}", f"--node-rank={node}",
        "--master-addr=127.0.0.1", f"--master-port={port}", f"--rdzv-timeout={rdzv}",
    ]  # fmt: skip


def start_nodes(
    nodes: int, engine: list[str], env: dict[str, str] | None = None
) -> list[subprocess.Popen[str]]:
    port = free_port()
    return [
        subprocess.Popen(
            [*LAUNCHER, *node_argv(n, nodes, port), "--", *engine],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        for n in range(nodes)
    ]


def test_rank_env_places_each_pods_ranks_in_the_run() -> None:
    node = Node(rank=1, count=3, master_addr="r-0.r", master_port=20001)
    env = rank_env(1, 4, port=20001, run_id="r", fault_dir=Path("/tmp/f"), node=node)
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == ("5", "1", "12")
    assert (env["GROUP_RANK"], env["GROUP_WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("1", "3", "4")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("r-0.r", "20001")


def test_direct_launcher_is_rendered_in_place_of_torchrun() -> None:
    spec = build_run_spec(world_size=16, gpus_per_node=8, run_id="r", launcher="direct")
    objs = render(spec)
    job = next(o for o in objs if o["kind"] == "Job")
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["python3", "-c", POD_WRAPPER]
    args = c["args"]
    assert "torchrun" not in args
    cut = args.index("--")
    assert args[:cut] == [
        "python3", "-m", "nccl_k8s.launch._pod", "--nnodes=2", "--nproc-per-node=8",
        "--node-rank=$(JOB_COMPLETION_INDEX)", f"--master-addr={spec.master_addr}",
        f"--master-port={spec.master_port}", "--rdzv-timeout=900",
    ]  # fmt: skip
    assert args[cut + 1 : cut + 3] == ["--metrics-port", "8080"]
    pod = {"spec": job["spec"]["template"]["spec"]}
    assert gpus_per_pod([pod]) == 8  # the culprit's G, read from the pods as with torchrun
    torchrun = render(build_run_spec(world_size=16, gpus_per_node=8, run_id="r"))
    assert (
        next(o for o in torchrun if o["kind"] == "Job")["spec"]["template"]["spec"]["containers"][
            0
        ]["args"][0]
        == "torchrun"
    )


def test_statefulset_runs_the_direct_launcher_with_its_ordinal() -> None:
    spec = build_run_spec(
        world_size=4, gpus_per_node=2, run_id="r", launcher="direct", workload="statefulset"
    )
    sts = next(o for o in render(spec) if o["kind"] == "StatefulSet")
    script = sts["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert 'python3 -m nccl_k8s.launch._pod --nnodes=2 --nproc-per-node=2 --node-rank="$rank"' in (
        script
    )
    assert script.rstrip().endswith('--rdzv-timeout=900 -- "$@"')


def test_launcher_from_the_zipapp_alone_names_the_pod_that_never_joined(tmp_path: Path) -> None:
    # -S: no site-packages, so neither nccl_k8s nor torch can come from anywhere but the archive:
    # the direct NCCL path's store and rendezvous need no torch (the slim image has none).
    pyz = tmp_path / ZIPAPP_NAME
    pyz.write_bytes(build_zipapp())
    run = subprocess.run(
        [sys.executable, "-S", "-m", "nccl_k8s.launch._pod",
         *node_argv(0, 3, free_port(), rdzv=1), "--", "--backend", "nccl"],
        capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(pyz)}, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr
    assert run.stderr.strip() == (
        "nccl-k8s launcher: rendezvous: Timed out after 1 seconds waiting for clients. "
        "1/3 clients joined."
    )
    rdzv = parse_rendezvous(run.stderr)  # what k8s.run's culprit reads from pod 0's log
    assert rdzv is not None and (rdzv.joined, rdzv.total) == (1, 3)


def test_a_pod_whose_node_0_never_comes_fails_in_one_line() -> None:
    run = subprocess.run(
        [*LAUNCHER, *node_argv(1, 2, free_port(), rdzv=1), "--", "--backend", "nccl"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 1
    assert run.stderr.startswith("nccl-k8s launcher: rendezvous: cannot reach node 0's store at ")
    assert len(run.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("backend", ["nccl", "gloo"])  # the engine's store; torch's TCPStore
def test_a_rendezvous_port_already_taken_is_one_line_naming_it(backend: str) -> None:
    # Under host networking pod 0 listens on the node's own stack, where a daemon or an outgoing
    # connection may hold the port: one line that says so and what to do, not a bind traceback.
    with held_port() as port:
        run = subprocess.run(
            [*LAUNCHER, *node_argv(0, 2, port, rdzv=5), "--", "--backend", backend],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert run.returncode == 1, run.stderr
    assert run.stderr.strip() == (
        f"nccl-k8s launcher: rendezvous: port {port}, this run's rendezvous port, is already in "
        "use where this pod listens: on the node under host networking (a node daemon, another "
        "process or an outgoing connection), else by another container of the pod; the port is "
        "derived from the run id, so a deploy with another --run-id draws another"
    )


@pytest.mark.slow
def test_two_pods_of_gloo_ranks_run_and_node_0_prints_the_table() -> None:
    procs = start_nodes(2, GLOO)
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    table = outs[0][0]
    assert "# all_reduce" in table or "all_reduce_perf" in table
    rows = [line for line in table.splitlines() if line.strip().startswith("4096 ")]
    assert rows and rows[0].split()[-1] == "0"  # #wrong 0 at 4 KiB
    # Four ranks over the two launchers, each started with torchrun's environment.
    assert '"world_size":4' in table and '"local_world_size":2' in table
    assert outs[1][0].count("NCCL_K8S_RESULT") == 0  # only global rank 0 prints results


#: Rank 3 (node 1's second rank) ends with exit code 7 before it joins anything.
EXIT_7 = textwrap.dedent(
    """
    import os
    if os.environ.get("RANK") == "3" and os.environ.get("NCCL_K8S_TEST_EXIT"):
        os._exit(int(os.environ["NCCL_K8S_TEST_EXIT"]))
    """
)


@pytest.mark.slow
def test_a_failed_rank_ends_its_pod_with_its_exit_code_and_is_named(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(EXIT_7)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    # -T 5: node 0's ranks wait that long for rank 3, which never comes (the verdict is node 1's).
    engine = [*GLOO[: GLOO.index("-T")], "-T", "5"]
    procs = start_nodes(2, engine, {"PYTHONPATH": path, "NCCL_K8S_TEST_EXIT": "7"})
    outs = [p.communicate(timeout=240) for p in procs]
    assert procs[1].returncode == 7, outs[1][1][-2000:]
    culprit = [x for x in outs[1][1].splitlines() if x.startswith("nccl-k8s launcher: ")]
    assert len(culprit) == 1 and culprit[0].startswith("nccl-k8s launcher: rank 3 (pid ")
    assert "failed with exit code 7" in culprit[0], culprit
    assert procs[0].returncode not in (0, None)  # node 0's ranks could not finish without it
