"""Markdown table: our engine's times next to nccl-tests' for the same op, size and GPU.

    python benchmarks/parity_table.py benchmarks/data/h200x1-parity tests/data/nccl-tests/h200x1-b

Reads our `default.txt` (eager) and `graph.txt` (-G 1) from the first folder and nccl-tests'
`<op>_perf.txt` files from the second; prints one table per op.
"""

from __future__ import annotations

import pathlib
import re
import sys

ROW = re.compile(r"^\s+\d+\s+\d+\s+\w+")


def sections(text: str) -> dict[str, dict[int, list[str]]]:
    out: dict[str, dict[int, list[str]]] = {}
    op = None
    for line in text.splitlines():
        m = re.match(r"# Collective test starting: (\w+)_perf", line)
        if m:
            op = m.group(1)
            out.setdefault(op, {})
        elif op and ROW.match(line):
            f = line.split()
            out[op][int(f[0])] = f
    return out


def main(ours_dir: str, ref_dir: str) -> None:
    ours = sections(pathlib.Path(ours_dir, "default.txt").read_text())
    graph = sections(pathlib.Path(ours_dir, "graph.txt").read_text())
    torch_path = pathlib.Path(ours_dir, "torch.txt")
    via_torch = sections(torch_path.read_text()) if torch_path.exists() else {}
    for op in ours:
        ref_path = pathlib.Path(ref_dir, f"{op}_perf.txt")
        ref = sections(ref_path.read_text()).get(op, {}) if ref_path.exists() else {}
        print(f"\n#### {op}\n")
        print(
            "| size (B) | nccl-tests out (µs) | ours out (µs) | ours -G out | via torch.distributed out"
            " | nccl-tests in (µs) | ours in (µs) | ours -G in | via torch.distributed in |"
        )
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for size, f in ours[op].items():
            r = ref.get(size)
            g = graph.get(op, {}).get(size)
            t = via_torch.get(op, {}).get(size)
            print(
                f"| {size} | {r[5] if r else '–'} | {f[5]} | {g[5] if g else '–'} | {t[5] if t else '–'} | "
                f"{r[9] if r else '–'} | {f[9]} | {g[9] if g else '–'} | {t[9] if t else '–'} |"
            )


if __name__ == "__main__":
    main(*sys.argv[1:3])
