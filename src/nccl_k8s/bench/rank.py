"""This process's place in the run: the process groups, the buffers, and what it runs on.

Two process groups: the data plane (NCCL or gloo, what is measured; with the direct driver,
libnccl itself through bench.nccl) and a gloo control plane on the CPU for barriers, time
exchange and error counts, so bookkeeping never queues behind or between the measured
collectives on the GPU.
"""

from __future__ import annotations

import datetime
import os
import platform
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nccl_k8s import __version__
from nccl_k8s.bench.config import Backend, Driver
from nccl_k8s.bench.ops import all_gather_fn

if TYPE_CHECKING:
    from nccl_k8s.bench.nccl import Communicator

GIB = 1 << 30
#: Seconds the process groups' own timeouts wait beyond the watchdog's, so the watchdog (which
#: names the culprit) always speaks first and torch's timeouts are only a backstop.
BACKSTOP_S = 60


class Rank:
    """This process's place in the run and the two process groups."""

    def __init__(self, backend: Backend, timeout_s: int, *, driver: Driver = "direct") -> None:
        import torch
        import torch.distributed as dist

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
        """Where the send/receive buffers come from: ncclMemAlloc (direct driver) or torch."""
        self.comm: Communicator | None = None
        self.stream: Any = None
        self.data_group: Any = None
        if backend == "nccl" and driver == "direct":
            # libnccl directly for the data plane; torch.distributed (gloo) only for the control plane.
            kwargs.pop("device_id", None)
            dist.init_process_group(backend="gloo", init_method="env://", **kwargs)
            from torch.distributed import distributed_c10d

            from nccl_k8s.bench.nccl import Communicator

            self.stream = torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]
            store = distributed_c10d._get_default_store()
            self.comm = Communicator(self.rank, self.world, store)
            self.ctrl: Any = dist.group.WORLD
        else:
            dist.init_process_group(backend=backend, init_method="env://", **kwargs)
            self.data_group = dist.group.WORLD
            timeout = {"timeout": kwargs["timeout"]} if timeout_s else {}
            self.ctrl = dist.new_group(backend="gloo", **timeout)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def driver(self) -> str | None:
        if self.backend != "nccl":
            return None
        return "direct" if self.comm is not None else "torch"

    def buffer(self, nbytes: int) -> Any:
        """A uint8 buffer on this rank's device: ncclMemAlloc with the direct driver (as
        nccl-tests 2.19.6 allocates), torch's allocator otherwise."""
        import torch

        if self.comm is not None:
            try:
                with torch.cuda.device(self.device):
                    buf = self.comm.alloc(nbytes)
            except Exception as exc:  # measured either way; say which
                self.allocator = f"torch (ncclMemAlloc failed: {exc})"
                buf = None
            if buf is not None:
                self.allocator = "ncclMemAlloc"
                return buf
        return torch.zeros(nbytes, dtype=torch.uint8, device=self.device)

    def complete(self) -> None:
        """Wait until every op issued so far has finished on this rank."""
        if self.comm is not None:
            self.comm.wait(self.stream)
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.device)

    def finish(self) -> None:
        """End of a timed loop: wait for the measured ops only (nccl-tests polls its stream)."""
        if self.comm is not None:
            self.comm.wait(self.stream)
        else:
            self.complete()

    def capture_stream(self) -> Any:
        """The stream CUDA graphs capture on: the one direct NCCL calls go to, else a side stream."""
        import torch

        if self.stream is not None:
            return self.stream
        return torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]

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
        """Abort the NCCL communicator (from the watchdog: unblocks a stuck collective)."""
        if self.comm is not None:
            self.comm.abort()

    def close(self) -> None:
        import torch.distributed as dist

        if self.comm is not None:
            self.comm.destroy()
        if dist.is_initialized():
            dist.destroy_process_group()


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


def resolve_backend(requested: Backend) -> Backend:
    if requested != "auto":
        return requested
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def device_info(r: Rank) -> dict[str, Any]:
    info: dict[str, Any] = {"rank": r.rank, "host": r.host, "pid": os.getpid()}
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

    lib = r.comm.lib if r.comm is not None else Library()
    code = lib.version_code()
    out.update(nccl=version_string(code), nccl_code=code, nccl_library=lib.path)
    return out


__all__ = ["BACKSTOP_S", "Rank", "default_env", "device_info", "resolve_backend", "versions"]
