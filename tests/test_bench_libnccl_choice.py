"""Which libnccl the engine loads (bench.nccl.Library), with real shared libraries.

Two copies of a small libnccl.so.2 (the functions the engine binds; ncclGetVersion says which
copy answered) are compiled here: one where the dynamic linker finds it (the image's system
copy), one where the nvidia-nccl wheel puts it on sys.path. The engine must measure the wheel's
NCCL (the one torch and nccl-tests use on that image) whether or not torch is in the process,
keep to a copy the process already loaded, and take NCCL_K8S_LIBNCCL alone when it is set.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FUNCS = [
    "ncclGetUniqueId",
    "ncclCommInitRank",
    "ncclCommDestroy",
    "ncclCommAbort",
    "ncclCommGetAsyncError",
    "ncclAllReduce",
    "ncclBroadcast",
    "ncclReduce",
    "ncclAllGather",
    "ncclReduceScatter",
    "ncclSend",
    "ncclRecv",
    "ncclGroupStart",
    "ncclGroupEnd",
]

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


def _libnccl(where: Path, version: int) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    src = where / "fake_nccl.c"
    body = "".join(f"int {name}(void) {{ return 0; }}\n" for name in FUNCS)
    src.write_text(
        body + f"int ncclGetVersion(int *v) {{ *v = {version}; return 0; }}\n"
        'const char *ncclGetErrorString(int rc) { return "fake"; }\n'
    )
    lib = where / "libnccl.so.2"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-Wl,-soname,libnccl.so.2", "-o", str(lib), str(src)],
        check=True,
    )
    src.unlink()
    return lib


@pytest.fixture(scope="module")
def copies(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    base = tmp_path_factory.mktemp("libnccl")
    system = _libnccl(base / "usr-lib", 22803)
    wheel_site = base / "site-packages"
    wheel = _libnccl(wheel_site / "nvidia" / "nccl" / "lib", 22809)
    return system, wheel, wheel_site


def _loaded(copies: tuple[Path, Path, Path], preload: str = "", **env: str) -> tuple[int, str]:
    system, _, wheel_site = copies
    code = (
        "import ctypes, sys\n"
        f"sys.path.append({str(wheel_site)!r})\n"
        f"{preload}\n"
        "from nccl_k8s.bench.nccl import Library\n"
        "lib = Library()\n"
        "print(lib.version_code(), lib.path)\n"
    )
    environ = {k: v for k, v in os.environ.items() if k != "NCCL_K8S_LIBNCCL"}
    environ |= {"PYTHONPATH": str(ROOT / "src"), "LD_LIBRARY_PATH": str(system.parent), **env}
    out = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[0]), out[1]


def test_the_wheels_nccl_is_measured_over_the_systems_when_torch_is_absent(
    copies: tuple[Path, Path, Path],
) -> None:
    # Before: a bare dlopen("libnccl.so.2") came first and found the system's 2.28.3.
    assert _loaded(copies) == (22809, str(copies[1]))


def test_a_copy_the_process_already_loaded_is_kept(copies: tuple[Path, Path, Path]) -> None:
    # As torch does on import: the process already has a libnccl; a second one would split
    # NCCL's state, so the engine binds the one that is there.
    system = copies[0]
    preload = f"ctypes.CDLL({str(system)!r}, mode=ctypes.RTLD_GLOBAL)"
    assert _loaded(copies, preload) == (22803, str(system))


def test_nccl_k8s_libnccl_is_taken_alone(copies: tuple[Path, Path, Path]) -> None:
    system = copies[0]
    assert _loaded(copies, NCCL_K8S_LIBNCCL=str(system)) == (22803, str(system))
