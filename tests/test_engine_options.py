"""The engine's options table (bench.options): each option declared once, and every layer that
names it (the parser, BenchConfig, the meta line, nccl-tests' -J, results' readers) agrees."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from nccl_k8s.bench.config import BenchConfig, build_parser, parse_args
from nccl_k8s.bench.options import (
    BLOCKING_MODES,
    DERIVED,
    NOT_HONOURED,
    OPTIONS,
    meta_config,
    nccl_tests_config,
)
from nccl_k8s.errors import ResultsError
from nccl_k8s.results.nccltests_json import parse_json
from nccl_k8s.results.schema import Reader, RunConfig, config_from

#: nccl-tests 2.19.6's -J `config` keys (src/util.cu, the writer of its run parameters).
NCCL_TESTS_JSON_CONFIG = {
    "nthreads", "ngpus", "minimum_bytes", "maximum_bytes", "step_factor", "step_bytes",
    "warmup_iters", "iterations", "aggregated_iterations", "validation", "graph",
    "blocking_collectives", "per_iter_timing", "per_iter_skip", "parallel_init",
}  # fmt: skip
#: Ours in the same object: -d and -o as asked, in nccl-tests' words.
OUR_JSON_CONFIG = {"datatype", "redop"}
#: A command line that moves every option results keep off its default.
ASKED = ["-b", "1K", "-e", "64K", "-f", "4", "-n", "3", "-w", "2", "-c", "0", "-d", "bf16",
         "-o", "max", "-r", "-1", "-z", "2", "-a", "3", "--ops", "broadcast,all_reduce"]  # fmt: skip


def test_every_benchconfig_field_is_one_entry_or_derived_from_one() -> None:
    fields = [o.field for o in OPTIONS]
    assert len(fields) == len(set(fields)), "a field declared twice"
    declared = set(fields) | set(DERIVED)
    assert {f.name for f in dataclasses.fields(BenchConfig)} == declared
    assert set(DERIVED.values()) <= set(fields)
    flags = [f for o in OPTIONS for f in o.flags] + [f for n in NOT_HONOURED for f in n[:2]]
    assert len(flags) == len(set(flags)), "a flag spelt by two entries"


def test_each_entrys_default_is_its_fields_default() -> None:
    assert parse_args([]) == BenchConfig()
    parser = build_parser()
    for o in OPTIONS:
        assert parser.get_default(o.arg_dest) == o.default, o.flags


def test_meta_names_are_results_fields_and_each_reads_back_what_the_engine_wrote() -> None:
    cfg = parse_args(ASKED)
    meta = meta_config(cfg)
    assert set(meta) == {o.meta for o in OPTIONS if o.meta}
    kept = {o.meta for o in OPTIONS if o.meta and o.read}
    assert {f.name for f in dataclasses.fields(RunConfig)} == kept
    read = config_from(Reader(json.loads(json.dumps(meta)), "meta.config", "<test>"))
    assert {k: getattr(read, k) for k in kept} == {k: meta[k] for k in kept}
    assert (read.blocking, read.average, read.dtype, read.ops) == (2, 3, "bfloat16", ["broadcast", "all_reduce"])  # fmt: skip


def _doc(config: dict[str, object]) -> dict[str, object]:
    """An -J document with `config` and one row."""
    cell = {"time": 1.0, "alg_bw": 1.0, "bus_bw": 1.0, "nwrong": 0}
    row = {"size": 1024, "count": 256, "type": "float", "redop": "sum", "root": "    -1",
           "out_of_place": cell, "in_place": cell}  # fmt: skip
    return {"args": ["all_reduce_perf"], "config": config, "results": [row]}


def test_json_keys_are_nccl_tests_own_and_read_back() -> None:
    cfg = dataclasses.replace(parse_args(ASKED), blocking=3)
    config = nccl_tests_config(cfg)
    assert {o.json_key for o in OPTIONS if o.json_key} <= NCCL_TESTS_JSON_CONFIG | OUR_JSON_CONFIG
    assert config["blocking_collectives"] == "true" and config["blocking"] == 3
    assert "step_bytes" not in config and config["step_factor"] == 4  # nccl-tests writes one
    doc = {**_doc(config), "generator": "nccl-k8s 0", "ops": [{"op": "broadcast"}]}
    read = parse_json(json.loads(json.dumps(doc)), origin="engine.json").meta.config
    for o in OPTIONS:
        if o.json_key in config and o.meta and o.read:  # -f 4: no step_bytes, as nccl-tests
            assert getattr(read, o.meta) == o.shown(getattr(cfg, o.field)), o.flags


@pytest.mark.parametrize(("stored", "mode"), [(True, 1), (False, 0), (0, 0), (2, 2), (3, 3)])
def test_stored_blocking_reads_as_its_mode_old_true_false_as_1_and_0(stored: object, mode: int) -> None:  # fmt: skip
    assert config_from(Reader({"blocking": stored}, "meta.config", "f.json")).blocking == mode


def test_a_blocking_mode_nccl_tests_does_not_have_is_one_line_naming_it() -> None:
    with pytest.raises(ResultsError, match=r"f.json: meta.config.blocking is 7, expected one of 0, 1, 2, 3"):  # fmt: skip
        config_from(Reader({"blocking": 7}, "meta.config", "f.json"))
    assert set(BLOCKING_MODES) == {0, 1, 2, 3}


def test_nccl_tests_own_json_says_only_whether_ops_block() -> None:
    for said, mode in (("true", 1), (True, 1), ("false", 0)):
        doc = _doc({"blocking_collectives": said})
        assert parse_json(doc, origin="x.json").meta.config.blocking == mode


def test_element_types_are_named_only_in_bench_dtypes() -> None:
    # Issue 34: every reader takes the types from bench.dtypes; a name spelt elsewhere in src is
    # a second table that will disagree. ("int" is an alias, and also the reader kind's name.)
    import ast

    import nccl_k8s
    from nccl_k8s.bench.dtypes import DTYPE_ALIASES, DTYPE_FACTS

    names = {*DTYPE_FACTS, *DTYPE_ALIASES}
    names |= {f.torch for f in DTYPE_FACTS.values()}
    names -= {"int"}
    src = Path(nccl_k8s.__file__).parent
    found = [
        f"{path.relative_to(src)}:{node.lineno} {node.value!r}"
        for path in sorted(src.rglob("*.py"))
        if path.name != "dtypes.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and (node.value in names or node.value == "f8")
    ]  # fmt: skip
    assert found == []


def test_report_shows_each_kept_option_by_its_meta_name_and_z_as_its_mode() -> None:
    from nccl_k8s.results.report import _config_text
    from nccl_k8s.results.schema import Run, RunMeta

    config = RunConfig(minbytes=1024, maxbytes=4096, stepfactor=2, iters=3, dtype="half",
                       blocking=2, average=0, ops=["all_reduce"])  # fmt: skip
    text = _config_text(Run(meta=RunMeta(config=config)))
    assert text == "sizes 1K..4K ×2, iters 3, dtype half, blocking 2, average 0"
