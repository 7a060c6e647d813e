"""Prometheus metrics of a running engine (--metrics-port), served with prometheus_client.

prometheus_client is optional: it is imported only when a port is asked for, and a run without
it still measures (asking for a port without it is a one-line error, exit 2). One server per
node: the process of local rank 0 serves, on one port, run-level figures when the node holds
global rank 0 and per-rank figures for the ranks of its own node. Those come from the per-rank
times and wrong counts every rank already receives on the control plane after each size, so
serving adds no collective, and nothing is written to the metrics while a timed loop runs (the
updates come after the cross-rank exchange, between sizes; a scrape is served by the server's own
thread). docs/metrics.md lists every metric and label.

Names follow Prometheus' conventions: an `nccl_k8s_` prefix, base units in the name (seconds,
bytes per second: busbw 1 GB/s is 1e9), `_total` for counters, `_info` for the run's versions.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from nccl_k8s.bench.config import METRICS_ADDR_ENV, ConfigError

#: A row's labels: op, dtype, redop, size (bytes, decimal), placement (out or in).
ROW_LABELS = ("op", "dtype", "redop", "size", "placement")
#: A rank's figures add its global rank and its node (the Kubernetes node, else the host).
RANK_LABELS = (*ROW_LABELS, "rank", "node")
SOAK_LABELS = ("op", "dtype", "redop", "size")
GB = 1e9


class Metrics:
    """What the engine reports; this base class reports nowhere (no --metrics-port, or a rank
    other than its node's local rank 0)."""

    enabled = False

    def run_started(
        self,
        *,
        info: Mapping[str, str],
        world: int,
        hosts: Mapping[int, str],
        nodes: Mapping[int, str],
        host: str,
    ) -> None:
        """The run's versions and shape: every rank's host and node; this process's `host` (the
        ranks there are the ones this server speaks for)."""

    def cell(
        self,
        labels: Sequence[str],
        *,
        time_s: float,
        algbw: float,
        busbw: float,
        rank_times: Sequence[float],
        rank_busbw: Sequence[float],
        rank_wrong: Sequence[int] | None,
    ) -> None:
        """One placement of one row: the combined figures (GB/s, seconds) and each rank's."""

    def soak_interval(
        self,
        labels: Sequence[str],
        *,
        iters: int,
        algbw: float,
        busbw: float,
        rank_wrong: Sequence[int] | None,
    ) -> None:
        """One soak report interval of op/dtype/redop/size."""

    def sweep_ended(self, *, ok: bool, duration_s: float) -> None:
        """A whole sweep ended (passed or failed)."""

    def close(self) -> None:
        """Stop serving."""


class Exporter(Metrics):
    """The metrics of one node's ranks on a prometheus_client registry served over HTTP."""

    enabled = True

    def __init__(self, prometheus_client: Any, registry: Any) -> None:
        pc = prometheus_client
        self.registry = registry
        self.server: Any = None
        self.mine: set[int] = set()
        self.nodes: dict[int, str] = {}
        self.run_level = False

        def gauge(name: str, doc: str, labels: Sequence[str] = ()) -> Any:
            return pc.Gauge(name, doc, list(labels), registry=registry)

        def counter(name: str, doc: str, labels: Sequence[str] = ()) -> Any:
            return pc.Counter(name, doc, list(labels), registry=registry)

        self.info = pc.Info(
            "nccl_k8s_run", "The run: id, versions of nccl-k8s, NCCL and torch.", registry=registry
        )
        self.world = gauge("nccl_k8s_world_size", "Ranks in the run.")
        self.busbw = gauge(
            "nccl_k8s_bus_bandwidth_bytes_per_second",
            "Bus bandwidth of the last measurement (nccl-tests' busbw, ranks' times combined "
            "per -a); soak mode: the last report interval's.",
            ROW_LABELS,
        )
        self.algbw = gauge(
            "nccl_k8s_algorithm_bandwidth_bytes_per_second",
            "Algorithm bandwidth (size / time) of the last measurement.",
            ROW_LABELS,
        )
        self.time = gauge(
            "nccl_k8s_op_time_seconds",
            "Time of one op in the last measurement, ranks' times combined per -a.",
            ROW_LABELS,
        )
        self.rank_time = gauge(
            "nccl_k8s_rank_op_time_seconds",
            "Time of one op on this rank in the last measurement.",
            RANK_LABELS,
        )
        self.rank_busbw = gauge(
            "nccl_k8s_rank_bus_bandwidth_bytes_per_second",
            "Bus bandwidth from this rank's own time in the last measurement.",
            RANK_LABELS,
        )
        self.wrong = counter(
            "nccl_k8s_wrong_elements",
            "Wrong elements the data checks found on this rank (0 while every check passes).",
            RANK_LABELS,
        )
        self.soak_iters = counter(
            "nccl_k8s_soak_iterations",
            "Ops issued in soak mode (--duration).",
            SOAK_LABELS,
        )
        self.soak_busbw = gauge(
            "nccl_k8s_soak_interval_bus_bandwidth_bytes_per_second",
            "Bus bandwidth of the last soak report interval.",
            SOAK_LABELS,
        )
        self.sweeps = counter("nccl_k8s_sweeps", "Sweeps ended, passed or failed.")
        self.failures = counter(
            "nccl_k8s_sweep_failures",
            "Sweeps that failed: wrong elements, an op that failed, or a --min-busbw miss.",
        )
        self.last_ok = gauge(
            "nccl_k8s_last_sweep_success", "1 when the last sweep passed, 0 when it failed."
        )
        self.last_end = gauge(
            "nccl_k8s_last_sweep_timestamp_seconds", "Unix time the last sweep ended."
        )
        self.last_duration = gauge(
            "nccl_k8s_last_sweep_duration_seconds", "How long the last sweep took."
        )
        # NaN, not 0, until a sweep has ended: a 0 would read as "the last sweep failed" (and
        # fire an alert on `== 0`) during every first sweep; NaN compares false.
        for unknown in (self.last_ok, self.last_end, self.last_duration):
            unknown.set(float("nan"))

    def run_started(
        self,
        *,
        info: Mapping[str, str],
        world: int,
        hosts: Mapping[int, str],
        nodes: Mapping[int, str],
        host: str,
    ) -> None:
        self.info.info(dict(info))
        self.world.set(world)
        self.nodes = dict(nodes)
        self.mine = {r for r, h in hosts.items() if h == host}
        self.run_level = 0 in self.mine

    def _rank_labels(self, labels: Sequence[str], rank: int) -> list[str]:
        return [*labels, str(rank), self.nodes.get(rank, "")]

    def cell(
        self,
        labels: Sequence[str],
        *,
        time_s: float,
        algbw: float,
        busbw: float,
        rank_times: Sequence[float],
        rank_busbw: Sequence[float],
        rank_wrong: Sequence[int] | None,
    ) -> None:
        if self.run_level:
            self.busbw.labels(*labels).set(busbw * GB)
            self.algbw.labels(*labels).set(algbw * GB)
            self.time.labels(*labels).set(time_s)
        for rank in sorted(self.mine):
            if rank >= len(rank_times):
                continue
            at = self._rank_labels(labels, rank)
            self.rank_time.labels(*at).set(rank_times[rank])
            self.rank_busbw.labels(*at).set(rank_busbw[rank] * GB)
            if rank_wrong is not None:
                self.wrong.labels(*at).inc(rank_wrong[rank])

    def soak_interval(
        self,
        labels: Sequence[str],
        *,
        iters: int,
        algbw: float,
        busbw: float,
        rank_wrong: Sequence[int] | None,
    ) -> None:
        if self.run_level:
            self.soak_iters.labels(*labels).inc(iters)
            self.soak_busbw.labels(*labels).set(busbw * GB)
            row = [*labels, "out"]
            self.busbw.labels(*row).set(busbw * GB)
            self.algbw.labels(*row).set(algbw * GB)
        if rank_wrong is not None:
            for rank in sorted(self.mine):
                if rank < len(rank_wrong):
                    self.wrong.labels(*self._rank_labels([*labels, "out"], rank)).inc(
                        rank_wrong[rank]
                    )

    def sweep_ended(self, *, ok: bool, duration_s: float) -> None:
        self.sweeps.inc()
        if not ok:
            self.failures.inc()
        else:
            self.failures.inc(0)  # the series exists from the first sweep on
        self.last_ok.set(1 if ok else 0)
        self.last_end.set(time.time())
        self.last_duration.set(duration_s)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def listen_addr(configured: str | None) -> str:
    """--metrics-addr, else $NCCL_K8S_METRICS_ADDR, else every IPv4 address."""
    return configured or os.environ.get(METRICS_ADDR_ENV) or "0.0.0.0"


def check(port: int, addr: str | None = None) -> None:
    """What serve() would refuse, found without serving (a launcher's check before any rank
    starts): ConfigError when prometheus_client is missing or addr:port cannot be bound."""
    import socket

    where = listen_addr(addr)
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        serve(port, addr)  # raises the one message
    try:
        infos = socket.getaddrinfo(where, port, type=socket.SOCK_STREAM)
        family, _, _, _, sockaddr = infos[0]
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(sockaddr)
    except OSError as exc:
        raise ConfigError(
            f"--metrics-port {port}: cannot listen on {where}:{port} ({exc.strerror or exc}): "
            "choose another port"
        ) from None


def serve(port: int, addr: str | None = None) -> Exporter:
    """Start the metrics server on addr:port; ConfigError (one line) when prometheus_client is
    missing or the port cannot be had."""
    where = listen_addr(addr)
    try:
        import prometheus_client as pc
    except ImportError:
        raise ConfigError(
            f"--metrics-port {port}: prometheus_client is not installed here: "
            "pip install prometheus_client (nccl-k8s's metrics extra), or leave --metrics-port out"
        ) from None
    # `_created` samples would double every series; nothing here needs them.
    pc.disable_created_metrics()  # type: ignore[no-untyped-call]
    registry = pc.CollectorRegistry()
    pc.ProcessCollector(registry=registry)
    exporter = Exporter(pc, registry)
    try:
        server, _ = pc.start_http_server(port, addr=where, registry=registry)
    except OSError as exc:
        raise ConfigError(
            f"--metrics-port {port}: cannot listen on {where}:{port} ({exc.strerror or exc}): "
            "choose another port"
        ) from None
    exporter.server = server
    return exporter


NULL = Metrics()

__all__ = [
    "NULL",
    "RANK_LABELS",
    "ROW_LABELS",
    "SOAK_LABELS",
    "Exporter",
    "Metrics",
    "check",
    "listen_addr",
    "serve",
]
