"""What starts the ranks in each pod (`--launcher`): the command words before the engine flags.

torchrun (the default) is in every PyTorch image, but imports torch in its agent before each
rank imports it again (seconds per pod, issue 23). `direct` runs the engine's own launcher,
`python3 -m nccl_k8s.launch._pod`, with torchrun's names for the same flags: node 0 hosts the
store, every pod starts its ranks as plain processes with torchrun's worker environment, and
the pod fails with the failed rank's exit code. It needs no torch for the direct NCCL path,
which is what the slim image (images/slim) carries. The engine flags follow the returned words.
"""

from __future__ import annotations

from nccl_k8s.spec import RunSpec

#: The engine's own launcher (nccl_k8s.launch._pod), as a module any image with nccl-k8s (or
#: the engine zipapp on PYTHONPATH) runs.
DIRECT_LAUNCHER = ("python3", "-m", "nccl_k8s.launch._pod")


def launcher_args(spec: RunSpec, node_rank: str) -> list[str]:
    """The launcher's command and flags; the engine flags come after them."""
    where = [
        f"--nnodes={spec.nodes}",
        f"--nproc-per-node={spec.gpus_per_node}",
        f"--node-rank={node_rank}",
        f"--master-addr={spec.master_addr}",
        f"--master-port={spec.master_port}",
    ]
    if spec.launcher == "direct":
        # How long node 0 waits for every pod (image pulls, scheduling); `--` ends its flags.
        return [*DIRECT_LAUNCHER, *where, f"--rdzv-timeout={spec.rendezvous_timeout_s}", "--"]
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


__all__ = ["DIRECT_LAUNCHER", "launcher_args"]
