"""Run one pod of a rendered `--launcher direct` Job the way the kubelet would, on this machine.

    python benchmarks/pod_entry.py run RENDERED.json --root DIR [--index 0] [--python-bin DIR]
    python benchmarks/pod_entry.py check POD.log [--ops N]

`run` reads the objects `nccl-k8s render -o json` printed, takes the Job's container (command,
args, env) and does what the kubelet does for completion index `--index`: the ConfigMap volumes
are written under DIR at their mount paths (the engine zipapp), env entries from the downward
API get the values a pod would see (spec.nodeName: this host; the job-completion-index
annotation: the index; status.podIP: 127.0.0.1; metadata.name: <job>-<index>), `$(VAR)` in env
values, command and args is expanded from the container's env (`$$` is a literal `$`), and env
values under a mount path point under DIR. The command then runs with this machine's environment
plus the container's (the image's environment plus the pod's), `python3` taken from
`--python-bin` first (a virtual environment without torch: the slim image). Its output is
streamed; the exit code is the pod's.

`check` reads such a pod's log as `deploy` does (nccl_k8s.results.lines.parse_sweeps on the
wrapper's results block) and passes when every op has rows, a summary with 0 out of bounds
and ok, and the meta line says the direct driver without torch. Issue 23; run on the GPU by
benchmarks/small_ab.sh (PARTS=pod).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import pathlib
import socket
import subprocess
import sys
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

# Kubernetes' $(VAR) expansion, the test cluster's kubelet's own (standard library only).
from tests.cluster.expansion import expand


def _field(path: str, job: str, index: int) -> str:
    if path == "spec.nodeName":
        return socket.gethostname()
    if path == "status.podIP":
        return "127.0.0.1"
    if path == "metadata.name":
        return f"{job}-{index}"
    if path == "metadata.annotations['batch.kubernetes.io/job-completion-index']":
        return str(index)
    raise SystemExit(f"pod_entry: no value for the downward API field {path!r}")


def pod(
    objs: list[dict[str, Any]], root: pathlib.Path, index: int
) -> tuple[list[str], dict[str, str]]:
    """The Job's container command and env for completion `index`, its volumes written."""
    jobs = [o for o in objs if o.get("kind") == "Job"]
    if len(jobs) != 1:
        raise SystemExit(f"pod_entry: expected one Job in the rendered objects, found {len(jobs)}")
    job = jobs[0]
    name = job["metadata"]["name"]
    spec = job["spec"]["template"]["spec"]
    container = spec["containers"][0]
    maps = {o["metadata"]["name"]: o for o in objs if o.get("kind") == "ConfigMap"}
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts: dict[str, pathlib.Path] = {}
    for mount in container.get("volumeMounts", []):
        source = volumes[mount["name"]].get("configMap")
        if source is None:
            continue  # emptyDir (/dev/shm): the machine's own
        where = root / mount["mountPath"].lstrip("/")
        where.mkdir(parents=True, exist_ok=True)
        cm = maps[source["name"]]
        for item in source.get("items", []):
            key, path = item["key"], where / item["path"]
            if key in cm.get("binaryData", {}):
                path.write_bytes(base64.b64decode(cm["binaryData"][key]))
            else:
                path.write_text(cm["data"][key])
        mounts[mount["mountPath"]] = where
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        if "valueFrom" in entry:
            value = _field(entry["valueFrom"]["fieldRef"]["fieldPath"], name, index)
        else:
            value = expand(entry.get("value", ""), env)
        # A path under a mount, alone or after a digest (`<sha256>  <path>`, the engine's).
        digest, sep, path = value.rpartition("  ")
        for mount_path, where in mounts.items():
            if path == mount_path or path.startswith(mount_path + "/"):
                value = digest + sep + str(where) + path[len(mount_path) :]
        env[entry["name"]] = value
    argv = [expand(a, env) for a in [*container.get("command", []), *container.get("args", [])]]
    return argv, env


def run(ns: argparse.Namespace) -> int:
    doc = json.loads(pathlib.Path(ns.rendered).read_text())
    objs = doc["items"] if isinstance(doc, dict) and "items" in doc else doc
    argv, env = pod(objs, pathlib.Path(ns.root), ns.index)
    full = {**os.environ, **env}
    if ns.python_bin:
        full["PATH"] = f"{ns.python_bin}{os.pathsep}{full.get('PATH', '')}"
    shown = [a if len(a) < 200 else f"<{len(a)} chars: the pod wrapper>" for a in argv]
    print(f"# pod_entry: index {ns.index}, command {shown}", flush=True)
    print(f"# pod_entry: pod env {json.dumps(env, sort_keys=True)}", flush=True)
    return subprocess.run(argv, env=full, check=False).returncode


def check(ns: argparse.Namespace) -> int:
    from nccl_k8s.results.lines import last_block, parse_sweeps

    text = pathlib.Path(ns.log).read_text(errors="replace")
    if last_block(text, "results") is None:
        print("pod_entry check: FAIL, no complete results block (the pod wrapper's) in the log")
        return 1
    sweep = parse_sweeps(text, origin=ns.log)[-1]
    problems = []
    if sweep.meta.torch is not None:
        problems.append(f"torch {sweep.meta.torch} was used")
    ops = sweep.ops()
    if ns.ops and len(ops) != ns.ops:
        problems.append(f"{len(ops)} ops with rows, expected {ns.ops}")
    by_op = {s.op: s for s in sweep.summaries}
    for op in ops:
        s = by_op.get(op)
        if s is None or s.out_of_bounds != 0 or not s.ok:
            problems.append(f"{op}: summary {s}")
    wrong = [r for r in sweep.rows if r.wrong]
    if wrong:
        problems.append(f"{len(wrong)} rows with wrong elements")
    verdict = "PASS" if not problems else "FAIL: " + "; ".join(problems)
    print(
        f"pod_entry check: {len(ops)} ops, {len(sweep.rows)} rows, "
        f"{sum(1 for s in sweep.summaries if s.out_of_bounds == 0 and s.ok)} summaries 0 OK, "
        f"world size {sweep.meta.world_size}, nccl {sweep.meta.nccl}, torch {sweep.meta.torch}: "
        f"{verdict}"
    )
    return 0 if not problems else 1


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="pod_entry.py")
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run")
    r.add_argument("rendered")
    r.add_argument("--root", required=True)
    r.add_argument("--index", type=int, default=0)
    r.add_argument("--python-bin")
    c = sub.add_parser("check")
    c.add_argument("log")
    c.add_argument("--ops", type=int, default=0)
    ns = ap.parse_args(argv)
    return run(ns) if ns.what == "run" else check(ns)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
