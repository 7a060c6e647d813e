"""`nodes check --push-to URL`: each node's last verdict and bus bandwidth, pushed to a Prometheus
Pushgateway when the check ends.

Why a push: the check is a batch job (a scheduled one is a CronJob's pod, gone before any
scrape), and "the only valid use case for the Pushgateway is for capturing the outcome of a
service-level batch job" (prometheus.io/docs/practices/pushing/); a Pushgateway "exists to
allow ephemeral and batch jobs to expose their metrics to Prometheus" (github.com/prometheus/
pushgateway, README). The alternatives do not fit: a `--metrics-port` is gone with the pod, and
the node exporter's textfile collector would need a file on every node.

One push per node with a verdict, each its own group (job `nccl-k8s-node-check`, grouping key
`node`): a push (PUT) replaces its group only, so the nodes a run did not test (left out by
--skip-checked-within or --max-nodes) keep their last verdict, which is what a fleet view needs;
the Pushgateway never forgets a group, so a node removed from the cluster is deleted by hand
(docs/metrics.md). Each metric carries the `node` label too, equal to the grouping key's (the
Pushgateway overwrites body labels that the URL path defines: its README, "URL", at commit
0898b43). The figures come from the check's own results, not from node labels.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, get_args
from urllib.parse import urlsplit

from nccl_k8s.errors import UsageError
from nccl_k8s.k8s.nodes._badnodes import NodeVerdict, Verdict
from nccl_k8s.k8s.nodes._checked import NodesChecked

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

JOB = "nccl-k8s-node-check"
VERDICT = "nccl_k8s_node_check_verdict"
BUSBW = "nccl_k8s_node_check_bus_bandwidth_bytes_per_second"
REFERENCE = "nccl_k8s_node_check_reference_bus_bandwidth_bytes_per_second"
TIMESTAMP = "nccl_k8s_node_check_timestamp_seconds"
#: Every metric a push holds (docs/metrics.md lists them; the dashboard reads them).
METRICS = (VERDICT, BUSBW, REFERENCE, TIMESTAMP)
#: Seconds one push may take: a check's verdicts are not held up by a slow gateway.
PUSH_TIMEOUT_S = 10.0


def push_url(flag: str, value: str) -> str:
    """A Pushgateway address, http(s)://HOST[:PORT][/PATH] or HOST:PORT (prometheus_client's
    forms), checked before the check starts: a typo is exit 2 now, not after an hour of tests."""
    parts = urlsplit(value if "://" in value else f"http://{value}")
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise UsageError(
            f'{flag} "{value}": expected a Pushgateway URL such as '
            "http://pushgateway.monitoring.svc:9091",
            key=flag,
        )
    return value


def node_registry(v: NodeVerdict, reference: float | None, at: float) -> CollectorRegistry:
    """One node's metrics: its verdict as a state set (1 for its verdict, 0 for the others), its
    busbw and the cluster reference it was judged against (bytes/s), and when."""
    from prometheus_client import CollectorRegistry, Gauge

    reg = CollectorRegistry()
    verdict = Gauge(VERDICT, "The node's last nodes check verdict (1: this one)",
                    ["node", "verdict"], registry=reg)  # fmt: skip
    for name in get_args(Verdict):
        verdict.labels(node=v.node, verdict=name).set(1 if v.verdict == name else 0)
    if v.score is not None:
        busbw = Gauge(BUSBW, "The node's bus bandwidth in its tests (median)", ["node"],
                      registry=reg)  # fmt: skip
        busbw.labels(node=v.node).set(v.score * 1e9)  # GB/s -> bytes/s
    if reference is not None:
        ref = Gauge(REFERENCE, "The cluster reference the node was judged against", ["node"],
                    registry=reg)  # fmt: skip
        ref.labels(node=v.node).set(reference * 1e9)
    ts = Gauge(TIMESTAMP, "Unix time of the node's last verdict", ["node"], registry=reg)
    ts.labels(node=v.node).set(at)
    return reg


@dataclasses.dataclass(frozen=True)
class Pushed:
    said: str
    """What was pushed, one line."""
    failed: list[str]
    """One line per node whose push failed (its verdict stands; the command fails)."""


def push_verdicts(url: str, checked: NodesChecked, *, at: float | None = None) -> Pushed:
    """Push every node's metrics (module docstring)."""
    from prometheus_client import push_to_gateway

    when = time.time() if at is None else at
    f = checked.findings
    failed: list[str] = []
    for v in f.nodes:
        try:
            push_to_gateway(url, job=JOB, registry=node_registry(v, f.reference, when),
                            grouping_key={"node": v.node}, timeout=PUSH_TIMEOUT_S)  # fmt: skip
        except OSError as e:  # urllib's URLError and HTTPError, a refused connection
            failed.append(f"could not push node {v.node}'s verdict to {url}: {e}")
    pushed = len(f.nodes) - len(failed)
    return Pushed(f"pushed the verdicts of {pushed} node(s) to {url} (job {JOB})", failed)


__all__ = ["JOB", "METRICS", "Pushed", "node_registry", "push_url", "push_verdicts"]
