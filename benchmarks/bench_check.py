"""`make bench-check`: rerun the scale benchmarks at 1,024 pods and fail when a figure is worse
than BENCHMARKS.md's by more than its noise band (issue 22: its figures went stale unnoticed).

The reference is the committed raw data BENCHMARKS.md's collection table is generated from
(REFERENCE below, its 1,024-pod run). Each command's figures may be worse by their noise band,
and its wall time also by how much busier the machine is than when the reference was measured
(the ratio of the 1-minute load averages per core, plus one):
- its own CPU time (user + system: what the code costs, whatever else the machine runs) by
  CPU_BAND. The load hardly moves it (the same code took 0.45 s of CPU for `status` at 1,024
  pods idle and 0.49 s at a load of 8: benchmarks/data/2026-12-04-collect-3 and -2), but this
  virtual machine's own speed does: on 2026-12-05 the same commit's `status` took 0.37 s in
  one run and 0.48 s in another, both idle, so a third more than the reference's is noise;
- its wall time by the spread its own rounds showed (max over median), never less than
  MIN_BAND, widened for the load (a command waits for a core in proportion to the run queue)
  and by its CPU time's own growth over the reference's, as the wall time is the CPU time
  stretched by the waiting (a CPU time past its band is named on its own);
- its peak memory by MEM_BAND.
The bad-node simulation (benchmarks/badnode_sim.py, when present) is run too and must pass its
own checks (exit 0).

    python benchmarks/bench_check.py                  # what `make bench-check` runs
    python benchmarks/bench_check.py --save FILE      # ... keeping collect_scale.py's output
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
REFERENCE = ROOT / "benchmarks" / "data" / "2026-12-05-collect-4" / "collect-1024-4096.json"
BADNODES = ROOT / "benchmarks" / "badnode_sim.py"
PODS = 1024
#: The least a wall time may move between runs on this shared 2-core machine and still pass.
MIN_BAND = 0.5
#: A command's CPU time: over twice the spread seen for one commit on this machine (module doc).
CPU_BAND = 0.75
MEM_BAND = 0.25
FIGURES = ("results", "status", "status_latest_json", "list")


def load(path: Path) -> dict[str, Any]:
    text = path.read_text()
    obj: dict[str, Any] = json.loads(text[text.rindex("\n{") + 1 :] if "\n{" in text else text)
    return obj


def at(doc: dict[str, Any], pods: int) -> dict[str, Any]:
    """The figures of the run of `pods` pods in a collect_scale.py output, with the run's own
    (the machine's load, its cores: a run of several sizes holds them once for all)."""
    for fig in doc.get("sizes") or [doc]:
        if fig.get("pods") == pods:
            return {**{k: v for k, v in doc.items() if k != "sizes"}, **fig}
    raise SystemExit(f"{pods} pods: not measured in this output")


def _busy(doc: dict[str, Any]) -> float:
    """How busy the machine was around a run: its mean load average per core, plus one."""
    loads = [doc.get("load_before"), doc.get("load_after")]
    known = [x for x in loads if isinstance(x, (int, float))]
    return 1.0 + (sum(known) / len(known) / (doc.get("cpus") or 1) if known else 0.0)


def compare(ref: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One line per figure worse than its band allows."""
    worse = []
    busier = max(1.0, _busy(new) / _busy(ref))
    print(f"machine load: {_busy(new):.2f} (per core, plus one) against {_busy(ref):.2f}")
    for name in FIGURES:
        # CPU first: how much more of it the command took is the other factor of its wall time.
        cpu, got_cpu = ref.get(f"{name}_cpu_s_median"), new.get(f"{name}_cpu_s_median")
        inflated = 1.0
        if cpu is not None and got_cpu is not None:
            cpu_limit = cpu * (1 + CPU_BAND)
            ok = got_cpu <= cpu_limit
            print(
                f"{name} CPU: {got_cpu:.3f} s (reference {cpu:.3f} s, band +{CPU_BAND:.0%}: "
                f"up to {cpu_limit:.3f} s): {'ok' if ok else 'worse'}"
            )
            if not ok:
                worse.append(f"{name} used {got_cpu:.3f} s of CPU, over {cpu_limit:.3f} s")
            inflated = max(1.0, got_cpu / cpu)
        median, top = ref[f"{name}_s_median"], ref[f"{name}_s_max"]
        band = max(MIN_BAND, top / median - 1)
        limit = median * (1 + band) * busier * inflated
        got = new[f"{name}_s_median"]
        verdict = "worse" if got > limit else "ok"
        print(
            f"{name}: {got:.3f} s (reference {median:.3f} s, band +{band:.0%}, x{busier:.2f} "
            f"for the load, x{inflated:.2f} for its CPU: up to {limit:.3f} s): {verdict}"
        )
        if verdict == "worse":
            worse.append(f"{name} took {got:.3f} s, over {limit:.3f} s")
        mem, got_mem = ref[f"{name}_peak_rss_mib"], new[f"{name}_peak_rss_mib"]
        print(f"{name} peak: {got_mem} MiB (reference {mem} MiB, band +{MEM_BAND:.0%})")
        if got_mem > mem * (1 + MEM_BAND):
            worse.append(f"{name} peaked at {got_mem} MiB, over {mem} MiB + {MEM_BAND:.0%}")
    return worse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measured", type=Path, help="a collect_scale.py output to compare")
    ap.add_argument("--reference", type=Path, default=REFERENCE)
    ap.add_argument("--save", type=Path, help="write collect_scale.py's output here too")
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
        if args.save is not None:
            args.save.write_text(out.stdout)
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
