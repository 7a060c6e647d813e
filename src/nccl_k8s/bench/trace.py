"""Start-up stages on stderr, for measuring where a run's first seconds go (issue 23).

NCCL_K8S_TRACE=1 prints `nccl-k8s-trace <unix time> <pid> <stage>` lines; off by default, when
`stage()` costs one dictionary lookup.
"""

from __future__ import annotations

import os
import sys
import time

ON = os.environ.get("NCCL_K8S_TRACE") == "1"


def stage(name: str) -> None:
    if ON:
        sys.stderr.write(f"nccl-k8s-trace {time.time():.4f} {os.getpid()} {name}\n")
        sys.stderr.flush()


__all__ = ["ON", "stage"]
