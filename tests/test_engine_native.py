"""The native timed loop (bench.native) makes exactly the calls the Python loop makes, both the
library shipped for this machine and the one its compiler builds.

Checked against a small C library built here that records every call and its arguments, in
place of libnccl: the order of calls over the rotations, every argument type (pointers, size_t,
negative ints, eight arguments with two on the stack), and a failing call's name and code.
"""

from __future__ import annotations

import ctypes
import pathlib
import shutil
import subprocess
import time
from typing import Any

import pytest

from nccl_k8s.bench import native

FAKE = r"""
#include <stdint.h>
#include <stddef.h>
int log_n = 0;
uint64_t log_a[64][9];
static void rec(uint64_t tag, uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e, uint64_t f,
                uint64_t g, uint64_t h) {
    uint64_t v[9] = {tag, a, b, c, d, e, f, g, h};
    for (int i = 0; i < 9; i++) log_a[log_n][i] = v[i];
    log_n++;
}
int three(void *p, size_t n, int x) { rec(3, (uint64_t)p, n, (uint64_t)(int64_t)x, 0, 0, 0, 0, 0); return 0; }
int eight(void *a, void *b, size_t c, int d, int e, int f, void *g, void *h) {
    rec(8, (uint64_t)a, (uint64_t)b, c, (uint64_t)(int64_t)d, (uint64_t)(int64_t)e, (uint64_t)(int64_t)f,
        (uint64_t)g, (uint64_t)h);
    return 0;
}
int none(void) { rec(0, 0, 0, 0, 0, 0, 0, 0, 0); return 0; }
int fails(int x) { return x == 7 ? 5 : 0; }
int polls = 0;
int query(void *stream) { polls++; return stream == (void *)0x5 && polls < 3000 ? 600 : (stream == (void *)0x5 ? 0 : 700); }
int async_error(void *comm, int *err) { *err = comm == (void *)0xBAD ? 9 : 0; return 0; }
"""


def _addr(lib: ctypes.CDLL, name: str) -> int:
    return int(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0)


def _check(rc: int, what: str) -> None:
    if rc:
        raise RuntimeError(f"{what} failed: ncclResult {rc}")


def _program(
    lib: ctypes.CDLL, ops: list[list[tuple[str, tuple[Any, ...]]]], **kwargs: Any
) -> native.Program:
    loop = native.native_loop()
    assert loop is not None
    return loop.program(
        [[(_addr(lib, name), args) for name, args in op] for op in ops],
        names=[[name for name, _ in op] for op in ops], check=_check, **kwargs,
    )  # fmt: skip


@pytest.fixture(params=["shipped", "built"])
def fake(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> Any:
    """The fake library, with the loop each way it is had: the shipped library of this machine
    (bench/loops/) and the one this machine's compiler builds."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler here")
    if request.param == "shipped" and not native.shipped_bytes():
        pytest.skip("no loop ships for this machine")
    if request.param == "built":
        monkeypatch.setattr(native, "_shipped", lambda: (None, None))
    (tmp_path / "fake.c").write_text(FAKE)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(tmp_path / "fake.so"), str(tmp_path / "fake.c")], check=True)  # fmt: skip
    monkeypatch.delenv("NCCL_K8S_NATIVE_LOOP", raising=False)  # on by default
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    native.native_loop.cache_clear()
    loop = native.native_loop()
    assert loop is not None and loop.origin == request.param
    yield ctypes.CDLL(str(tmp_path / "fake.so"))
    native.native_loop.cache_clear()


def _log(lib: ctypes.CDLL) -> list[list[int]]:
    n = ctypes.c_int.in_dll(lib, "log_n").value
    rows = ((ctypes.c_uint64 * 9) * 64).in_dll(lib, "log_a")
    return [list(rows[i]) for i in range(n)]


def test_native_loop_makes_the_same_calls(fake: ctypes.CDLL) -> None:
    v, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    eight = (v(0x1000), v(0x2000), sz(1 << 40), i(-1), i(7), i(2**31 - 1), v(0xABC), v(0xDEF))
    rot0 = [("eight", eight)]
    rot1 = [("none", ()), ("three", (v(0x3000), sz(16), i(-5))), ("none", ())]
    program = _program(fake, [rot0, rot1])
    program.run(5)  # op i is rotation i % 2: 0, 1, 0, 1, 0
    m1 = 2**64 - 1
    call0 = [8, 0x1000, 0x2000, 1 << 40, m1, 7, 2**31 - 1, 0xABC, 0xDEF]
    call1 = [[0] * 9, [3, 0x3000, 16, 2**64 - 5, 0, 0, 0, 0, 0], [0] * 9]
    assert _log(fake) == [call0, *call1, call0, *call1, call0]


def test_a_failing_call_raises_with_its_name(fake: ctypes.CDLL) -> None:
    program = _program(fake, [[("fails", (ctypes.c_int(1),)), ("fails", (ctypes.c_int(7),))]])
    with pytest.raises(RuntimeError, match="fails failed: ncclResult 5"):
        program.run(3)


def test_timed_waits_for_the_stream_and_reports_errors(fake: ctypes.CDLL) -> None:
    loop = native.native_loop()
    assert loop is not None
    loop.stream_query = _addr(fake, "query")  # the fake stream is done after 3,000 polls
    err = _addr(fake, "async_error")
    ok = _program(fake, [[("none", ())]], stream=0x5, comm=0x1, async_error=err)
    start = time.monotonic()
    seconds = ok.timed(4)
    wall = time.monotonic() - start
    # The time it says is the time it took, in seconds: at most the wall around it (not a
    # fixed bound: the loop yields between polls, and beside three CPU hogs 3,000 took 8.4 s).
    assert 0 < seconds <= wall and ctypes.c_int.in_dll(fake, "polls").value == 3000
    assert len(_log(fake)) == 4  # four ops issued before the wait
    with pytest.raises(native.NativeError, match="CUDA error 700"):  # a failed stream
        _program(fake, [[("none", ())]], stream=0x6).timed(1)
    ctypes.c_int.in_dll(fake, "polls").value = 0
    bad = _program(fake, [[("none", ())]], stream=0x5, comm=0xBAD, async_error=err)
    with pytest.raises(RuntimeError, match="asynchronous NCCL operation failed: ncclResult 9"):
        bad.timed(1)


def test_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_K8S_NATIVE_LOOP", "0")
    native.native_loop.cache_clear()
    try:
        assert native.native_loop() is None
    finally:
        native.native_loop.cache_clear()
