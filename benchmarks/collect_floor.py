"""The floor under `results` and `status` at scale on this machine (issue 40, acceptance 2).

The same test cluster and the same run as collect_scale.py (an Indexed Job of N pods whose
logs are the load generator's), and in each round, interleaved:

- `results`: the command, as collect_scale.py times it;
- `results` floor: the same N log requests (GET .../pods/<pod>/log?container=bench) by curl, 32
  at once on kept-alive connections (`--parallel --parallel-max 32`), each written to a file
  and nothing read: what serving the logs costs before the collector does anything with them;
- `status`: the command;
- `status` floor: the requests `status` sends (recorded from it once, then made again with
  their continue tokens) by a Python process that imports only the standard library and
  decodes each answer: what answering costs before the command's start-up and its own work;
- the same replay with each table asked for its cells alone (`includeObject=None`): how much of
  the server's answer is the rows' metadata;
- `--version`: the CLI's start-up alone.

Each with its wall time, its own CPU and the test cluster's CPU meanwhile (the API server runs
as threads of this process). On a 2-core machine a command cannot take less wall time than its
floor, nor less than (its own CPU + the server's CPU) / 2. Not a test; figures go to
BENCHMARKS.md with the commit measured.

    python benchmarks/collect_floor.py --pods 4096 --nodes 128 --repeat 5
"""

from __future__ import annotations

import argparse
import compileall
import gc
import importlib.util
import json
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
from benchmarks.collect_scale import _start_run, run_cli
from tests.cluster.cluster import Cluster

#: Makes the recorded requests of `status` again and decodes each answer: the standard library
#: only, so that what it costs is asking and reading, not importing.
_REPLAY = r"""
import http.client, json, sys, urllib.parse
host, port = sys.argv[1], int(sys.argv[2])
conn = http.client.HTTPConnection(host, port)
rows = 0
for line in sys.stdin:
    req = json.loads(line)
    query = dict(req["query"])
    while True:
        conn.request("GET", req["path"] + ("?" + urllib.parse.urlencode(query) if query else ""),
                     headers={"Accept": req["accept"]})
        resp = conn.getresponse()
        body = json.loads(resp.read())
        rows += len(body.get("rows") or body.get("items") or [])
        token = (body.get("metadata") or {}).get("continue")
        if not token or "limit" not in query:
            break
        query["continue"] = token
print(rows)
"""


def _timed(argv: list[str], stdin: str | None = None) -> tuple[float, float, str]:
    t0 = time.monotonic()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu = ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime
    return wall, cpu, proc.stdout


def _status_requests(c: Cluster, argv: list[str], env: dict[str, str]) -> list[dict[str, Any]]:
    """The GET requests `status` sends, recorded from a run of it through a logging proxy of
    the server's handler: path, query (less any continue token) and Accept."""
    from tests.cluster import apiserver

    seen: list[dict[str, Any]] = []
    handler = apiserver._Handler
    original = handler.do_GET

    def do_get(self: Any) -> None:
        parts = self.path.split("?", 1)
        from urllib.parse import parse_qsl

        query = [(k, v) for k, v in parse_qsl(parts[1] if len(parts) > 1 else "")]
        if not any(k == "continue" for k, _ in query):
            seen.append(
                {"path": parts[0], "query": query, "accept": self.headers.get("Accept", "*/*")}
            )
        original(self)

    handler.do_GET = do_get  # type: ignore[method-assign]
    try:
        run_cli(argv, env)
    finally:
        handler.do_GET = original  # type: ignore[method-assign]
    return seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=4096)
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--sizes", type=int, default=24, help="sizes per op in rank 0's results")
    ap.add_argument("--info-lines", type=int, default=200, help="NCCL INFO lines per pod")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--timeout-s", type=float, default=900)
    ap.add_argument("--concurrency", type=int, default=32)
    args = ap.parse_args()
    from tests.cluster import apiserver

    # As collect_scale.py does by default (its --as-is help says why).
    apiserver._Handler.disable_nagle_algorithm = True
    apiserver._Server.request_queue_size = 1024
    package = importlib.util.find_spec("nccl_k8s")
    for where in (package.submodule_search_locations or []) if package else []:
        compileall.compile_dir(where, quiet=1)

    figures: dict[str, Any] = {
        "pods": args.pods,
        "nodes": args.nodes,
        "cpus": os.cpu_count(),
        "concurrency": args.concurrency,
        "commit": commit(),
        "curl": subprocess.run(
            ["curl", "--version"], capture_output=True, text=True
        ).stdout.splitlines()[0],
        "load_before": os.getloadavg()[0],
    }
    n = args.pods
    with (
        Cluster(nodes=args.nodes, gpus_per_node=max(8, -(-n // args.nodes))) as c,
        tempfile.TemporaryDirectory() as tmp,
    ):
        store = c.store
        finished: set[str] = set()

        def on_change(etype: str, resource_: str, obj: dict[str, Any]) -> None:
            if resource_ == "pods" and obj.get("status", {}).get("phase") == "Succeeded":
                finished.add(obj["metadata"]["uid"])

        store.subscribe(on_change)
        ns, rid = f"scale-{n}", f"nccl-scale-{n:05d}"
        _start_run(store, ns, rid, n, args)
        deadline = time.monotonic() + args.timeout_s
        while len(finished) < n:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {len(finished)} of {n} pods finished")
            time.sleep(0.2)
        gc.freeze()

        env = dict(c.kubectl_env(), NCCL_K8S_RUNS_DIR=str(Path(tmp) / "runs"))
        base = ["-n", ns, "--kubeconfig", str(c.kubeconfig)]
        host, port = c.url.removeprefix("http://").rsplit(":", 1)
        pods, _ = store.list("pods", ns)
        names = sorted(p["metadata"]["name"] for p in pods)
        out = Path(tmp) / "curl"
        out.mkdir()
        config = Path(tmp) / "curl.cfg"
        config.write_text(
            "".join(
                f'url = "http://{host}:{port}/api/v1/namespaces/{ns}/pods/{p}/log'
                f'?container=bench"\noutput = "{out / p}"\n'
                for p in names
            )
        )
        curl = [
            "curl", "--silent", "--fail", "--parallel", "--parallel-immediate",
            "--parallel-max", str(args.concurrency), "--config", str(config),
        ]  # fmt: skip
        status_argv = ["status", "--run", rid, *base]
        requests = _status_requests(c, status_argv, env)
        figures["status_requests"] = [
            f"{r['path']}?{'&'.join(f'{k}={v}' for k, v in r['query'])} ({r['accept']})"
            for r in requests
        ]
        replay = [sys.executable, "-S", "-c", _REPLAY, host, port]
        stdin = "".join(json.dumps(r) + "\n" for r in requests)
        # The same, each table without its rows' metadata (includeObject=None: the cells alone,
        # which lack the labels and timestamps status reads rank and age from): how much of the
        # server's answer is the metadata.
        cells = "".join(
            json.dumps({**r, "query": [*r["query"], ("includeObject", "None")]}) + "\n"
            if "as=Table" in r["accept"]
            else json.dumps(r) + "\n"
            for r in requests
        )
        samples: dict[str, list[tuple[float, float, float]]] = {}

        def measure(name: str, thunk: Any) -> Any:
            cpu0 = time.process_time()
            wall, cpu, got = thunk()
            samples.setdefault(name, []).append((wall, cpu, time.process_time() - cpu0))
            return got

        for _ in range(args.repeat):
            measure("results", lambda: _cli(["results", "--run", rid, *base], env))
            measure("results_floor_curl", lambda: _timed(curl))
            got = sum(1 for _ in out.iterdir())
            assert got == n, f"curl wrote {got} logs of {n}"
            measure("status", lambda: _cli(status_argv, env))
            rows = measure("status_floor_replay", lambda: _timed(replay, stdin))
            assert int(rows) >= n, rows
            rows = measure("status_floor_cells_only", lambda: _timed(replay, cells))
            assert int(rows) >= n, rows
            measure("cli_version", lambda: _cli(["--version"], env))
        figures["load_after"] = os.getloadavg()[0]
        for name, vals in samples.items():
            for i, what in enumerate(("s", "cpu_s", "server_cpu_s")):
                xs = sorted(v[i] for v in vals)
                figures[f"{name}_{what}_median"] = round(xs[len(xs) // 2], 3)
            figures[f"{name}_s_rounds"] = [round(v[0], 3) for v in vals]
    print(json.dumps(figures, indent=1))


def _cli(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    wall, _rss, out, _err, cpu = run_cli(argv, env)
    return wall, cpu, out


if __name__ == "__main__":
    main()
