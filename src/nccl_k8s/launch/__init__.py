"""Starting ranks: locally (`local`), with the culprit rank named from each rank's own exit and
fault record; in a pod, `python -m nccl_k8s.launch._pod` (`deploy --launcher direct`) starts
that pod's ranks the same way, in torchrun's place, and `python -m nccl_k8s.launch._place` gives
torchrun its node rank by the deployer's rank plan. Knows nothing of results or Kubernetes: the
`run` use case (nccl_k8s.local) composes it with results.

The names are loaded on first use: every rank starts as `python -m nccl_k8s.launch._rank`, which
imports this package first, and must reach its PR_SET_PDEATHSIG before anything else is imported
(nor may the package import _rank before runpy runs it).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nccl_k8s.launch.local import (
        DEFAULT_CPU_RANKS,
        MAX_CPU_RANKS_PER_CPU,
        RUN_FLAGS,
        LocalRun,
        check_writable,
        interruptible,
        journal_path,
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
    "journal_path",
    "launch",
    "prepare",
    "run_parser",
    "usable_cpus",
    "workdir",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from nccl_k8s.launch import local

        return getattr(local, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
