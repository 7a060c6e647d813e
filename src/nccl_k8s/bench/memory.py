"""Buffers, views and the data check, on one of two data paths.

- `TorchMemory`: views are torch tensors and bench.data fills and checks them (gloo, `--driver
  torch`, and the direct driver with NCCL_K8S_DATA=torch).
- `KernelMemory`: views are raw device pointers and bench.kernels' CUDA kernels, compiled from
  the same formulas, fill and check them (the direct driver's default: no torch in the process).

Both put the same values in the same places and count the same wrong elements: the tests prove
it on the CPU (the kernels' text compiled by cc against bench.data) and on the GPU.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Protocol

from nccl_k8s.bench import data
from nccl_k8s.bench.collectives import Expected, InputOf, Reduced
from nccl_k8s.bench.config import Dtype

if TYPE_CHECKING:
    import torch

    from nccl_k8s.bench.kernels import Kernels


@dataclasses.dataclass(frozen=True)
class DevView:
    """`n` elements of device memory from `ptr` (what the direct driver's calls are given)."""

    ptr: int
    n: int

    def numel(self) -> int:
        return self.n

    def data_ptr(self) -> int:
        return self.ptr

    def __getitem__(self, part: slice) -> DevView:
        """`view[start:]` in bytes, as a uint8 tensor slices (-u offsets both buffers)."""
        start, stop, step = part.indices(self.n)
        if step != 1:
            raise ValueError("device views slice contiguously")
        return DevView(self.ptr + start, max(0, stop - start))


class Memory(Protocol):
    """Views of the two preallocated buffers, and the data check on them."""

    elt: int

    def view(self, buf: Any, byte_offset: int, nelems: int) -> Any: ...
    def fill(self, view: Any, p: data.Pattern, rank: int, rep: int) -> None: ...
    def sentinel(self, view: Any) -> None: ...
    def count_wrong(self, view: Any, e: Expected, p: data.Pattern, rep: int) -> int: ...


def expected_values(
    e: Expected, p: data.Pattern, rep: int, device: torch.device
) -> data.ExpectedFn:
    """The values an expected result (bench.collectives) describes, as the checker reads them."""
    if isinstance(e, Reduced):
        start = e.start
        return lambda s, k: data.reduced(p, start + s, k, rep, device)
    if isinstance(e, InputOf):
        src, first = e.src, e.start
        return lambda s, k: data.inputs(p, src, first + s, k, rep, device)
    chunk, first = e.size, e.start  # Chunks: chunk i comes from rank i

    def by_chunk(s: int, k: int) -> torch.Tensor:
        import torch

        parts = []
        pos = s
        while pos < s + k:
            src, off = divmod(pos, chunk)
            take = min(chunk - off, s + k - pos)
            parts.append(data.inputs(p, src, first + off, take, rep, device))
            pos += take
        return torch.cat(parts) if parts else torch.empty(0, dtype=torch.float64, device=device)

    return by_chunk


class TorchMemory:
    def __init__(self, dtype: Dtype) -> None:
        self.dtype_name = dtype
        self.dtype = data.torch_dtype(dtype)
        self.elt = int(self.dtype.itemsize)

    def view(self, buf: Any, byte_offset: int, nelems: int) -> Any:
        return buf[byte_offset : byte_offset + nelems * self.elt].view(self.dtype)

    def fill(self, view: Any, p: data.Pattern, rank: int, rep: int) -> None:
        data.fill(view, p, rank, rep)

    def sentinel(self, view: Any) -> None:
        data.fill_sentinel(view)

    def count_wrong(self, view: Any, e: Expected, p: data.Pattern, rep: int) -> int:
        fn = expected_values(e, p, rep, view.device)
        return data.count_wrong(view, fn, rel_tol=p.tolerance)


class KernelMemory:
    def __init__(self, dtype: Dtype, kernels: Kernels) -> None:
        from nccl_k8s.bench.dtypes import DTYPES

        self.dtype_name = dtype
        self.elt = DTYPES[dtype]
        self.k = kernels

    def view(self, buf: DevView, byte_offset: int, nelems: int) -> DevView:
        return DevView(buf.ptr + byte_offset, nelems)

    def fill(self, view: DevView, p: data.Pattern, rank: int, rep: int) -> None:
        self.k.fill(view.ptr, view.n, self.dtype_name, p, rank, rep)

    def sentinel(self, view: DevView) -> None:
        self.k.sentinel(view.ptr, view.n, self.dtype_name)

    def count_wrong(self, view: DevView, e: Expected, p: data.Pattern, rep: int) -> int:
        from nccl_k8s.bench.kernels import expectation

        mode, a, b = expectation(e)
        return self.k.count_wrong(
            view.ptr, view.n, self.dtype_name, p, rep, mode, a, b, p.tolerance
        )


__all__ = ["DevView", "KernelMemory", "Memory", "TorchMemory", "expected_values"]
