"""Scale figures of the test cluster (issue 3): N pods of a short command over M nodes.

Measures, on this machine: creating the pods (through the store, as the API server does after
decoding), all of them scheduled, all of them run to Succeeded by the process kubelet, and then
listing them through the store, over HTTP (GET /api/v1/namespaces/<ns>/pods) and with
`kubectl get pods`. Not a test: the numbers depend on the machine; record them in BENCHMARKS.md.

    python benchmarks/cluster_scale.py --nodes 128 --pods 1024
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.cluster.cluster import Cluster


def _wait(what: str, fn: object, timeout_s: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if fn():  # type: ignore[operator]
            return time.monotonic() - t0
        time.sleep(0.05)
    raise SystemExit(f"timed out after {timeout_s}s waiting for {what}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--pods", type=int, default=1024)
    ap.add_argument("--command", default="true", help="what each pod runs (sh -c)")
    ap.add_argument("--timeout-s", type=float, default=600)
    ap.add_argument(
        "--workload",
        choices=("pods", "indexed-job"),
        default="pods",
        help="bare pods, or one Indexed Job (completions = parallelism = --pods, one GPU each) "
        "with a headless Service as its pods' subdomain, the deployer's shape",
    )
    args = ap.parse_args()

    ns = "scale"
    figures: dict[str, Any] = {
        "nodes": args.nodes,
        "pods": args.pods,
        "workload": args.workload,
        "cpus": os.cpu_count() or 0,
    }
    t_start = time.monotonic()
    with Cluster(nodes=args.nodes, gpus_per_node=8) as c:
        figures["cluster_start_s"] = round(time.monotonic() - t_start, 3)
        store = c.store
        store.create("namespaces", {"metadata": {"name": ns}})
        finished: set[str] = set()  # counted from store events: polling lists would skew the run

        def on_change(etype: str, resource: str, obj: dict[str, Any]) -> None:
            if resource == "pods" and obj.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                finished.add(obj["metadata"]["uid"])

        store.subscribe(on_change)
        t0 = time.monotonic()
        container: dict[str, Any] = {
            "name": "main",
            "image": "busybox",
            "command": ["sh", "-c", args.command],
        }
        if args.workload == "pods":
            for i in range(args.pods):
                store.create(
                    "pods",
                    {
                        "metadata": {"name": f"p-{i:05d}", "namespace": ns, "labels": {"app": "s"}},
                        "spec": {"restartPolicy": "Never", "containers": [container]},
                    },
                )
        else:
            store.create(
                "services",
                {
                    "metadata": {"name": "ranks", "namespace": ns},
                    "spec": {
                        "clusterIP": "None",
                        "publishNotReadyAddresses": True,
                        "selector": {"job-name": "scale"},
                    },
                },
            )
            container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
            store.create(
                "jobs",
                {
                    "metadata": {"name": "scale", "namespace": ns},
                    "spec": {
                        "completionMode": "Indexed",
                        "completions": args.pods,
                        "parallelism": args.pods,
                        "template": {
                            "spec": {
                                "subdomain": "ranks",
                                "restartPolicy": "Never",
                                "containers": [container],
                            }
                        },
                    },
                },
            )
        figures["create_s"] = round(time.monotonic() - t0, 3)

        def count(pred: Callable[[dict[str, Any]], bool]) -> int:
            return sum(1 for p in store.list("pods", ns)[0] if pred(p))

        figures["all_scheduled_s"] = round(
            figures["create_s"]
            + _wait("scheduled", lambda: c.scheduler.bound >= args.pods, args.timeout_s),
            3,
        )
        _wait("finished", lambda: len(finished) >= args.pods, args.timeout_s)
        figures["all_finished_s"] = round(time.monotonic() - t0, 3)
        if args.workload == "indexed-job":

            def complete() -> bool:
                conds = store.get("jobs", ns, "scale")["status"].get("conditions") or []
                return any(x["type"] == "Complete" and x["status"] == "True" for x in conds)

            _wait("Job Complete", complete, args.timeout_s)
            figures["job_complete_s"] = round(time.monotonic() - t0, 3)
        figures["failed"] = count(lambda p: p["status"].get("phase") == "Failed")
        nodes_used = {p["spec"]["nodeName"] for p in store.list("pods", ns)[0]}
        figures["nodes_used"] = len(nodes_used)

        t1 = time.monotonic()
        items = store.list("pods", ns)[0]
        figures["list_store_s"] = round(time.monotonic() - t1, 3)
        assert len(items) == args.pods

        t1 = time.monotonic()
        with urllib.request.urlopen(f"{c.url}/api/v1/namespaces/{ns}/pods", timeout=60) as r:
            body = json.loads(r.read())
        figures["list_http_s"] = round(time.monotonic() - t1, 3)
        assert len(body["items"]) == args.pods

        kubectl = shutil.which("kubectl")
        if kubectl:
            t1 = time.monotonic()
            out = subprocess.run(
                [kubectl, "get", "pods", "-n", ns, "--no-headers"],
                capture_output=True,
                text=True,
                env=c.kubectl_env(),
                timeout=120,
                check=True,
            ).stdout
            figures["kubectl_get_pods_s"] = round(time.monotonic() - t1, 3)
            assert len(out.splitlines()) == args.pods

        t1 = time.monotonic()
        store.delete("namespaces", None, ns)
        figures["delete_namespace_s"] = round(time.monotonic() - t1, 3)
        t1 = time.monotonic()
    figures["cluster_stop_s"] = round(time.monotonic() - t1, 3)
    # Where the CPU went: this process (store, API server, scheduler, controllers, kubelet) or
    # the pods' processes (unshare, sh, mount, nsenter, the command itself).
    figures["cpu_self_s"] = round(sum(resource.getrusage(resource.RUSAGE_SELF)[:2]), 2)
    figures["cpu_pods_s"] = round(sum(resource.getrusage(resource.RUSAGE_CHILDREN)[:2]), 2)
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
