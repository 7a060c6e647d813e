"""The `nccl-k8s run` use case: a benchmark on this machine, and its results stored.

It composes two sibling layers that know nothing of each other: `launch` (the local launcher:
ranks, culprit, exit code) and `results` (the schema, the -J reader, the runs directory). Living
above both keeps results free of the launcher (and of torch) and the launcher free of storage.
"""

from nccl_k8s.local._run import (
    Outcome,
    Plan,
    plan,
    results_from_json,
    run,
    run_and_save,
    save_results,
)

__all__ = ["Outcome", "Plan", "plan", "results_from_json", "run", "run_and_save", "save_results"]
