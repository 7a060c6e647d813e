"""Issue 35, expected floors: the table (every row known, sourced, strict in what it applies
to), `--min-busbw auto` (resolved for render/deploy, or one exit-2 line saying for what no
floor is known), the nodes-check verdict against a floor (the whole cluster, never each node),
and docs/floors.md generated from the table."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.errors import UsageError
from nccl_k8s.k8s.nodes._badnodes import Findings
from nccl_k8s.k8s.nodes._checked import NodesChecked
from nccl_k8s.k8s.nodes._floor import judge_floor, pair_floor
from nccl_k8s.k8s.nodes._level import PairResult
from nccl_k8s.results.floors import (
    FLOORS,
    FloorQuery,
    floor_for,
    with_floor,
    with_floors_table,
)
from nccl_k8s.spec import build_run_spec
from nccl_k8s.spec.platforms import PLATFORMS

DOCS = Path(__file__).resolve().parent.parent / "docs" / "floors.md"
G = 1 << 30


def _p5(**over: object) -> FloorQuery:
    base = dict(platform="eks-efa", machine="p5.48xlarge", op="all_reduce", nodes=2,
                gpus_per_node=8, size_bytes=1 * G, algo=None)  # fmt: skip
    return FloorQuery(**{**base, **over})  # type: ignore[arg-type]


def test_docs_floors_table_is_generated_from_the_table() -> None:
    doc = DOCS.read_text(encoding="utf-8")
    assert with_floors_table(doc) == doc, "run: python -m nccl_k8s.results.floors docs/floors.md"
    for row in FLOORS:
        assert row.source in doc


def test_every_row_names_a_known_platform_and_machine_and_its_source() -> None:
    assert FLOORS
    for row in FLOORS:
        platform = PLATFORMS[row.platform]
        assert platform.instance(row.machine) is not None, row
        assert row.source.startswith("https://github.com/"), row
        assert row.says and row.derived and row.floor_gbps > 0, row
        # A source pinned to a commit: what was read stays what the row cites.
        assert "/blob/" in row.source and len(row.source.split("/blob/")[1].split("/")[0]) == 40
    with pytest.raises(ValueError, match="unknown platform/machine"):
        dataclasses.replace(FLOORS[0], machine="a9-imaginary-8g")


def test_published_thresholds_are_taken_as_they_are() -> None:
    by = {(f.platform, f.machine): f for f in FLOORS}
    assert by["gke-tcpxo", "a3-megagpu-8g"].floor_gbps == 150  # CHS a3plus.yaml
    assert by["gke-tcpxo", "a3-megagpu-8g"].op == "all_gather"
    assert by["aks-ib", "Standard_ND96isr_H100_v5"].floor_gbps == 460  # NHC conf
    assert by["aks-ib", "Standard_ND96isr_H100_v5"].nodes == 1
    # A healthy measurement (not a threshold) is taken with the stated margin.
    assert by["eks-efa", "p5.48xlarge"].floor_gbps == pytest.approx(436.95 * 0.8, abs=0.05)


def test_a_floor_applies_only_to_a_run_like_its_source() -> None:
    row = floor_for(_p5())
    assert row is not None and row.machine == "p5.48xlarge" and row.floor_gbps == 349.6
    assert floor_for(_p5(size_bytes=16 * G)) == row  # larger sizes reach it too
    # Ring on two nodes measures the NIC, below what NCCL's choice (Tree/NVLS) reaches.
    assert floor_for(_p5(algo="Ring")) is None
    assert floor_for(_p5(size_bytes=256 << 20)) is None  # smaller sizes read less
    assert floor_for(_p5(nodes=4)) is None
    assert floor_for(_p5(gpus_per_node=4)) is None
    assert floor_for(_p5(op="all_gather")) is None
    assert floor_for(_p5(machine=None)) is None
    assert floor_for(_p5(platform="generic", machine=None)) is None


def _spec(*engine: str, **kw: object):  # type: ignore[no-untyped-def]
    base = dict(world_size=16, gpus_per_node=8, platform="eks-efa", instance_type="p5.48xlarge",
                run_id="floor")  # fmt: skip
    return build_run_spec(engine_args=engine, **{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize("form", [("--min-busbw", "auto"), ("--min-busbw=auto",)])
def test_min_busbw_auto_resolves_to_the_platform_floor(form: tuple[str, ...]) -> None:
    spec = _spec("-b", "1G", "-e", "4G", *form)  # the spec accepts auto, keeps it
    assert "auto" in "".join(spec.engine_args)
    resolved, note = with_floor(spec)
    assert "349.6" in " ".join(resolved.engine_args) and "auto" not in "".join(resolved.engine_args)
    assert "349.6 GB/s" in note and "awsome-distributed-training" in note
    given = _spec("-b", "1G", "-e", "1G", "--min-busbw", "3")
    assert with_floor(given) == (given, "")


@pytest.mark.parametrize(
    ("spec_kw", "engine", "expected"),
    [
        (
            {"platform": "generic", "instance_type": None},
            ("-b", "1G", "-e", "1G"),
            "none for generic",
        ),
        ({}, ("-b", "8M", "-e", "1G"), "sizes >= 8M"),  # the average over small sizes: no floor
        ({"world_size": 32}, ("-b", "1G", "-e", "1G"), "4 nodes"),
        (
            {},
            ("-b", "1G", "-e", "1G", "--ops", "all_reduce,all_gather"),
            "a floor is per collective",
        ),
        ({}, ("-b", "1G", "-e", "1G", "--backend", "gloo"), "gloo backend"),
    ],
)
def test_min_busbw_auto_without_a_floor_says_for_what(
    spec_kw: dict[str, object], engine: tuple[str, ...], expected: str
) -> None:
    with pytest.raises(UsageError) as e:
        with_floor(_spec(*engine, "--min-busbw", "auto", **spec_kw))
    assert expected in str(e.value)
    assert "--min-busbw GBPS" in str(e.value)


def test_render_resolves_min_busbw_auto_or_exits_2() -> None:
    shape = ["--world-size", "16", "--gpus-per-node", "8", "--run-id", "fl"]
    ok = CliRunner().invoke(
        app, ["render", *shape, "--platform", "eks-efa", "--instance-type", "p5.48xlarge",
              "--", "-b", "1G", "-e", "1G", "--min-busbw", "auto"],
    )  # fmt: skip
    assert ok.exit_code == 0, ok.output
    args = [
        a
        for doc in yaml.safe_load_all(ok.stdout)
        if doc and doc["kind"] == "Job"
        for c in doc["spec"]["template"]["spec"]["containers"]
        for a in c.get("args", []) + c.get("command", [])
    ]
    assert any("349.6" in a for a in args) and not any("--min-busbw auto" in a for a in args)
    refused = CliRunner().invoke(app, ["render", *shape, "--", "--min-busbw", "auto"])
    assert refused.exit_code == 2, refused.output
    assert "the platform is not known here (--platform auto)" in refused.output
    generic = CliRunner().invoke(
        app, ["render", *shape, "--platform", "generic", "--", "--min-busbw", "auto"]
    )
    assert generic.exit_code == 2, generic.output
    assert "no expected floor is known for generic" in generic.output


def _findings(reference: float | None) -> Findings:
    return Findings(reference, 0.9, [], [])


def test_a_cluster_below_its_floor_is_one_finding_not_every_node() -> None:
    results = [PairResult("n0", "n1", 90.0), PairResult("n2", "n3", 95.0)]
    below = judge_floor(_findings(92.0), results, (150.0, FLOORS[1]))
    assert below.below and below.measured == 92.0
    assert below.finding.startswith("the whole cluster is below the floor: 92 GB/s < 150 GB/s")
    assert FLOORS[1].source in below.finding
    above = judge_floor(_findings(160.0), results, (150.0, None))
    assert not above.below and "given by --floor" in above.finding
    # No confirmed level: the best test decides; no pair reached the floor, so no subset did.
    assert judge_floor(_findings(None), results, (100.0, None)).measured == 95.0
    assert judge_floor(_findings(None), results, (100.0, None)).below
    assert not judge_floor(_findings(None), results, (90.0, None)).below
    # Nothing measured: failures, judged by the evidence rules, not "below the floor".
    failed = [PairResult("n0", "n1", None, error="crashed")]
    assert not judge_floor(_findings(None), failed, (10.0, None)).below
    checked = NodesChecked(["n0", "n1"], {}, [], _findings(92.0), [], False, floor=below)
    assert checked.flagged == []  # no node is named for the cluster's level
    assert checked.to_dict()["floor"]["below"] is True


def test_pair_tests_floor_given_or_from_the_table_or_why_not() -> None:
    spec = _spec("--ops", "all_gather", "-b", "2G", "-e", "8G", world_size=16,
                 platform="gke-tcpxo", instance_type="a3-megagpu-8g")  # fmt: skip
    got = pair_floor(spec, None)
    assert not isinstance(got, str) and got[1] is not None
    assert (got[0], got[1].machine) == (150, "a3-megagpu-8g")
    assert pair_floor(spec, 12.5) == (12.5, None)
    ring = dataclasses.replace(spec, env=(("NCCL_ALGO", "Ring"),))
    why = pair_floor(ring, None)
    assert isinstance(why, str) and "NCCL_ALGO=Ring" in why and "--floor GBPS" in why
    gloo = _spec("--backend", "gloo", world_size=2, gpus_per_node=1, platform="generic",
                 instance_type=None)  # fmt: skip
    assert "gloo" in str(pair_floor(gloo, None))


@pytest.mark.parametrize("value", ["0", "-5"])
def test_nodes_check_floor_must_be_a_positive_bandwidth(value: str) -> None:
    got = CliRunner().invoke(app, ["nodes", "check", "--floor", value])
    assert got.exit_code == 2, got.output
    assert f"--floor {float(value):g}: expected a bus bandwidth in GB/s > 0" in got.output
