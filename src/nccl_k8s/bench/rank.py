"""This process's place in the run: the process groups, the buffers, and what it runs on.

The runner picks the rank (bench.runner.join): the direct NCCL path (bench.direct: libnccl, the
CUDA driver and our store, no torch) or this module's torch rank for gloo and `--driver torch`;
both start from the environment `default_env` completes. The torch rank has
two process groups: the data plane (NCCL or gloo, what is measured) and a gloo control plane on
the CPU for barriers, time exchange and error counts, so bookkeeping never queues behind or
between the measured collectives on the GPU. The direct rank's control plane is the store.
"""

from __future__ import annotations

import datetime
import os
import platform
import socket
from collections.abc import Sequence
from typing import Any

from nccl_k8s import __version__
from nccl_k8s.bench.config import NODE_NAME_ENV, Backend, Driver, Dtype
from nccl_k8s.bench.memory import Memory, TorchMemory
from nccl_k8s.bench.ops import all_gather_fn

GIB = 1 << 30
#: Seconds the process groups' own timeouts wait beyond the watchdog's, so the watchdog (which
#: names the culprit) always speaks first and torch's timeouts are only a backstop.
BACKSTOP_S = 60


class Rank:
    """This process's place in the run and the two process groups (gloo, `--driver torch`)."""

    comm = None
    stream = None

    def __init__(self, backend: Backend, timeout_s: int, *, driver: Driver = "torch") -> None:
        import torch
        import torch.distributed as dist

        if backend == "nccl" and driver == "direct":
            raise ValueError(
                "the direct NCCL driver's rank is bench.direct.DirectRank (runner.join)"
            )
        default_env()
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(self.world)))
        self.backend = backend
        self.host = socket.gethostname()
        kwargs: dict[str, Any] = {}
        if timeout_s:
            kwargs["timeout"] = datetime.timedelta(seconds=timeout_s + BACKSTOP_S)
        if backend == "nccl":
            ndev = torch.cuda.device_count()
            self.device = torch.device("cuda", self.local_rank % ndev)
            torch.cuda.set_device(self.device)
            kwargs["device_id"] = self.device
        else:
            self.device = torch.device("cpu")
        self.timeout_s = timeout_s
        self.allocator = "torch"
        """Where the send/receive buffers come from."""
        dist.init_process_group(backend=backend, init_method="env://", **kwargs)
        self.data_group: Any = dist.group.WORLD
        timeout = {"timeout": kwargs["timeout"]} if timeout_s else {}
        self.ctrl: Any = dist.new_group(backend="gloo", **timeout)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def driver(self) -> str | None:
        return "torch" if self.backend == "nccl" else None

    def buffer(self, nbytes: int) -> Any:
        """A uint8 buffer on this rank's device (torch's allocator)."""
        import torch

        return torch.zeros(nbytes, dtype=torch.uint8, device=self.device)

    def memory(self, dtype: Dtype) -> Memory:
        return TorchMemory(dtype)

    def complete(self) -> None:
        """Wait until every op issued so far has finished on this rank."""
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.device)

    def finish(self) -> None:
        """End of a timed loop: wait for the measured ops."""
        self.complete()

    def event(self) -> Any:
        """A timing event (the soak's per-op clock)."""
        import torch

        return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]

    def capture(self, calls: Sequence[Any]) -> TorchGraph:
        """The calls captured in a CUDA graph on a side stream, replayed there."""
        return TorchGraph(self.device, calls)

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier(group=self.ctrl)

    def gather_floats(self, values: Sequence[float]) -> list[list[float]]:
        """Every rank's values, on every rank (control plane)."""
        import torch

        mine = torch.tensor(list(values), dtype=torch.float64)
        out = torch.empty(self.world * len(values), dtype=torch.float64)
        all_gather_fn()(out, mine, group=self.ctrl)
        return [out[i * len(values) : (i + 1) * len(values)].tolist() for i in range(self.world)]

    def decide(self, values: Sequence[float]) -> list[float]:
        """Rank 0's values, on every rank: one decision all ranks then follow (control plane)."""
        import torch
        import torch.distributed as dist

        t = torch.tensor(list(values), dtype=torch.float64)
        dist.broadcast(t, src=0, group=self.ctrl)
        return [float(x) for x in t.tolist()]

    def gather_object(self, obj: Any) -> list[Any]:
        import torch.distributed as dist

        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj, group=self.ctrl)
        return out

    def abort(self) -> None:
        """Nothing of ours to abort: torch's NCCL watchdog owns its communicators."""

    def close(self) -> None:
        import gc

        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        # destroy_process_group forgets the groups; their C++ objects (and gloo's worker
        # threads) end with the last reference, and these two were the last. Kept, they ended at
        # interpreter exit, where a gloo thread still holding a tensor aborts the process
        # ("terminate called without an active exception": 2 runs of 45 on a loaded machine).
        self.data_group = self.ctrl = None
        gc.collect()

    def device_info(self) -> dict[str, Any]:
        return device_info(self)

    def versions(self) -> dict[str, Any]:
        return versions(self)


class TorchGraph:
    """torch's CUDA graph of some calls, captured and replayed on one side stream."""

    def __init__(self, device: Any, calls: Sequence[Any]) -> None:
        import torch

        self.stream = torch.cuda.Stream(device=device)  # type: ignore[no-untyped-call]
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=self.stream):
            for call in calls:
                call()

    def exec_handle(self) -> int | None:
        return None  # replayed by torch, not launched from the C loop

    def launch(self) -> None:
        import torch

        with torch.cuda.stream(self.stream):
            self.graph.replay()

    def close(self) -> None:
        del self.graph


def default_env() -> None:
    """Run as a world of one when started without torchrun."""
    if "RANK" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )  # fmt: skip


class NoGpu(Exception):
    """A rank whose pod asked for GPUs (--gpus-requested) sees none; `gpus` is how many."""

    def __init__(self, gpus: int) -> None:
        super().__init__(no_gpu_reason(gpus))
        self.gpus = gpus


#: The variables that decide which GPUs a container's processes see: the CUDA runtime's, and
#: the NVIDIA container runtime's (which devices it mounts into the container).
VISIBLE_DEVICES_ENV = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")


def no_gpu_reason(gpus: int) -> str:
    """Why a rank that asked for GPUs sees none, with what to check (one line)."""
    seen = ", ".join(f"{k}={os.environ.get(k, '(unset)')}" for k in VISIBLE_DEVICES_ENV)
    return (
        f"its pod asked for {gpus} GPU{'s' if gpus != 1 else ''} (--gpus-per-node) but the CUDA "
        f"driver sees none ({seen}): likely causes: the pod does not run under the NVIDIA "
        "container runtime (its runtimeClass, --runtime-class), the node's device plugin did not "
        "hand the GPUs in, or a visible-devices variable hides them; `-- --backend gloo` "
        "measures the CPU on purpose"
    )


def resolve_backend(requested: Backend, *, gpus_requested: int = 0) -> Backend:
    """auto: NCCL where the CUDA driver sees a GPU (asked without torch), gloo only where no GPU
    was requested; a rank that asked for GPUs (`gpus_requested` > 0) and sees none raises NoGpu
    unless gloo was asked for."""
    if requested == "gloo" or (requested == "nccl" and not gpus_requested):
        return requested
    from nccl_k8s.bench.cuda import device_count

    seen = device_count()
    if gpus_requested and not seen:
        raise NoGpu(gpus_requested)
    if requested != "auto":
        return requested
    return "nccl" if seen else "gloo"


def device_info(r: Rank) -> dict[str, Any]:
    info: dict[str, Any] = {"rank": r.rank, "host": r.host, "pid": os.getpid()}
    # The Kubernetes node when the pod's environment names it (the downward API), else the host.
    info["node"] = os.environ.get(NODE_NAME_ENV) or r.host
    if r.cuda:
        import torch

        props = torch.cuda.get_device_properties(r.device)
        info["device"] = r.device.index
        info["name"] = props.name
        domain = getattr(props, "pci_domain_id", 0)
        info["pci"] = (
            f"{domain:04x}:{getattr(props, 'pci_bus_id', 0):02x}:{getattr(props, 'pci_device_id', 0):02x}"
        )
        info["memory"] = int(props.total_memory)
    else:
        info["device"] = r.local_rank
        info["name"] = _cpu_name()
        info["pci"] = "cpu"
        info["memory"] = _host_available() // max(1, r.local_world)
    return info


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def _host_available() -> int:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * GIB


def versions(r: Rank) -> dict[str, Any]:
    """What ran: the NCCL actually loaded (ncclGetVersion, and its file), not torch's build
    number; gloo runs use no NCCL and say so."""
    import torch

    torch_nccl = None
    if torch.cuda.is_available():
        try:
            v = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
            torch_nccl = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        except Exception:  # torch built without NCCL
            torch_nccl = None
    out: dict[str, Any] = {
        "nccl_k8s": __version__,
        "torch": torch.__version__,
        "nccl": None,
        "nccl_code": 0,
        "nccl_library": None,
        "nccl_torch": torch_nccl,
        "cuda": torch.version.cuda,
        "backend": r.backend,
    }
    if r.backend != "nccl":
        out["nccl_note"] = f"{r.backend} backend: NCCL is not used"
        return out
    from nccl_k8s.bench.nccl import Library, version_string

    lib = Library()
    code = lib.version_code()
    out.update(nccl=version_string(code), nccl_code=code, nccl_library=lib.path)
    return out


__all__ = [
    "BACKSTOP_S",
    "VISIBLE_DEVICES_ENV",
    "NoGpu",
    "Rank",
    "TorchGraph",
    "default_env",
    "device_info",
    "no_gpu_reason",
    "resolve_backend",
    "versions",
]
