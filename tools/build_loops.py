"""Build the engine's timed C loop for every machine it ships for: `make loops` (`--check`: `make
loops-check`, which rebuilds and compares).

The loop's text is bench.native's `_SOURCE`. Each machine's shared library is cross-compiled with
Zig's `cc` (the `ziglang` wheel from PyPI, pinned below: one pinned compiler for both machines,
with glibc 2.17 as the oldest it may ask for, so the library loads in any image of the last ten
years, and the same text gives the same bytes on any build machine). The libraries go to
src/nccl_k8s/bench/loops/ and their sha256 digests, with the text's, to
src/nccl_k8s/bench/_loops.py, which the engine checks each library against before it loads it.

Why Zig rather than gcc and a cross toolchain: one pip package builds both machines, pins the
compiler and the glibc it links against, and its output is reproducible, so `--check` can prove
the committed bytes come from the committed text.

    python tools/build_loops.py            # write the libraries and _loops.py
    python tools/build_loops.py --check    # exit 1 when a rebuild differs from what is committed
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from nccl_k8s.bench import native  # noqa: E402

#: The compiler: `pip install ziglang==ZIG` (the Makefile's loops target does).
ZIG = "0.13.0"
#: platform.machine() -> Zig target (glibc 2.17: the oldest symbol versions the loop needs).
TARGETS = {"x86_64": "x86_64-linux-gnu.2.17", "aarch64": "aarch64-linux-gnu.2.17"}
FLAGS = ("-O2", "-shared", "-fPIC", "-s")
LOOPS = ROOT / "src" / "nccl_k8s" / "bench" / "loops"
MODULE = ROOT / "src" / "nccl_k8s" / "bench" / "_loops.py"


def build(out: Path) -> dict[str, bytes]:
    """Every machine's library, built into `out`; by machine."""
    src = out / "loop.c"
    src.write_text(native._SOURCE, encoding="utf-8")
    built = {}
    for machine, target in TARGETS.items():
        lib = out / native.shipped_name(machine)
        cmd = [sys.executable, "-m", "ziglang", "cc", "-target", target, *FLAGS, "-o", str(lib), str(src)]  # fmt: skip
        subprocess.run(cmd, check=True)
        built[machine] = lib.read_bytes()
    return built


def module_text(built: dict[str, bytes]) -> str:
    digests = "".join(
        f'    "{m}": "{hashlib.sha256(data).hexdigest()}",\n' for m, data in sorted(built.items())
    )
    targets = "".join(f'    "{m}": "{t}",\n' for m, t in sorted(TARGETS.items()))
    return (
        '"""Digests of the shipped timed loops (bench/loops/): written by tools/build_loops.py\n'
        '(`make loops`), not by hand. The engine loads a library only when its bytes have the\n'
        'digest here and SOURCE_SHA256 is the digest of the loop\'s text it runs (bench.native)."""\n\n'
        f'#: The compiler that built them (the ziglang wheel), and its targets.\nZIG = "{ZIG}"\n'
        f"TARGETS = {{\n{targets}}}\n"
        f'#: sha256 of bench.native._SOURCE, the text they were built from.\nSOURCE_SHA256 = "{native.source_sha256()}"\n'
        f"#: sha256 of each machine's library (platform.machine() -> hex).\nSHA256 = {{\n{digests}}}\n"
    )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="rebuild and compare, write nothing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nccl-k8s-loops-") as tmp:
        built = build(Path(tmp))
    if args.check:
        libs = {LOOPS / native.shipped_name(m): data for m, data in built.items()}
        bad = [str(lib.relative_to(ROOT)) for lib, data in libs.items()
               if not lib.is_file() or lib.read_bytes() != data]  # fmt: skip
        if MODULE.read_text(encoding="utf-8") != module_text(built):
            bad.append(str(MODULE.relative_to(ROOT)))
        for what in bad:
            print(f"differs from a rebuild of the loop's text: {what}; run `make loops`")
        return 1 if bad else 0
    LOOPS.mkdir(exist_ok=True)
    for machine, data in built.items():
        (LOOPS / native.shipped_name(machine)).write_bytes(data)
        print(
            f"{native.shipped_name(machine)}  {hashlib.sha256(data).hexdigest()}  {len(data)} bytes"
        )
    MODULE.write_text(module_text(built), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
