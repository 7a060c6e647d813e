"""BENCHMARKS.md's engine tables, generated from the raw outputs of one device run.

    python benchmarks/engine_tables.py benchmarks/data/2026-12-03-h200x1-engine            # print
    python benchmarks/engine_tables.py benchmarks/data/2026-12-03-h200x1-engine --write BENCHMARKS.md

The folder is what benchmarks/device_engine.sh wrote (raw.tgz unpacked): nccl-tests 2.19.6's
`ref_<op>[_graph].txt` and our `ours_<op>[_graph].txt` from the same call, plus the experiments.
With --write, the text between the `<!-- engine-tables:begin -->` and `<!-- engine-tables:end -->`
markers of the file is replaced; tests/test_benchmarks_md.py checks that the committed file
equals what this prints, so no figure in those tables is typed by hand.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "src"))

from nccl_k8s.bench.config import ALL_OPS as OPS

ROW = re.compile(r"^\s+\d+\s+\d+\s+\w+")
BEGIN, END = "<!-- engine-tables:begin -->", "<!-- engine-tables:end -->"
SMALL = (8, 64 << 10)  # the time target's range: 8 B to 64 KB
LARGE = 32 << 20  # the bandwidth target's range: 32 MB and up
Table = dict[int, list[str]]


def sections(text: str) -> dict[str, Table]:
    """op -> size -> row fields, for every 'Collective test starting' section."""
    out: dict[str, Table] = {}
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


def table(folder: pathlib.Path, name: str, op: str) -> Table:
    path = folder / f"{name}.txt"
    return sections(path.read_text(errors="replace")).get(op, {}) if path.exists() else {}


def ratio(a: str, b: str) -> float | None:
    x, y = float(a), float(b)
    return x / y if y > 0 and x > 0 else None


def fmt(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def header_value(folder: pathlib.Path, name: str, pattern: str) -> str:
    path = folder / f"{name}.txt"
    if not path.exists():
        return "?"
    m = re.search(pattern, path.read_text(errors="replace"))
    return m.group(1) if m else "?"


def op_table(
    folder: pathlib.Path, op: str, graph: bool
) -> tuple[list[str], dict[str, list[float]]]:
    """Markdown rows for one op, and the ratios the summary needs."""
    suffix = "_graph" if graph else ""
    ref, ours = table(folder, f"ref_{op}{suffix}", op), table(folder, f"ours_{op}{suffix}", op)
    lines = [
        "| size (B) | nccl-tests out (µs) | ours out (µs) | time ratio out | nccl-tests in (µs) | ours in (µs) | time ratio in | bw ratio out | #wrong ours |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    stats: dict[str, list[float]] = {"small_out": [], "small_in": [], "large_bw": []}
    for size in sorted(set(ref) & set(ours)):
        r, o = ref[size], ours[size]
        t_out, t_in = ratio(o[5], r[5]), ratio(o[9], r[9])
        bw = ratio(r[5], o[5])  # algbw (and busbw, same factor) ours / theirs = their time / ours
        if SMALL[0] <= size <= SMALL[1]:
            stats["small_out"] += [t_out] if t_out else []
            stats["small_in"] += [t_in] if t_in else []
        if size >= LARGE and bw:
            stats["large_bw"].append(bw)
        wrong = o[8] + ("" if o[12] == "N/A" else f" / {o[12]}")
        lines.append(
            f"| {size} | {r[5]} | {o[5]} | {fmt(t_out)} | {r[9]} | {o[9]} | {fmt(t_in)} | "
            f"{fmt(bw) if size >= LARGE else ''} | {wrong} |"
        )
    return lines, stats


def summary_row(op: str, graph: bool, stats: dict[str, list[float]]) -> str:
    so, si, lb = stats["small_out"], stats["small_in"], stats["large_bw"]
    met_t = bool(so) and max(so) <= 1.05
    met_b = bool(lb) and min(lb) >= 0.99
    return (
        f"| {op}{' -G 20' if graph else ''} | {fmt(statistics.median(so) if so else None)} | {fmt(max(so) if so else None)} | "
        f"{fmt(statistics.median(si) if si else None)} | {fmt(min(lb) if lb else None)} | "
        f"{'yes' if met_t else 'no'} | {'yes' if met_b else 'no'} |"
    )


def loop_table(folder: pathlib.Path) -> list[str]:
    """The Python loop against the C loop, each against nccl-tests, at 8 B-64 KB (one run).

    The folder holds per-op runs with one loop (`ours_<op>.txt`) and one `--ops all` run with the
    other (`python_all.txt` or `native_all.txt`); each file's header says which timer it used.
    """
    lines = [
        "| op | out: Python loop / nccl-tests, median (max) | out: C loop / nccl-tests, median (max) | in: Python / nccl-tests | in: C loop / nccl-tests |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    other_path = next(
        (folder / n for n in ("python_all.txt", "native_all.txt") if (folder / n).exists()), None
    )
    if other_path is None:
        return []
    other = sections(other_path.read_text(errors="replace"))
    other_is_c = other_path.name == "native_all.txt"
    for op in OPS:
        ref, ours = table(folder, f"ref_{op}", op), table(folder, f"ours_{op}", op)
        py, c = (ours, other.get(op, {})) if other_is_c else (other.get(op, {}), ours)
        cols = []
        for col in (5, 9):
            for src in (py, c):
                rs = [
                    x for s in sorted(set(ref) & set(src)) if SMALL[0] <= s <= SMALL[1]
                    for x in [ratio(src[s][col], ref[s][col])] if x
                ]  # fmt: skip
                cols.append(f"{fmt(statistics.median(rs))} ({fmt(max(rs))})" if rs else "–")
        if any(c != "–" for c in cols):
            lines.append(f"| {op} | {cols[0]} | {cols[1]} | {cols[2]} | {cols[3]} |")
    return lines


def _versus(
    folder: pathlib.Path, files: tuple[str, str, str], heads: tuple[str, str, str]
) -> list[str]:
    """sendrecv out-of-place times of three runs side by side, the last two against the first."""
    ref, a, b = (table(folder, name, "sendrecv") for name in files)
    lines = [
        f"| size (B) | {heads[0]} (µs) | {heads[1]} (µs) | {heads[2]} (µs) | ratio {heads[1]} | ratio {heads[2]} |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for size in sorted(set(ref) & set(a) & set(b)):
        lines.append(
            f"| {size} | {ref[size][5]} | {a[size][5]} | {b[size][5]} | "
            f"{fmt(ratio(a[size][5], ref[size][5]))} | {fmt(ratio(b[size][5], ref[size][5]))} |"
        )
    return lines


def sendrecv_alloc_table(folder: pathlib.Path) -> list[str]:
    files = ("ref_sendrecv_graph", "ours_sendrecv_graph", "sendrecv_graph_torchalloc")
    return _versus(
        folder, files, ("nccl-tests -G 20", "ours, ncclMemAlloc", "ours, torch allocator")
    )


def sendrecv_launch_table(folder: pathlib.Path) -> list[str]:
    files = ("dbg_ref_sendrecv", "dbg_ours_sendrecv", "dbg_ours_sendrecv_py")
    return _versus(folder, files, ("nccl-tests", "ours, C launch", "ours, Python replay"))


def heartbeat_table(folder: pathlib.Path) -> list[str]:
    """all_reduce with heartbeats on and off, in the interleaved pairs the run made."""
    pairs = sorted({int(p.stem.rsplit("_", 1)[1]) for p in folder.glob("hb_on_*.txt")})
    names = [f"hb_{state}_{k}" for k in pairs for state in ("on", "off")]
    runs = {name: table(folder, name, "all_reduce") for name in names}
    if not runs or not all(runs.values()):
        return []
    sizes = sorted(set.intersection(*(set(t) for t in runs.values())))
    head = " | ".join(
        f"{'on' if '_on_' in n else 'off'}, pair {n.rsplit('_', 1)[1]} (µs)" for n in names
    )
    lines = [
        f"| size (B) | {head} | median on / median off |",
        "| ---: |" + " ---: |" * (len(names) + 1),
    ]
    for size in sizes:
        on = statistics.median(float(runs[n][size][5]) for n in names if "_on_" in n)
        off = statistics.median(float(runs[n][size][5]) for n in names if "_off_" in n)
        lines.append(
            f"| {size} | " + " | ".join(runs[n][size][5] for n in names) + f" | {fmt(on / off)} |"
        )
    return lines


def driver_table(folder: pathlib.Path) -> list[str]:
    """Our two NCCL drivers in one earlier run (default.txt: direct, torch.txt: torch.distributed)."""
    direct = sections((folder / "default.txt").read_text(errors="replace"))
    torch_ = sections((folder / "torch.txt").read_text(errors="replace"))
    lines = [
        "| op | direct out, median 8 B-64 KB (µs) | torch.distributed out (µs) | direct in (µs) | torch.distributed in (µs) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for op in OPS:
        d, t = direct.get(op, {}), torch_.get(op, {})
        sizes = [s for s in sorted(set(d) & set(t)) if SMALL[0] <= s <= SMALL[1]]
        if not sizes:
            continue
        med = [
            fmt(statistics.median(float(src[s][col]) for s in sizes))
            for col in (5, 9)
            for src in (d, t)
        ]
        lines.append(f"| {op} | {med[0]} | {med[1]} | {med[2]} | {med[3]} |")
    return lines


def check_lines(folder: pathlib.Path) -> list[str]:
    """Every run's verdict lines, counted: the checks that ran on the GPU."""
    out = []
    for name in ("ours", "torch", "native", "python"):
        files = sorted(folder.glob(f"{name}_*.txt"))
        if not files:
            continue
        oks = sum(
            p.read_text(errors="replace").count("# Out of bounds values : 0 OK") for p in files
        )
        bad = sum(
            len(
                re.findall(
                    r"# Out of bounds values : [1-9]\d* FAILED", p.read_text(errors="replace")
                )
            )
            for p in files
        )
        out.append(
            f"- `{folder.as_posix()}/{name}_*`: {len(files)} runs, {oks} op tables `0 OK`, {bad} `FAILED`"
        )
    return out


def hang_lines(folder: pathlib.Path) -> list[str]:
    out = []
    for name in ("hang_direct", "hang_torch"):
        text = "\n".join(
            p.read_text(errors="replace")
            for p in (folder / f"{name}.txt", folder / f"{name}.err")
            if p.exists()
        )
        fault = next(
            (line for line in text.splitlines() if line.startswith("NCCL_K8S_FAULT")), None
        )
        human = next(
            (
                line
                for line in text.splitlines()
                if "culprit" in line and not line.startswith("NCCL_K8S_FAULT")
            ),
            None,
        )
        exits = (folder / "exits.txt").read_text() if (folder / "exits.txt").exists() else ""
        code = re.search(rf"^{name} exit=(\d+) (\d+)-(\d+)s", exits, re.M)
        took = int(code.group(2)) - int(code.group(3)) if code else "?"
        out.append(
            f"- {name}: exit {code.group(1) if code else '?'} after {took} s (process start included)"
        )
        out.append(f"  - `{fault}`" if fault else "  - no FAULT line")
        if human:
            out.append(f"  - stderr: `{human.strip()}`")
    pod = folder / "pod_default.txt"
    if pod.exists():
        m = re.search(r'"timeout_s":\s*(\d+)', pod.read_text())
        out.append(
            f"- no -T, KUBERNETES_SERVICE_HOST set: meta `timeout_s` = {m.group(1) if m else '?'}"
        )
    return out


def render(
    folder: pathlib.Path,
    experiments: pathlib.Path | None = None,
    drivers: pathlib.Path | None = None,
    heartbeat_cpu: pathlib.Path | None = None,
) -> str:
    """The block: the table run in `folder`, the experiments of `experiments` (default: the
    same folder), the driver comparison of `drivers`."""
    exp = experiments or folder
    gpu = header_value(folder, "versions", r"GPU 0: ([^(]+?) \(")
    torch_v = header_value(folder, "versions", r"(?m)^torch (\S+)")
    when = header_value(folder, "versions", r"(?m)^(\d{4}-\d\d-\d\dT\d\d:\d\d)")
    lib_ours = header_value(folder, "ours_all_reduce", r"nccl-library=(\S+)")
    lib_ref = header_value(folder, "ref_all_reduce", r"nccl-library=(\d+)")
    flags = header_value(folder, "ours_all_reduce", r"(minBytes .*?iters: \d+ )")
    out = [
        BEGIN,
        f"<!-- generated by: python benchmarks/engine_tables.py {folder.as_posix()}"
        + (f" --experiments {experiments.as_posix()}" if experiments else "")
        + (f" --drivers {drivers.as_posix()}" if drivers else "")
        + (f" --heartbeat-cpu {heartbeat_cpu.as_posix()}" if heartbeat_cpu else "")
        + " --write BENCHMARKS.md -->",
        "",
        f"Run {when} on one {gpu.strip()} (torch {torch_v}); NCCL as loaded: ours `nccl-library={lib_ours}`,"
        f" nccl-tests `nccl-library={lib_ref}`. Flags: `-b 8 -e 256M -f 4 -n 20 -w 5` ({flags.strip()}),"
        " default and `-G 20`, every op, world size 1; each op ran nccl-tests then ours in the same call.",
        "Time ratio = ours / nccl-tests (lower is better); bw ratio = ours / nccl-tests algbw (busbw has the"
        " same factor; at world size 1 it is 0 for all but broadcast, reduce and sendrecv).",
        "",
        "### Summary (targets: time <= 1.05x at 8 B-64 KB, bandwidth >= 0.99x at >= 32 MB)",
        "",
        "| op | time ratio out 8 B-64 KB, median | max | time ratio in, median | bw ratio >= 32 MB, min | time target | bw target |",
        "| --- | ---: | ---: | ---: | ---: | :---: | :---: |",
    ]
    tables: list[str] = []
    for graph in (False, True):
        for op in OPS:
            lines, stats = op_table(folder, op, graph)
            if len(lines) > 2:
                out.append(summary_row(op, graph, stats))
                tables += ["", f"#### {op}{' -G 20' if graph else ''}", "", *lines]
    if (folder / "python_all.txt").exists() or (folder / "native_all.txt").exists():
        out += [
            "",
            "### The timed loop in C against the Python loop, 8 B-64 KB, same run",
            "",
            *loop_table(folder),
        ]
    if exp != folder and (exp / "native_all.txt").exists():
        title = f"### The Python loop against a first C loop (C issues, Python waits and takes the clock; `{exp.as_posix()}`)"
        out += ["", title, "", *loop_table(exp)]
    if (folder / "dbg_ours_sendrecv.txt").exists():
        title = f"### sendrecv `-G 20`: the graph launched from C on the NCCL stream, or replayed from Python (`{folder.as_posix()}`)"
        out += ["", title, "", *sendrecv_launch_table(folder)]
    title = f"### sendrecv `-G 20` with the Python replay: where the buffers come from (`{exp.as_posix()}`)"
    out += ["", title, "", *sendrecv_alloc_table(exp)]
    checks = [*check_lines(folder), *(check_lines(exp) if exp != folder else [])]
    out += ["", "### Checks on the GPU", "", *checks]
    title = f"### The timeout watchdog (a GPU sleep queued before the 1 MB op, `-T 5`; `{exp.as_posix()}`)"
    out += ["", title, "", *hang_lines(exp)]
    hb = folder if list(folder.glob("hb_on_*.txt")) else exp
    title = f"### Heartbeats on and off on the GPU (all_reduce; separate processes, interleaved; `{hb.as_posix()}`)"
    out += ["", title, "", *heartbeat_table(hb)]
    if heartbeat_cpu is not None:
        out += [
            "",
            f"In one process on the CPU (`benchmarks/heartbeat_overhead.py`, `{heartbeat_cpu.as_posix()}`):",
            "",
        ]
        out += [
            f"- {line.strip()}"
            for line in heartbeat_cpu.read_text().splitlines()
            if "median on/off" in line
        ]
    if drivers is not None:
        out += [
            "",
            f"### The torch.distributed driver's cost (`--driver torch`; an earlier run, `{drivers.as_posix()}`)",
            "",
            *driver_table(drivers),
        ]
    out += ["", "### Per op, per size", *tables, "", END]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", type=pathlib.Path)
    ap.add_argument(
        "--experiments",
        type=pathlib.Path,
        help="the run with the hang, heartbeat and allocator experiments",
    )
    ap.add_argument(
        "--drivers", type=pathlib.Path, help="an earlier run with default.txt and torch.txt"
    )
    ap.add_argument(
        "--heartbeat-cpu", type=pathlib.Path, help="benchmarks/heartbeat_overhead.py's output"
    )
    ap.add_argument("--write", type=pathlib.Path, help="replace the generated block of this file")
    args = ap.parse_args()
    text = render(args.folder, args.experiments, args.drivers, args.heartbeat_cpu)
    if not args.write:
        sys.stdout.write(text)
        return
    doc = args.write.read_text()
    start, end = doc.index(BEGIN), doc.index(END) + len(END) + 1
    args.write.write_text(doc[:start] + text + doc[end:])


if __name__ == "__main__":
    main()
