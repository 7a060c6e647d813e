"""`python -m tests.cluster`: run a test cluster by hand until Ctrl-C (or SIGTERM).

Prints one line containing `ready` (with the URL and kubeconfig) once kubectl can talk to it, so
scripts can wait for that line; on SIGINT/SIGTERM it stops every pod process, unmounts and
removes its temp dir before exiting.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from tests.cluster.cluster import Cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.cluster",
        description="Run a local Kubernetes-like test cluster until SIGINT/SIGTERM.",
    )
    parser.add_argument("--nodes", type=int, default=4, help="number of nodes (default 4)")
    parser.add_argument(
        "--gpus-per-node", type=int, default=8, help="nvidia.com/gpu per node (default 8)"
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        required=True,
        help="where to write the kubeconfig for kubectl (KUBECONFIG=PATH kubectl get nodes)",
    )
    parser.add_argument(
        "--image-pull-fail-pattern",
        default=None,
        help="images whose name matches this regex fail with ErrImagePull",
    )
    parser.add_argument(
        "--log-max-size",
        type=int,
        default=None,
        metavar="BYTES",
        help="rotate container logs at this size, as the kubelet's containerLogMaxSize "
        "(default: no rotation)",
    )
    parser.add_argument(
        "--log-max-files",
        type=int,
        default=5,
        metavar="N",
        help="container log files kept with --log-max-size, the current one included (default 5)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every part's work")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    if args.nodes < 1 or args.gpus_per_node < 0:
        parser.error("--nodes must be >= 1 and --gpus-per-node >= 0")
    if not _ours_or_absent(args.kubeconfig):
        parser.error(
            f"--kubeconfig {args.kubeconfig}: the file exists and is not a test cluster's "
            "kubeconfig; give a new path (e.g. /tmp/kc) so your real one is not overwritten"
        )

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    with Cluster(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        kubeconfig=args.kubeconfig,
        image_pull_fail_pattern=args.image_pull_fail_pattern,
        log_max_bytes=args.log_max_size,
        log_max_files=args.log_max_files,
    ) as cluster:
        print(
            f"cluster ready: {cluster.url} ({args.nodes} nodes x {args.gpus_per_node} GPUs); "
            f"KUBECONFIG={cluster.kubeconfig} workdir={cluster.workdir}",
            flush=True,
        )
        stop.wait()
        print("stopping cluster", file=sys.stderr, flush=True)
    return 0


def _ours_or_absent(path: Path) -> bool:
    """Overwrite only a kubeconfig a test cluster wrote (its context is nccl-k8s-test-<k>)."""
    if not path.exists():
        return True
    try:
        text = path.read_text()
    except OSError:
        return False
    return not text.strip() or "current-context: nccl-k8s-test-" in text


if __name__ == "__main__":
    sys.exit(main())
