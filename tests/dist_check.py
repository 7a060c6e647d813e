"""`make check-dist`: the wheel and sdist `make dist` built are ready to publish.

Run by the Makefile as `python tests/dist_check.py DIST_DIR VENV_BIN` after the wheel was
installed into a fresh venv (VENV_BIN is its bin/). Not a pytest module: it needs the built
files and, for the venv, PyPI (the core dependencies); `make test` stays offline.

Checks, each a line on failure (exit 1): one wheel and one sdist of this version; the wheel
holds the package, py.typed, the timed loops it ships and LICENSE, and no tests; its metadata names the license (SPDX),
a readme, the extras the CLI's hints name, and only classifiers PyPI accepts (the
trove-classifiers package, when installed); the sdist holds LICENSE, README.md and
pyproject.toml; the installed `nccl-k8s --help`, a `render` run (no extra installed) and the
shipped timed loop passing its digest check.
"""

from __future__ import annotations

import email
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

NAME, MODULE = "nccl-k8s", "nccl_k8s"


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(z.read(meta))


def check_wheel(wheel: Path, problems: list[str]) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    loops = [f"{MODULE}/bench/loops/loop-{m}.so" for m in ("x86_64", "aarch64")]
    for must in (f"{MODULE}/__init__.py", f"{MODULE}/py.typed", f"{MODULE}/cli/main.py", *loops):
        if must not in names:
            problems.append(f"{wheel.name}: {must} missing")
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        problems.append(f"{wheel.name}: no LICENSE in its .dist-info/licenses/")
    if any(n.startswith("tests/") for n in names):
        problems.append(f"{wheel.name}: ships tests/")
    meta = _metadata(wheel)
    if meta.get("License-Expression") != "Apache-2.0":
        problems.append(f"{wheel.name}: License-Expression is {meta.get('License-Expression')!r}")
    if meta.get("Description-Content-Type") != "text/markdown":
        problems.append(f"{wheel.name}: no markdown readme")
    extras = set(meta.get_all("Provides-Extra") or [])
    for extra in ("k8s", "engine", "report", "metrics", "tracing"):
        if extra not in extras:
            problems.append(f"{wheel.name}: extra {extra!r} missing")
    classifiers = meta.get_all("Classifier") or []
    try:
        from trove_classifiers import classifiers as known  # type: ignore[import-not-found]
    except ImportError:
        known = None
    for c in classifiers:
        if known is not None and c not in known:
            problems.append(f"{wheel.name}: classifier {c!r} is not one PyPI accepts")


def check_sdist(sdist: Path, problems: list[str]) -> None:
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    for must in ("LICENSE", "README.md", "pyproject.toml", f"src/{MODULE}/cli/main.py"):
        if must not in names:
            problems.append(f"{sdist.name}: {must} missing")


def check_installed(bin_dir: Path, problems: list[str]) -> None:
    for argv in (
        ["nccl-k8s", "--help"],
        # No extra installed: no prometheus_client for the pods' metrics, so none asked.
        ["nccl-k8s", "render", "--world-size", "2", "--gpus-per-node", "1", "--metrics-port", "0"],
        # The timed loop shipped for this machine passes its digest check where installed.
        [
            "python",
            "-c",
            "import platform; from nccl_k8s.bench import _loops, native; "
            "print(platform.machine() not in _loops.SHA256 or bool(native.shipped_bytes()))",
        ],
    ):
        done = subprocess.run(
            [str(bin_dir / argv[0]), *argv[1:]], capture_output=True, text=True, check=False
        )
        if done.returncode != 0 or not done.stdout or done.stdout.strip() == "False":
            problems.append(f"installed `{' '.join(argv)}` exited {done.returncode}: {done.stderr}")


def main(dist: Path, bin_dir: Path) -> int:
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    problems: list[str] = []
    if len(wheels) != 1 or len(sdists) != 1:
        problems.append(f"{dist}: expected one wheel and one sdist, found {wheels + sdists}")
    else:
        check_wheel(wheels[0], problems)
        check_sdist(sdists[0], problems)
        check_installed(bin_dir, problems)
    for p in problems:
        print(f"check-dist: {p}", file=sys.stderr)
    if not problems:
        print(f"check-dist: {wheels[0].name} and {sdists[0].name} are ready to publish")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
