"""BENCHMARKS.md's tables for the small-size eager A/B of issue 23, from one device call's outputs.

    python benchmarks/small_ab_tables.py benchmarks/data/2026-12-05-h200x1-small-ab            # print
    python benchmarks/small_ab_tables.py benchmarks/data/2026-12-05-h200x1-small-ab --write BENCHMARKS.md

The folder is what benchmarks/small_ab.sh wrote (small_ab.tgz unpacked): versions.txt, pod.txt,
ab/<variant>_r<round>_<op>_<ours|ref>.txt (one process's nccl-tests-format table each) and
ab/clocks.csv (nvidia-smi). For every variant, op and round: the median over the sizes of
ours / nccl-tests time (out-of-place and in-place apart); then the median of those over the
rounds, with the distribution-free interval [x(k), x(n-k+1)] of the order statistics, k the
largest with P(Binomial(n, 1/2) < k) <= 2.5 % (its coverage printed: [min, max] covers 99.2 %
at 8 rounds). With --write, the text between `<!-- small_ab-tables:begin -->` and
`<!-- small_ab-tables:end -->` is replaced; tests/test_benchmarks_md.py checks it is current.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import re
import statistics
import sys

BEGIN, END = "<!-- small_ab-tables:begin -->", "<!-- small_ab-tables:end -->"
SMALL = 64 << 10
VARIANTS = {
    "n200": "-n 200 -w 20",
    "n20": "-n 20 -w 5 (side_by_side.sh's)",
    "pin": "-n 200 -w 20, both `taskset -c 4-7`",
    "pyloop": "-n 200 -w 20, ours with the Python loop (NCCL_K8S_NATIVE_LOOP=0)",
    "proto": "-n 200 -w 20, both NCCL_PROTO=Simple NCCL_ALGO=Ring",
    "fast": "-n 200 -w 20, both pinned to the CPU of the lowest memcpy latency",
    "slow": "-n 200 -w 20, both pinned to the CPU of the highest memcpy latency",
    "pod": "-n 200 -w 20, ours as a pod runs it: from the zipapp, no C compiler on PATH, an empty cache",
}
#: The A/A table's ops (issue 23's four); the A/B table has every op a run has.
AA_OPS = ("all_reduce", "all_gather", "reduce", "sendrecv")
OPS = (*AA_OPS, "broadcast", "reduce_scatter", "alltoall", "gather", "scatter")
_FILE = re.compile(r"(\w+?)_r(\d+)_(\w+)_(ours|ref)\.txt$")

#: {(variant, round, op, side): {size: (out-of-place us, in-place us)}}
Tables = dict[tuple[str, int, str, str], dict[int, tuple[float, float]]]


def rows(path: pathlib.Path) -> dict[int, tuple[float, float]]:
    """size -> (out-of-place, in-place) time in us, for 0 < size <= 64 KB."""
    out: dict[int, tuple[float, float]] = {}
    for line in path.read_text(errors="replace").splitlines():
        t = line.split()
        if len(t) >= 10 and t[0].isdigit() and t[1].isdigit() and 0 < int(t[0]) <= SMALL:
            try:
                out[int(t[0])] = (float(t[5]), float(t[9]))
            except ValueError:
                continue
    return out


def load(folder: pathlib.Path) -> Tables:
    found: Tables = {}
    for path in sorted((folder / "ab").glob("*_r*_*.txt")):
        m = _FILE.match(path.name)
        if m and m.group(3) in OPS:
            found[(m.group(1), int(m.group(2)), m.group(3), m.group(4))] = rows(path)
    return found


def interval(values: list[float]) -> tuple[float, float, float]:
    """(low, high, coverage) of the order-statistic interval for the median."""
    xs, n = sorted(values), len(values)
    k = 1
    while k + 1 <= n // 2 and _cdf(k, n) <= 0.025:  # P(B <= k) = P(B < k + 1)
        k += 1
    return xs[k - 1], xs[n - k], 1 - 2 * _cdf(k - 1, n)


def _cdf(k: int, n: int) -> float:
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def round_ratio(t: Tables, v: str, r: int, op: str, col: int, a: str = "ours", b: str = "ref",
                op_b: str | None = None) -> float | None:  # fmt: skip
    """Median over the sizes of side a's op over side b's op_b (default: the same op)."""
    x, y = t.get((v, r, op, a)), t.get((v, r, op_b or op, b))
    if not x or not y:
        return None
    sizes = sorted(set(x) & set(y))
    ratios = [x[s][col] / y[s][col] for s in sizes if y[s][col] > 0]
    return statistics.median(ratios) if ratios else None


def _rounds(t: Tables, v: str) -> list[int]:
    return sorted({r for (vv, r, _, _) in t if vv == v})


def _cell(values: list[float]) -> str:
    if not values:
        return "n/a"
    lo, hi, cov = interval(values)
    return f"{statistics.median(values):.3f} [{lo:.3f}, {hi:.3f}] ({cov:.0%})"


def _time(t: Tables, v: str, op: str, side: str, col: int) -> str:
    per_round = [
        statistics.median(x[1][col] for x in sorted(t[(v, r, op, side)].items()))
        for r in _rounds(t, v)
        if t.get((v, r, op, side))
    ]
    return f"{statistics.median(per_round):.2f}" if per_round else "n/a"


def ab_table(t: Tables) -> list[str]:
    out = [
        "| variant | op | rounds | out-of-place ours / nccl-tests: median [interval] (coverage) | per round | in-place (NCCL does nothing at one rank): median [interval] | out-of-place µs, ours / nccl-tests | in-place µs, ours / nccl-tests |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |",
    ]  # fmt: skip
    for v in VARIANTS:
        for op in OPS:
            rs = _rounds(t, v)
            oop = [x for r in rs if (x := round_ratio(t, v, r, op, 0)) is not None]
            inp = [x for r in rs if (x := round_ratio(t, v, r, op, 1)) is not None]
            if not oop:
                continue
            each = " ".join(f"{x:.2f}" for x in oop)
            out.append(
                f"| {v} | {op} | {len(oop)} | {_cell(oop)} | {each} | {_cell(inp)} | "
                f"{_time(t, v, op, 'ours', 0)} / {_time(t, v, op, 'ref', 0)} | "
                f"{_time(t, v, op, 'ours', 1)} / {_time(t, v, op, 'ref', 1)} |"
            )
    return out


def aa_table(t: Tables) -> list[str]:
    """A/A: the same side against itself, where NCCL does the same work (reduce and all_reduce
    at one rank are both one cudaMemcpyAsync), and round against round."""
    out = [
        "| variant | side | reduce / all_reduce, same round: median [interval] | per round | round-to-round spread of each op's median time (max / min): all_reduce, all_gather, reduce, sendrecv |",
        "| --- | --- | ---: | --- | --- |",
    ]  # fmt: skip
    for v in ("n200", "n20", "pin", "fast", "slow"):
        rs = _rounds(t, v)
        for side, name in (("ref", "nccl-tests"), ("ours", "ours")):
            same = [
                x for r in rs if (x := round_ratio(t, v, r, "reduce", 0, side, side, "all_reduce"))
            ]  # fmt: skip
            if not same:
                continue
            spreads = []
            for op in AA_OPS:
                med = [
                    statistics.median(s[0] for s in t[(v, r, op, side)].values())
                    for r in rs
                    if t.get((v, r, op, side))
                ]
                spreads.append(f"{max(med) / min(med):.2f}" if med else "n/a")
            each = " ".join(f"{x:.2f}" for x in same)
            out.append(f"| {v} | {name} | {_cell(same)} | {each} | {', '.join(spreads)} |")
    return out


def clocks(folder: pathlib.Path) -> str:
    sm, mem, states = [], [], set()
    path = folder / "ab" / "clocks.csv"
    for line in path.read_text().splitlines() if path.exists() else []:
        f = [x.strip() for x in line.split(",")]
        if len(f) >= 4 and f[1].endswith("MHz"):
            sm.append(int(f[1].split()[0]))
            mem.append(int(f[2].split()[0]))
            states.add(f[3])
    if not sm:
        return "GPU clocks: not logged."
    q = statistics.quantiles(sm, n=20)
    return (
        f"GPU clocks during the A/B (nvidia-smi every 250 ms, {len(sm)} samples): SM "
        f"{min(sm)}-{max(sm)} MHz (5th-95th percentile {q[0]:.0f}-{q[-1]:.0f}), memory "
        f"{min(mem)}-{max(mem)} MHz, {', '.join(sorted(states))}."
    )


def _streams(path: pathlib.Path) -> list[tuple[int, float, float]]:
    """(cpu, memcpy us, kernel us) per stream of one memcpy_latency process, medians of reps."""
    out = []
    for line in path.read_text().splitlines():
        t = line.split()
        if len(t) > 5 and t[0] == "stream" and "kernel_us" in t:
            k = t.index("kernel_us")
            memcpy = statistics.median(float(x) for x in t[5:k])
            kernel = statistics.median(float(x) for x in t[k + 1 :])
            out.append((int(t[3]), memcpy, kernel))
    return out


def modes(folder: pathlib.Path) -> list[str]:
    """benchmarks/memcpy_latency.cu: per process, each stream's us per op."""
    m = folder / "modes"
    if not m.is_dir():
        return []
    versions = (m / "versions.txt").read_text().splitlines()
    out = [
        f"`benchmarks/memcpy_latency.cu` (no NCCL, no benchmark; run {versions[0]}): "
        "back-to-back 8 B cudaMemcpyAsync D2D, the call NCCL makes "
        "for an out-of-place op at one rank, and empty kernels, 400 a repetition, on new "
        "non-blocking streams of one process; µs per op, median of 5 repetitions.",
        "",
        "| process | CPU | memcpy µs, stream 1..8 | empty kernel µs, stream 1..8 |",
        "| --- | ---: | --- | --- |",
    ]
    procs = sorted(m.glob("proc_*.txt"), key=lambda p: int(p.stem.split("_")[1]))
    cpus = sorted(m.glob("cpu_*.txt"), key=lambda p: int(p.stem.split("_")[1]))
    every: list[float] = []
    for path in [*procs, *cpus]:
        streams = _streams(path)
        if not streams:
            out.append(f"| {path.stem} | | failed | |")
            continue
        every += [x[1] for x in streams]
        cpu = ",".join(sorted({str(x[0]) for x in streams}))
        name = path.stem.replace("proc_", "").replace("cpu_", "pinned to CPU ")
        memcpy = " ".join(f"{x[1]:.2f}" for x in streams)
        kernel = " ".join(f"{x[2]:.2f}" for x in streams)
        out.append(f"| {name} | {cpu} | {memcpy} | {kernel} |")
    if every:
        out += ["", f"Streams: {len(every)}; memcpy µs per op {min(every):.2f}-{max(every):.2f}, "
                f"median {statistics.median(every):.2f}."]  # fmt: skip
    return out


def pick_cpus(modes_dir: pathlib.Path) -> tuple[int, int]:
    """The CPUs whose pinned memcpy_latency process had the lowest and the highest median."""
    per = {}
    for path in modes_dir.glob("cpu_*.txt"):
        streams = _streams(path)
        if streams:
            per[int(path.stem.split("_")[1])] = statistics.median(x[1] for x in streams)
    return min(per, key=per.__getitem__), max(per, key=per.__getitem__)


def pinned(folder: pathlib.Path) -> str:
    path = folder / "ab" / "pinned.txt"
    if not path.exists():
        return ""
    fast, slow = path.read_text().split()[1::2]
    return f" fast: CPU {fast}, slow: CPU {slow} (from the pinned memcpy_latency processes below)."


def pod(folder: pathlib.Path) -> str:
    path = folder / "pod.txt"
    if not path.exists():
        return ""
    lines = path.read_text().splitlines()
    check = next((x for x in lines if x.startswith("pod_entry check:")), "no check line")
    rcs = ", ".join(x for x in lines if x.startswith(("render rc=", "pod rc=")))
    torch = next((x for x in lines if "No module named" in x), "torch importable")
    return (
        "`--launcher direct` pod entrypoint (`benchmarks/pod_entry.py`, venv without torch): "
        f"{rcs}; `import torch` there: {torch}; {check}"
    )


def libraries(folder: pathlib.Path) -> str:
    """The NCCL each side loaded, from the outputs (our meta line, nccl-tests' header)."""
    ours: set[tuple[str, str]] = set()
    ref: set[str] = set()
    for path in (folder / "ab").glob("*_r*_*.txt"):
        text = path.read_text(errors="replace")
        ours.update(re.findall(r'"nccl":"([^"]+)","nccl_code":\d+,"nccl_library":"([^"]+)"', text))
        ref.update(
            re.findall(r"nccl-library=(\d+)", text) if path.name.endswith("_ref.txt") else ()
        )
    mine = "; ".join(f"{v} ({p})" for v, p in sorted(ours))
    return f"NCCL loaded: ours {mine}; nccl-tests nccl-library={', '.join(sorted(ref))}."


def _sizes(t: Tables) -> str:
    sizes = sorted({s for rows in t.values() for s in rows})
    return f"{_bytes(sizes[0])}-{_bytes(sizes[-1])} (-f 2, {len(sizes)} sizes)"


def _bytes(n: int) -> str:
    return f"{n >> 10} KB" if n >= 1024 else f"{n} B"


def timers(folder: pathlib.Path) -> str:
    """Which loop timed our side, per variant, from the headers (`timer=`); "" before it was said."""
    seen: dict[str, set[str]] = {}
    for path in (folder / "ab").glob("*_r*_*_ours.txt"):
        m = _FILE.match(path.name)
        found = re.findall(r" timer=([a-z-]+) ", path.read_text(errors="replace"))
        if m and found:
            seen.setdefault(m.group(1), set()).update(found)
    said = "; ".join(f"{v}: {', '.join(sorted(x))}" for v, x in sorted(seen.items()))
    return f" Our timer by variant (the header's `timer=`): {said}." if said else ""


def section(folder: pathlib.Path) -> list[str]:
    versions = (folder / "versions.txt").read_text().splitlines()
    t = load(folder)
    memcpy = modes(folder)
    gpu = versions[1].split(":", 1)[1].split("(")[0].strip()
    out = [f"#### `{folder.name}`", ""]
    if t:
        out += [
            f"Run {versions[0]} on one {gpu}, {_sizes(t)}, one process per op "
            "and side, nccl-tests 2.19.6 built in the same call; ours from a virtual environment "
            f"without torch. Ratios < 1: ours faster.{pinned(folder)} {libraries(folder)}"
            f"{timers(folder)}",
            "",
            *ab_table(t),
            "",
            "A/A controls, the same runs:",
            "",
            *aa_table(t),
            "",
            clocks(folder),
            "",
        ]
    if memcpy:
        out += [*memcpy, ""]
    if pod(folder):
        out += [pod(folder), ""]
    return out


def render(folders: list[pathlib.Path]) -> str:
    names = " ".join(f.as_posix() for f in folders)
    cmd = f"python benchmarks/small_ab_tables.py {names} --write BENCHMARKS.md"
    parts = [BEGIN, f"<!-- generated by: {cmd} -->", ""]
    for folder in folders:
        parts += section(folder)
    return "\n".join([*parts, END]) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("folders", type=pathlib.Path, nargs="*")
    ap.add_argument("--write", type=pathlib.Path)
    ap.add_argument("--pick-cpus", type=pathlib.Path, help="a modes/ folder: print FAST SLOW")
    ns = ap.parse_args(argv)
    if ns.pick_cpus is not None:
        print(*pick_cpus(ns.pick_cpus))
        return 0
    text = render(ns.folders)
    if ns.write is None:
        sys.stdout.write(text)
        return 0
    doc = ns.write.read_text()
    if BEGIN not in doc:
        raise SystemExit(f"{ns.write}: no {BEGIN} marker")
    doc = doc[: doc.index(BEGIN)] + text + doc[doc.index(END) + len(END) + 1 :]
    ns.write.write_text(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
