"""Issue 13: the engine's Prometheus metrics, scraped from a real local run, and the Grafana
dashboard's queries checked against what that run exports.

One local run (2 gloo ranks, a soak of two sizes, two sweeps with a pause between them) serves
the module: it is scraped over HTTP every 0.1 s while it runs, as Prometheus would scrape it.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests._helpers import free_port, held_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "dashboards" / "nccl-k8s.json"


def scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return str(r.read().decode())
    except OSError:
        return None


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


class Scraped:
    def __init__(self) -> None:
        self.during_soak: str | None = None
        """The first scrape holding a soak interval's bandwidth."""
        self.after_sweep: str | None = None
        """The last scrape after the first sweep ended (every metric is set by then)."""
        self.exit_code: int | None = None
        self.stdout = ""
        self.stderr = ""


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env["NCCL_K8S_RUNS_DIR"] = str(tmp_path_factory.mktemp("runs"))
    args = [
        "run", "--run-id", "scraped-1", "--nproc", "2", "-b", "1K", "-e", "2K", "-f", "2",
        "--duration", "1", "--report-interval", "0.25", "--sweeps", "2", "--sweep-interval", "2",
        "--metrics-port", str(port), "--metrics-addr", "127.0.0.1", "-T", "60",
    ]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "nccl_k8s.cli.main", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    got = Scraped()
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            text = scrape(port)
            if text:
                interval = re.search(r"^nccl_k8s_soak_interval_bus\S+\{", text, re.M)
                if got.during_soak is None and interval:
                    got.during_soak = text
                if re.search(r"^nccl_k8s_sweeps_total [1-9]", text, re.M):
                    got.after_sweep = text
            time.sleep(0.1)
        got.stdout, got.stderr = proc.communicate(timeout=60)
        got.exit_code = proc.returncode
        yield got
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_local_soak_is_scraped_while_it_runs(scraped: Scraped) -> None:
    assert scraped.exit_code == 0, scraped.stderr
    text = scraped.during_soak
    assert text is not None, "no scrape during the soak showed its bandwidth"
    # Prometheus' text format, with the metric types.
    assert "# TYPE nccl_k8s_bus_bandwidth_bytes_per_second gauge" in text
    assert "# TYPE nccl_k8s_soak_iterations_total counter" in text
    assert "# TYPE nccl_k8s_wrong_elements_total counter" in text
    got = samples(text)
    busbw = got["nccl_k8s_bus_bandwidth_bytes_per_second"]
    assert {labels["op"] for labels, _ in busbw} == {"all_reduce"}
    assert all(value > 0 for _, value in busbw)
    assert all(labels["dtype"] == "float" and labels["redop"] == "sum" for labels, _ in busbw)
    assert got["nccl_k8s_world_size"] == [({}, 2.0)]
    iters = got["nccl_k8s_soak_iterations_total"]
    assert iters and all(value >= 1 for _, value in iters)
    info = got["nccl_k8s_run_info"][0][0]
    assert info["backend"] == "gloo" and info["torch_version"].startswith("2.")
    assert info["run_id"] == "scraped-1"  # the id `results`/`report` know the run by
    # Inside the first sweep nothing is known of a last sweep: NaN, never a 0 that reads "failed".
    if got["nccl_k8s_sweeps_total"] == [({}, 0.0)]:
        assert math.isnan(got["nccl_k8s_last_sweep_success"][0][1])
    else:  # the scrape came late (a loaded machine): the first sweep's verdict is there
        assert got["nccl_k8s_last_sweep_success"] == [({}, 1.0)]


def test_after_a_sweep_every_rank_and_the_sweep_counters_are_there(scraped: Scraped) -> None:
    text = scraped.after_sweep
    assert text is not None, "no scrape between the two sweeps"
    got = samples(text)
    assert got["nccl_k8s_sweeps_total"][0][1] >= 1
    assert got["nccl_k8s_sweep_failures_total"] == [({}, 0.0)]
    assert got["nccl_k8s_last_sweep_success"] == [({}, 1.0)]
    # Per rank: both ranks of this node, each with its node (this host) and a bandwidth.
    ranks = got["nccl_k8s_rank_bus_bandwidth_bytes_per_second"]
    assert {labels["rank"] for labels, _ in ranks} == {"0", "1"}
    assert {labels["size"] for labels, _ in ranks} == {"1024", "2048"}
    assert len({labels["node"] for labels, _ in ranks}) == 1 and all(v > 0 for _, v in ranks)
    # Every check passed: the wrong-element counters exist, at 0.
    wrong = got["nccl_k8s_wrong_elements_total"]
    assert {labels["rank"] for labels, _ in wrong} == {"0", "1"}
    assert all(v == 0 for _, v in wrong)


#: PromQL words that are not metric names.
_PROMQL = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk",
    "bottomk", "quantile", "count_values", "group", "rate", "irate", "increase", "delta",
    "label_values", "histogram_quantile", "time", "vector", "scalar", "abs", "clamp_min",
}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana label_values query) reads."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r",\s*[a-z_]+\s*\)", ")", expr)  # label_values(metric, label)
    names = set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", expr))
    return {n for n in names if n not in _PROMQL and not n.startswith("__")}


def test_metric_names_reads_a_query_as_prometheus_would() -> None:
    expr = (
        'max by (op, size) ((nccl_k8s_bus_bandwidth_bytes_per_second{op=~"$op"}) * '
        'on(instance, job) group_left(run_id) nccl_k8s_run_info{run_id=~"$run"})'
    )
    assert metric_names(expr) == {
        "nccl_k8s_bus_bandwidth_bytes_per_second",
        "nccl_k8s_run_info",
    }
    assert metric_names("sum(increase(nccl_k8s_sweeps_total[$__rate_interval]))") == {
        "nccl_k8s_sweeps_total"
    }
    assert metric_names("label_values(nccl_k8s_run_info, run_id)") == {"nccl_k8s_run_info"}


def test_every_dashboard_query_reads_only_metrics_the_engine_exports(scraped: Scraped) -> None:
    assert scraped.after_sweep is not None
    # ... and what `nodes check --push-to` pushes (issue 38: the fleet row).
    exported = set(samples(scraped.after_sweep)) | set(samples(node_check_push()))
    doc = json.loads(DASHBOARD.read_text())
    queries: list[tuple[str, str]] = []

    def walk(panels: list[dict[str, object]]) -> None:
        for panel in panels:
            for target in panel.get("targets") or []:  # type: ignore[attr-defined]
                queries.append((str(panel["title"]), str(target["expr"])))
            walk(panel.get("panels") or [])  # type: ignore[arg-type]

    walk(doc["panels"])
    for var in doc["templating"]["list"]:
        if var["type"] == "query":
            queries.append((f"variable {var['name']}", var["query"]["query"]))
    assert len(queries) >= 10
    titles = " ".join(t for t, _ in queries)
    assert "per node" in titles and "by op and size" in titles
    read = set()
    for title, expr in queries:
        names = metric_names(expr)
        assert names, f"{title}: no metric in {expr!r}"
        missing = names - exported
        assert not missing, f"{title}: {sorted(missing)} not in a scrape of a real run"
        read |= names
    # The dashboard shows what matters: bandwidth (run and per rank), checks, sweeps, soak.
    assert {
        "nccl_k8s_bus_bandwidth_bytes_per_second",
        "nccl_k8s_rank_bus_bandwidth_bytes_per_second",
        "nccl_k8s_wrong_elements_total",
        "nccl_k8s_sweeps_total",
        "nccl_k8s_last_sweep_success",
        "nccl_k8s_soak_interval_bus_bandwidth_bytes_per_second",
        "nccl_k8s_node_check_verdict",
        "nccl_k8s_node_check_bus_bandwidth_bytes_per_second",
    } <= read
    heatmap = next(p for p in doc["panels"] if p["type"] == "heatmap")
    assert "by (node)" in heatmap["targets"][0]["expr"]


def test_docs_list_every_metric_a_run_exports_and_no_other(scraped: Scraped) -> None:
    assert scraped.during_soak is not None and scraped.after_sweep is not None
    exported = {
        name
        for text in (scraped.during_soak, scraped.after_sweep)
        for name in samples(text)
        if name.startswith("nccl_k8s_") and not name.endswith("_created")
    }
    table = (Path(__file__).parent.parent / "docs" / "metrics.md").read_text()
    documented = set(re.findall(r"^\| `(nccl_k8s_\w+)` \|", table, re.M))
    pushed = {n for n in samples(node_check_push()) if n.startswith("nccl_k8s_")}
    assert documented == exported | pushed


def node_check_push() -> str:
    """What `nodes check --push-to` pushes for a good node with a busbw (the text a
    Pushgateway receives)."""
    from prometheus_client import generate_latest

    from nccl_k8s.k8s.nodes._badnodes import NodeVerdict
    from nccl_k8s.k8s.nodes._metrics import node_registry

    return generate_latest(node_registry(NodeVerdict("n", "good", 20.0, ""), 20.0, 1.0)).decode()


def _hide_prometheus_client(tmp_path: Path) -> dict[str, str]:
    shadow = tmp_path / "shadow" / "prometheus_client"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("hidden for this test")\n')
    return {**os.environ, "PYTHONPATH": str(shadow.parent), "NCCL_K8S_RUNS_DIR": str(tmp_path)}


def test_without_prometheus_client_a_port_is_refused_and_a_run_still_measures(
    tmp_path: Path,
) -> None:
    env = _hide_prometheus_client(tmp_path)
    base = [sys.executable, "-m", "nccl_k8s.bench", "--backend", "gloo", "-b", "8", "-e", "8"]
    asked = subprocess.run(
        [*base, "--metrics-port", str(free_port())], env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert asked.returncode == 2, asked.stderr
    assert (
        asked.stderr.strip().splitlines()[-1].startswith("error: --metrics-port ")
        and "prometheus_client is not installed here" in asked.stderr
    )
    plain = subprocess.run(base, env=env, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    assert "# Out of bounds values : 0 OK" in plain.stdout
    # `nccl-k8s run` says it before any rank starts.
    run = subprocess.run(
        [sys.executable, "-m", "nccl_k8s.cli.main", "run", "--no-save", "--metrics-port", "9"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2 and "prometheus_client is not installed here" in run.stderr
    assert run.stderr.count("\n") == 1


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with held_port() as port:
        run = subprocess.run(
            [sys.executable, "-m", "nccl_k8s.cli.main", "run", "--no-save", "--metrics-port",
             str(port), "--metrics-addr", "127.0.0.1"],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "NCCL_K8S_RUNS_DIR": str(tmp_path)},
        )  # fmt: skip
    assert run.returncode == 2
    assert run.stderr == (
        f"error: --metrics-port {port}: cannot listen on 127.0.0.1:{port} (Address already in "
        "use): choose another port\n"
    )
