"""The element types the engine runs: the one home of each type's name, size, codes and limits.

nccl-tests' `-d` names, the bytes per element (the size column, counts and bandwidth), the
ncclDataType_t the direct driver passes, torch's dtype, the check kernels' type number, the
numbers each type holds exactly (what the data checker may generate), which backends can reduce
it, and the other spellings users type. The flag parser and backend rules (bench.options,
bench.config, bench.compat), the checker (bench.data, bench.kernels), the NCCL calls (bench.nccl)
and the results reader (results.collectives) all read this table. Standard library only, no
torch even for types: results and the spec import it on machines without torch.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

#: nccl-tests' type names (its `-d` values), in the order `--help` lists them.
Dtype = Literal[
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16",
    "f8e4m3", "f8e5m2",
]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class DtypeFacts:
    """One element type as every layer names it."""

    size: int
    """Bytes per element."""
    nccl: int
    """Its ncclDataType_t value (nccl.h)."""
    torch: str
    """The name of its torch dtype (an attribute of the torch module)."""
    kernel: int | None
    """Its number in the check kernels' type enum (bench._kernel_source: T_INT8 ...); None:
    the kernels have no such type, so the NCCL path (which fills and checks its buffers with
    them) cannot run it (bench.compat.NCCL_NO_KERNEL). Every type has one today."""
    exact: int
    """Largest B such that every integer in [0, B] is exact in the type."""
    doublings: int
    """Largest power of two it holds (products of the checker are 2**y with y <= this)."""
    float_layout: tuple[int, float] | None = None
    """Floating types: explicit mantissa bits and the smallest normal number; None: integers."""
    avg_contributors: int = 1
    """Ranks that may contribute to one element of a checked `avg`: 4k(k+1)u stays <= 1/8 (u
    the unit roundoff), so the tolerance is at least 8x below what one rank changes."""
    signed: bool = True
    """False: the checker's sentinel -1 is its largest value, which patterns then avoid."""
    eight_bit_float: bool = False
    """An 8-bit float: gloo has none, and NCCL averages none (NCCL_NO_FP8_AVG)."""
    gloo: bool = True
    """torch.distributed's gloo moves and reduces it. False for uint32 and uint64: torch 2.13's
    gloo answers every collective on them with 'Invalid scalar type' (bench.compat.GLOO_NO_TYPE)."""
    torch_nccl: bool = True
    """torch.distributed's NCCL process group (`--driver torch`) takes it. False for uint32 and
    uint64: torch 2.11 on an H100 refused all_reduce, all_gather, broadcast, reduce, alltoall,
    sendrecv and gather on them (bench.compat.TORCH_NCCL_NO_TYPE); the direct driver runs them."""

    @property
    def floating(self) -> bool:
        return self.float_layout is not None


_F = DtypeFacts
#: Every type the engine runs, by nccl-tests' name.
DTYPE_FACTS: dict[Dtype, DtypeFacts] = {
    "int8": _F(1, 0, "int8", 0, exact=127, doublings=6),
    "uint8": _F(1, 1, "uint8", 1, exact=255, doublings=7, signed=False),
    "int32": _F(4, 2, "int32", 2, exact=(1 << 31) - 1, doublings=30),
    "uint32": _F(4, 3, "uint32", 10, exact=(1 << 32) - 1, doublings=31, signed=False,
                 gloo=False, torch_nccl=False),
    "int64": _F(8, 4, "int64", 3, exact=(1 << 63) - 1, doublings=62),
    "uint64": _F(8, 5, "uint64", 11, exact=(1 << 64) - 1, doublings=63, signed=False,
                 gloo=False, torch_nccl=False),
    "half": _F(2, 6, "float16", 4, exact=2048, doublings=15, float_layout=(10, 2.0**-14),
               avg_contributors=4),
    "float": _F(4, 7, "float32", 5, exact=1 << 24, doublings=100, float_layout=(23, 2.0**-126),
                avg_contributors=8),
    "double": _F(8, 8, "float64", 6, exact=1 << 53, doublings=1000,
                 float_layout=(52, 2.0**-1022), avg_contributors=8),
    "bfloat16": _F(2, 9, "bfloat16", 7, exact=256, doublings=100, float_layout=(7, 2.0**-126),
                   avg_contributors=2),
    "f8e4m3": _F(1, 10, "float8_e4m3fn", 8, exact=16, doublings=8, float_layout=(3, 2.0**-6),
                 eight_bit_float=True),
    "f8e5m2": _F(1, 11, "float8_e5m2", 9, exact=8, doublings=15, float_layout=(2, 2.0**-14),
                 eight_bit_float=True),
}  # fmt: skip
#: nccl-tests' -d default.
DEFAULT_DTYPE: Dtype = "float"
#: Bytes per element of each type.
DTYPES: dict[Dtype, int] = {name: facts.size for name, facts in DTYPE_FACTS.items()}
#: Aliases nccl-tests users type (and older nccl-tests print), mapped to nccl-tests' names.
DTYPE_ALIASES: dict[str, Dtype] = {
    "float32": "float",
    "fp32": "float",
    "float16": "half",
    "fp16": "half",
    "bf16": "bfloat16",
    "float64": "double",
    "fp64": "double",
    "char": "int8",
    "int": "int32",
}


__all__ = [
    "DEFAULT_DTYPE",
    "DTYPES",
    "DTYPE_ALIASES",
    "DTYPE_FACTS",
    "Dtype",
    "DtypeFacts",
]
