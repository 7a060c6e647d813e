"""Issue 5, acceptance 5: a results file round-trips, and bad files end in one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.errors import ResultsError
from nccl_k8s.results import SCHEMA_VERSION, Device, Row, Run, RunConfig, RunMeta, Summary
from nccl_k8s.results.schema import dump, dumps, load


def _run() -> Run:
    meta = RunMeta(
        run_id="nccl-20261203-050000-abcd",
        time="2026-12-03T05:00:00+00:00",
        nccl_k8s="0.1.0",
        torch="2.13.0",
        nccl="2.28.9",
        cuda="13.0",
        backend="nccl",
        world_size=2,
        nodes=1,
        gpus_per_node=2,
        gpu_model="NVIDIA H200",
        devices=[Device(rank=0, host="vm", pid=10, device=0, name="NVIDIA H200")],
        env={"NCCL_NVLS_ENABLE": "0"},
        config=RunConfig(minbytes=8, maxbytes=1 << 20, stepfactor=4, iters=20, ops=["all_reduce"]),
    )
    rows = [
        Row("all_reduce", 1 << 20, "out", 12.5, 83.89, 83.89, dtype="float", redop="sum",
            root=-1, count=262144, wrong=0, time_us_min=12.1, time_us_max=12.5),
        Row("all_reduce", 1 << 20, "in", 12.0, 87.38, 87.38, dtype="float", wrong=None),
    ]  # fmt: skip
    return Run(meta, rows, [Summary("all_reduce", 0, 85.6, True)], [{"interval": 1}])


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    run = _run()
    path = dump(run, tmp_path / "r" / "results.json")
    doc = json.loads(path.read_text())
    assert doc["schema"] == "nccl-k8s/results"
    assert doc["schema_version"] == SCHEMA_VERSION == 1
    back = load(path)
    assert back == run
    assert back.rows[1].wrong is None  # N/A survives as null, not 0


def _compare_exit(tmp_path: Path, content: str) -> tuple[int, str, str]:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    good = dump(_run(), tmp_path / "good.json")
    res = CliRunner().invoke(app, ["compare", str(bad), "--baseline", str(good)])
    return res.exit_code, res.stdout, res.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "is truncated", id="truncated"),
        pytest.param("# nccl-tests version 2.19.6\n#  size count\n", "is not a results file",
                     id="nccl-tests-text"),
        pytest.param('{"version": 3, "results": []}', "is not an nccl-k8s results file",
                     id="other-json"),
        pytest.param("", "is empty", id="empty"),
        pytest.param(None, "schema version 2", id="unknown-version"),
    ],
)  # fmt: skip
def test_bad_files_one_line_exit_2(tmp_path: Path, content: str | None, message: str) -> None:
    if content is None and message == "is truncated":
        content = dumps(_run())[:200]
    elif content is None:
        doc = json.loads(dumps(_run()))
        doc["schema_version"] = 2
        content = json.dumps(doc)
    code, stdout, stderr = _compare_exit(tmp_path, content)
    assert code == 2
    assert stdout == ""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    assert message in lines[0]
    assert "bad.json" in lines[0]
    assert "Traceback" not in stderr


def test_unknown_version_says_what_to_do(tmp_path: Path) -> None:
    doc = json.loads(dumps(_run()))
    doc["schema_version"] = 7
    (tmp_path / "v7.json").write_text(json.dumps(doc))
    with pytest.raises(ResultsError) as e:
        load(tmp_path / "v7.json")
    assert "schema version 7" in str(e.value)
    assert "reads version 1" in str(e.value)


def test_bad_field_is_named(tmp_path: Path) -> None:
    doc = json.loads(dumps(_run()))
    doc["rows"][1]["busbw"] = "fast"
    (tmp_path / "f.json").write_text(json.dumps(doc))
    with pytest.raises(ResultsError, match=r"rows\[1\]\.busbw should be a number, not str"):
        load(tmp_path / "f.json")
    del doc["rows"][0]["op"]
    (tmp_path / "g.json").write_text(json.dumps(doc))
    with pytest.raises(ResultsError, match=r"rows\[0\] has no 'op'"):
        load(tmp_path / "g.json")


def test_missing_file_and_unknown_run_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_K8S_RUNS_DIR", str(tmp_path / "runs"))
    res = CliRunner().invoke(app, ["compare", "nccl-20990101-000000-0000", "--min-busbw", "1"])
    assert res.exit_code == 2
    assert "no run 'nccl-20990101-000000-0000'" in res.stderr
    res = CliRunner().invoke(app, ["compare", str(tmp_path / "x.json"), "--min-busbw", "1"])
    assert res.exit_code == 2
    assert res.stderr.strip() == f"error: {tmp_path / 'x.json'}: no such results file"


def test_run_id_resolves_to_run_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_K8S_RUNS_DIR", str(tmp_path / "runs"))
    dump(_run(), tmp_path / "runs" / "nccl-20261203-050000-abcd" / "results.json")
    res = CliRunner().invoke(app, ["compare", "nccl-20261203-050000-abcd", "--min-busbw", "80"])
    assert res.exit_code == 0, res.output
    assert "all_reduce 85.63" in res.stdout
    res = CliRunner().invoke(app, ["compare", "nccl-20261203-050000-abcd", "--min-busbw", "90"])
    assert res.exit_code == 1
    assert "all_reduce below 90 GB/s" in res.stderr


def test_import_provenance_round_trips_and_closed_sets_are_checked(tmp_path: Path) -> None:
    from nccl_k8s.results import OpIdentification

    run = _run()
    run.meta.source = "nccl-tests"
    run.meta.op_identified = [
        OpIdentification("all_reduce", "table", "from the table: redop sum, root -1")
    ]
    run.meta.failure = "node0: Test CUDA failure common.cu:389 'an illegal memory access'"
    path = dump(run, tmp_path / "r.json")
    assert load(path) == run
    doc = json.loads(path.read_text())
    # A file written before these fields existed still loads, with them empty.
    del doc["meta"]["op_identified"], doc["meta"]["failure"]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    old = load(tmp_path / "old.json")
    assert (old.meta.op_identified, old.meta.failure) == ([], None)
    for field, value, message in (
        ("backend", "torch", "meta.backend is 'torch', expected one of nccl, gloo"),
        (
            "op_identified",
            [{"op": "all_reduce", "by": "guess"}],
            "meta.op_identified[0].by is 'guess', expected one of header, footer, command, "
            "file-name, table, text, unknown",
        ),
    ):
        bad = json.loads(path.read_text())
        bad["meta"][field] = value
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        with pytest.raises(ResultsError) as info:
            load(tmp_path / "bad.json")
        assert str(info.value) == f"{tmp_path / 'bad.json'}: results.{message}"
