"""Starting ranks: locally through torch's elastic launcher (`local`), with the culprit rank
named from each rank's own exit and fault record. Knows nothing of results or Kubernetes: the
`run` use case (nccl_k8s.local) composes it with results."""

from nccl_k8s.launch.local import (
    DEFAULT_CPU_RANKS,
    MAX_CPU_RANKS_PER_CPU,
    RUN_FLAGS,
    LocalRun,
    check_writable,
    interruptible,
    launch,
    prepare,
    run_parser,
    usable_cpus,
    workdir,
)

__all__ = [
    "DEFAULT_CPU_RANKS",
    "MAX_CPU_RANKS_PER_CPU",
    "RUN_FLAGS",
    "LocalRun",
    "check_writable",
    "interruptible",
    "launch",
    "prepare",
    "run_parser",
    "usable_cpus",
    "workdir",
]
