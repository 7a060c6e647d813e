"""The engine's flag error, and what `-d all`/`-o all` skip on each backend.

Every flag nccl-tests takes is accepted (bench.options: those the engine does, and those it
refuses with the reason). Standard library only: it travels in pods with the engine.
"""

from __future__ import annotations

from nccl_k8s.bench.dtypes import DTYPE_FACTS, Dtype


class ConfigError(ValueError):
    """An engine flag has a value the engine cannot use. The message is one line."""


#: Measured on an H200 with NCCL 2.28.9: ncclAllReduce with ncclAvg on ncclFloat8e4m3 returns
#: ncclInvalidArgument (NCCL reduces 8-bit floats with sum, prod, max and min only).
NCCL_NO_FP8_AVG = "NCCL averages no 8-bit floats (ncclAvg: invalid argument)"


GLOO_NO_FP8 = "gloo has no 8-bit floats"
GLOO_AVG_FLOATS_ONLY = "gloo averages only floating types"
#: torch 2.13's gloo answers any collective on torch.uint32/uint64 with "Invalid scalar type".
GLOO_NO_TYPE = "torch.distributed's gloo has no uint32 or uint64 ('Invalid scalar type')"
#: torch 2.11's NCCL process group (on an H100): "Input tensor data type is not supported for
#: NCCL process group: UInt32" for every collective but reduce_scatter.
TORCH_NCCL_NO_TYPE = (
    "torch.distributed's NCCL process group has no uint32 or uint64 ('Input tensor data type "
    "is not supported for NCCL process group'); --driver direct runs them"
)
#: The NCCL path fills and checks its buffers with bench._kernel_source's kernels: a type they
#: have not (DtypeFacts.kernel None) cannot run there. Every type has one today (uint32 and
#: uint64 since issue 39); a new type is refused on NCCL with this until its kernel exists.
NCCL_NO_KERNEL = "the engine's GPU fill and check kernels have no such type yet"


def absent(backend: str, dtype: Dtype, driver: str = "direct") -> str | None:
    """Why `backend` (with NCCL, through `driver`) cannot run `dtype` at all, whatever the
    collective or reduction (None: it can): -d all skips it with this line, -d naming it alone
    is refused with it."""
    facts = DTYPE_FACTS[dtype]
    if backend == "nccl" and facts.kernel is None:
        return NCCL_NO_KERNEL
    if backend == "nccl" and driver == "torch" and not facts.torch_nccl:
        return TORCH_NCCL_NO_TYPE
    if backend == "gloo" and not facts.gloo:
        return GLOO_NO_TYPE
    return None


def skipped(backend: str, dtype: Dtype, redop: str | None, driver: str = "direct") -> str | None:
    """Why `-d all`/`-o all` skips this type and reduction on `backend` (None: it runs). A
    type or reduction named on its own is refused instead (check_backend)."""
    facts = DTYPE_FACTS[dtype]
    missing = absent(backend, dtype, driver)
    if missing is not None:
        return missing
    if backend == "nccl" and redop == "avg" and facts.eight_bit_float:
        return NCCL_NO_FP8_AVG
    if backend != "gloo":
        return None
    if facts.eight_bit_float:
        return GLOO_NO_FP8
    if redop == "avg" and not facts.floating:
        return GLOO_AVG_FLOATS_ONLY
    return None


__all__ = [
    "GLOO_AVG_FLOATS_ONLY",
    "GLOO_NO_FP8",
    "GLOO_NO_TYPE",
    "NCCL_NO_FP8_AVG",
    "NCCL_NO_KERNEL",
    "TORCH_NCCL_NO_TYPE",
    "ConfigError",
    "absent",
    "skipped",
]
