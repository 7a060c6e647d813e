"""The slim image's size from PyPI's own figures, without building it (no Docker engine here).

For each pinned requirement of images/slim/requirements*.txt this reads the wheel PyPI serves for
the platform (manylinux, x86_64 or aarch64): its download size from PyPI's JSON API, and its
installed size as the sum of its members' uncompressed sizes, read from the wheel's zip central
directory with HTTP range requests (a few KB per wheel, not the hundreds of MB). nccl-k8s itself
(its sources, ~1 MB installed) and its CLI dependencies (typer, rich, PyYAML, a few MB) are not
counted; neither is the base image, whose size its registry states.

    python benchmarks/slim_image_size.py [--arch x86_64|aarch64] [images/slim/requirements.txt ...]

Prints a markdown table: wheel, version, download MB, installed MB, and the library directories.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import re
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

_PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s;#]+)")
MB = 1_000_000


class _Remote(io.RawIOBase):
    """A read-only, seekable view of a URL through HTTP range requests."""

    def __init__(self, url: str, size: int) -> None:
        self.url, self.size, self.pos = url, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        req = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-{end - 1}"})
        with urllib.request.urlopen(req, timeout=60) as r:
            data: bytes = r.read()
        self.pos += len(data)
        return data


@dataclasses.dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    download: int
    installed: int
    libs: list[str]


def wheel(name: str, version: str, arch: str) -> Wheel:
    index = f"https://pypi.org/pypi/{name}/json"
    with urllib.request.urlopen(index, timeout=60) as r:
        files = json.load(r)["releases"][version]
    wheels = [f for f in files if f["filename"].endswith(".whl")]
    plat = [f for f in wheels if arch in f["filename"]] or [
        f for f in wheels if f["filename"].endswith("-any.whl")
    ]
    f = plat[0]
    # A mirror may serve the file's address relative to the JSON's.
    with zipfile.ZipFile(_Remote(urllib.parse.urljoin(index, f["url"]), f["size"])) as zf:
        infos = zf.infolist()
    libs = sorted({str(Path(i.filename).parent) for i in infos if ".so" in i.filename})
    return Wheel(name, version, int(f["size"]), sum(i.file_size for i in infos), libs)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--arch", default="x86_64", choices=["x86_64", "aarch64"])
    p.add_argument("requirements", nargs="*", type=Path)
    ns = p.parse_args()
    here = Path(__file__).resolve().parent.parent / "images" / "slim"
    for req in ns.requirements or sorted(here.glob("requirements*.txt")):
        pins = [m.groups() for line in req.read_text().splitlines() if (m := _PIN.match(line))]
        rows = [wheel(n, v, ns.arch) for n, v in pins]
        print(f"\n{req.name} ({ns.arch}):\n")
        print("| wheel | download MB | installed MB | shared libraries in |")
        print("|---|---:|---:|---|")
        for w in rows:
            print(f"| {w.name}=={w.version} | {w.download / MB:.1f} | {w.installed / MB:.1f} | "
                  f"{', '.join(w.libs) or '-'} |")  # fmt: skip
        down, inst = sum(w.download for w in rows), sum(w.installed for w in rows)
        print(f"| **total** | **{down / MB:.1f}** | **{inst / MB:.1f}** | |")


if __name__ == "__main__":
    main()
