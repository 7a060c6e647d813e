"""The native timed loop (bench.native) makes exactly the calls the Python loop makes.

Checked against a small C library built here that records every call and its arguments, in
place of libnccl: the order of calls over the rotations, every argument type (pointers, size_t,
negative ints, eight arguments with two on the stack), and a failing call's name and code.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import shutil
import subprocess
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
"""


class FakeComm:
    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        self.lib = self

    def pointer(self, name: str) -> int:
        return int(ctypes.cast(getattr(self._lib, name), ctypes.c_void_p).value or 0)

    def check(self, rc: int, what: str) -> None:
        if rc:
            raise RuntimeError(f"{what} failed: ncclResult {rc}")


@pytest.fixture
def fake(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler here")
    (tmp_path / "fake.c").write_text(FAKE)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(tmp_path / "fake.so"), str(tmp_path / "fake.c")], check=True)  # fmt: skip
    monkeypatch.setenv("NCCL_K8S_NATIVE_LOOP", "1")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    native.native_loop.cache_clear()
    yield ctypes.CDLL(str(tmp_path / "fake.so"))
    native.native_loop.cache_clear()


def _log(lib: ctypes.CDLL) -> list[list[int]]:
    n = ctypes.c_int.in_dll(lib, "log_n").value
    rows = ((ctypes.c_uint64 * 9) * 64).in_dll(lib, "log_a")
    return [list(rows[i]) for i in range(n)]


def test_native_loop_makes_the_same_calls(fake: ctypes.CDLL) -> None:
    loop = native.native_loop()
    assert loop is not None
    v, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    rot0 = [
        (
            "eight",
            (v(0x1000), v(0x2000), sz(1 << 40), i(-1), i(7), i(2**31 - 1), v(0xABC), v(0xDEF)),
        )
    ]
    rot1 = [("none", ()), ("three", (v(0x3000), sz(16), i(-5))), ("none", ())]
    program = loop.program(FakeComm(fake), [rot0, rot1])  # type: ignore[arg-type]
    program.run(5)  # op i is rotation i % 2: 0, 1, 0, 1, 0
    m1 = 2**64 - 1
    call0 = [8, 0x1000, 0x2000, 1 << 40, m1, 7, 2**31 - 1, 0xABC, 0xDEF]
    call1 = [[0] * 9, [3, 0x3000, 16, 2**64 - 5, 0, 0, 0, 0, 0], [0] * 9]
    assert _log(fake) == [call0, *call1, call0, *call1, call0]


def test_a_failing_call_raises_with_its_name(fake: ctypes.CDLL) -> None:
    loop = native.native_loop()
    assert loop is not None
    program = loop.program(
        FakeComm(fake), [[("fails", (ctypes.c_int(1),)), ("fails", (ctypes.c_int(7),))]]
    )  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="fails failed: ncclResult 5"):
        program.run(3)


def test_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NCCL_K8S_NATIVE_LOOP", raising=False)
    native.native_loop.cache_clear()
    try:
        assert native.native_loop() is None
    finally:
        native.native_loop.cache_clear()
    assert os.environ.get("NCCL_K8S_NATIVE_LOOP") is None
