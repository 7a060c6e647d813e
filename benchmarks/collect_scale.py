"""Scale of the deployer's read side (issue 4): `results` and `status` on a 1,024-pod run.

Starts a test cluster, creates one run the way `nccl-k8s deploy` labels it (Indexed Job, our
labels, container `bench`) whose pods do not run the engine but a load generator: each pod
prints a log shaped like a real pod's (NCCL INFO lines, the nccl-tests table) and rank 0 adds
the engine's result lines (meta, a row per op x size x placement, summaries). Then it times, as
a user would run them (separate processes, over HTTP):

- `nccl-k8s results`: every pod's log fetched, result lines merged, runs/<id>/ written;
- `nccl-k8s status` (and `-o json`, and `list`): one list of the Job and one of the pods;

with each command's peak RSS (its VmHWM), so "bounded memory" is a number, its own CPU time
(user + system: on a shared machine the wall time is mostly waiting for a core), and the CPU time
the test cluster (API server, controllers, kubelet: threads of this process) spent meanwhile,
its share of the machine. Goals (issues 4, 22): results within 5 s and 300 MB, status within
1 s, at 4,096 pods. Not a test; figures go to BENCHMARKS.md, each with the commit it measured.

    python benchmarks/collect_scale.py --pods 1024 --nodes 128
    python benchmarks/collect_scale.py --pods 1024,2048,4096 --nodes 128   # growth per doubling

Imports nothing of nccl_k8s.k8s: the commands run as the user runs them.
"""

from __future__ import annotations

import argparse
import compileall
import gc
import importlib.util
import itertools
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import commit
from tests.cluster.cluster import Cluster

OPS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "alltoall",
    "sendrecv",
    "gather",
    "scatter",
)
LABELS = {
    "app.kubernetes.io/name": "nccl-k8s",
    "app.kubernetes.io/managed-by": "nccl-k8s",
}


def result_line(kind: str, payload: dict[str, Any]) -> str:
    # The engine's format (nccl_k8s.bench.report.result_line), written out here so this load
    # generator stays independent of the code it measures.
    return "NCCL_K8S_RESULT " + json.dumps({"v": 1, "kind": kind, **payload}, separators=(",", ":"))


def rank0_log(run_id: str, world: int, nodes: int, sizes: int) -> str:
    lines = [f"# nccl-k8s load generator, rank 0 of {world}"]
    lines.append(
        result_line(
            "meta",
            {
                "run_id": run_id,
                "time": "2026-12-03T05:00:00Z",
                "nccl_k8s": "0.1.0",
                "torch": "2.13.0",
                "nccl": "2.28.9",
                "cuda": "12.9",
                "backend": "nccl",
                "world_size": world,
                "nodes": nodes,
                "local_world_size": world // nodes,
                "gpu_model": "NVIDIA H200",
                "devices": [],
                "env": {"NCCL_DEBUG": "INFO"},
                "config": {"minbytes": 8, "maxbytes": 8 << (sizes - 1), "ops": list(OPS)},
            },
        )
    )
    for op in OPS:
        total = 0.0
        for i in range(sizes):
            size = 8 << i
            for placement in ("out", "in"):
                t = 10.0 + size / 1e4
                busbw = size / t / 1e3
                total += busbw
                lines.append(
                    result_line(
                        "row",
                        {
                            "op": op,
                            "dtype": "float",
                            "redop": "sum",
                            "root": -1,
                            "size": size,
                            "count": max(1, size // 4),
                            "placement": placement,
                            "time_us": t,
                            "algbw": size / t / 1e3,
                            "busbw": busbw,
                            "wrong": 0,
                            "time_us_min": t * 0.98,
                            "time_us_max": t * 1.02,
                        },
                    )
                )
        lines.append(
            result_line(
                "summary",
                {"op": op, "out_of_bounds": 0, "avg_busbw": total / (2 * sizes), "ok": True},
            )
        )
    return "\n".join(lines) + "\n"


def any_rank_log(info_lines: int) -> str:
    # What every pod prints besides results: NCCL's INFO lines and the engine's table.
    lines = [
        f"host-$$:{i}:{i} [0] NCCL INFO Channel {i % 32:02d}/0 : 0[0] -> 1[1] via P2P/CUMEM"
        for i in range(info_lines)
    ]
    lines += [
        f"{8 << i:12d}  {2 << i:12d}     float     sum      -1   12.34  0.00  0.00       0"
        for i in range(30)
    ]
    return "\n".join(lines) + "\n"


def run_cli(args: list[str], env: dict[str, str]) -> tuple[float, float, str, str, float]:
    """A CLI run with its own peak RSS (through a tiny wrapper that reports its VmHWM) and its
    own CPU seconds (user + system): on a shared machine the wall time is mostly waiting for a
    core, the CPU time is what the command costs."""
    # VmHWM, not getrusage's ru_maxrss: the latter survives exec, so a child of this (large)
    # process would report this process's size.
    wrapper = (
        "import sys\n"
        "from nccl_k8s.cli.main import app\n"
        "try:\n"
        "    app(sys.argv[1:], standalone_mode=False)\n"
        "finally:\n"
        "    hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
        "    sys.stderr.write('\\nRSS_MIB ' + str(int(hwm) / 1024) + '\\n')\n"
    )
    t0 = time.monotonic()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, "-c", wrapper, *args], env=env, capture_output=True, text=True, timeout=600
    )
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime
    if proc.returncode != 0:
        raise SystemExit(f"nccl-k8s {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    rss = float(proc.stderr.rsplit("RSS_MIB ", 1)[1].split()[0])
    return wall, rss, proc.stdout, proc.stderr, cpu


def _cpu_s() -> float:
    """CPU seconds of this process (the test cluster's API server, controllers and kubelet run
    in it as threads): the server's share of a command, measured around it."""
    return time.process_time()


def _start_run(store: Any, ns: str, rid: str, pods: int, args: argparse.Namespace) -> int:
    """One run of `pods` pods in namespace `ns` (its own ConfigMap and Indexed Job); the bytes
    of rank 0's log."""
    store.create("namespaces", {"metadata": {"name": ns}})
    labels = {**LABELS, "app.kubernetes.io/instance": rid}
    data = {
        "rank0.log": rank0_log(rid, pods * 8, pods, args.sizes),
        "other.log": any_rank_log(args.info_lines),
    }
    store.create(
        "configmaps",
        {"metadata": {"name": f"{rid}-engine", "namespace": ns, "labels": labels}, "data": data},
    )
    script = 'if [ "$JOB_COMPLETION_INDEX" = 0 ]; then cat /data/rank0.log; fi; cat /data/other.log'
    container = {
        "name": "bench",
        "image": "load-generator",
        "command": ["sh", "-c", script],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    store.create(
        "jobs",
        {
            "metadata": {"name": rid, "namespace": ns, "labels": labels},
            "spec": {
                "completionMode": "Indexed",
                "completions": pods,
                "parallelism": pods,
                "backoffLimit": 0,
                "template": {
                    "metadata": {"labels": {**labels, "app.kubernetes.io/component": "worker"}},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [container],
                        "volumes": [{"name": "data", "configMap": {"name": f"{rid}-engine"}}],
                    },
                },
            },
        },
    )
    return len(data["rank0.log"]) + len(data["other.log"])


COMMANDS = ("status", "status_latest_json", "list", "results")


def _argv(name: str, rid: str, base: list[str], concurrency: int) -> list[str]:
    return {
        "status": ["status", "--run", rid, *base],
        "status_latest_json": ["status", "-o", "json", *base],
        "list": ["list", *base],
        "results": ["results", "--run", rid, "--concurrency", str(concurrency), *base],
    }[name]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--pods",
        default="1024",
        help="pods of the run; several, comma-separated (1024,2048,4096), make one run each on "
        "one cluster, measured in interleaved rounds, with the growth per doubling",
    )
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--sizes", type=int, default=24, help="sizes per op in rank 0's results")
    ap.add_argument("--info-lines", type=int, default=200, help="NCCL INFO lines per pod")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout-s", type=float, default=900)
    ap.add_argument("--concurrency", type=int, default=32, help="results --concurrency")
    ap.add_argument(
        "--as-is",
        action="store_true",
        help="leave the test API server as it is. By default three things about it are made "
        "what a real API server's are (Go's net/http): TCP_NODELAY (the test server "
        "writes headers and body separately, so with Nagle each answer on a kept-alive "
        "connection waits ~40 ms for the client's delayed ACK) and a listen backlog of 1024 "
        "(socketserver's default is 5: a burst of new connections loses SYNs, which the client "
        "retransmits after 1 s): both measure the test server, not the collector. Third, once "
        "the pods have finished, the objects of this process (the test cluster's store, logs "
        "and threads) are moved out of Python's collected generations (gc.freeze): else a full "
        "collection, which frees nothing of them, stops every thread of the test server for "
        "~0.5 s at 4,096 pods whenever the allocations of the commands' answers trigger one, "
        "where kube-apiserver's Go collector runs beside its requests.",
    )
    args = ap.parse_args()
    if not args.as_is:
        from tests.cluster import apiserver

        apiserver._Handler.disable_nagle_algorithm = True
        apiserver._Server.request_queue_size = 1024
    # The commands run as installed from the wheel: pip byte-compiles what it installs, while
    # an editable install is never compiled where PYTHONDONTWRITEBYTECODE is set (as on our
    # machines), and compiling ~40 modules is ~50 ms of every command. Compiled: the package
    # the commands import, wherever it is (PYTHONPATH may name another checkout's sources).
    package = importlib.util.find_spec("nccl_k8s")
    for where in (package.submodule_search_locations or []) if package else []:
        compileall.compile_dir(where, quiet=1)

    sizes = sorted(int(x) for x in str(args.pods).split(","))
    total = sum(sizes)
    gpus = max(1, -(-total // args.nodes))
    figures: dict[str, Any] = {
        "pods": sizes[0] if len(sizes) == 1 else sizes,
        "nodes": args.nodes,
        "cpus": os.cpu_count(),
        "server_as_real": not args.as_is,
        "concurrency": args.concurrency,
        "commit": commit(),
        "load_before": os.getloadavg()[0],
    }
    with (
        Cluster(nodes=args.nodes, gpus_per_node=max(8, gpus)) as c,
        tempfile.TemporaryDirectory() as tmp,
    ):
        store = c.store
        finished: set[str] = set()
        complete: set[str] = set()

        def on_change(etype: str, resource_: str, obj: dict[str, Any]) -> None:
            if resource_ == "pods" and obj.get("status", {}).get("phase") == "Succeeded":
                finished.add(obj["metadata"]["uid"])
            conds = obj.get("status", {}).get("conditions") or []
            if resource_ == "jobs" and any(
                c.get("type") == "Complete" and c.get("status") == "True" for c in conds
            ):
                complete.add(obj["metadata"]["uid"])

        store.subscribe(on_change)
        t0 = time.monotonic()
        runs = {n: (f"scale-{n}", f"nccl-scale-{n:05d}") for n in sizes}
        for n, (ns, rid) in runs.items():
            figures.setdefault("rank0_log_bytes", _start_run(store, ns, rid, n, args))
        figures["other_log_bytes"] = len(any_rank_log(args.info_lines))
        deadline = time.monotonic() + args.timeout_s
        # Every pod finished and every Job Complete: the controllers' work on the run is done,
        # so what the commands are timed beside is the cluster at rest, not its last updates.
        while len(finished) < total or len(complete) < len(sizes):
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"only {len(finished)} of {total} pods finished, "
                    f"{len(complete)} of {len(sizes)} Jobs Complete"
                )
            time.sleep(0.2)
        figures["pods_finished_s"] = round(time.monotonic() - t0, 1)
        if not args.as_is:
            gc.freeze()  # --as-is's help says why

        env = dict(c.kubectl_env(), NCCL_K8S_RUNS_DIR=str(Path(tmp) / "runs"))
        samples: dict[int, dict[str, list[tuple[float, float, float, float]]]] = {
            n: {} for n in sizes
        }
        # Interleaved rounds: every command at every size once per round, so that what else
        # runs on this shared machine falls on all of them alike.
        for _ in range(args.repeat):
            for n in sizes:
                ns, rid = runs[n]
                base = ["-n", ns, "--kubeconfig", str(c.kubeconfig)]
                for name in COMMANDS:
                    cpu0 = _cpu_s()
                    wall, rss, out, err, cli_cpu = run_cli(
                        _argv(name, rid, base, args.concurrency), env
                    )
                    server = _cpu_s() - cpu0
                    samples[n].setdefault(name, []).append((wall, rss, server, cli_cpu))
                    if name == "results":
                        assert f"from {n} pods" in err, err
                    if name == "status_latest_json":
                        assert len(json.loads(out)["pods"]) == n
        wall, rss, _, _, cli_cpu = run_cli(["--version"], env)
        figures["cli_startup_s"] = round(wall, 3)
        figures["cli_startup_cpu_s"] = round(cli_cpu, 3)
        figures["load_after"] = os.getloadavg()[0]
        per_size = []
        for n in sizes:
            fig: dict[str, Any] = {"pods": n}
            for name, vals in samples[n].items():
                walls = sorted(v[0] for v in vals)
                fig[f"{name}_s_median"] = round(walls[len(walls) // 2], 3)
                fig[f"{name}_s_min"] = round(walls[0], 3)
                fig[f"{name}_s_max"] = round(walls[-1], 3)
                fig[f"{name}_s_rounds"] = [round(v[0], 3) for v in vals]
                fig[f"{name}_peak_rss_mib"] = round(max(v[1] for v in vals), 1)
                servers = sorted(v[2] for v in vals)
                fig[f"{name}_server_cpu_s_median"] = round(servers[len(servers) // 2], 3)
                cpus = sorted(v[3] for v in vals)
                fig[f"{name}_cpu_s_median"] = round(cpus[len(cpus) // 2], 3)
            logs = Path(tmp) / "runs" / runs[n][1] / "logs"
            fig["logs_written"] = len(list(logs.iterdir()))
            fig["logs_bytes"] = sum(p.stat().st_size for p in logs.iterdir())
            fig["results_rows"] = len(
                json.loads((logs.parent / "results.json").read_text())["rows"]
            )
            per_size.append(fig)
    if len(sizes) == 1:
        figures.update({k: v for k, v in per_size[0].items() if k != "pods"})
    else:
        figures["sizes"] = per_size
        # Growth per doubling: from each size to the next, (figure at m / figure at n) **
        # (1 / log2(m / n)); 2.0 is linear in the pods. Of the wall time (the median) and of
        # the command's own CPU (the median; what the load on a shared machine moves least).
        growth: dict[str, dict[str, float]] = {}
        for small, large in itertools.pairwise(per_size):
            doublings = math.log2(large["pods"] / small["pods"])
            growth[f"{small['pods']}->{large['pods']}"] = {
                f"{name}{what}": round(
                    (large[f"{name}{what}_median"] / small[f"{name}{what}_median"])
                    ** (1 / doublings),
                    2,
                )
                for name in COMMANDS
                for what in ("_s", "_cpu_s")
            }
        figures["growth_per_doubling"] = growth
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
