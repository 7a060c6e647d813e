"""How many ranks, and on which hosts, a nccl-tests output implies where it does not print them
all: the `-g`/`-t` of its command line, the per-rank element count of its rows, and device lines
thinned by whoever pasted them. Pure; results.nccltests reads outputs with it."""

from __future__ import annotations

import re

from nccl_k8s.results.collectives import DTYPE_BYTES
from nccl_k8s.results.schema import Device, Row

_GPUS_FLAG = re.compile(r"(?:^|\s)(?:-g\s*|--ngpus[=\s])(?P<n>\d+)\b")
_THREADS_FLAG = re.compile(r"(?:^|\s)(?:-t\s*|--nthreads[=\s])(?P<n>\d+)\b")


def ranks_per_process(command: str) -> int | None:
    """Ranks per process a command line asks nccl-tests for: `-t` threads x `-g` GPUs."""
    g, t = _GPUS_FLAG.search(command), _THREADS_FLAG.search(command)
    if g is None and t is None:
        return None
    return (int(g.group("n")) if g else 1) * (int(t.group("n")) if t else 1)


def world_from_counts(rows: list[Row]) -> int | None:
    """The ranks a per-rank count implies (size / element size / count), when every row with a
    count agrees on one integer above 1."""
    ks = {
        r.size_bytes / (DTYPE_BYTES[r.dtype] * r.count)
        for r in rows
        if r.dtype in DTYPE_BYTES and r.count and r.size_bytes > 0
    }
    if len(ks) != 1:
        return None
    k = ks.pop()
    return int(k) if k == int(k) and k > 1 else None


def hosts_from_device_indices(devices: dict[int, Device], world: int) -> dict[int, str] | None:
    """The host of every rank 0..world-1, when device lines thinned by whoever pasted them (ranks
    0, 7, 8 and 15 of 16) still pin it; else None.

    nccl-tests and rccl-tests give a rank the device `localRank * nThreads * nGpus + i`, where
    `localRank` counts the process's predecessors on its host (`run()` in src/common.cu of
    NVIDIA/nccl-tests at d2d40cc8): so a rank on device d has at least d ranks below it on its host (at
    least: a device count modulo or several ranks per GPU only lower the index). Where the
    unlisted ranks below it are exactly as many as its host still lacks, they are all on its
    host. Only with rank 0 on device 0, and none asking more lower ranks than there are: else
    the index may not count ranks (`NCCL_TESTS_DEVICE` gives every process the same device,
    which shows at rank 0)."""
    if 0 not in devices or devices[0].device != 0:
        return None
    host: dict[int, str] = {}
    index: dict[int, int] = {}
    for rank, d in devices.items():
        if d.host is None or d.device is None:
            return None
        host[rank], index[rank] = d.host, d.device
    changed = True
    while changed:
        changed = False
        for rank in sorted(index):
            on_host = host[rank]
            known = sum(1 for r, h in host.items() if r < rank and h == on_host)
            free = [r for r in range(rank) if r not in host]
            lack = index[rank] - known
            if lack > len(free):
                return None
            if free and lack == len(free):
                host.update((r, on_host) for r in free)
                changed = True
    return host if sorted(host) == list(range(world)) else None


__all__ = ["hosts_from_device_indices", "ranks_per_process", "world_from_counts"]
