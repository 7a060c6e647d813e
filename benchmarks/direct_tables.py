"""BENCHMARKS.md's tables for the torch-free engine (issue 23), from one device call's outputs.

    python benchmarks/direct_tables.py benchmarks/data/2026-12-05-h200x1-direct            # print
    python benchmarks/direct_tables.py benchmarks/data/2026-12-05-h200x1-direct --write BENCHMARKS.md

The folder is what benchmarks/device_direct.sh wrote (direct.tgz unpacked): startup.txt
(benchmarks/startup.py lines), the trace logs `one_ours_<round>.log`, wallsh/wall.txt
(../shared/ref/wall.sh), wall.txt and `sbs_<round>/side_by_side.txt` (../shared/ref/side_by_side.sh).
With --write, the text between `<!-- direct-tables:begin -->` and `<!-- direct-tables:end -->`
is replaced; tests/test_benchmarks_md.py checks the committed file equals what this prints.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import statistics
import sys

BEGIN, END = "<!-- direct-tables:begin -->", "<!-- direct-tables:end -->"
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv")
SMALL, LARGE = 64 << 10, 32 << 20


def startup(folder: pathlib.Path) -> list[str]:
    runs: dict[str, dict[str, list[str]]] = {}
    for line in (folder / "startup.txt").read_text().splitlines():
        m = re.match(r"startup (\S+) r(\d+) first_row_s=(\S+) exit_s=(\S+) rc=(\d+)", line)
        if m:
            runs.setdefault(m.group(1), {}).setdefault("row", []).append(m.group(3))
            runs[m.group(1)].setdefault("exit", []).append(m.group(4))
            runs[m.group(1)].setdefault("rc", []).append(m.group(5))
    names = {
        "nccl-tests-one": "nccl-tests all_reduce_perf (one binary)",
        "ours-one": "`nccl-k8s run`, venv without torch (default: communicator left to exit)",
        "ours-one-torchenv": "`nccl-k8s run`, the image's python (torch installed, not imported)",
        "ours-one-destroy": "`nccl-k8s run`, venv without torch, NCCL_K8S_COMM_END=destroy",
        "ours-one-abort": "`nccl-k8s run`, venv without torch, NCCL_K8S_COMM_END=abort",
        "ours-all": "`nccl-k8s run --ops` (7 ops) 8 B-128 MB, venv without torch",
    }
    out = [
        "| what (one 8 B all_reduce, `-n 1 -w 0`) | time to first row, s (round 1, 2) | start to exit, s (round 1, 2) | exit codes |",
        "| --- | ---: | ---: | :---: |",
    ]
    for key, label in names.items():
        r = runs.get(key)
        if r:
            out.append(
                f"| {label} | {', '.join(r['row'])} | {', '.join(r['exit'])} | {','.join(r['rc'])} |"
            )
    return out


def stages(folder: pathlib.Path) -> list[str]:
    """Median seconds between trace stages over the rounds' one-op runs (benchmarks/startup.py
    clock: each line's first field is seconds since the command started)."""
    per: dict[str, list[float]] = {}
    for log in sorted(folder.glob("one_ours_[0-9].log")):
        last = 0.0
        for line in log.read_text().splitlines():
            m = re.match(r"\s*([\d.]+) nccl-k8s-trace \S+ \d+ (.+)$", line)
            if m:
                t = float(m.group(1))
                per.setdefault(m.group(2), []).append(t - last)
                last = t
    out = [
        "| stage (trace, `NCCL_K8S_TRACE=1`) | seconds since the previous stage, median of the rounds |",
        "| --- | ---: |",
    ]
    for name, values in per.items():
        out.append(f"| {name} | {statistics.median(values):.3f} |")
    return out


def side_by_side(folder: pathlib.Path) -> list[str]:
    rounds = sorted(folder.glob("sbs_*/side_by_side.txt"))
    data: dict[str, list[dict[int, float]]] = {}
    for path in rounds:
        tables: dict[str, dict[int, float]] = {}
        name = None
        for line in path.read_text().splitlines():
            m = re.match(r"=== (\w+) \(GPUs", line)
            if m:
                name = m.group(1)
                tables[name] = {}
                continue
            f = line.split()
            if name and len(f) >= 4 and f[0].isdigit():
                size, ratio = int(f[0]), float(f[3])
                if size > 0 and ratio > 0:
                    tables[name][size] = ratio
        for k, v in tables.items():
            data.setdefault(k, []).append(v)
    out = [
        "| op | eager time ratio <= 64 KB, median (round 1, 2) | eager bw ratio >= 32 MB, min (round 1, 2) | `-G 20` time ratio <= 64 KB, median | `-G 20` bw ratio >= 32 MB, min |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]

    def cells(key: str) -> tuple[str, str]:
        small, large = [], []
        for t in data.get(key, []):
            small.append(f"{statistics.median(r for s, r in t.items() if s <= SMALL):.2f}")
            large.append(f"{min(1 / r for s, r in t.items() if s >= LARGE):.3f}")
        return ", ".join(small), ", ".join(large)

    for op in OPS:
        e, g = cells(op), cells(f"{op}_graph")
        out.append(f"| {op} | {e[0]} | {e[1]} | {g[0]} | {g[1]} |")
    return out


def walls(folder: pathlib.Path) -> list[str]:
    out = [
        "| round | one 8 B op: nccl-tests, s | ours, s | ratio | every op 8 B-256 MB: 7 binaries, s | ours, s | ratio |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for line in (folder / "wallsh" / "wall.txt").read_text().splitlines():
        m = re.match(
            r"round (\d+): one 8 B op: nccl-tests ([\d.]+) s, ours ([\d.]+) s \(([\d.]+)x.*every op: "
            r"nccl-tests 7 binaries ([\d.]+) s, ours ([\d.]+) s \(([\d.]+)x",
            line,
        )
        if m:
            out.append("| " + " | ".join(m.groups()) + " |")
    return out


def render(folder: pathlib.Path) -> str:
    versions = (folder / "versions.txt").read_text().splitlines()
    cmd = f"python benchmarks/direct_tables.py {folder.as_posix()} --write BENCHMARKS.md"
    parts = [
        BEGIN,
        f"<!-- generated by: {cmd} -->",
        "",
        f"Run {versions[0]} on one {versions[1].split(':', 1)[1].split('(')[0].strip()}; "
        "the engine from a virtual environment without torch unless the row says otherwise.",
        "",
        "#### `../shared/ref/wall.sh` (`nccl-k8s run` against nccl-tests 2.19.6, two interleaved rounds)",
        "",
        *walls(folder),
        "",
        "#### Start-up, `benchmarks/startup.py` (same clock for both; two interleaved rounds)",
        "",
        *startup(folder),
        "",
        "#### Where a one-op run's time goes (torch-free venv, default)",
        "",
        *stages(folder),
        "",
        "#### `../shared/ref/side_by_side.sh`, two rounds (ratios ours / nccl-tests; bw ratio > 1: ours faster)",
        "",
        *side_by_side(folder),
        "",
        END,
    ]
    return "\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", type=pathlib.Path)
    ap.add_argument("--write", type=pathlib.Path)
    ns = ap.parse_args(argv)
    text = render(ns.folder)
    if ns.write is None:
        sys.stdout.write(text)
        return 0
    doc = ns.write.read_text()
    if BEGIN in doc:
        doc = doc[: doc.index(BEGIN)] + text + doc[doc.index(END) + len(END) + 1 :]
    else:
        raise SystemExit(f"{ns.write}: no {BEGIN} marker")
    ns.write.write_text(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
