"""The collectives registry (bench.collectives): one table that the engine and the results read.

- results' facts about each collective are the engine's entries, not a copy that can drift;
- the facts themselves match nccl-tests 2.19.6's source (src/<op>.cu), stated here as the oracle;
- the libnccl calls each entry makes put every element where its expected result says, run on
  a small simulated NCCL (the direct driver needs a GPU; this checks the call lists on CPU);
- element types are stated once (bench.dtypes) and read by the parser, the NCCL calls, torch
  and the results reader.
"""

from __future__ import annotations

import ctypes
from collections import defaultdict
from typing import Any, get_args

import pytest
import torch

from nccl_k8s.bench import config
from nccl_k8s.bench.collectives import (
    ALL_OPS,
    COLLECTIVES,
    REDUCING_OPS,
    ROOTED_OPS,
    Chunks,
    Expected,
    InputOf,
    NcclCall,
    Op,
    Place,
    Reduced,
    Spec,
    refused,
)
from nccl_k8s.bench.data import torch_dtype
from nccl_k8s.bench.dtypes import DTYPE_ALIASES, DTYPE_FACTS, DTYPES, Dtype
from nccl_k8s.bench.nccl import NCCL_DTYPES
from nccl_k8s.results import collectives as results


def test_results_read_the_engines_entries() -> None:
    """No fact stated twice: results' facts for an engine collective are its registry entry."""
    assert not set(results.NCCL_TESTS_ONLY) & set(ALL_OPS)
    assert sorted(results.COLLECTIVES) == sorted([*ALL_OPS, *results.NCCL_TESTS_ONLY])
    for op, c in COLLECTIVES.items():
        facts = results.FACTS[op]
        assert facts == results.Facts.of(c)
        assert facts.bus_factor is c.bus_factor, op  # the same function, not a restatement
        assert (facts.reduces, facts.rooted, facts.per_rank_count, facts.checks_in_place) == (
            c.prints_redop, c.rooted, c.split, c.inplace_checked
        ), op  # fmt: skip


# nccl-tests 2.19.6, src/<op>.cu: redop printed, root >= 0, count per rank, busbw/algbw at 4
# ranks, in-place #wrong checked (alltoall and sendrecv set reportErrors = !in_place).
NCCL_TESTS: dict[str, tuple[bool, bool, bool, float, bool]] = {
    "all_reduce": (True, False, False, 1.5, True),
    "all_gather": (False, False, True, 0.75, True),
    "reduce_scatter": (True, False, True, 0.75, True),
    "broadcast": (False, True, False, 1.0, True),
    "reduce": (True, True, False, 1.0, True),
    "alltoall": (False, False, True, 0.75, False),
    "sendrecv": (True, False, False, 1.0, False),
    "gather": (False, True, True, 0.75, True),
    "scatter": (False, True, True, 0.75, True),
    "hypercube": (False, False, True, 1.0, True),
}


@pytest.mark.parametrize("op", list(results.FACTS))
def test_facts_are_nccl_tests(op: str) -> None:
    f = results.FACTS[op]  # type: ignore[index]
    assert (f.reduces, f.rooted, f.per_rank_count, f.bus_factor(4), f.checks_in_place) == (
        NCCL_TESTS[op]
    )


def test_op_names_are_the_entries() -> None:
    assert get_args(Op) == tuple(COLLECTIVES) == ALL_OPS
    assert all(c.name == op for op, c in COLLECTIVES.items())
    assert config.ALL_OPS is ALL_OPS
    assert {"broadcast", "reduce", "gather", "scatter"} == ROOTED_OPS
    assert {"all_reduce", "reduce_scatter", "reduce"} == REDUCING_OPS  # sendrecv prints a redop


def test_every_op_runs_at_one_to_eight_ranks_unless_it_says_why() -> None:
    for n in range(1, 9):
        for op in ALL_OPS:
            why = COLLECTIVES[op].refuses(n)
            assert why is None or (why and "\n" not in why), (op, n, why)
    assert refused(("all_reduce", "all_gather"), 3) is None


def test_dtypes_are_stated_once() -> None:
    assert get_args(Dtype) == tuple(DTYPE_FACTS) == tuple(DTYPES)
    assert config.DTYPES is DTYPES
    # nccl.h's ncclDataType_t
    assert NCCL_DTYPES == {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4,
                           "uint64": 5, "half": 6, "float": 7, "double": 8, "bfloat16": 9,
                           "f8e4m3": 10, "f8e5m2": 11}  # fmt: skip
    for name, size in DTYPES.items():
        assert torch_dtype(name).itemsize == size, name
        assert results.DTYPE_BYTES[name] == size
    for alias, name in DTYPE_ALIASES.items():
        assert results.DTYPE_BYTES[alias] == DTYPES[name]
    assert torch_dtype("half") is torch.float16 and torch_dtype("f8e4m3") is torch.float8_e4m3fn


# -- the libnccl calls, on a simulated NCCL ---------------------------------------------------
ELT = 8  # one element: an int64 naming (rank, index), so every misplaced element shows
SEND, RECV = 0x10000, 0x100000


def _id(rank: int, index: int) -> int:
    return rank * 1_000_000 + index


def _value(arg: Any) -> int:
    return int(arg.value or 0)


class _Nccl:
    """Every rank's memory (element address -> value) and libnccl's data movement on it.

    All ranks' k-th step (one collective call, or one group) run together, reading memory as it
    was before the step; sends and receives between two ranks match in order, as in NCCL."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.mem: list[dict[int, int | None]] = [{} for _ in range(n)]
        self.before: list[dict[int, int | None]] = []

    def read(self, rank: int, ptr: int, count: int) -> list[int | None]:
        mem = self.before or self.mem
        return [mem[rank].get(ptr // ELT + k) for k in range(count)]

    def write(self, rank: int, ptr: int, values: list[int | None]) -> None:
        for k, v in enumerate(values):
            self.mem[rank][ptr // ELT + k] = v

    def run(self, specs: list[list[Spec]]) -> None:
        steps = [_steps(s) for s in specs]
        assert len({len(s) for s in steps}) == 1, "ranks make different numbers of steps"
        for k in range(len(steps[0])):
            self.before = [dict(m) for m in self.mem]
            calls = [s[k] for s in steps]
            names = {name for call in calls for name, _ in call}
            if names <= {"ncclSend", "ncclRecv"}:
                self._p2p(calls)
            else:
                assert len(names) == 1 and all(len(call) == 1 for call in calls), names
                self._collective(names.pop(), [call[0][1] for call in calls])
            self.before = []

    def _p2p(self, calls: list[list[Spec]]) -> None:
        sends: dict[tuple[int, int], list[list[int | None]]] = defaultdict(list)
        for rank, group in enumerate(calls):
            for name, (ptr, cnt, _dt, peer, *_) in group:
                if name == "ncclSend":
                    sends[rank, _value(peer)].append(self.read(rank, _value(ptr), _value(cnt)))
        for rank, group in enumerate(calls):
            for name, (ptr, cnt, _dt, peer, *_) in group:
                if name == "ncclRecv":
                    data = sends[_value(peer), rank].pop(0)
                    assert len(data) == _value(cnt), "send and receive counts differ"
                    self.write(rank, _value(ptr), data)
        assert not any(sends.values()), "a send nobody received"

    def _collective(self, name: str, args: list[tuple[Any, ...]]) -> None:
        """One collective call on every rank; args[i] are rank i's arguments."""
        n, cnt = self.n, _value(args[0][2])
        rooted = {"ncclBroadcast": 4, "ncclGather": 4, "ncclScatter": 4, "ncclReduce": 5}
        root = _value(args[0][rooted[name]]) if name in rooted else -1

        def send(i: int, chunk: int = 0) -> list[int | None]:
            return self.read(i, _value(args[i][0]) + chunk * cnt * ELT, cnt)

        def total(chunk: int) -> list[int | None]:
            cols = zip(*(send(i, chunk) for i in range(n)), strict=True)
            return [None if None in col else sum(v for v in col if v is not None) for col in cols]

        for rank in range(n):
            recv = _value(args[rank][1])
            if name == "ncclAllReduce" or (name == "ncclReduce" and rank == root):
                self.write(rank, recv, total(0))
            elif name == "ncclReduceScatter":
                self.write(rank, recv, total(rank))
            elif name == "ncclBroadcast":
                self.write(rank, recv, send(root))
            elif name == "ncclAllGather" or (name == "ncclGather" and rank == root):
                for i in range(n):
                    self.write(rank, recv + i * cnt * ELT, send(i))
            elif name == "ncclAlltoAll":
                for i in range(n):
                    self.write(rank, recv + i * cnt * ELT, send(i, rank))
            elif name == "ncclScatter":
                self.write(rank, recv, send(root, rank))
            else:
                assert name in ("ncclReduce", "ncclGather"), f"unknown call {name}"


def _steps(specs: list[Spec]) -> list[list[Spec]]:
    """One rank's calls as steps: a lone collective call, or the calls of one group."""
    steps: list[list[Spec]] = []
    group: list[Spec] | None = None
    for spec in specs:
        if spec[0] == "ncclGroupStart":
            group = []
        elif spec[0] == "ncclGroupEnd":
            assert group is not None
            steps.append(group)
            group = None
        elif group is not None:
            group.append(spec)
        else:
            steps.append([spec])
    assert group is None
    return steps


def _expected(e: Expected, n: int, count: int) -> list[int | None]:
    if isinstance(e, Reduced):
        return [sum(_id(r, e.start + j) for r in range(n)) for j in range(count)]
    if isinstance(e, InputOf):
        return [_id(e.src, e.start + j) for j in range(count)]
    assert isinstance(e, Chunks)
    return [_id(j // e.size, e.start + j % e.size) for j in range(count)]


def simulate(op: Op, n: int, *, in_place: bool, native: bool, root: int = 0) -> list[str]:
    """Run op's libnccl calls on every rank; the ranks whose receive view is not as expected."""
    c = COLLECTIVES[op]
    counts = c.counts(8 * ELT * n, ELT, n)
    nccl = _Nccl(n)
    specs, views = [], []
    for rank in range(n):
        send = RECV + counts.send_inplace_offset * rank * ELT if in_place else SEND
        recv = RECV + counts.recv_inplace_offset * rank * ELT if in_place else RECV
        views.append((send, recv))
        if not (c.root_inputs_only and rank != root):
            nccl.write(rank, send, [_id(rank, k) for k in range(counts.send)])
        call = NcclCall(
            send=send, recv=recv, count=counts.param, chunk_bytes=counts.param * ELT, dtype=4,
            redop=0, root=root, rank=rank, nranks=n, comm=ctypes.c_void_p(0xC0), stream=0x5700,
            native={"ncclAlltoAll", "ncclGather", "ncclScatter"} if native else set(),
        )  # fmt: skip
        specs.append(c.nccl(call))
    nccl.run(specs)
    wrong = []
    for rank, (_, recv) in enumerate(views):
        e = c.expected(Place(rank, n, root, counts))
        if e is not None and nccl.read(rank, recv, counts.recv) != _expected(e, n, counts.recv):
            wrong.append(f"{op} rank {rank}/{n} in_place={in_place} native={native}")
    return wrong


@pytest.mark.parametrize("op", ALL_OPS)
def test_nccl_calls_put_every_element_where_the_check_expects_it(op: Op) -> None:
    c = COLLECTIVES[op]
    wrong = []
    for n in (1, 2, 3, 4, 8):
        if c.refuses(n):
            continue
        for in_place in (False, True) if c.inplace_checked else (False,):
            for native in (False, True):
                for root in sorted({0, n - 1}) if c.rooted else (0,):
                    wrong += simulate(op, n, in_place=in_place, native=native, root=root)
    assert not wrong
