"""The data fill and check on the GPU without torch: bench.data's formulas as CUDA kernels.

The kernels' text (bench._kernel_source) is compiled once per machine with NVRTC, the CUDA
runtime compiler NVIDIA ships as a wheel (nvidia-cuda-nvrtc) and in every CUDA toolkit, for the
GPU's own architecture, and the cubin is cached (bench.native.cache_path: keyed by the text, the
architecture, NVRTC's version and ours), so later runs only load it. The same text compiled by
cc is what the tests compare with bench.data on torch: both paths write the same bytes and count
the same wrong elements (tests/test_kernels.py, and on the GPU tests/test_gpu_direct.py).
"""

from __future__ import annotations

import ctypes
import functools
import glob
import hashlib
import os
import sys
from typing import Any

from nccl_k8s import __version__
from nccl_k8s.bench import data
from nccl_k8s.bench._kernel_source import SOURCE
from nccl_k8s.bench.config import Dtype
from nccl_k8s.bench.cuda import Device, Module
from nccl_k8s.bench.dtypes import DTYPE_FACTS
from nccl_k8s.bench.native import cache_path, cached, write_atomic

#: The kernels' numbering of bench.data's kinds and bench.dtypes' types (the C enums).
KINDS = {"move": 0, "sum": 1, "prod": 2, "max": 3, "min": 4, "avg": 5, "avg_int": 6}
TYPES: dict[Dtype, int] = {
    name: facts.kernel for name, facts in DTYPE_FACTS.items() if facts.kernel is not None
}
#: The expectations of bench.collectives (Reduced, InputOf, Chunks) as the check kernel reads them.
REDUCED, INPUT, CHUNKS = 0, 1, 2
_TAGS = {"move": 1, "sum": 2, "prod": 3, "max": 4, "min": 5, "avg": 6, "avg_int": 2}
_BLOCK = 256


class NvrtcError(RuntimeError):
    """NVRTC is missing or could not compile the kernels."""


class PatternStruct(ctypes.Structure):
    """struct nk_pattern."""

    _fields_ = [
        ("kind", ctypes.c_int64), ("tag", ctypes.c_int64), ("nranks", ctypes.c_int64),
        ("budget", ctypes.c_int64), ("contributors", ctypes.c_int64), ("avg_bits", ctypes.c_int64),
        ("avg_base", ctypes.c_double), ("units", ctypes.c_void_p), ("nunits", ctypes.c_int64),
    ]  # fmt: skip


def units(nranks: int) -> list[int]:
    """bench.data's rank multipliers (coprime with n), the table position() indexes."""
    return list(data.rank_units(nranks))


def pattern_struct(p: data.Pattern, units_ptr: int, nunits: int) -> PatternStruct:
    is_avg = p.kind == "avg"
    return PatternStruct(
        KINDS[p.kind], _TAGS[p.kind], p.nranks, p.budget, p.contributors,
        p.avg_bits if is_avg else 0, p.avg_base if is_avg else 0.0, units_ptr, nunits,
    )  # fmt: skip


# -- NVRTC -----------------------------------------------------------------------------------------


def _nvrtc_candidates() -> list[str]:
    override = os.environ.get("NCCL_K8S_LIBNVRTC")
    if override:
        return [override]
    found: list[str] = []
    for base in sys.path:  # the wheels: nvidia/cu13/lib (CUDA 13), nvidia/cuda_nvrtc/lib (12)
        for sub in ("cu*", "cuda_nvrtc"):
            found += sorted(
                glob.glob(os.path.join(base or ".", "nvidia", sub, "lib", "libnvrtc.so.*"))
            )
    found = [f for f in found if "builtins" not in f and "alt" not in os.path.basename(f)]
    cuda_home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    found += sorted(glob.glob(os.path.join(cuda_home, "lib64", "libnvrtc.so*")))
    return [*found, "libnvrtc.so"]


@functools.lru_cache(maxsize=1)
def nvrtc() -> ctypes.CDLL:
    errors = []
    for path in _nvrtc_candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as exc:
            errors.append(f"{path}: {exc}")
    raise NvrtcError(
        "cannot load NVRTC for the data kernels (pip install nvidia-cuda-nvrtc, or set "
        "NCCL_K8S_LIBNVRTC): " + "; ".join(errors[-2:])
    )


def nvrtc_version() -> str:
    major, minor = ctypes.c_int(), ctypes.c_int()
    nvrtc().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"{major.value}.{minor.value}"


def compile_cubin(arch: int) -> bytes:
    """The kernels as a cubin for sm_<arch> (PTX for the newest arch NVRTC knows when it does
    not know this one: the driver then compiles it)."""
    lib = nvrtc()
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(
        ctypes.byref(prog), SOURCE.encode(), b"nccl_k8s_data.cu", 0, None, None
    )
    if rc:
        raise NvrtcError(f"nvrtcCreateProgram failed ({rc})")
    try:
        for target, getter in ((f"sm_{arch}", "CUBIN"), (f"compute_{arch}", "PTX")):
            opts = [f"--gpu-architecture={target}".encode(), b"-default-device", b"--std=c++17"]
            arr = (ctypes.c_char_p * len(opts))(*opts)
            if lib.nvrtcCompileProgram(prog, len(opts), arr) == 0:
                size = ctypes.c_size_t()
                getattr(lib, f"nvrtcGet{getter}Size")(prog, ctypes.byref(size))
                out = ctypes.create_string_buffer(size.value)
                getattr(lib, f"nvrtcGet{getter}")(prog, out)
                return out.raw
        log_size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(log_size))
        log = ctypes.create_string_buffer(log_size.value)
        lib.nvrtcGetProgramLog(prog, log)
        raise NvrtcError(
            f"NVRTC could not compile the data kernels for sm_{arch}: {log.value.decode()[:2000]}"
        )
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def cubin(arch: int) -> bytes:
    """The kernels for sm_<arch>: from the cache, or compiled once and cached."""
    digest = hashlib.sha256(SOURCE.encode()).hexdigest()[:16]
    path = cache_path(f"kernels-{__version__}-sm{arch}-nvrtc{nvrtc_version()}-{digest}.cubin")
    if path is not None and cached(path):
        with open(path, "rb") as f:
            return f.read()
    image = compile_cubin(arch)
    if path is not None:
        write_atomic(path, image)
    return image


# -- the kernels on one device ---------------------------------------------------------------------


class Kernels:
    """Fill, sentinel and check on raw device pointers, on one stream of one device."""

    def __init__(self, device: Device, stream: int) -> None:
        self.dev, self.stream = device, stream
        self.module = Module(cubin(device.arch))
        self.grid_max = max(1, device.attrs.get("sms", 1)) * 8
        self.counter = device.alloc(8)
        self._units: dict[int, tuple[int, int]] = {}

    def _pattern(self, p: data.Pattern) -> PatternStruct:
        if p.nranks not in self._units:
            table = units(p.nranks)
            ptr = self.dev.alloc(8 * len(table))
            self.dev.to_device(ptr, bytes((ctypes.c_int64 * len(table))(*table)), self.stream)
            self._units[p.nranks] = (ptr, len(table))
        ptr, n = self._units[p.nranks]
        return pattern_struct(p, ptr, n)

    def _grid(self, n: int) -> int:
        return max(1, min(self.grid_max, (n + _BLOCK - 1) // _BLOCK))

    def fill(self, ptr: int, n: int, dtype: Dtype, p: data.Pattern, rank: int, rep: int, start: int = 0) -> None:  # fmt: skip
        if n <= 0:
            return
        args = [ctypes.c_void_p(ptr), ctypes.c_int64(n), ctypes.c_int(TYPES[dtype]), self._pattern(p),
                ctypes.c_int64(rank), ctypes.c_int64(rep), ctypes.c_int64(start)]  # fmt: skip
        self.module.launch("nk_fill", self._grid(n), _BLOCK, self.stream, args)

    def sentinel(self, ptr: int, n: int, dtype: Dtype) -> None:
        if n <= 0:
            return
        args = [ctypes.c_void_p(ptr), ctypes.c_int64(n), ctypes.c_int(TYPES[dtype])]
        self.module.launch("nk_sentinel", self._grid(n), _BLOCK, self.stream, args)

    def count_wrong(self, ptr: int, n: int, dtype: Dtype, p: data.Pattern, rep: int, mode: int, a: int, b: int, tol: float) -> int:  # fmt: skip
        """Elements of the n at `ptr` that differ from the expectation (mode, a, b)."""
        if n <= 0:
            return 0
        self.dev.to_device(self.counter, bytes(8), self.stream)
        args = [ctypes.c_void_p(ptr), ctypes.c_int64(n), ctypes.c_int(TYPES[dtype]), self._pattern(p),
                ctypes.c_int64(rep), ctypes.c_int(mode), ctypes.c_int64(a), ctypes.c_int64(b),
                ctypes.c_double(tol), ctypes.c_void_p(self.counter)]  # fmt: skip
        self.module.launch("nk_check", self._grid(n), _BLOCK, self.stream, args)
        return int.from_bytes(self.dev.to_host(self.counter, 8, self.stream), "little")


def expectation(e: Any) -> tuple[int, int, int]:
    """(mode, a, b) of a bench.collectives expectation, as nk_check reads it."""
    from nccl_k8s.bench.collectives import InputOf, Reduced

    if isinstance(e, Reduced):
        return REDUCED, e.start, 0
    if isinstance(e, InputOf):
        return INPUT, e.src, e.start
    return CHUNKS, e.size, e.start


__all__ = [
    "CHUNKS",
    "INPUT",
    "KINDS",
    "REDUCED",
    "TYPES",
    "Kernels",
    "NvrtcError",
    "PatternStruct",
    "compile_cubin",
    "cubin",
    "expectation",
    "nvrtc",
    "pattern_struct",
    "units",
]
