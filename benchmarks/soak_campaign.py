"""Many soak runs under CPU contention: does any hang, diverge or report a wrong element?

    python benchmarks/soak_campaign.py --runs 50 --nproc 2,3 --duration 20 --out DIR

Each run is `nccl-k8s run --nproc N --duration D --report-interval 1` on gloo, cycling through
ops and sizes, with two CPU hog processes beside it the whole time. A run that does not end
within duration + 120 s counts as a hang (and is killed). Writes DIR/runs.jsonl (one object per
run) and prints a summary; issue 9's acceptance 0 asks for fifty 20 s runs at 2 and 3 ranks.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

OPS = ("all_reduce", "all_gather", "sendrecv", "alltoall", "broadcast", "reduce_scatter")
SIZES = ("1K", "8K", "64K", "1M")
INTERVAL = re.compile(r"# soak \w+ \d+ B\s+t=\s*[\d.]+s\s+iters\s+\d+.*#wrong (\d+)")


def one(nproc: int, op: str, size: str, duration: float) -> dict[str, object]:
    cmd = [sys.executable, "-m", "nccl_k8s.cli.main", "run", "--no-save", "--nproc", str(nproc),
           "--ops", op, "-b", size, "-e", size, "--duration", str(duration), "--report-interval", "1"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)  # fmt: skip
    hang = False
    try:
        out, err = proc.communicate(timeout=duration + 120)
    except subprocess.TimeoutExpired:
        hang = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    wrongs = [int(w) for w in INTERVAL.findall(out)]
    return {
        "nproc": nproc, "op": op, "size": size, "rc": proc.returncode, "hang": hang,
        "wall_s": round(time.monotonic() - t0, 1), "intervals": len(wrongs), "wrong": sum(wrongs),
        "tail": "" if proc.returncode == 0 and not hang else (err or out)[-400:],
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--nproc", default="2,3")
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(2)
    ]
    try:
        with (out / "runs.jsonl").open("a", encoding="utf-8") as f:
            for nproc in (int(n) for n in args.nproc.split(",")):
                for i in range(args.runs):
                    rec = one(nproc, OPS[i % len(OPS)], SIZES[i % len(SIZES)], args.duration)
                    rec["run"] = i
                    f.write(json.dumps(rec) + "\n")
                    f.flush()
                    print(json.dumps({k: v for k, v in rec.items() if k != "tail"}), flush=True)
    finally:
        for h in hogs:
            os.killpg(h.pid, signal.SIGKILL)
            h.wait()
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    for nproc in sorted({r["nproc"] for r in runs}):
        mine = [r for r in runs if r["nproc"] == nproc]
        print(
            f"nproc {nproc}: {len(mine)} runs, {sum(r['hang'] for r in mine)} hung, "
            f"{sum(r['rc'] != 0 for r in mine)} failed, {sum(r['intervals'] for r in mine)} checked "
            f"intervals, {sum(r['wrong'] for r in mine)} wrong elements, "
            f"wall {min(r['wall_s'] for r in mine)}-{max(r['wall_s'] for r in mine)} s"
        )


if __name__ == "__main__":
    main()
