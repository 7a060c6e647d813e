"""-z as nccl-tests 2.19.6 reads it, shown with a barrier that takes 62.5 ms (gloo, in process).

0: ops back to back; 1: wait and barrier after each op, the barrier timed; 2: wait after each
op, no barrier; 3: wait and barrier after each op, the barrier not timed.

The engine's clock is the test's: it moves only while the barrier runs, by 62.5 ms each time, so
what each -z times is exact whatever else the machine is doing (a real sleep against the real
clock failed when a loaded machine made 1 KB ops take more than 10 ms).
"""

from __future__ import annotations

import io

import pytest
import torch.distributed as dist
from tests._helpers import FakeClock

from nccl_k8s.bench import engine as engine_module
from nccl_k8s.bench.collectives import COLLECTIVES
from nccl_k8s.bench.config import ConfigError, parse_args
from nccl_k8s.bench.counts import rotation_shifts
from nccl_k8s.bench.engine import Engine, Printer
from nccl_k8s.bench.ops import Collectives
from nccl_k8s.bench.rank import Rank
from nccl_k8s.bench.watch import Watchdog

BARRIER_S = 1 / 16  # 62.5 ms: a sum of these on the test clock is exact in binary


@pytest.fixture
def barrier_world(world_of_one: Rank, monkeypatch: pytest.MonkeyPatch) -> Rank:
    """The one-rank world whose barrier moves the engine's clock by BARRIER_S."""
    slow = dist.barrier
    clock = FakeClock()

    def barrier(*args: object, **kwargs: object) -> None:
        clock.now += BARRIER_S
        slow(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine_module, "time", clock)
    monkeypatch.setattr(dist, "barrier", barrier)
    return world_of_one


def _per_op_s(rank: Rank, blocking: int) -> float:
    cfg = parse_args(["-b", "1K", "-e", "1K", "-n", "4", "-z", str(blocking)])
    engine = Engine(cfg, rank, Printer(False, io.StringIO(), False), Watchdog(0, 1, host="h", timeout_s=0, interval_s=-1))  # fmt: skip
    coll = Collectives(rank=0, nranks=1, dtype="float", redop="sum",
                       sendbuf=rank.buffer(4096), recvbuf=rank.buffer(4096), group=rank.data_group)  # fmt: skip
    counts = COLLECTIVES["all_reduce"].counts(1024, 4, 1)
    b = coll.bind("all_reduce", counts, rotation_shifts(counts, 4, 4096, 4), 0, False)
    return engine._timed(b)


def test_z3_excludes_the_barrier_z1_includes_it(barrier_world: Rank) -> None:
    t = {z: _per_op_s(barrier_world, z) for z in (0, 1, 2, 3)}
    assert t[1] >= BARRIER_S, t  # every op waited for a 62.5 ms barrier, and it was timed
    assert t[1] == pytest.approx(BARRIER_S), t  # one barrier per op, nothing else on this clock
    for z in (0, 2, 3):
        assert t[z] < BARRIER_S / 5, t  # no barrier (0, 2) or an untimed one (3)
        assert t[z] == 0, t


def test_blocking_flag_values() -> None:
    assert parse_args(["-z", "3"]).blocking == 3
    with pytest.raises(ConfigError, match="-z 4: expected 0, 1, 2 or 3"):
        parse_args(["-z", "4"])
    with pytest.raises(ConfigError, match="-z 1 with -G 1: a CUDA graph cannot wait"):
        parse_args(["-z", "1", "-G", "1"])
    assert parse_args(["-z", "3", "-G", "1"]).blocking == 3  # the engine turns it off, as 2.19.6
