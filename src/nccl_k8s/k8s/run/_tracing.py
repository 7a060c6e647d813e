"""Traces of what a deploy spends its time on: OpenTelemetry spans, exported over OTLP, when
OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set.

`deploy` is one trace: a root span `deploy` and, as its children, one span per phase in turn,
`apply` (creating the objects), `schedule` (until every pod is bound to a node), `rendezvous`
(from every pod bound until rank 0's log shows the ranks met: image pulls, container starts,
torchrun's rendezvous), `run` (until the run ends; a StatefulSet's until every rank runs). A
phase not seen (a run already past it when `wait` attaches) has no span. `wait` is the same without `apply`; `results` is a `collect` span. Each
carries the run id and namespace as attributes (`nccl_k8s.run_id`, `k8s.namespace.name`).

No cost when the variable is unset: opentelemetry is not imported, every call here returns at
once. The SDK and the OTLP/HTTP exporter are the `tracing` extra (`pip install '.[tracing]'` in
the clone); the exporter reads the standard OTEL_EXPORTER_OTLP_* variables (endpoint,
headers, timeout). With the variable set and the extra missing, one warning and no spans: a
tracing setup meant for other tools must not stop a benchmark.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from nccl_k8s.errors import install_hint

ENDPOINT_ENVS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
TRACER_NAME = "nccl_k8s"
#: A run's phases in the order they come; Phases only moves forward through them.
ORDER = ("schedule", "rendezvous", "run")

_tracer: Any = None
_provider: Any = None
_warned = False


def enabled() -> bool:
    """Whether spans are recorded (an endpoint is set, or a test installed an exporter)."""
    return _provider is not None or any(os.environ.get(v) for v in ENDPOINT_ENVS)


def use_exporter(exporter: Any) -> None:
    """Record spans into `exporter` (synchronously; tests pass the SDK's InMemorySpanExporter),
    whatever the environment says."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    global _provider, _tracer
    _provider = TracerProvider(resource=_resource())
    _provider.add_span_processor(SimpleSpanProcessor(exporter))
    _tracer = _provider.get_tracer(TRACER_NAME)


def shutdown() -> None:
    """Send what is still queued (the exporter's own timeout bounds it) and forget the tracer;
    run when the command ends."""
    global _provider, _tracer
    provider, _provider, _tracer = _provider, None, None
    if provider is not None:
        provider.shutdown()


def _resource() -> Any:
    from opentelemetry.sdk.resources import Resource

    from nccl_k8s import __version__

    return Resource.create({"service.name": "nccl-k8s", "service.version": __version__})


def tracer() -> Any:
    """The tracer, set up on first use; None when tracing is off or cannot be had."""
    global _provider, _tracer, _warned
    if _tracer is not None or not enabled():
        return _tracer
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        if not _warned:
            _warned = True
            var = next(v for v in ENDPOINT_ENVS if os.environ.get(v))
            print(
                f"warning: {var} is set but the tracing extra is not installed "
                f"({install_hint('tracing')}): no spans are sent",
                file=sys.stderr,
            )
        return None
    _provider = TracerProvider(resource=_resource())
    _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    atexit.register(shutdown)
    _tracer = _provider.get_tracer(TRACER_NAME)
    return _tracer


def _attributes(run_id: str | None, namespace: str | None, extra: dict[str, Any]) -> dict[str, Any]:
    attrs = {k: v for k, v in extra.items() if v is not None}
    if run_id:
        attrs["nccl_k8s.run_id"] = run_id
    if namespace:
        attrs["k8s.namespace.name"] = namespace
    return attrs


@contextlib.contextmanager
def span(
    name: str, *, run_id: str | None = None, namespace: str | None = None, **extra: Any
) -> Iterator[Any]:
    """A span around the block (the current span's child); the span, or None when off. An
    exception leaving the block is recorded on it and marks it failed."""
    t = tracer()
    if t is None:
        yield None
        return
    with t.start_as_current_span(name, attributes=_attributes(run_id, namespace, extra)) as s:
        yield s


def annotate(s: Any, *, run_id: str | None = None, namespace: str | None = None) -> None:
    """Name the run on span `s` once it is known (`results` resolves the latest run); nothing
    when `s` is None (tracing off)."""
    if s is not None:
        s.set_attributes(_attributes(run_id, namespace, {}))


class Phases:
    """Consecutive phases of one run as sibling spans under the current span: `enter(name)` ends
    the phase before and starts the next, `close(error)` ends the last."""

    def __init__(self, *, run_id: str, namespace: str) -> None:
        self.run_id, self.namespace = run_id, namespace
        self.current: str | None = None
        self._span: Any = None
        self._tracer = tracer()

    def enter(self, name: str) -> None:
        """Start phase `name`, ending the one before; a phase already passed is not entered
        again (a pod replaced mid-run does not make a second `schedule`)."""
        if self.current is not None and ORDER.index(name) <= ORDER.index(self.current):
            return
        self.close()
        self.current = name
        if self._tracer is not None:
            self._span = self._tracer.start_span(
                name, attributes=_attributes(self.run_id, self.namespace, {})
            )

    def close(self, error: BaseException | None = None) -> None:
        if self._span is None:
            return
        if error is not None:
            from opentelemetry.trace import Status, StatusCode

            self._span.record_exception(error)
            self._span.set_status(Status(StatusCode.ERROR, str(error).splitlines()[0][:200]))
        self._span.end()
        self._span = None


__all__ = [
    "ENDPOINT_ENVS",
    "ORDER",
    "Phases",
    "annotate",
    "enabled",
    "shutdown",
    "span",
    "tracer",
    "use_exporter",
]
