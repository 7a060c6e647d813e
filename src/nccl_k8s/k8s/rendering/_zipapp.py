"""The engine as a zipapp: what a stock PyTorch image needs to run `python -m nccl_k8s.bench`.

The deployer ships these bytes in a ConfigMap, so no custom image is needed. The archive holds
only `nccl_k8s/__init__.py`, the `nccl_k8s.bench` package (the engine imports nothing else of
ours) and what the engine's own launcher adds to it (`--launcher direct`: the `nccl_k8s.launch`
package and `nccl_k8s/errors.py`, all standard library above bench), plus a `__main__.py` so
`python nccl_k8s.pyz ...` runs the engine too. It also carries
prometheus_client (pure Python, no dependencies, Apache-2.0, its license file beside it) from
the installation that builds it: stock PyTorch images have none, and every pod serves metrics
(--metrics-port) with it.

Deterministic: entries sorted, fixed timestamps and modes, fixed compression level, so the same
sources give the same bytes and `render` stays a pure function of the RunSpec.
"""

from __future__ import annotations

import functools
import io
import zipfile
from pathlib import Path

#: File name inside the ConfigMap and its mount.
ZIPAPP_NAME = "nccl_k8s.pyz"

#: Largest archive accepted. A ConfigMap holds at most 1 MiB of data, and its base64 form in the
#: API request is a third larger again; 768 KiB keeps both under the limit.
MAX_ZIPAPP_BYTES = 768 * 1024

_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry
_MAIN = b'''"""Run the nccl-k8s engine from this archive: python nccl_k8s.pyz [engine flags]."""
import runpy

runpy.run_module("nccl_k8s.bench", run_name="__main__", alter_sys=True)
'''


class ZipappTooLarge(RuntimeError):
    """The engine grew past what a ConfigMap can carry; use `--engine image`."""


def _package_root() -> Path:
    import nccl_k8s

    return Path(nccl_k8s.__file__).resolve().parent


def _belongs(rel: Path) -> bool:
    """Sources and data files of the engine; not bytecode, editor leftovers or hidden files,
    which differ between machines and would make the archive differ too."""
    if any(part == "__pycache__" or part.startswith(".") for part in rel.parts):
        return False
    return rel.suffix not in (".pyc", ".pyo", ".swp", ".orig", ".rej") and not rel.name.endswith(
        "~"
    )


#: The packages the zipapp carries: the engine, and the launcher pods run with --launcher direct
#: (launch.local's `nccl-k8s run` comes along; it imports nothing the zipapp lacks).
_PACKAGES = ("bench", "launch")
#: Modules of the package root the launcher imports.
_LAUNCHER_MODULES = ("errors.py",)


def engine_sources(root: Path | None = None) -> list[tuple[str, bytes]]:
    """(archive name, content) of every file the zipapp holds, sorted by name."""
    root = root or _package_root()
    files: dict[str, bytes] = {"__main__.py": _MAIN}
    for name in ("__init__.py", *_LAUNCHER_MODULES):
        files[f"nccl_k8s/{name}"] = (root / name).read_bytes()
    for package in _PACKAGES:
        for path in (root / package).rglob("*"):
            if path.is_file() and _belongs(path.relative_to(root / package)):
                files["nccl_k8s/" + path.relative_to(root).as_posix()] = path.read_bytes()
    files.update(_vendored())
    return sorted(files.items())


#: The one third-party package the zipapp carries, for the engine's metrics server.
VENDORED = "prometheus_client"


def _vendored() -> dict[str, bytes]:
    """prometheus_client's sources and license, by archive name; empty when not installed."""
    try:
        import prometheus_client
    except ImportError:
        return {}
    from importlib import metadata

    pkg = Path(prometheus_client.__file__).resolve().parent
    files = {
        f"{VENDORED}/{path.relative_to(pkg).as_posix()}": path.read_bytes()
        for path in pkg.rglob("*")
        if path.is_file() and _belongs(path.relative_to(pkg))
    }
    try:
        dist = metadata.distribution(VENDORED)
        for f in dist.files or ():
            if f.name.upper().startswith(("LICENSE", "NOTICE")):
                files[f"{VENDORED}/{f.name}"] = Path(str(f.locate())).read_bytes()
    except (metadata.PackageNotFoundError, OSError):
        pass
    return files


def carries_prometheus_client(zipapp: bytes) -> bool:
    """Whether a zipapp holds prometheus_client (so its engine can serve --metrics-port)."""
    with zipfile.ZipFile(io.BytesIO(zipapp)) as zf:
        return f"{VENDORED}/__init__.py" in zf.namelist()


def build_zipapp(root: Path | None = None) -> bytes:
    """The engine zipapp's bytes; the same sources always give the same bytes."""
    buf = io.BytesIO()
    buf.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buf, "w") as zf:
        for name, content in engine_sources(root):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            info.create_system = 3  # Unix, whatever the building machine is
            zf.writestr(info, content, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
    data = buf.getvalue()
    if len(data) > MAX_ZIPAPP_BYTES:
        raise ZipappTooLarge(
            f"the engine zipapp is {len(data)} bytes, over the {MAX_ZIPAPP_BYTES} a ConfigMap can "
            "carry; deploy with --engine image"
        )
    return data


@functools.lru_cache(maxsize=1)
def engine_zipapp() -> bytes:
    """The installed engine's zipapp, built once per process."""
    return build_zipapp()


__all__ = [
    "MAX_ZIPAPP_BYTES",
    "ZIPAPP_NAME",
    "ZipappTooLarge",
    "build_zipapp",
    "carries_prometheus_client",
    "engine_sources",
    "engine_zipapp",
]
