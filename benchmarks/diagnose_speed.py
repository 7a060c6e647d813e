"""`nccl-k8s diagnose FILE` on a large NCCL log, as a user runs it: one CLI process per call,
wall and CPU (user + sys of the child) per call, interleaved rounds so that a busy machine
weighs on every variant alike (issue 22: "the same parser speed for diagnose on large files").

    python benchmarks/diagnose_speed.py LOG [--rounds N] [--copies K] [--out DIR]

Variants, one of each per round, in a rotating order:
- `import`: `nccl-k8s --version` (the CLI's import time, the floor under every command);
- `log`: `nccl-k8s diagnose LOG` (the verbatim file);
- `log x K`: diagnose on K copies of LOG in one temporary file, copy k with every NCCL prefix's
  host renamed `<host>-k` (K nodes' worth of real lines, as a Slurm job's merged output holds
  them: K = 4 makes a 350 kB file of an 87 kB log). Identical copies would not do: a parser may
  rightly read a repeated line once.

Writes DIR/raw.jsonl (one object per call) and prints the medians; "parse" is a variant's median
CPU minus the import median. The CLI is run from the sources on PYTHONPATH (or the installed one).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = [sys.executable, "-c", "from nccl_k8s.cli.main import main; main()"]
#: NCCL's line prefix `host:pid:tid [dev]`, wherever a launcher's prefix put it in the line.
PREFIX = re.compile(rb"(?m)(^|[\s>])([A-Za-z0-9][\w.-]*)(:\d+:\d+ \[)")


def scaled(text: bytes, copies: int) -> bytes:
    """`copies` copies of `text`, copy k with each NCCL prefix's host renamed `<host>-k`."""
    out = []
    for k in range(copies):
        suffix = b"-%d" % k

        def rename(m: re.Match[bytes], suffix: bytes = suffix) -> bytes:
            return m[1] + m[2] + suffix + m[3]

        out.append(PREFIX.sub(rename, text))
    return b"".join(out)


def _call(args: list[str]) -> tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    rc = subprocess.run(
        [*CLI, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
    ).returncode
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, rc


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    text = a.log.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / f"{a.log.stem}.x{a.copies}.log"
        big.write_bytes(scaled(text, a.copies))
        variants = {
            "import": ["--version"],
            "log": ["diagnose", str(a.log)],
            f"log x {a.copies}": ["diagnose", str(big)],
        }
        sizes = {"import": 0, "log": len(text), f"log x {a.copies}": big.stat().st_size}
        names = list(variants)
        raw: list[dict[str, object]] = []
        for r in range(a.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                wall, cpu, rc = _call(variants[name])
                raw.append(
                    {
                        "round": r,
                        "variant": name,
                        "bytes": sizes[name],
                        "wall_s": round(wall, 4),
                        "cpu_s": round(cpu, 4),
                        "rc": rc,
                    }
                )
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        with open(a.out / "raw.jsonl", "w", encoding="utf-8") as f:
            for obj in raw:
                f.write(json.dumps(obj) + "\n")
    floor = statistics.median(float(str(o["cpu_s"])) for o in raw if o["variant"] == "import")
    print(f"log {a.log} ({len(text)} B), {a.rounds} rounds, load {os.getloadavg()[0]:.1f}")
    for name in names:
        mine = [o for o in raw if o["variant"] == name]
        wall = statistics.median(float(str(o["wall_s"])) for o in mine)
        cpu = statistics.median(float(str(o["cpu_s"])) for o in mine)
        rcs = sorted({int(str(o["rc"])) for o in mine})
        print(
            f"{name:>10} {sizes[name]:>8} B  wall {wall:6.3f} s  cpu {cpu:6.3f} s  "
            f"parse {cpu - floor:6.3f} s  rc {rcs}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
