"""The CUDA driver API through ctypes: what the direct NCCL path needs of a GPU, without torch.

Why the driver library (libcuda.so.1) and not cuda-bindings or the runtime: it is on every GPU
node already (the driver puts it there; no wheel to ship), it loads in milliseconds where
`import torch` takes seconds (issue 23), and the engine already calls libnccl through ctypes the
same way. NCCL links its CUDA runtime statically and works in whatever context is current, so
this module makes the device's primary context current (what the runtime's cudaSetDevice does),
and streams, graphs and memory made here are the runtime's too (cudaStream_t is a CUstream).
The data kernels are compiled with NVRTC (bench.kernels).

`gpu_count()` serves the launcher: NVML when present (no context, no cuInit), else the driver.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from typing import Any

#: cudaErrorNotReady / CUDA_ERROR_NOT_READY: the stream still has work.
NOT_READY = 600
_ATTR = {
    "cc_major": 75,
    "cc_minor": 76,
    "pci_bus": 33,
    "pci_device": 34,
    "pci_domain": 50,
    "sms": 16,
}
#: cuStreamBeginCapture's mode, as nccl-tests captures (cudaStreamCaptureModeGlobal).
_CAPTURE_GLOBAL = 0
_STREAM_NON_BLOCKING = 1


class CudaError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error text."""

    def __init__(self, what: str, code: int, text: str) -> None:
        super().__init__(f"{what} failed: {text} (CUDA error {code})")
        self.code = code


@functools.lru_cache(maxsize=1)
def driver() -> ctypes.CDLL:
    """libcuda.so.1, loaded once (OSError where there is no NVIDIA driver)."""
    return ctypes.CDLL(
        os.environ.get("NCCL_K8S_LIBCUDA") or "libcuda.so.1", mode=ctypes.RTLD_GLOBAL
    )


def check(rc: int, what: str) -> None:
    if rc:
        text = ctypes.c_char_p()
        driver().cuGetErrorString(rc, ctypes.byref(text))
        raise CudaError(what, rc, (text.value or b"unknown error").decode(errors="replace"))


def _call(name: str, *args: Any) -> None:
    check(getattr(driver(), name)(*args), name)


@functools.lru_cache(maxsize=1)
def init() -> None:
    _call("cuInit", 0)


def device_count() -> int:
    """Devices this process sees (CUDA_VISIBLE_DEVICES applies); 0 without a driver."""
    try:
        init()
    except (OSError, CudaError):
        return 0
    n = ctypes.c_int()
    _call("cuDeviceGetCount", ctypes.byref(n))
    return int(n.value)


def gpu_count() -> int:
    """The GPUs a launcher can start ranks on, without a CUDA context: NVML's count, narrowed by
    CUDA_VISIBLE_DEVICES as CUDA reads it; the driver's count where NVML is missing."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        n = ctypes.c_uint()
        if nvml.nvmlInit_v2() != 0 or nvml.nvmlDeviceGetCount_v2(ctypes.byref(n)) != 0:
            raise OSError("NVML did not answer")
        nvml.nvmlShutdown()
    except (OSError, AttributeError):
        return device_count()
    return visible(int(n.value), os.environ.get("CUDA_VISIBLE_DEVICES"))


def visible(total: int, mask: str | None) -> int:
    """How many of `total` GPUs CUDA_VISIBLE_DEVICES leaves: CUDA reads the list up to its first
    invalid entry (an index out of range, a repeat, a word that is no GPU); unset: all."""
    if mask is None:
        return total
    seen: list[str] = []
    for raw in mask.split(","):
        item = raw.strip()
        if item.isdigit():
            if int(item) >= total or item in seen:
                break
        elif not item.startswith(("GPU-", "MIG-")):
            break
        seen.append(item)
    return len(seen)


class Device:
    """One GPU with its primary context current on this thread."""

    def __init__(self, ordinal: int) -> None:
        init()
        lib = driver()
        dev = ctypes.c_int()
        _call("cuDeviceGet", ctypes.byref(dev), ordinal)
        self.ordinal, self.handle = ordinal, dev.value
        ctx = ctypes.c_void_p()
        _call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        self.ctx = ctx
        self.make_current()
        name = ctypes.create_string_buffer(256)
        _call("cuDeviceGetName", name, 256, dev)
        self.name = name.value.decode(errors="replace")
        mem = ctypes.c_size_t()
        _call("cuDeviceTotalMem_v2", ctypes.byref(mem), dev)
        self.memory = int(mem.value)
        self.attrs = {k: self.attribute(code) for k, code in _ATTR.items()}
        lib.cuStreamQuery.argtypes = [ctypes.c_void_p]

    def make_current(self) -> None:
        _call("cuCtxSetCurrent", self.ctx)

    def attribute(self, code: int) -> int:
        v = ctypes.c_int()
        _call("cuDeviceGetAttribute", ctypes.byref(v), code, self.handle)
        return int(v.value)

    @property
    def arch(self) -> int:
        """Compute capability as 90 for 9.0."""
        return self.attrs["cc_major"] * 10 + self.attrs["cc_minor"]

    @property
    def pci(self) -> str:
        a = self.attrs
        return f"{a['pci_domain']:04x}:{a['pci_bus']:02x}:{a['pci_device']:02x}"

    # -- streams and memory ------------------------------------------------------------------
    def stream(self) -> int:
        s = ctypes.c_void_p()
        _call("cuStreamCreate", ctypes.byref(s), _STREAM_NON_BLOCKING)
        return int(s.value or 0)

    def alloc(self, nbytes: int) -> int:
        p = ctypes.c_uint64()
        _call("cuMemAlloc_v2", ctypes.byref(p), ctypes.c_size_t(max(nbytes, 1)))
        return int(p.value)

    def free(self, ptr: int) -> None:
        _call("cuMemFree_v2", ctypes.c_uint64(ptr))

    def to_host(self, ptr: int, nbytes: int, stream: int) -> bytes:
        out = ctypes.create_string_buffer(nbytes)
        _call(
            "cuMemcpyDtoHAsync_v2",
            out,
            ctypes.c_uint64(ptr),
            ctypes.c_size_t(nbytes),
            ctypes.c_void_p(stream),
        )
        sync(stream)
        return out.raw

    def to_device(self, ptr: int, payload: bytes, stream: int) -> None:
        _call(
            "cuMemcpyHtoDAsync_v2",
            ctypes.c_uint64(ptr),
            payload,
            ctypes.c_size_t(len(payload)),
            ctypes.c_void_p(stream),
        )
        sync(stream)

    def synchronize(self) -> None:
        _call("cuCtxSynchronize")


def query(stream: int) -> bool:
    """True once `stream` has no work left (raises on a failed kernel)."""
    rc = driver().cuStreamQuery(ctypes.c_void_p(stream))
    if rc == NOT_READY:
        return False
    check(rc, "cuStreamQuery")
    return True


def sync(stream: int) -> None:
    _call("cuStreamSynchronize", ctypes.c_void_p(stream))


def address(name: str) -> int:
    """The address of a driver function (for the native loop: cuStreamQuery, cuGraphLaunch)."""
    return int(ctypes.cast(getattr(driver(), name), ctypes.c_void_p).value or 0)


def driver_version() -> str:
    """The CUDA version the driver supports, as 13.0."""
    v = ctypes.c_int()
    _call("cuDriverGetVersion", ctypes.byref(v))
    return f"{v.value // 1000}.{v.value % 1000 // 10}"


class Graph:
    """Work issued on a stream between `capture` and `end`, replayable with `launch`."""

    def __init__(self, stream: int) -> None:
        self.stream = stream
        self.graph = ctypes.c_void_p()
        self.exec = ctypes.c_void_p()
        _call("cuStreamBeginCapture_v2", ctypes.c_void_p(stream), _CAPTURE_GLOBAL)

    def end(self) -> Graph:
        _call("cuStreamEndCapture", ctypes.c_void_p(self.stream), ctypes.byref(self.graph))
        _call(
            "cuGraphInstantiateWithFlags",
            ctypes.byref(self.exec),
            self.graph,
            ctypes.c_ulonglong(0),
        )
        return self

    def launch(self) -> None:
        _call("cuGraphLaunch", self.exec, ctypes.c_void_p(self.stream))

    def close(self) -> None:
        if self.exec:
            driver().cuGraphExecDestroy(self.exec)
            self.exec = ctypes.c_void_p()
        if self.graph:
            driver().cuGraphDestroy(self.graph)
            self.graph = ctypes.c_void_p()


class Event:
    """A CUDA event that records time (the soak's per-op clock, torch.cuda.Event's twin)."""

    def __init__(self) -> None:
        self.handle = ctypes.c_void_p()
        _call("cuEventCreate", ctypes.byref(self.handle), 0)

    def record(self, stream: int | None) -> None:
        _call("cuEventRecord", self.handle, ctypes.c_void_p(stream or 0))

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds from this event to `end` (both recorded and complete)."""
        ms = ctypes.c_float()
        lib = driver()
        fn = getattr(lib, "cuEventElapsedTime_v2", None) or lib.cuEventElapsedTime
        check(fn(ctypes.byref(ms), self.handle, end.handle), "cuEventElapsedTime")
        return float(ms.value)

    def __del__(self) -> None:
        if self.handle:
            with contextlib.suppress(Exception):
                driver().cuEventDestroy_v2(self.handle)


class Module:
    """A loaded cubin (or PTX) and its kernels."""

    def __init__(self, image: bytes) -> None:
        self._image = ctypes.create_string_buffer(image, len(image))
        self.handle = ctypes.c_void_p()
        _call("cuModuleLoadData", ctypes.byref(self.handle), self._image)
        self._fns: dict[str, ctypes.c_void_p] = {}

    def function(self, name: str) -> ctypes.c_void_p:
        if name not in self._fns:
            fn = ctypes.c_void_p()
            _call("cuModuleGetFunction", ctypes.byref(fn), self.handle, name.encode())
            self._fns[name] = fn
        return self._fns[name]

    def launch(self, name: str, grid: int, block: int, stream: int, args: list[Any]) -> None:
        """Launch kernel `name` with ctypes-valued `args` (each passed by address)."""
        ptrs = (ctypes.c_void_p * len(args))(
            *(ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in args)
        )
        _call(
            "cuLaunchKernel", self.function(name), grid, 1, 1, block, 1, 1, 0,
            ctypes.c_void_p(stream), ptrs, None,
        )  # fmt: skip


__all__ = [
    "NOT_READY",
    "CudaError",
    "Device",
    "Event",
    "Graph",
    "Module",
    "address",
    "check",
    "device_count",
    "driver",
    "driver_version",
    "gpu_count",
    "init",
    "query",
    "sync",
    "visible",
]
