"""The native loop's cache (bench.native.cache_dir): created by the user with mode 0700; a
directory owned by someone else, or writable by its group or everyone, is refused with one
stderr line and the next choice used, and no library is loaded from it (issue 36: the cache fell
back to a predictable folder in the temp dir and loaded any library of the right name)."""

from __future__ import annotations

import os
import pathlib
import stat
import tempfile

import pytest

from nccl_k8s.bench import native


@pytest.fixture
def dirs(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # gettempdir() caches it
    (tmp_path / "tmp").mkdir()
    monkeypatch.delenv("NCCL_K8S_CACHE_DIR", raising=False)
    monkeypatch.setattr(native, "_REFUSED", set(), raising=False)
    return tmp_path


def mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_cache_is_made_private(dirs: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_K8S_CACHE_DIR", str(dirs / "mine" / "cache"))
    assert native.cache_dir() == str(dirs / "mine" / "cache")
    assert mode(dirs / "mine" / "cache") == 0o700
    assert (dirs / "mine" / "cache").stat().st_uid == os.getuid()


@pytest.mark.parametrize("bits", [0o777, 0o770, 0o1777, 0o722])
def test_a_cache_others_may_write_is_refused(
    dirs: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    bits: int,
) -> None:  # fmt: skip
    shared = dirs / "shared"
    shared.mkdir()
    shared.chmod(bits)
    monkeypatch.setenv("NCCL_K8S_CACHE_DIR", str(shared))
    got = native.cache_dir()
    assert got == str(dirs / "xdg" / "nccl-k8s") and mode(dirs / "xdg" / "nccl-k8s") == 0o700
    err = capsys.readouterr().err.splitlines()
    assert err == [f"nccl-k8s: not using the cache directory {shared}: writable by its group "
                   f"or by everyone (mode {bits & 0o7777:04o})"]  # fmt: skip
    native.cache_dir()
    assert capsys.readouterr().err == ""  # said once


def test_the_temp_dir_fallback_of_another_user_is_refused(
    dirs: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every choice exists and belongs to someone else (this user is now uid 4242).
    monkeypatch.setattr(os, "getuid", lambda: 4242)
    (dirs / "xdg" / "nccl-k8s").mkdir(parents=True, mode=0o700)
    planted = dirs / "tmp" / "nccl-k8s-cache-4242"
    planted.mkdir(mode=0o700)
    assert native.cache_dir() is None
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all("owned by uid" in line for line in err)
    assert str(planted) in err[1] and "not by this user (uid 4242)" in err[1]
    # Nothing is loaded from it: the built library goes to a fresh private folder instead.
    assert native.cache_path("loop.so") is None


def test_a_planted_library_is_not_loaded(
    dirs: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = dirs / "cache"
    monkeypatch.setenv("NCCL_K8S_CACHE_DIR", str(cache))
    lib = pathlib.Path(native.cache_path("loop-x.so") or "")
    lib.write_bytes(b"\x7fELF")
    lib.chmod(0o644)
    assert native.cached(str(lib))
    lib.chmod(0o666)  # anyone could have written it
    assert not native.cached(str(lib))
