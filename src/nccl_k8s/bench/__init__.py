"""The measuring engine: nccl-tests' collectives, sizes, formulas and table.

Imports only the standard library, because this package is what runs inside pods: the deployer
ships it to stock PyTorch images as a zipapp. The NCCL path needs libnccl, the CUDA driver and
NVRTC, not torch (bench.direct); torch is imported lazily for gloo and `--driver torch`. `python -m nccl_k8s.bench`
is the per-rank entry point; it works under plain torchrun.
"""

from nccl_k8s.bench.config import ALL_OPS, BenchConfig, ConfigError, parse_args, parse_size
from nccl_k8s.bench.report import FAULT_PREFIX, RESULT_PREFIX, parse_fault_line

__all__ = [
    "ALL_OPS",
    "FAULT_PREFIX",
    "RESULT_PREFIX",
    "BenchConfig",
    "ConfigError",
    "parse_args",
    "parse_fault_line",
    "parse_size",
]
