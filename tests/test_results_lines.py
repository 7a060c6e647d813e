"""The engine's NCCL_K8S_RESULT lines, found in any text that holds them, become a Run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nccl_k8s.errors import ResultsError
from nccl_k8s.results import collect_results, load, parse_result_lines

PREFIX = "NCCL_K8S_RESULT "


def line(kind: str, **fields: Any) -> str:
    return PREFIX + json.dumps({"v": 1, "kind": kind, **fields}, separators=(",", ":"))


META: dict[str, Any] = {
    "time": "2026-12-03T05:00:00+00:00",
    "nccl_k8s": "0.1.0",
    "torch": "2.13.0",
    "nccl": "2.28.9",
    "cuda": "13.0",
    "backend": "nccl",
    "world_size": 16,
    "nodes": 2,
    "local_world_size": 8,
    "gpu_model": None,
    "devices": [
        {"rank": r, "host": f"job-{r // 8}", "pid": 100 + r, "device": r % 8, "name": "NVIDIA H200"}
        for r in range(16)
    ],
    "env": {"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5"},
    "run_id": "nccl-20261203-050000-abcd",
    "config": {
        "minbytes": 8, "maxbytes": 1 << 30, "stepbytes": 1048576, "stepfactor": 2, "iters": 20,
        "warmup": 5, "check": 1, "dtype": "float", "redop": "sum", "root": -1, "blocking": False,
        "average": 1, "graph": 0, "ops": ["all_reduce"], "duration_s": 0,
    },
}  # fmt: skip


def row(size: int, placement: str, time_us: float, wrong: int | None = 0) -> str:
    algbw = size / time_us / 1e3
    return line(
        "row", op="all_reduce", dtype="float", redop="sum", root=-1, size=size, count=size // 4,
        placement=placement, time_us=time_us, algbw=algbw, busbw=algbw * 2 * 15 / 16, wrong=wrong,
        time_us_min=time_us * 0.97, time_us_max=time_us,
    )  # fmt: skip


def test_lines_in_pod_logs_with_timestamps_and_other_output() -> None:
    text = "\n".join(
        [
            "2026-12-03T05:00:00.000000001Z # nccl-tests version 2.19.6 (nccl-k8s)",
            "job-0:100:100 [0] NCCL INFO NCCL version 2.28.9+cuda13.0",
            "2026-12-03T05:00:01.000000001Z " + line("meta", **META),
            "#       size         count      type ...",
            "2026-12-03T05:00:02.1Z " + row(1 << 30, "out", 4500.25),
            "[pod/job-0/worker] " + row(1 << 30, "in", 4490.5, wrong=None),
            "job-0:100:100 [0] NCCL INFO comm 0x1 rank 0 nranks 16 cudaDev 0 - Destroy COMPLETE",
            line("summary", op="all_reduce", out_of_bounds=0, avg_busbw=447.3, ok=True),
            line("soak", op="all_reduce", interval=1, busbw=447.1, p99_us=4600.0),
        ]
    )
    run = parse_result_lines(text)
    assert run.meta.source == "nccl-k8s"
    assert run.meta.run_id == "nccl-20261203-050000-abcd"
    assert (run.meta.world_size, run.meta.nodes, run.meta.gpus_per_node) == (16, 2, 8)
    assert run.meta.gpu_model == "NVIDIA H200"  # from the devices when the meta says null
    assert run.meta.nccl == "2.28.9"
    assert run.meta.env["NCCL_IB_HCA"] == "mlx5"
    assert run.meta.config.stepfactor == 2
    assert run.meta.config.ops == ["all_reduce"]
    assert [(r.size_bytes, r.placement, r.time_us, r.wrong) for r in run.rows] == [
        (1 << 30, "out", 4500.25, 0),
        (1 << 30, "in", 4490.5, None),
    ]
    assert run.rows[0].busbw == pytest.approx((1 << 30) / 4500.25 / 1e3 * 30 / 16)
    assert run.rows[0].time_us_min == pytest.approx(4500.25 * 0.97)
    assert run.summaries[0].avg_busbw == 447.3
    assert run.soak == [{"op": "all_reduce", "interval": 1, "busbw": 447.1, "p99_us": 4600.0}]


def test_collect_results_writes_the_results_file(tmp_path: Path) -> None:
    logs = ["job-1 log without results\n", line("meta", **META) + "\n" + row(8, "out", 5.0)]
    run, path = collect_results(
        logs, run_id="nccl-x-1", out=tmp_path / "runs" / "nccl-x-1" / "results.json"
    )
    assert path is not None
    back = load(path)
    assert back == run
    assert back.meta.run_id == "nccl-x-1"
    assert back.rows[0].size_bytes == 8


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("just a log\n", "no result lines"),
        (line("meta", **META) + "\n" + row(8, "out", 5.0)[:-20], "line 2: result line is not one "
         "JSON object (cut off?)"),
        (PREFIX + '{"v": 2, "kind": "meta"}', "result line version 2"),
        (line("meta", **META) + "\n" + line("bogus"), "unknown result kind 'bogus'"),
        (row(8, "out", 5.0), "row before the meta line"),
        (line("meta", **META) + "\n" + line("row", op="x"), "line 2 has no 'placement'"),
        (line("meta", **META) + "\n" + line("meta", **META), "more than one run"),
    ],
)  # fmt: skip
def test_bad_result_lines_are_errors(text: str, message: str) -> None:
    with pytest.raises(ResultsError) as e:
        parse_result_lines(text, origin="pod.log")
    assert message in str(e.value)
    assert str(e.value).startswith("pod.log")
    assert "\n" not in str(e.value)


def test_store_run_names_the_run_directory(tmp_path: Path) -> None:
    from nccl_k8s.results import store_run

    run = parse_result_lines(line("meta", **META) + "\n" + row(8, "out", 5.0))
    path = store_run(run, base=tmp_path)
    # The engine's meta line carried the id (NCCL_K8S_RUN_ID in the pod): it names the directory.
    assert path == tmp_path / "nccl-20261203-050000-abcd" / "results.json"
    run.meta.run_id = None
    path = store_run(run, base=tmp_path)
    assert path.parent.name.startswith("nccl-") and load(path).meta.run_id == path.parent.name


def test_the_loaded_libnccl_path_is_kept_through_the_results_file(tmp_path: Path) -> None:
    """The engine names the libnccl it loaded (ncclGetVersion's library); results keep it."""
    lib = "/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2"
    run = parse_result_lines(line("meta", **META, nccl_library=lib) + "\n" + row(8, "out", 5.0))
    assert (run.meta.nccl, run.meta.nccl_library) == ("2.28.9", lib)
    _, path = collect_results([line("meta", **META, nccl_library=lib), row(8, "out", 5.0)],
                                   run_id="r", out=tmp_path / "results.json")  # fmt: skip
    assert path is not None and load(path).meta.nccl_library == lib
