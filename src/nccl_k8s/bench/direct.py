"""A rank of the direct NCCL path: libnccl, the CUDA driver and a store; no torch.

What torch did for this path before (issue 23), and what does it now:
- the device, its stream and CUDA graphs: bench.cuda (the driver API through ctypes);
- the buffers: ncclMemAlloc, as nccl-tests 2.19.6 allocates (bench.nccl);
- the data fill and check: bench.kernels (bench.data's formulas compiled by NVRTC);
- the rendezvous and the control plane (rank 0's ncclUniqueId, barriers, the per-cell exchange
  of times and error counts): bench.store, a small TCP store the launcher hosts (torchrun's
  torch TCPStore under torchrun).

NCCL_K8S_DATA=torch keeps everything else but fills and checks with bench.data on torch tensors
over the same memory: the A/B that shows both data paths agree on the GPU.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import socket
from collections.abc import Callable, Sequence
from typing import Any

from nccl_k8s import __version__
from nccl_k8s.bench import cuda
from nccl_k8s.bench.config import NODE_NAME_ENV, Dtype
from nccl_k8s.bench.cuda import Event
from nccl_k8s.bench.memory import DevView, KernelMemory, Memory, TorchMemory
from nccl_k8s.bench.nccl import Communicator, version_string
from nccl_k8s.bench.store import StoreGroup, connect
from nccl_k8s.bench.trace import stage

#: Seconds the store waits beyond the watchdog's timeout (bench.rank.BACKSTOP_S's role); with
#: no timeout (-T 0), torch's own default for its process groups.
_BACKSTOP_S = 60
_NO_TIMEOUT_S = 1800


class Captured:
    """Calls captured into a CUDA graph on the NCCL stream (cuStreamBeginCapture, as nccl-tests)."""

    def __init__(self, stream: int, calls: Sequence[Callable[[], None]]) -> None:
        self.graph = cuda.Graph(stream)
        try:
            for call in calls:
                call()
        finally:
            self.graph.end()

    def exec_handle(self) -> int | None:
        return int(self.graph.exec.value or 0) or None

    def launch(self) -> None:
        self.graph.launch()

    def close(self) -> None:
        self.graph.close()


class DirectRank:
    """This process's place in the run on the direct NCCL path."""

    backend = "nccl"
    driver = "direct"
    cuda = True
    data_group = None

    def __init__(self, timeout_s: int) -> None:
        from nccl_k8s.bench.rank import default_env

        default_env()
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(self.world)))
        self.host = socket.gethostname()
        self.timeout_s = timeout_s
        ndev = cuda.device_count()
        if not ndev:
            raise RuntimeError("--backend nccl: no CUDA device is visible to this rank")
        self.device_index = self.local_rank % ndev
        self.dev = cuda.Device(self.device_index)
        self.stream = self.dev.stream()
        stage("device")
        store_s = float(timeout_s + _BACKSTOP_S if timeout_s else _NO_TIMEOUT_S)
        self.store, self._server = connect(rank=self.rank, timeout_s=store_s)
        self.ctrl = StoreGroup(self.store, self.rank, self.world)
        stage("store")
        self.comm: Communicator | None = Communicator(self.rank, self.world, self.store)
        stage("nccl init")
        self.data_path = "torch" if os.environ.get("NCCL_K8S_DATA") == "torch" else "kernels"
        self.allocator = "ncclMemAlloc"
        self._memory: dict[Dtype, Memory] = {}
        self._own: list[int] = []

    # -- buffers and data --------------------------------------------------------------------
    def buffer(self, nbytes: int) -> Any:
        """ncclMemAlloc'd memory (as nccl-tests 2.19.6 allocates), cuMemAlloc where NCCL has none."""
        assert self.comm is not None
        if self.data_path == "torch":
            import torch

            torch.cuda.set_device(self.device_index)
            tensor = self.comm.alloc_tensor(nbytes)
            if tensor is not None:
                return tensor
            self.allocator = "torch"
            return torch.zeros(nbytes, dtype=torch.uint8, device=f"cuda:{self.device_index}")
        ptr = self.comm.alloc_ptr(nbytes)
        if ptr is None:
            self.allocator = "cuMemAlloc"
            ptr = self.dev.alloc(nbytes)
            self._own.append(ptr)
        return DevView(ptr, nbytes)

    def memory(self, dtype: Dtype) -> Memory:
        """The data path for `dtype` (one per type: -d all measures several)."""
        memory = self._memory.get(dtype)
        if memory is None:
            if self.data_path == "torch":
                memory = TorchMemory(dtype)
            else:
                from nccl_k8s.bench.kernels import Kernels

                memory = KernelMemory(dtype, Kernels(self.dev, self.stream))
                stage("kernels")
            self._memory[dtype] = memory
        return memory

    # -- waiting ------------------------------------------------------------------------------
    def complete(self) -> None:
        """Wait until every op issued so far has finished on this rank."""
        assert self.comm is not None
        self.comm.wait(self.stream)
        if self.data_path == "torch":
            self.dev.synchronize()  # torch's fills and checks ran on torch's stream

    def finish(self) -> None:
        assert self.comm is not None
        self.comm.wait(self.stream)

    def event(self) -> Event:
        """A timing event (the soak's per-op clock)."""
        return cuda.Event()

    def capture(self, calls: Sequence[Callable[[], None]]) -> Captured:
        return Captured(self.stream, calls)

    # -- control plane ------------------------------------------------------------------------
    def barrier(self) -> None:
        self.ctrl.barrier()

    def gather_floats(self, values: Sequence[float]) -> list[list[float]]:
        return self.ctrl.gather_floats(values)

    def decide(self, values: Sequence[float]) -> list[float]:
        return self.ctrl.gather_floats(values)[0]

    def gather_object(self, obj: Any) -> list[Any]:
        return [json.loads(v) for v in self.ctrl.gather(json.dumps(obj).encode())]

    # -- what it runs on ------------------------------------------------------------------------
    def device_info(self) -> dict[str, Any]:
        return {
            "rank": self.rank, "host": self.host, "pid": os.getpid(),
            "node": os.environ.get(NODE_NAME_ENV) or self.host, "device": self.device_index,
            "name": self.dev.name, "pci": self.dev.pci, "memory": self.dev.memory,
        }  # fmt: skip

    def versions(self) -> dict[str, Any]:
        """What ran: the NCCL loaded (ncclGetVersion and its file); torch is not used here, so
        only its installed version, if any, is named."""
        assert self.comm is not None
        code = self.comm.lib.version_code()
        try:
            torch_installed: str | None = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            torch_installed = None
        return {
            "nccl_k8s": __version__, "torch": None, "torch_installed": torch_installed,
            "nccl": version_string(code), "nccl_code": code, "nccl_library": self.comm.lib.path,
            "nccl_torch": None, "cuda": cuda.driver_version(), "backend": self.backend,
        }  # fmt: skip

    # -- the end --------------------------------------------------------------------------------
    def abort(self) -> None:
        if self.comm is not None:
            self.comm.abort()

    def close(self) -> None:
        """Free everything. A world of one whose process ends next leaves the communicator to
        the process's end (NCCL_K8S_COMM_END=exit, the default there): ncclCommDestroy took
        0.48 s of a 2.3 s one-op run on the H200 (BENCHMARKS.md) and frees nothing the end of
        the process does not. With peers the communicator is destroyed, as nccl-tests does, so
        no peer sees a connection drop; NCCL_K8S_COMM_END=destroy|abort|exit overrides."""
        if self.comm is not None:
            stage("closing")
            end = os.environ.get("NCCL_K8S_COMM_END") or ("exit" if self.world == 1 else "destroy")
            if end == "abort":
                self.comm.abort()
                self.comm.free_all()
            elif end != "exit":
                self.comm.destroy()
            self.comm = None
            stage(f"nccl {end}")
        for ptr in self._own:
            self.dev.free(ptr)
        self._own = []
        close = getattr(self.store, "close", None)
        if close is not None:
            close()
        if self._server is not None:
            self._server.close()
            self._server = None


__all__ = ["Captured", "DirectRank"]
