"""Issue 24, point 8: messages that said something other than what happened. Each test gives the
situation and checks the line a user reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cluster.cluster import Cluster
from tests.e2e_helpers import cli
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.errors import UsageError
from nccl_k8s.k8s.preflight._doctor import Doctored
from nccl_k8s.k8s.preflight._preflight import Check, Read, check_pod_security
from nccl_k8s.results import dump, import_file
from nccl_k8s.results.report import load_runs
from nccl_k8s.spec import build_run_spec, label_selector

DATA = Path(__file__).parent / "data"
OLD = DATA / "nccl-tests" / "handmade-old" / "v100x8_2nodes_error_column.txt"
# What an engine pod of a gloo run logs: the nccl-tests table, no NCCL line (NCCL is not used).
GLOO_LOG = """\
# nccl-k8s engine: backend gloo, 2 ranks
#  Rank  0 Group  0 Pid      7 on  u2-gloo-0 device  0 [cpu]
#       size         count      type   redop    root     time   algbw   busbw #wrong
        1024           256     float     sum      -1    151.2    0.01    0.01      0
"""


def _run_dir(tmp_path: Path, backend: str | None) -> Path:
    run = import_file(OLD)
    run.meta.backend = backend  # type: ignore[assignment]
    path = dump(run, tmp_path / "r1" / "results.json")
    (path.parent / "logs").mkdir()
    (path.parent / "logs" / "rank-0-r1-0.log").write_text(GLOO_LOG)
    return path


def test_report_of_a_gloo_run_says_nccl_was_not_used_not_to_set_nccl_debug(
    tmp_path: Path,
) -> None:
    (r,) = load_runs([str(_run_dir(tmp_path, "gloo"))])
    assert r.diagnosis is None
    assert r.diagnosis_note == (
        "a gloo run: NCCL was not used, so its logs have no NCCL lines to diagnose"
    )


def test_report_of_an_nccl_run_without_nccl_lines_still_says_to_set_nccl_debug(
    tmp_path: Path,
) -> None:
    (r,) = load_runs([str(_run_dir(tmp_path, "nccl"))])
    assert r.diagnosis_note.startswith("logs not diagnosed: ")
    assert "no NCCL log lines found: run with NCCL_DEBUG=INFO" in r.diagnosis_note


def test_doctor_says_skip_for_the_pod_security_check_of_an_absent_namespace() -> None:
    spec = build_run_spec(world_size="2", gpus_per_node="1", namespace="nope")
    c = check_pod_security(spec, "nope", Read(items=[]))
    assert c.status == "skip"
    assert c.message == (
        "not checked: namespace nope does not exist (a new one has no "
        "pod-security.kubernetes.io/enforce label; a cluster-wide default may apply); the pods "
        "of --security socket pass 'restricted'"
    )
    # Not readable (RBAC) stays a warning.
    assert check_pod_security(spec, "nope", Read(forbidden=True)).status == "warn"
    report = Doctored(
        server="https://api", namespace="nope", checks=[c, Check("api", "pass", "answers")]
    )
    assert report.ok
    assert (
        report.summary()
        == "doctor: 0 fail, 0 warn, 1 pass, 1 skipped (https://api, namespace nope)"
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["report", "{dir}"], "{dir} is a directory without results.json: expected a results "
         "file, a run's directory (runs/<id>/) or a run id"),
        (["compare", "{dir}", "--baseline", "{dir}"], "{dir} is a directory without "
         "results.json: expected a results file, a run's directory (runs/<id>/) or a run id"),
        (["status", "--kubeconfig", "{dir}"], '--kubeconfig "{dir}": is a directory: expected a '
         "kubeconfig file"),
        (["import", "{dir}"], "{dir} is a directory, not an nccl-tests output"),
        (["diagnose", "{dir}"], "{dir} is a directory, not a log file"),
    ],
    ids=["report", "compare", "kubeconfig", "import", "diagnose"],
)  # fmt: skip
def test_a_directory_given_as_a_file_is_called_a_directory(
    tmp_path: Path, args: list[str], line: str
) -> None:
    where = str(tmp_path)
    res = CliRunner().invoke(app, [a.replace("{dir}", where) for a in args])
    assert res.exit_code == 2, res.output
    assert res.stderr.splitlines() == ["error: " + line.replace("{dir}", where)]


@pytest.mark.parametrize(
    "text",
    ["gpu=h200", "gpu==h200,zone in (a,b)", "!spot", "a.b/c", "x notin (y)", "n>3,m<4", "k=",
     "gpu!=a100, zone"],
)  # fmt: skip
def test_kubectl_selectors_pass(text: str) -> None:
    assert label_selector("--selector", text) == text


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("gpu in (a", "gpu in needs values and a closing ')'"),
        ("a b", '"b" after "a" is not an operator'),
        ("x=y=z", 'unexpected "="'),
        ("gpu=h200,", 'unexpected ","'),
        ("n>x", "n> needs a whole number"),
        ("=v", '"=" is not a label key'),
        ("k=" + "v" * 64, "is not a label value"),
        ("x in ()", "x in needs values"),
    ],
)
def test_malformed_selectors_name_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(UsageError) as info:
        label_selector("--selector", text)
    assert str(info.value).startswith(f"--selector {text!r}: ".replace("'", '"'))
    assert why in str(info.value)
    # ... and the form expected: the selector's, or a label value's.
    assert str(info.value).endswith(("separated by commas", "ending with a letter or digit)"))


def test_a_malformed_selector_is_bad_input_exit_2_before_any_request(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app,
        ["nodes", "check", "--gpus-per-node", "1", "-l", "gpu in (a"],
        env={"KUBECONFIG": str(tmp_path / "none")},  # no cluster: nothing is asked of one
    )
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith('error: --selector "gpu in (a": gpu in needs values')


def test_a_selector_no_node_matches_says_so_and_how_many_nodes_there_are(cluster: Cluster) -> None:
    every = len(cluster.store.list("nodes", None)[0])
    res = cli(cluster, "nodes", "check", "--gpus-per-node", "1", "-l", "gpu=h999")
    assert res.exit_code == 2, res.output
    assert res.stderr.splitlines() == [
        f"error: nodes check: no node matches --selector 'gpu=h999' (the cluster has {every} "
        "nodes; `kubectl get nodes --show-labels` lists their labels)"
    ]


def test_a_selector_the_server_refuses_is_bad_input_too(cluster: Cluster) -> None:
    # kubectl's grammar allows `n>3`; this API server does not parse it and answers 400.
    res = cli(cluster, "nodes", "check", "--gpus-per-node", "1", "-l", "n>3")
    assert res.exit_code == 2, res.output
    (line,) = res.stderr.splitlines()
    assert line.startswith("error: --selector 'n>3': the API server refused it: ")
    assert "400" in line
