"""`make bench-check`: rerun the scale benchmarks at 1,024 pods and fail when a figure is worse
than BENCHMARKS.md's by more than its noise band (issue 22: its figures went stale unnoticed).

The reference is the committed raw data BENCHMARKS.md's collection table is generated from
(REFERENCE below, its 1,024-pod run). Each wall-time figure may be worse by its noise band:
the spread its own rounds showed (max over median), never less than MIN_BAND, since this machine
is shared; peak memory by MEM_BAND. The bad-node simulation (benchmarks/badnode_sim.py, when
present) is run too and must pass its own checks (exit 0).

    python benchmarks/bench_check.py                  # what `make bench-check` runs
    python benchmarks/bench_check.py --measured FILE  # compare a collect_scale.py output

Exit 0 when every figure is within its band, 1 naming each that is not.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "benchmarks" / "data" / "2026-12-04-collect" / "collect-1024.json"
BADNODES = ROOT / "benchmarks" / "badnode_sim.py"
PODS = 1024
#: The least a wall time may move between runs on this shared 2-core machine and still pass.
MIN_BAND = 0.5
MEM_BAND = 0.25
FIGURES = ("results", "status", "status_latest_json", "list")


def load(path: Path) -> dict[str, Any]:
    text = path.read_text()
    obj: dict[str, Any] = json.loads(text[text.rindex("\n{") + 1 :] if "\n{" in text else text)
    return obj


def at(doc: dict[str, Any], pods: int) -> dict[str, Any]:
    """The figures of the run of `pods` pods in a collect_scale.py output."""
    for fig in doc.get("sizes") or [doc]:
        if fig.get("pods") == pods:
            return fig
    raise SystemExit(f"{pods} pods: not measured in this output")


def compare(ref: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One line per figure worse than its band allows."""
    worse = []
    for name in FIGURES:
        median, top = ref[f"{name}_s_median"], ref[f"{name}_s_max"]
        band = max(MIN_BAND, top / median - 1)
        got = new[f"{name}_s_median"]
        verdict = "worse" if got > median * (1 + band) else "ok"
        print(f"{name}: {got:.3f} s (reference {median:.3f} s, band +{band:.0%}): {verdict}")
        if verdict == "worse":
            worse.append(f"{name} took {got:.3f} s, over {median:.3f} s + {band:.0%}")
        mem, got_mem = ref[f"{name}_peak_rss_mib"], new[f"{name}_peak_rss_mib"]
        if got_mem > mem * (1 + MEM_BAND):
            worse.append(f"{name} peaked at {got_mem} MiB, over {mem} MiB + {MEM_BAND:.0%}")
    return worse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measured", type=Path, help="a collect_scale.py output to compare")
    ap.add_argument("--reference", type=Path, default=REFERENCE)
    args = ap.parse_args()
    ref = at(load(args.reference), PODS)
    if args.measured is not None:
        new = at(load(args.measured), PODS)
    else:
        cmd = [sys.executable, str(ROOT / "benchmarks" / "collect_scale.py"), "--pods", str(PODS)]
        print("$", " ".join(cmd[1:]), flush=True)
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"collect_scale.py failed ({out.returncode}): {out.stderr[-2000:]}")
        new = at(json.loads(out.stdout[out.stdout.index("{") :]), PODS)
    print(
        f"reference: {args.reference.relative_to(ROOT)} (commit {load(args.reference)['commit']})"
    )
    worse = compare(ref, new)
    if BADNODES.exists():
        print("$ python benchmarks/badnode_sim.py --check", flush=True)
        code = subprocess.run([sys.executable, str(BADNODES), "--check"], cwd=ROOT).returncode
        if code != 0:
            worse.append(f"benchmarks/badnode_sim.py failed its checks (exit {code})")
    else:
        print("benchmarks/badnode_sim.py: not in this tree, not run")
    if worse:
        print("bench-check FAILED:\n  " + "\n  ".join(worse))
        raise SystemExit(1)
    print("bench-check passed")


if __name__ == "__main__":
    main()
