"""The deploy option registry: each option is one entry on the RunSpec field it fills, and the
CLI and build_run_spec both come from it (issue 19: a new option is an entry plus its use)."""

from __future__ import annotations

import dataclasses
import json
import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import pytest
from typer.testing import CliRunner

from nccl_k8s.errors import UsageError
from nccl_k8s.spec import OPTION_BY_NAME, OPTIONS, RunSpec, build_run_spec

#: Fields no option sets: build_run_spec derives them (from the run id, from the engine flags).
DERIVED = {"master_port", "engine_args", "given", "healthy_since"}

#: Every option given (values the parsers accept), but --interval: this is a job, and the
#: statefulset case below gives it.
EVERY_OPTION: dict[str, object] = {
    "world_size": "16", "gpus_per_node": "8", "nodes": "2", "workload": "job",
    "run_id": "nccl-every", "namespace": "bench", "label": ["team=infra"],
    "annotation": ["owner=me"], "pod_annotation": ["note=x"], "image": "me/nccl:1",
    "engine": "image", "scheduler": "hami-scheduler", "node_selector": ["pool=a"],
    "node": ["n1", "n2"], "toleration": ["gpu:NoSchedule"], "spread": "preferred",
    "topology": "cloud.google.com/gce-topology-block", "placement": "required",
    "gpu_resource": "amd.com/gpu", "cpu": "32", "memory": "256Gi", "qos": "guaranteed",
    "shm_size": "32Gi", "env": ["A=1"], "pvc": "results", "network": "roce",
    "rdma_resource": ["rdma/roce=1"], "network_attachment": ["sriov-a"], "host_network": True,
    "security": "host", "queue": "gpu-queue", "gang": "volcano", "priority_class": "high",
    "runtime_class": "nvidia",
    "active_deadline": "2h", "ttl": "10m", "rendezvous_timeout": "5m", "metrics_port": "9400",
    "pod_monitor": True, "platform": "generic", "instance_type": "p5.48xlarge", "launcher": "direct",
    "compute_domain": True, "network_policy": "on", "metrics_from": ["namespace=monitoring"],
    "healthy_only": True, "healthy_within": "30h",
}  # fmt: skip


def test_every_field_is_an_option_or_derived() -> None:
    fields = {f.name for f in dataclasses.fields(RunSpec)}
    assert {o.field for o in OPTIONS} == fields - DERIVED
    assert len({o.field for o in OPTIONS}) == len(OPTIONS)
    assert set(OPTION_BY_NAME) - set(EVERY_OPTION) == {"interval"}


def test_an_option_is_named_after_its_flag_and_no_flag_is_taken_twice() -> None:
    for o in OPTIONS:
        assert o.flag.startswith("--") and o.name == o.flag[2:].replace("-", "_"), o
        assert o.help and o.panel and (o.metavar or o.kind == "switch"), o
        assert (o.parse is None) == (o.kind == "switch"), o
    flags = [f for o in OPTIONS for f in o.flags]
    assert len(flags) == len(set(flags))


def _conforms(value: object, hint: Any) -> bool:
    """The value is of the annotated type (the hints RunSpec uses: Literal, unions, tuples)."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is type(None):
        return value is None
    if origin is Literal:
        return value in args
    if origin in (Union, types.UnionType):
        return any(_conforms(value, a) for a in args)
    if origin is frozenset:
        return isinstance(value, frozenset) and all(_conforms(v, args[0]) for v in value)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_conforms(v, args[0]) for v in value)
        return len(value) == len(args) and all(map(_conforms, value, args))
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


@pytest.mark.parametrize(
    "values",
    [
        EVERY_OPTION,
        {"world_size": 8},
        {"nodes": 2, "workload": "statefulset", "interval": "1h", "network": "ib",
         "rdma_resource": ["rdma/ib=1"]},
    ],
    ids=["every-option", "defaults", "statefulset-ib"],
)  # fmt: skip
def test_each_parser_gives_its_field_the_fields_type(values: dict[str, object]) -> None:
    spec = build_run_spec(**values)  # type: ignore[arg-type]
    hints = get_type_hints(RunSpec)
    for f in dataclasses.fields(RunSpec):
        value = getattr(spec, f.name)
        assert _conforms(value, hints[f.name]), (f.name, value, hints[f.name])


def test_every_option_given_lands_in_its_field() -> None:
    spec = build_run_spec(**EVERY_OPTION)  # type: ignore[arg-type]
    assert (spec.scheduler_name, spec.node_names, spec.ttl_s) == (
        "hami-scheduler",
        ("n1", "n2"),
        600,
    )
    assert (spec.labels, spec.rdma_resources, spec.rendezvous_timeout_s) == (
        (("team", "infra"),),
        (("rdma/roce", 1),),
        300,
    )
    assert spec.tolerations[0].to_dict() == {
        "key": "gpu",
        "operator": "Exists",
        "effect": "NoSchedule",
    }


@pytest.mark.parametrize("opt", [o for o in OPTIONS if o.kind != "switch"], ids=lambda o: o.flag)
def test_every_option_refuses_a_bad_value_in_one_line_naming_it(opt: Any) -> None:
    """Validated once, at the edge: no option passes a malformed string on to the renderer."""
    bad = "Not Valid!"
    values: dict[str, object] = {"world_size": 8, "run_id": "r"}
    values[opt.name] = [bad] if opt.kind == "list" else bad
    with pytest.raises(UsageError) as info:
        build_run_spec(**values)  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith(f'{opt.flag} "{bad}"'), message
    assert "\n" not in message and info.value.key == opt.flag


def test_workload_only_options_follow_their_entry() -> None:
    for o in OPTIONS:
        if o.only_with is not None:
            other, value = o.only_with
            assert value in get_args(get_type_hints(RunSpec)[OPTION_BY_NAME[other].field])
    assert build_run_spec(world_size=8, run_id="r", workload="statefulset").ttl_s is None
    with pytest.raises(
        UsageError, match=r"^--active-deadline: applies to --workload job, not statefulset$"
    ):
        build_run_spec(world_size=8, run_id="r", workload="statefulset", active_deadline="1h")


def test_an_unknown_option_is_a_programming_error() -> None:
    with pytest.raises(TypeError, match=r"unknown option\(s\) scheduler_name$"):
        build_run_spec(world_size=8, scheduler_name="x")


def test_the_cli_offers_every_option_with_its_flags_metavar_and_panel() -> None:
    from nccl_k8s.cli.main import app

    text = CliRunner().invoke(app, ["render", "--help"], env={"COLUMNS": "250"}).stdout
    panels = {o.panel for o in OPTIONS}
    assert all(f"─ {p} " in text for p in panels)
    for o in OPTIONS:
        line = next(line for line in text.splitlines() if line.startswith(f"│ {o.flag} "))
        assert all(f in line for f in o.flags) and o.metavar in line, line


# ---- --priority-class: the option issue 19's acceptance adds as one entry plus one use ----------


def _rendered_pods(*args: str) -> list[dict[str, Any]]:
    """The pod templates `nccl-k8s render` prints (as JSON) for these options."""
    from nccl_k8s.cli.main import app

    res = CliRunner().invoke(app, ["render", "--run-id", "r", "-o", "json", *args])
    assert res.exit_code == 0, res.output
    items = json.loads(res.stdout)["items"]
    return [o["spec"]["template"]["spec"] for o in items if o["kind"] in ("Job", "StatefulSet")]


@pytest.mark.parametrize("workload", ["job", "statefulset"])
def test_priority_class_is_set_on_the_pods(workload: str) -> None:
    pods = _rendered_pods(
        "--world-size", "16", "--workload", workload, "--priority-class", "gpu-high"
    )
    assert [p["priorityClassName"] for p in pods] == ["gpu-high"]
    assert all("priorityClassName" not in p for p in _rendered_pods("--world-size", "16"))


@pytest.mark.parametrize("name", ["High", "gpu_high", "-x", "a" * 254])
def test_a_bad_priority_class_is_one_line_exit_2_naming_it(name: str) -> None:
    from nccl_k8s.cli.main import app

    res = CliRunner().invoke(app, ["render", "--world-size", "8", "--priority-class", name])
    assert res.exit_code == 2 and res.stdout == "", res.output
    assert res.stderr.splitlines() == [
        f'error: --priority-class "{name}": expected a DNS-1123 name (lowercase letters, digits, '
        "'-' and '.', at most 253 characters)"
    ]


# ---- --runtime-class: a new option added as one entry plus one use (issue 19, acceptance 1) ----


@pytest.mark.parametrize("workload", ["job", "statefulset"])
def test_runtime_class_is_set_on_the_pods_and_absent_renders_nothing(workload: str) -> None:
    pods = _rendered_pods("--world-size", "16", "--workload", workload, "--runtime-class", "nvidia")
    assert [p["runtimeClassName"] for p in pods] == ["nvidia"]
    assert all("runtimeClassName" not in p for p in _rendered_pods("--world-size", "16"))


def test_a_bad_runtime_class_is_one_line_exit_2_naming_it() -> None:
    from nccl_k8s.cli.main import app

    res = CliRunner().invoke(app, ["render", "--world-size", "8", "--runtime-class", "Nvidia"])
    assert res.exit_code == 2 and res.stdout == "", res.output
    assert res.stderr.splitlines() == [
        'error: --runtime-class "Nvidia": expected a DNS-1123 name (lowercase letters, digits, '
        "'-' and '.', at most 253 characters)"
    ]
