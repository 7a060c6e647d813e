"""RunSpec validation: what the user typed becomes a spec or one line saying what was expected."""

from __future__ import annotations

import datetime
import re

import pytest
from typer.testing import CliRunner

from nccl_k8s.errors import UsageError
from nccl_k8s.spec import (
    DEFAULT_IMAGE,
    MASTER_PORT_MIN,
    MASTER_PORT_SPAN,
    RDMA_IMAGE,
    Toleration,
    build_run_spec,
    generate_run_id,
    master_port_for,
    parse_toleration,
)


def usage_error(**kwargs: object) -> str:
    kwargs.setdefault("run_id", "nccl-t")
    with pytest.raises(UsageError) as info:
        build_run_spec(**kwargs)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message and message.strip() == message
    return message


# --- run size -------------------------------------------------------------------------------


def test_world_size_and_gpus_give_nodes() -> None:
    spec = build_run_spec(world_size=16, gpus_per_node=8, run_id="r")
    assert (spec.world_size, spec.gpus_per_node, spec.nodes) == (16, 8, 2)


def test_nodes_instead_of_world_size() -> None:
    spec = build_run_spec(nodes=8, gpus_per_node=4, run_id="r")
    assert (spec.world_size, spec.gpus_per_node, spec.nodes) == (32, 4, 8)


def test_consistent_world_size_and_nodes_accepted() -> None:
    assert build_run_spec(world_size=32, nodes=8, gpus_per_node=4, run_id="r").nodes == 8


def test_gpus_per_node_defaults_to_eight() -> None:
    assert build_run_spec(world_size=16, run_id="r").nodes == 2


def test_world_size_not_a_multiple_is_refused_with_the_issue_message() -> None:
    assert (
        usage_error(world_size=6, gpus_per_node=4)
        == "--world-size 6 --gpus-per-node 4: world size must be a multiple of GPUs per node"
    )


def test_world_size_and_nodes_disagree() -> None:
    msg = usage_error(world_size=16, nodes=3, gpus_per_node=8)
    assert msg.startswith("--world-size 16 --nodes 3 --gpus-per-node 8: world size must equal")


def test_no_size_at_all() -> None:
    assert "--world-size N" in usage_error()


# --- names and acceptance 3 -------------------------------------------------------------------


def test_bad_namespace_names_the_value_and_the_form() -> None:
    msg = usage_error(world_size=8, namespace="Bad_Name")
    assert msg.startswith('--namespace "Bad_Name": expected a DNS-1123 label')


def test_env_without_equals() -> None:
    assert usage_error(world_size=8, env=["NOEQUALS"]) == '--env "NOEQUALS": expected KEY=VALUE'


@pytest.mark.parametrize(
    ("kwargs", "starts"),
    [
        ({"world_size": 0}, "--world-size 0: expected a whole number >= 1"),
        ({"world_size": 8, "gpus_per_node": 0}, "--gpus-per-node 0:"),
        ({"nodes": -1}, "--nodes -1:"),
        ({"world_size": 8, "run_id": "Nope"}, '--run-id "Nope": expected a DNS-1123 label'),
        ({"world_size": 8, "run_id": "x" * 41}, "--run-id"),
        ({"world_size": 8, "namespace": "-lead"}, '--namespace "-lead"'),
        (
            {"world_size": 8, "workload": "deployment"},
            '--workload "deployment": expected one of job, statefulset',
        ),
        (
            {"world_size": 8, "network": "ethernet"},
            '--network "ethernet": expected one of auto, ib, roce',
        ),
        ({"world_size": 8, "security": "root"}, '--security "root": expected one of'),
        (
            {"world_size": 8, "spread": "some"},
            '--spread "some": expected one of required, preferred, none',
        ),
        ({"world_size": 8, "engine": "wheel"}, '--engine "wheel": expected one of zipapp, image'),
        ({"world_size": 8, "engine": "image"}, "--engine image: expected --image"),
        ({"world_size": 8, "image": "has space"}, '--image "has space"'),
        # Issue 36: a digest pins what runs; a malformed one failed only at the kubelet's pull.
        (
            {"world_size": 8, "image": "repo@sha256:abc"},
            '--image "repo@sha256:abc": expected a digest',
        ),
        ({"world_size": 8, "image": "repo@sha256:" + "A" * 64}, '--image "repo@sha256:AAAA'),
        ({"world_size": 8, "image": "repo@" + "a" * 64}, '--image "repo@aaaa'),
        ({"world_size": 8, "image": "@sha256:" + "a" * 64}, '--image "@sha256:'),
        ({"world_size": 8, "cpu": "lots"}, '--cpu "lots": expected a positive Kubernetes quantity'),
        ({"world_size": 8, "memory": "0Gi"}, '--memory "0Gi"'),
        ({"world_size": 8, "shm_size": "8GB"}, '--shm-size "8GB"'),
        ({"world_size": 8, "env": ["1X=2"]}, '--env "1X=2": "1X" is not a valid variable name'),
        (
            {"world_size": 8, "env": ["PYTHONPATH=/x"]},
            '--env "PYTHONPATH=/x": PYTHONPATH is set by nccl-k8s',
        ),
        ({"world_size": 8, "label": ["team"]}, '--label "team": expected KEY=VALUE'),
        (
            {"world_size": 8, "label": ["team=a b"]},
            '--label "team=a b": "a b" is not a valid label value',
        ),
        ({"world_size": 8, "label": ["app.kubernetes.io/instance=x"]}, "--label"),
        ({"world_size": 8, "annotation": ["=x"]}, '--annotation "=x"'),
        ({"world_size": 8, "node_selector": ["gpu"]}, '--node-selector "gpu": expected KEY=VALUE'),
        (
            {"world_size": 8, "toleration": ["gpu:Sometimes"]},
            '--toleration "gpu:Sometimes": expected',
        ),
        (
            {"world_size": 8, "rdma_resource": ["rdma=1"]},
            '--rdma-resource "rdma=1": expected NAME=COUNT',
        ),
        ({"world_size": 8, "rdma_resource": ["rdma/ib=0"]}, '--rdma-resource "rdma/ib=0"'),
        (
            {"world_size": 8, "network": "ib"},
            "--network ib uses --security rdma: expected --rdma-resource",
        ),
        ({"world_size": 8, "security": "rdma"}, "--security rdma: expected --rdma-resource"),
        ({"world_size": 8, "gpu_resource": "gpu"}, '--gpu-resource "gpu"'),
        ({"world_size": 8, "scheduler": "Hami"}, '--scheduler "Hami": expected a DNS-1123 name'),
        ({"world_size": 8, "pvc": "my_pvc"}, '--pvc "my_pvc"'),
        ({"world_size": 8, "priority_class": "High"}, '--priority-class "High"'),
        ({"world_size": 8, "queue": "a queue"}, '--queue "a queue"'),
        ({"world_size": 8, "interval": "5m"}, "--interval: applies to --workload statefulset"),
        (
            {"world_size": 8, "workload": "statefulset", "ttl": "1h"},
            "--ttl: applies to --workload job",
        ),
        (
            {"world_size": 8, "workload": "statefulset", "interval": "soon"},
            '--interval "soon": expected a duration',
        ),
        ({"world_size": 8, "active_deadline": "1y"}, '--active-deadline "1y": expected a duration'),
        ({"world_size": 8, "memory": "8Gi"}, "--memory 8Gi: not more than --shm-size 8Gi"),
        ({"world_size": 8, "cpu": "lots"}, '--cpu "lots": expected a positive Kubernetes quantity'),
        ({"world_size": 8, "qos": "best-effort"}, '--qos "best-effort": expected one of'),
        ({"world_size": 8, "gang": "yunikorn"}, '--gang "yunikorn": expected one of volcano'),
        (
            {"world_size": 8, "network_attachment": ["sriov,Bad_Net"]},
            '--network-attachment "sriov,Bad_Net": expected NetworkAttachmentDefinition names',
        ),
        (
            {
                "world_size": 8,
                "network_attachment": ["sriov"],
                "pod_annotation": ["k8s.v1.cni.cncf.io/networks=other"],
            },
            "--network-attachment and an annotation k8s.v1.cni.cncf.io/networks",
        ),
        (
            {
                "world_size": 8,
                "network": "ib",
                "rdma_resource": ["rdma/ib=1"],
                "image": "pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime",
            },
            '--image "pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime" --network ib: the '
            "pytorch/pytorch images carry no libibverbs",
        ),
        ({"world_size": 8, "rendezvous_timeout": "0"}, '--rendezvous-timeout "0"'),
        ({"world_size": 8, "env": ["A=\nB"], "namespace": "x\ny"}, '--namespace "x\\ny"'),
    ],
)
def test_invalid_input_is_one_line_naming_the_value(kwargs: dict[str, object], starts: str) -> None:
    assert usage_error(**kwargs).startswith(starts)


# --- engine flags, checked by the engine's own parser ------------------------------------------


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["-b", "1Q"], "-b '1Q': expected a byte size"),
        (["-b", "1M", "-e", "1K"], "expected -b <= -e"),
        (["--ops", "all_to_nothing"], "unknown collective"),
        (["-r", "8"], "-r 8: expected a rank below the world size 8"),
        (["--backend", "gloo", "-G", "1"], "CUDA graphs need the NCCL backend"),
        (["--no-such-flag"], "unrecognized arguments"),
        (["--help"], "-h/--help is not a benchmark flag"),
    ],
)
def test_engine_args_are_validated_before_anything_is_rendered(
    argv: list[str], needle: str
) -> None:
    msg = usage_error(world_size=8, engine_args=argv)
    assert msg.startswith("engine arguments")
    assert needle in msg


def test_engine_args_kept_verbatim() -> None:
    argv = ["-b", "8", "-e", "1G", "-f", "2", "--ops", "all_reduce,all_gather"]
    assert build_run_spec(world_size=8, run_id="r", engine_args=argv).engine_args == tuple(argv)


# --- generated and derived values ---------------------------------------------------------------


def test_generated_run_id_is_time_sortable_and_unique_per_second() -> None:
    now = datetime.datetime(2026, 12, 3, 4, 55, 7, tzinfo=datetime.timezone.utc)
    assert generate_run_id(now, token="beef") == "nccl-20261203-045507-beef"
    spec = build_run_spec(world_size=8, now=now)
    assert re.fullmatch(r"nccl-20261203-045507-[0-9a-f]{4}", spec.run_id)
    assert spec.master_port == master_port_for(spec.run_id)


def test_master_port_is_stable_per_run_and_unprivileged() -> None:
    ports = {master_port_for(f"nccl-run-{i}") for i in range(200)}
    assert all(MASTER_PORT_MIN <= p < MASTER_PORT_MIN + MASTER_PORT_SPAN for p in ports)
    assert len(ports) > 150  # spread, so two concurrent host-network runs rarely share one
    assert master_port_for("nccl-a") == master_port_for("nccl-a")


def test_defaults_a_user_would_choose() -> None:
    spec = build_run_spec(world_size=8, run_id="r")
    assert spec.image == DEFAULT_IMAGE and ":" in spec.image and not spec.image.endswith(":latest")
    assert spec.workload == "job" and spec.engine == "zipapp" and spec.spread == "required"
    assert (spec.active_deadline_s, spec.ttl_s) == (3600, 86400)
    assert spec.security == "socket" and spec.network == "auto"
    assert spec.namespace is None and spec.interval_s is None


def test_statefulset_defaults_and_durations() -> None:
    spec = build_run_spec(world_size=8, run_id="r", workload="statefulset")
    assert spec.interval_s == 300 and spec.active_deadline_s is None and spec.ttl_s is None
    spec = build_run_spec(world_size=8, run_id="r", workload="statefulset", interval="2h")
    assert spec.interval_s == 7200


def test_job_lifetime_flags() -> None:
    spec = build_run_spec(
        world_size=8,
        run_id="r",
        active_deadline="90m",
        ttl="0",
        rendezvous_timeout="5m",
    )
    assert (spec.active_deadline_s, spec.ttl_s) == (5400, 0)
    assert spec.rendezvous_timeout_s == 300
    assert build_run_spec(world_size=8, run_id="r", active_deadline="0").active_deadline_s is None


def test_pods_request_cpu_and_memory_sized_per_gpu_with_shm_on_top() -> None:
    spec = build_run_spec(world_size=16, gpus_per_node=8, run_id="r")
    # 2 cores and 4Gi per GPU, plus the 8Gi /dev/shm the memory limit must hold too.
    assert (spec.cpu, spec.memory, spec.shm_size, spec.qos) == ("16", "40Gi", "8Gi", "burstable")
    spec = build_run_spec(world_size=2, gpus_per_node=1, run_id="r", shm_size="1G")
    assert (spec.cpu, spec.memory) == ("2", "5050Mi")  # 4096Mi + 10**9 B (953.7Mi), rounded up
    spec = build_run_spec(world_size=8, run_id="r", cpu="500m", memory="64Gi", qos="guaranteed")
    assert (spec.cpu, spec.memory, spec.qos) == ("500m", "64Gi", "guaranteed")


@pytest.mark.parametrize(
    "image",
    [
        "pytorch/pytorch@sha256:" + "0" * 64,
        "pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime@sha256:" + "0123456789abcdef" * 4,
        "registry.example:5000/team/bench@sha512:" + "f" * 128,
    ],
)
def test_an_image_pinned_by_digest_is_rendered_as_given(image: str) -> None:
    spec = build_run_spec(world_size=8, run_id="r", image=image)
    assert spec.image == image
    # The repository behind a digest is still known: the pytorch images lack libibverbs.
    if image.startswith("pytorch/"):
        with pytest.raises(UsageError, match="carry no libibverbs"):
            build_run_spec(
                world_size=8, run_id="r", image=image, network="ib", rdma_resource=["rdma/ib=1"]
            )


def test_rdma_fabrics_default_to_an_image_with_libibverbs() -> None:
    ib = build_run_spec(world_size=8, run_id="r", network="ib", rdma_resource=["rdma/ib=1"])
    assert ib.image == RDMA_IMAGE == "nvcr.io/nvidia/pytorch:25.01-py3"
    assert build_run_spec(world_size=8, run_id="r", network="socket").image == DEFAULT_IMAGE
    mine = build_run_spec(
        world_size=8, run_id="r", network="roce", rdma_resource=["rdma/roce=1"], image="me/nccl:1"
    )
    assert mine.image == "me/nccl:1"  # an image we know nothing about is the user's call


def test_gang_and_network_attachments() -> None:
    spec = build_run_spec(
        world_size=8,
        run_id="r",
        gang="coscheduling",
        network_attachment=["sriov-a,sriov-b", "net/sriov-c@net3", "sriov-a"],
    )
    assert spec.gang == "coscheduling"
    assert spec.network_attachments == ("sriov-a", "sriov-b", "net/sriov-c@net3")
    assert build_run_spec(world_size=8, run_id="r").gang is None


def test_network_picks_the_least_security_that_works() -> None:
    assert build_run_spec(world_size=8, run_id="r", network="socket").security == "socket"
    spec = build_run_spec(world_size=8, run_id="r", network="roce", rdma_resource=["rdma/roce=2"])
    assert spec.security == "rdma" and spec.rdma_resources == (("rdma/roce", 2),)
    # Explicit choice beats the derived one.
    assert (
        build_run_spec(world_size=8, run_id="r", network="ib", security="privileged").security
        == "privileged"
    )


def test_repeated_keys_keep_the_last_value_in_first_order() -> None:
    spec = build_run_spec(world_size=8, run_id="r", env=["A=1", "B=2", "A=3"], label=["x=1", "x=2"])
    assert spec.env == (("A", "3"), ("B", "2"))
    assert spec.labels == (("x", "2"),)


def test_env_values_are_free_text() -> None:
    spec = build_run_spec(world_size=8, run_id="r", env=["NCCL_SOCKET_IFNAME==eth0", "X="])
    assert spec.env == (("NCCL_SOCKET_IFNAME", "=eth0"), ("X", ""))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "nvidia.com/gpu=present:NoSchedule",
            Toleration(
                key="nvidia.com/gpu", operator="Equal", value="present", effect="NoSchedule"
            ),
        ),
        (
            "nvidia.com/gpu:NoSchedule",
            Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
        ),
        ("dedicated=nccl", Toleration(key="dedicated", operator="Equal", value="nccl")),
        ("dedicated", Toleration(key="dedicated", operator="Exists")),
        (
            "maintenance:NoExecute",
            Toleration(key="maintenance", operator="Exists", effect="NoExecute"),
        ),
    ],
)
def test_tolerations_use_kubectl_taint_syntax(text: str, expected: Toleration) -> None:
    assert parse_toleration(text) == expected


def test_toleration_dict_shape() -> None:
    assert parse_toleration("k=v:PreferNoSchedule").to_dict() == {
        "key": "k",
        "operator": "Equal",
        "value": "v",
        "effect": "PreferNoSchedule",
    }
    assert parse_toleration("k").to_dict() == {"key": "k", "operator": "Exists"}


# --- the CLI: exit 2, one line on stderr, nothing on stdout ------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--world-size", "6", "--gpus-per-node", "4"],
            "--world-size 6 --gpus-per-node 4: world size must be a multiple of GPUs per node",
        ),
        (
            ["--world-size", "8", "--namespace", "Bad_Name"],
            '--namespace "Bad_Name": expected a DNS-1123 label',
        ),
        (["--world-size", "8", "--env", "NOEQUALS"], '--env "NOEQUALS": expected KEY=VALUE'),
        (
            ["--world-size", "8", "--", "-b", "1Q"],
            "engine arguments: -b '1Q': expected a byte size",
        ),
        # Engine flags before `--`: refused, never silently taken (-n would be the namespace).
        (
            ["--world-size", "8", "-b", "8", "-e", "1G", "-n", "50"],
            "No such option: -b; engine flags go after `--`",
        ),
        (["--world-size", "8", "-o", "xml"], '--output "xml": expected yaml or json'),
        (["--world-size", "six"], '--world-size "six": expected a whole number >= 1'),
        # Dropped: a run is a gang (docs/deploy.md), a retried pod could not rejoin it.
        (["--world-size", "8", "--backoff-limit", "1"], "No such option: --backoff-limit"),
        (
            ["--world-size", "8", "--memory", "4Gi", "--shm-size", "4Gi"],
            "--memory 4Gi: not more than --shm-size 4Gi, and /dev/shm counts against the "
            "pod's memory limit; expected more (at least 5Gi), or a smaller --shm-size",
        ),
    ],
)
def test_cli_usage_errors_exit_2_with_one_line(
    argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nccl_k8s.cli.main import app

    monkeypatch.delenv("NCCL_K8S_DEBUG", raising=False)
    result = CliRunner().invoke(app, ["render", *argv])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: " + message)
