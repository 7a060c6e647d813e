"""--duration holds within one report interval, however long a data check takes.

In process, one gloo rank, on the test's clock: each op takes 0.5 s and a check 0.01 s or 25 s
(what a 256 MB check costs on a CPU), so what the soak decides is exact on any machine.
"""

from __future__ import annotations

import io
import itertools
import json
import pathlib
import re

import pytest
from tests._helpers import FakeClock

from nccl_k8s.bench import soak as soak_module
from nccl_k8s.bench.config import parse_args
from nccl_k8s.bench.engine import Engine, Printer
from nccl_k8s.bench.ops import Collectives
from nccl_k8s.bench.rank import Rank
from nccl_k8s.bench.runner import write_json
from nccl_k8s.bench.watch import Watchdog

OP_S = 0.5


def _soak(rank: Rank, monkeypatch: pytest.MonkeyPatch, check_s: float) -> tuple[float, list[float]]:
    """Soak 60 s with reports every 10 s; the clock at the end and each report's t."""
    clock = FakeClock()
    monkeypatch.setattr(soak_module, "time", clock)

    def batch(engine: object, b: object, n: int) -> list[float]:
        clock.now += n * OP_S
        return [OP_S] * n

    monkeypatch.setattr(soak_module, "_batch", batch)
    cfg = parse_args(["-b", "1K", "-e", "1K", "--duration", "60", "--report-interval", "10"])
    out = io.StringIO()
    engine = Engine(cfg, rank, Printer(True, out, False), Watchdog(0, 1, host="h", timeout_s=0, interval_s=-1))  # fmt: skip

    def checked_op(*args: object) -> int:
        clock.now += check_s
        return 0

    monkeypatch.setattr(engine, "checked_op", checked_op)
    coll = Collectives(rank=0, nranks=1, dtype="float", redop="sum",
                       sendbuf=rank.buffer(4096), recvbuf=rank.buffer(4096), group=rank.data_group)  # fmt: skip
    soak = soak_module._Soak(engine, "all_reduce", coll, 1024, -1)
    soak.run()
    reports = [float(t) for t in re.findall(r"t=\s*([\d.]+)s", out.getvalue())]
    assert soak.checks == len(reports)
    return clock.now, reports


def test_a_cheap_check_every_interval_and_the_duration_kept(
    world_of_one: Rank, monkeypatch: pytest.MonkeyPatch
) -> None:
    end, reports = _soak(world_of_one, monkeypatch, check_s=0.01)
    assert 60 <= end <= 70
    assert reports[0] == OP_S  # the first batch is checked at once
    assert reports[-1] >= 60
    gaps = [b - a for a, b in itertools.pairwise(reports)]
    assert all(10 <= g <= 10 + OP_S + 0.01 for g in gaps[:-1]), reports


def test_a_check_longer_than_the_interval_still_ends_within_one_interval(
    world_of_one: Rank, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a 60 s soak whose checks took ~30 s ran 114 s (reports at 10, 52, 78 s)."""
    end, reports = _soak(world_of_one, monkeypatch, check_s=25)
    assert end <= 70, (end, reports)
    assert len(reports) >= 2  # the first batch's check, and the last one's


def test_a_soaked_op_is_summarised_once(
    world_of_one: Rank, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    """One op soaked at one size is one summary and one row in the -J file, as a sweep's op is
    (the soak used to be added to the run's summaries twice: two `ops` entries, two rows)."""
    clock = FakeClock()
    monkeypatch.setattr(soak_module, "time", clock)

    def batch(engine: object, b: object, n: int) -> list[float]:
        clock.now += n * OP_S
        return [OP_S] * n

    monkeypatch.setattr(soak_module, "_batch", batch)
    argv = ["-b", "1K", "-e", "1K", "--duration", "2", "--report-interval", "1"]
    cfg = parse_args(argv)
    engine = Engine(cfg, world_of_one, Printer(True, io.StringIO(), False), Watchdog(0, 1, host="h", timeout_s=0, interval_s=-1))  # fmt: skip
    outcome = engine.run()
    assert [s.op for s in outcome.summaries] == ["all_reduce"]
    write_json(str(tmp_path / "run.json"), engine, argv, "start")
    doc = json.loads((tmp_path / "run.json").read_text())
    assert [op["op"] for op in doc["ops"]] == ["all_reduce"]
    assert [row["size"] for row in doc["results"]] == [1024]
