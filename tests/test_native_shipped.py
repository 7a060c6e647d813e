"""The timed C loop ships with the engine (issue 40): built for x86_64 and aarch64 from the loop's
text by tools/build_loops.py, carried in the wheel and in the pods' zipapp, and loaded in a pod
with no compiler only when its bytes have the digest the engine's code records. A library with
one byte changed is refused, said on stderr with what runs instead.

The pod cases run the engine's loader from a zipapp the way a pod does (`python` with the
archive on its path), with no C compiler on PATH and an empty cache."""

from __future__ import annotations

import hashlib
import io
import os
import pathlib
import platform
import shutil
import struct
import subprocess
import sys
import zipfile

import pytest

from nccl_k8s.bench import _loops, native
from nccl_k8s.k8s.rendering._zipapp import build_zipapp

LOOPS = pathlib.Path(native.__file__).parent / "loops"
#: ELF e_machine of each shipped machine (the ELF specification's EM_X86_64 and EM_AARCH64).
E_MACHINE = {"x86_64": 62, "aarch64": 183}
SHIPS_HERE = platform.machine() in _loops.SHA256

#: What a pod runs: the loader, from the archive, printing which loop it has (or none).
PROBE = (
    "from nccl_k8s.bench import native; loop = native.native_loop(); "
    "print('loop', loop.origin if loop else 'none', native.__file__)"
)


def test_every_shipped_loop_is_this_text_built_for_its_machine() -> None:
    # The loop's text has not changed since the libraries were built (`make loops` rebuilds).
    assert native.source_sha256() == _loops.SOURCE_SHA256
    assert sorted(_loops.SHA256) == ["aarch64", "x86_64"]
    for machine, digest in _loops.SHA256.items():
        data = (LOOPS / native.shipped_name(machine)).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest
        # A 64-bit little-endian ELF shared object (ET_DYN) for that machine.
        assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1
        e_type, e_machine = struct.unpack_from("<HH", data, 16)
        assert (e_type, e_machine) == (3, E_MACHINE[machine])
        assert b"nk_timed" in data and b"nk_loop" in data


def _pod(
    tmp_path: pathlib.Path, zipapp: bytes, *, compiler: bool, cc_var: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The loader run as a pod runs it: from the zipapp, an empty cache, and a PATH with a C
    compiler on it or with nothing but an empty folder (the stock images have none); `cc_var`,
    the CC variable."""
    pyz = tmp_path / "nccl_k8s.pyz"
    pyz.write_bytes(zipapp)
    cache = tmp_path / "cache"
    bare = tmp_path / "bin"
    bare.mkdir(exist_ok=True)
    cc = shutil.which("cc")
    env = {
        "PATH": os.path.dirname(cc) if compiler and cc else str(bare),
        "HOME": str(tmp_path / "home"),
        "NCCL_K8S_CACHE_DIR": str(cache),
        "PYTHONPATH": str(pyz),
        **({"CC": cc_var} if cc_var else {}),
    }
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def _tampered(zipapp: bytes) -> bytes:
    """The zipapp with one byte of this machine's shipped loop changed (its middle one)."""
    name = f"nccl_k8s/bench/loops/{native.shipped_name(platform.machine())}"
    src = zipfile.ZipFile(io.BytesIO(zipapp))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == name:
                k = len(data) // 2
                data = data[:k] + bytes([data[k] ^ 0x01]) + data[k + 1 :]
            dst.writestr(info, data)
    return out.getvalue()


@pytest.mark.skipif(not SHIPS_HERE, reason="no loop ships for this machine")
def test_a_pod_without_a_compiler_loads_the_shipped_loop_from_memory(
    tmp_path: pathlib.Path,
) -> None:
    proc = _pod(tmp_path, build_zipapp(), compiler=False)
    loop, origin, where = proc.stdout.split()
    assert (loop, origin) == ("loop", "shipped") and where.startswith(
        str(tmp_path / "nccl_k8s.pyz")
    )
    assert proc.stderr == ""
    # Loaded from an in-memory file: nothing was written for it.
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


@pytest.mark.skipif(not SHIPS_HERE, reason="no loop ships for this machine")
def test_one_changed_byte_makes_the_engine_refuse_the_shipped_loop_and_say_so(
    tmp_path: pathlib.Path,
) -> None:
    want = _loops.SHA256[platform.machine()]
    name = native.shipped_name(platform.machine())
    bad = _tampered(build_zipapp())
    proc = _pod(tmp_path, bad, compiler=False)
    assert proc.stdout.split()[:2] == ["loop", "none"]  # the Python loop times the ops
    (line,) = proc.stderr.splitlines()
    assert line.startswith(
        f"nccl-k8s: refusing the shipped timing loop loops/{name}: its sha256 is "
    )
    assert line.endswith(f", not {want}; the Python loop times the ops")
    if shutil.which("cc"):  # where a compiler is, it builds the loop instead
        proc = _pod(tmp_path, bad, compiler=True)
        assert proc.stdout.split()[:2] == ["loop", "built"]
        assert "refusing the shipped timing loop" in proc.stderr
        assert proc.stderr.rstrip().endswith("; the loop is built here with cc")
    # A compiler named by CC that fails (gcc whose assembler is not on the bare PATH, as on
    # the GPU machine): the line says what ran, the Python loop, and why the build did not.
    broken = tmp_path / "cc-broken"
    broken.write_text(
        "#!/bin/sh\necho \"cc-broken: fatal error: cannot execute 'as'\" >&2\nexit 1\n"
    )
    broken.chmod(0o755)
    proc = _pod(tmp_path, bad, compiler=False, cc_var=str(broken))
    assert proc.stdout.split()[:2] == ["loop", "none"]
    (line,) = proc.stderr.splitlines()
    assert line.startswith("nccl-k8s: refusing the shipped timing loop ")
    assert line.endswith(
        f"; the Python loop times the ops (building the loop here with {broken} failed: "
        "cc-broken: fatal error: cannot execute 'as')"
    )


@pytest.mark.skipif(not SHIPS_HERE, reason="no loop ships for this machine")
def test_without_a_memfd_the_loop_is_checked_again_in_a_private_file(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NCCL_K8S_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(os, "memfd_create", _no_memfd, raising=False)
    data = native.shipped_bytes()
    assert data is not None
    loop = native._load_checked(data)
    assert loop.origin == "shipped" and loop.loop(None, None, 0, 0) == 0
    (lib,) = (tmp_path / "cache").iterdir()
    assert lib.read_bytes() == data and lib.stat().st_mode & 0o022 == 0
    # A file whose bytes are not the checked ones once written is not loaded.
    real = native.write_atomic
    monkeypatch.setattr(
        native,
        "write_atomic",
        lambda path, payload: real(path, payload[:-1] + bytes([payload[-1] ^ 1])),
    )
    lib.unlink()
    with pytest.raises(OSError, match="changed after it was written"):
        native._load_checked(data)


def _no_memfd(name: str, flags: int = 0) -> int:
    raise OSError(38, "Function not implemented")
