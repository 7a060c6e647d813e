"""Start-up of a command: seconds to its first table row and to its exit, from a clock taken
just before it starts (the same clock for nccl-tests' binaries and for ours).

    python benchmarks/startup.py LABEL -- COMMAND [ARGS...]

Prints one line: `startup LABEL first_row_s=... exit_s=... rc=...`; the command's output goes
to $STARTUP_LOG (default: discarded) with each line's seconds since the start in front.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

ROW = re.compile(r"^\s+\d+\s+\d+\s+\w+")


def main(argv: list[str]) -> int:
    label, rest = argv[0], argv[argv.index("--") + 1 :]
    log = open(os.environ.get("STARTUP_LOG", os.devnull), "a", encoding="utf-8")  # noqa: SIM115
    t0 = time.monotonic()
    t_abs = time.time()
    proc = subprocess.Popen(rest, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first: float | None = None
    assert proc.stdout is not None
    for line in proc.stdout:
        now = time.monotonic() - t0
        if first is None and ROW.match(line):
            first = now
        log.write(f"{now:9.3f} {line}")
    rc = proc.wait()
    end = time.monotonic() - t0
    first_s = f"{first:.3f}" if first is not None else "none"
    print(
        f"startup {label} first_row_s={first_s} exit_s={end:.3f} rc={rc} t0={t_abs:.4f}", flush=True
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
