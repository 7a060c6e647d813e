"""Issue 13: deploy's phases as OpenTelemetry spans, sent over OTLP/HTTP when
OTEL_EXPORTER_OTLP_ENDPOINT is set, and nothing (no import, no cost) when it is not; the same
deploy's live summary on a terminal.

The end-to-end test sends the spans with the SDK's real OTLP/HTTP exporter to a receiver on
127.0.0.1 that decodes the protobuf as a collector would (opentelemetry-proto's
ExportTraceServiceRequest): what a Jaeger or Tempo behind an OpenTelemetry collector would get.
"""

from __future__ import annotations

import http.server
import io
import itertools
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from rich.console import Console
from tests.cluster.cluster import Cluster
from tests.e2e_helpers import cli

from nccl_k8s.cli import _deploy as cli_deploy
from nccl_k8s.errors import install_hint
from nccl_k8s.k8s.run import _tracing


@pytest.fixture(autouse=True)
def no_tracer() -> Iterator[None]:
    _tracing.shutdown()
    yield
    _tracing.shutdown()


# ---- no cost when unset, one line when the extra is missing ------------------------------------


def test_unset_endpoint_imports_no_opentelemetry() -> None:
    code = (
        "import sys\n"
        "from nccl_k8s.k8s.run import _collect, _deploy, _monitor, _tracing\n"
        "with _tracing.span('deploy', run_id='r') as s:\n"
        "    assert s is None\n"
        "p = _tracing.Phases(run_id='r', namespace='n'); p.enter('schedule'); p.close()\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert done.stderr == ""


def test_endpoint_set_without_the_extra_warns_once_and_sends_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    # What an environment without opentelemetry-exporter-otlp-proto-http sees: ImportError.
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    monkeypatch.setattr(_tracing, "_warned", False)
    with _tracing.span("deploy") as s:
        assert s is None
    assert _tracing.tracer() is None
    err = capsys.readouterr().err
    assert err == (
        "warning: OTEL_EXPORTER_OTLP_ENDPOINT is set but the tracing extra is not installed "
        f"({install_hint('tracing')}): no spans are sent\n"
    )


def test_phases_move_forward_only_and_a_failure_marks_the_phase_it_happened_in() -> None:
    exporter = InMemorySpanExporter()
    _tracing.use_exporter(exporter)
    with _tracing.span("deploy", run_id="r1", namespace="ns"):
        phases = _tracing.Phases(run_id="r1", namespace="ns")
        phases.enter("schedule")
        phases.enter("rendezvous")
        phases.enter("schedule")  # a pod replaced: still the rendezvous phase
        phases.close(RuntimeError("rank 1 (pod r1-1, node n1) exited with code 1\nmore"))
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert list(spans) == ["schedule", "rendezvous", "deploy"]
    root = spans["deploy"]
    for name in ("schedule", "rendezvous"):
        parent = spans[name].parent
        assert parent is not None and parent.span_id == root.context.span_id
    assert spans["rendezvous"].status.status_code is StatusCode.ERROR
    assert spans["rendezvous"].status.description == "rank 1 (pod r1-1, node n1) exited with code 1"
    assert spans["schedule"].status.status_code is StatusCode.UNSET
    attrs = dict(spans["rendezvous"].attributes or {})
    assert attrs["nccl_k8s.run_id"] == "r1" and attrs["k8s.namespace.name"] == "ns"


# ---- end to end: a real exporter, a local receiver ---------------------------------------------


class Receiver(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver (protobuf) on 127.0.0.1: every span it was sent."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.resources: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest.FromString(body)
        with self.server.lock:
            self.server.paths.append(self.path)
            for rs in request.resource_spans:
                attrs = {a.key: a.value.string_value for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    self.server.spans.extend(ss.spans)
                    self.server.resources.extend(attrs for _ in ss.spans)
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_deploy_and_results_send_their_phases_as_spans_and_the_terminal_shows_progress(
    cluster: Cluster,
    namespace: str,
    receiver: Receiver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns = namespace
    monkeypatch.setenv("NCCL_K8S_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{receiver.server_port}")
    rid = f"t-{uuid.uuid4().hex[:6]}"
    # stderr as a terminal: the live summary is drawn there.
    terminal = io.StringIO()
    monkeypatch.setattr(cli_deploy, "err", Console(file=terminal, force_terminal=True, width=200))
    deployed = cli(
        cluster, "deploy", "-n", ns, "--run-id", rid, "--world-size", "2",
        "--gpus-per-node", "1", "--", "--backend", "gloo", "-b", "1K", "-e", "4K",
        "-n", "2", "-w", "0",
    )  # fmt: skip
    assert deployed.exit_code == 0, deployed.output
    live = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal.getvalue())
    assert re.search(rf"run {rid}: 2 succeeded of 2 pods \(\d+s\)", live), live
    # What rank 0's log said while the run was followed (a log stream may trail the pods'
    # status by a moment: its last rows may come after the run ended).
    assert re.search(r"; rank 0: all_reduce up to [124] KiB", live), live
    assert re.search(rf"run {rid}: 2 running of 2 pods", live), live
    collected = cli(cluster, "results", "-n", ns, "--run", rid)
    assert collected.exit_code == 0, collected.output
    _tracing.shutdown()  # what the command's exit does: send what is queued

    assert set(receiver.paths) == {"/v1/traces"}
    spans = {s.name: s for s in receiver.spans}
    assert sorted(spans) == ["apply", "collect", "deploy", "rendezvous", "run", "schedule"]
    assert all(r["service.name"] == "nccl-k8s" for r in receiver.resources)
    root = spans["deploy"]
    assert root.parent_span_id == b""
    phases = [spans[n] for n in ("apply", "schedule", "rendezvous", "run")]
    for s in phases:
        assert s.trace_id == root.trace_id and s.parent_span_id == root.span_id, s.name
        assert root.start_time_unix_nano <= s.start_time_unix_nano
        assert s.end_time_unix_nano <= root.end_time_unix_nano
    for before, after in itertools.pairwise(phases):  # one after the other
        assert before.end_time_unix_nano <= after.start_time_unix_nano, after.name
    collect = spans["collect"]
    assert collect.trace_id != root.trace_id and collect.parent_span_id == b""
    for s in spans.values():
        attrs = {a.key: a.value for a in s.attributes}
        assert attrs["nccl_k8s.run_id"].string_value == rid, s.name
        assert attrs["k8s.namespace.name"].string_value == ns, s.name
        assert s.status.code != 2, s.name  # STATUS_CODE_ERROR
    attrs = {a.key: a.value for a in root.attributes}
    assert attrs["nccl_k8s.workload"].string_value == "job"
    assert attrs["nccl_k8s.nodes"].int_value == 2
