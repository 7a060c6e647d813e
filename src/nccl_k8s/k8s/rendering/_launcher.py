"""What starts the ranks in each pod (`--launcher`): the command words before the engine flags.

torchrun (the default) is in every PyTorch image, but imports torch in its agent before each
rank imports it again (seconds per pod, issue 23). `direct` runs the engine's own launcher,
`python3 -m nccl_k8s.launch._pod`, with torchrun's names for the same flags: node 0 hosts the
store, every pod starts its ranks as plain processes with torchrun's worker environment, and
the pod fails with the failed rank's exit code. It needs no torch for the direct NCCL path,
which is what the slim image (images/slim) carries. The engine flags follow the returned words.

With the deployer's rank plan (`planned`: deploy read the nodes, rendering._topology), torchrun
is started by the placement step, `python3 -m nccl_k8s.launch._place`, which gives each pod its
node rank by where it landed and torchrun's master address (the pod that got node rank 0), then
runs torchrun with them; `render`, which reads no nodes, has no plan and keeps torchrun's own
command.
"""

from __future__ import annotations

from nccl_k8s.bench.config import POD_IP_ENV
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.spec import MASTER_PORT_MIN, MASTER_PORT_SPAN, RunSpec

#: The engine's own launcher (nccl_k8s.launch._pod), as a module any image with nccl-k8s (or
#: the engine zipapp on PYTHONPATH) runs.
DIRECT_LAUNCHER = ("python3", "-m", "nccl_k8s.launch._pod")
#: The placement step before torchrun when the Job carries a rank plan (nccl_k8s.launch._place).
PLACEMENT_STEP = ("python3", "-m", "nccl_k8s.launch._place")
#: A Job pod's node rank before any plan: its completion index (the env var the Job controller
#: sets and the container's env states, expanded by the kubelet).
JOB_INDEX_REF = "$(JOB_COMPLETION_INDEX)"


def placement_port(spec: RunSpec) -> int:
    """The port of the placement step's store (launch._place), on the pod of index 0 before
    torchrun starts: half the master range away from the run's master port, wrapping inside it
    (20000-29999: below the NodePort and ephemeral ranges, spec's MASTER_PORT_MIN). Another
    run's rendezvous port may be the same number: on the pod network each pod has its own ports,
    and under host networking both are declared hostPorts, so the scheduler keeps two pods that
    would bind one port off one node."""
    half = MASTER_PORT_SPAN // 2
    return MASTER_PORT_MIN + (spec.master_port - MASTER_PORT_MIN + half) % MASTER_PORT_SPAN


def launcher_args(spec: RunSpec, node_rank: str, *, planned: bool = False) -> list[str]:
    """The launcher's command and flags; the engine flags come after them. `planned`: the Job
    carries the deployer's rank plan (torchrun then starts behind the placement step)."""
    nnodes, nproc = f"--nnodes={spec.nodes}", f"--nproc-per-node={spec.gpus_per_node}"
    rank, master = f"--node-rank={node_rank}", f"--master-addr={spec.master_addr}"
    port = f"--master-port={spec.master_port}"
    # How long the pods wait for each other (image pulls, scheduling).
    timeout = f"--rdzv-timeout={spec.rendezvous_timeout_s}"
    if spec.launcher == "direct":
        # Node 0 hosts the store and numbers the ranks by the plan itself; `--` ends its flags.
        return [*DIRECT_LAUNCHER, nnodes, nproc, rank, master, port, timeout, "--"]
    if planned:
        # The step adds --node-rank and --master-addr to torchrun's flags.
        placement = [*PLACEMENT_STEP, nnodes, rank, master, f"--port={placement_port(spec)}"]
        return [*placement, timeout, "--", *_torchrun(spec, nnodes, nproc, port)]
    return _torchrun(spec, nnodes, nproc, rank, master, port)


def pod_ip_env() -> Obj:
    """The container's POD_IP (the downward API's status.podIP): the metrics server's address,
    and the address the placement step hands on when its pod gets node rank 0."""
    return {"name": POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}


def _torchrun(spec: RunSpec, *where: str) -> list[str]:
    return [
        "torchrun",
        *where,
        # Static rendezvous: how long the pods wait for each other (image pulls, scheduling).
        f"--rdzv-conf=timeout={spec.rendezvous_timeout_s}",
        # A rank that fails has no result worth retrying for: fail the pod, fail the run.
        "--max-restarts=0",
        "-m",
        "nccl_k8s.bench",
    ]


__all__ = [
    "DIRECT_LAUNCHER",
    "JOB_INDEX_REF",
    "PLACEMENT_STEP",
    "launcher_args",
    "placement_port",
    "pod_ip_env",
]
