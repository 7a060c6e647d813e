"""Per-rank entry point: `torchrun --nproc-per-node N -m nccl_k8s.bench [nccl-tests flags]`.

Exit codes: 0 all checks passed, 1 wrong results or an average busbw below --min-busbw,
2 bad flags (one line on stderr), anything else a crash (torchrun's error file names the rank).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

from nccl_k8s.bench.config import ConfigError, parse_args


def main(argv: Sequence[str] | None = None) -> int:
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


def _recorded(fn: Callable[..., int]) -> Callable[..., int]:
    """torchrun's error-file recorder, so `nccl-k8s run` and pods can name the failing rank."""
    try:
        from torch.distributed.elastic.multiprocessing.errors import record
    except ImportError:  # pragma: no cover - torch without elastic
        return fn
    return record(fn)  # type: ignore[return-value]


if __name__ == "__main__":
    sys.exit(main())
