"""The element types the engine runs: the one home of each type's name, size and library codes.

nccl-tests' `-d` names, the bytes per element (the size column, counts and bandwidth), the
ncclDataType_t the direct driver passes, torch's dtype, and the other spellings users type.
The flag parser (bench.config), the checker (bench.data), the NCCL calls (bench.nccl) and the
results reader (results.collectives) all read this table. Standard library only, no torch even
for types: results and the spec import it on machines without torch.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

#: nccl-tests' type names (its `-d` values), in the order `--help` lists them.
Dtype = Literal[
    "int8", "uint8", "int32", "int64", "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"
]


@dataclasses.dataclass(frozen=True)
class DtypeFacts:
    """One element type as every layer names it."""

    size: int
    """Bytes per element."""
    nccl: int
    """Its ncclDataType_t value (nccl.h)."""
    torch: str
    """The name of its torch dtype (an attribute of the torch module)."""


#: Every type the engine runs, by nccl-tests' name.
DTYPE_FACTS: dict[Dtype, DtypeFacts] = {
    "int8": DtypeFacts(1, 0, "int8"),
    "uint8": DtypeFacts(1, 1, "uint8"),
    "int32": DtypeFacts(4, 2, "int32"),
    "int64": DtypeFacts(8, 4, "int64"),
    "half": DtypeFacts(2, 6, "float16"),
    "float": DtypeFacts(4, 7, "float32"),
    "double": DtypeFacts(8, 8, "float64"),
    "bfloat16": DtypeFacts(2, 9, "bfloat16"),
    "f8e4m3": DtypeFacts(1, 10, "float8_e4m3fn"),
    "f8e5m2": DtypeFacts(1, 11, "float8_e5m2"),
}
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


__all__ = ["DTYPES", "DTYPE_ALIASES", "DTYPE_FACTS", "Dtype", "DtypeFacts"]
