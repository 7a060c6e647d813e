"""Per-rank entry point: `torchrun --nproc-per-node N -m nccl_k8s.bench [nccl-tests flags]`.

Exit codes: 0 all checks passed, 1 wrong results or an average busbw below --min-busbw,
2 bad flags (one line on stderr), anything else a crash (torchrun's error file names the rank).
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from nccl_k8s.bench.config import ConfigError, parse_args


def main(argv: Sequence[str] | None = None) -> int:
    from nccl_k8s.bench.trace import stage

    stage("rank main")
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        from nccl_k8s.bench.config import build_parser

        build_parser().print_help()
        return 0
    try:
        cfg = parse_args(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from nccl_k8s.bench.runner import run_rank

    try:
        return int(_recorded(run_rank)(cfg, args))
    except ConfigError as exc:  # backend-dependent checks run once the backend is known
        # Local rank 0 speaks for its node: a refused --metrics-port is its own error alone.
        if os.environ.get("LOCAL_RANK", "0") == "0":
            print(f"error: {exc}", file=sys.stderr)
        return 2


#: Where a launcher wants the rank's error (torchrun and nccl-k8s run set it per rank).
ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"


def _recorded(fn: Callable[..., int]) -> Callable[..., int]:
    """Write an exception that ends the rank to $TORCHELASTIC_ERROR_FILE, in the layout torch's
    elastic `record` writes (torchrun's agent and `nccl-k8s run` read it to name the failing
    rank), then raise it on. Our own, so the torch-free path need not import torch for it."""

    def recorded(*args: Any, **kwargs: Any) -> int:
        with contextlib.suppress(Exception):
            faulthandler.enable(all_threads=True)
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            write_error_file(exc)
            raise

    return recorded


def write_error_file(exc: BaseException) -> None:
    path = os.environ.get(ERROR_FILE_ENV)
    if not path:
        return
    doc = {
        "message": {
            "message": f"{type(exc).__name__}: {exc}",
            "extraInfo": {
                "py_callstack": "".join(traceback.format_exception(exc)),
                "timestamp": str(int(time.time())),
            },
        }
    }
    with contextlib.suppress(OSError), open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)


if __name__ == "__main__":
    sys.exit(main())
