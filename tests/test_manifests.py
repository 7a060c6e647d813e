"""render(RunSpec): golden YAML, upstream schemas of three Kubernetes versions, and the objects'
meaning (what a user or the API server would check).

Golden files live in tests/golden/. After a deliberate change, regenerate them with
`NCCL_K8S_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_manifests.py -k golden` and review
the diff. The engine zipapp inside the ConfigMap is replaced by a placeholder there (it changes
whenever bench/ does); its bytes are checked separately.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import os
import re
import stat
import subprocess
import sys
import zipfile
from io import BytesIO
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import typer
import yaml
from typer.testing import CliRunner

from nccl_k8s.k8s import dump, render
from nccl_k8s.k8s.rendering._wrapper import ENGINE_DIGEST_ENV, POD_WRAPPER
from nccl_k8s.k8s.rendering._zipapp import (
    MAX_ZIPAPP_BYTES,
    ZIPAPP_NAME,
    build_zipapp,
    engine_zipapp,
)
from nccl_k8s.k8s.run._deploy import attach_owner
from nccl_k8s.spec import RunSpec, build_run_spec

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("NCCL_K8S_UPDATE_GOLDEN", "") not in ("", "0")
#: Three Kubernetes minor versions whose strict upstream schemas every object must pass: 1.29, the
#: oldest the manifests support (before it the schema required onPodConditions in every
#: podFailurePolicy rule), the newest kubernetes-validate ships here, and one between.
K8S_VERSIONS = ("1.29", "1.33", "1.37")
REDACTED = "<engine zipapp: see test_configmap_carries_the_engine_zipapp>"

#: name -> the `nccl-k8s render` arguments of that configuration.
CONFIGS: dict[str, list[str]] = {
    "job-8x4": [
        "--world-size", "32", "--gpus-per-node", "4", "--run-id", "nccl-golden-8x4",
        "--namespace", "bench", "--", "-b", "8", "-e", "1G", "-f", "2",
    ],
    "job-2x8-ib": [
        "--world-size", "16", "--gpus-per-node", "8", "--network", "ib",
        "--rdma-resource", "rdma/ib=1", "--run-id", "nccl-golden-2x8-ib", "--namespace", "bench",
        "--", "-b", "1M", "-e", "8G", "-f", "2",
    ],
    "statefulset-2x8": [
        "--nodes", "2", "--gpus-per-node", "8", "--workload", "statefulset", "--interval", "10m",
        "--run-id", "nccl-golden-soak", "--namespace", "bench", "--", "-b", "1G", "-e", "1G", "-n", "50",
    ],
    # The slim image (images/slim): no torch, so the engine's own launcher starts the ranks.
    "job-2x8-slim": [
        "--world-size", "16", "--gpus-per-node", "8", "--engine", "image", "--launcher", "direct",
        "--image", "registry.example/nccl-k8s:0.1.0-slim", "--run-id", "nccl-golden-slim",
        "--namespace", "bench", "--", "-b", "8", "-e", "1G", "-f", "2",
    ],
}  # fmt: skip

#: Not golden, schema-checked: every option that changes the objects, and each security profile.
EVERYTHING = {
    "world_size": 16,
    "gpus_per_node": 8,
    "run_id": "nccl-everything",
    "namespace": "bench",
    "scheduler": "hami-scheduler",
    "node_selector": ["nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3", "pool=a"],
    "toleration": ["nvidia.com/gpu:NoSchedule", "dedicated=nccl:NoExecute", "spot"],
    "spread": "preferred",
    "rdma_resource": ["rdma/ib=1", "rdma/ib_b=2"],
    "network": "roce",
    "host_network": True,
    "cpu": "32",
    "memory": "256Gi",
    "shm_size": "32Gi",
    "env": ["NCCL_DEBUG=WARN", "NCCL_IB_GID_INDEX=3"],
    "pvc": "nccl-results",
    "queue": "gpu-queue",
    "priority_class": "benchmark",
    "active_deadline": "2h",
    "ttl": "10m",
    "label": ["team=infra"],
    "annotation": ["owner=someone@example.com"],
    "pod_annotation": ["example.com/note=rail-optimized", "linkerd.io/inject=enabled"],
    "network_attachment": ["sriov-a,sriov-b"],
    "gang": "volcano",
    "qos": "guaranteed",
    "metrics_port": "9400",
    "pod_monitor": True,
    "engine_args": ["-b", "8", "-e", "1G", "--ops", "all"],
}


def spec_for(name: str) -> RunSpec:
    """The spec of a golden configuration (test_golden checks the CLI renders the same)."""
    return _SPECS[name]


_SPECS = {
    "job-8x4": build_run_spec(
        world_size=32, gpus_per_node=4, run_id="nccl-golden-8x4", namespace="bench",
        engine_args=["-b", "8", "-e", "1G", "-f", "2"],
    ),
    "job-2x8-ib": build_run_spec(
        world_size=16, gpus_per_node=8, network="ib", rdma_resource=["rdma/ib=1"],
        run_id="nccl-golden-2x8-ib", namespace="bench", engine_args=["-b", "1M", "-e", "8G", "-f", "2"],
    ),
    "statefulset-2x8": build_run_spec(
        nodes=2, gpus_per_node=8, workload="statefulset", interval="10m", run_id="nccl-golden-soak",
        namespace="bench", engine_args=["-b", "1G", "-e", "1G", "-n", "50"],
    ),
    "job-2x8-slim": build_run_spec(
        world_size=16, gpus_per_node=8, engine="image", launcher="direct",
        image="registry.example/nccl-k8s:0.1.0-slim", run_id="nccl-golden-slim",
        namespace="bench", engine_args=["-b", "8", "-e", "1G", "-f", "2"],
    ),
}  # fmt: skip


def redact(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    objs = copy.deepcopy(objs)
    for obj in objs:
        if obj["kind"] == "ConfigMap":
            obj["binaryData"] = {k: REDACTED for k in obj["binaryData"]}
        template = obj.get("spec", {}).get("template", {}).get("spec", {})
        for c in template.get("containers", []):
            for e in c.get("env", []):
                if e["name"] == ENGINE_DIGEST_ENV:  # the zipapp's: changes with any engine source
                    e["value"] = re.sub(r"^[0-9a-f]{64}", "<sha256 of the zipapp>", e["value"])
    return objs


def by_kind(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objs}


#: Kinds the upstream schemas do not know: checked against their CRDs (test_deploy_gang.py).
CUSTOM_KINDS = ("PodGroup", "PodMonitor")


def pod_selector(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return objs[-1]["spec"]["selector"]["matchLabels"] if objs[-1]["kind"] == "StatefulSet" else {
        k: v for k, v in objs[-1]["spec"]["template"]["metadata"]["labels"].items()
        if k.startswith("app.kubernetes.io/") and k != "app.kubernetes.io/managed-by"
    }  # fmt: skip


def pod_spec(objs: list[dict[str, Any]]) -> dict[str, Any]:
    workload = objs[-1]
    return workload["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return pod_spec(objs)["containers"][0]  # type: ignore[no-any-return]


def env_of(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(objs)["env"]}


# --- golden files and schemas --------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_golden(name: str) -> None:
    from nccl_k8s.cli.main import app

    spec = spec_for(name)
    text = dump(redact(render(spec)))
    path = GOLDEN / f"{name}.yaml"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), (
        f"{path} differs; regenerate with NCCL_K8S_UPDATE_GOLDEN=1 and review"
    )
    # The CLI prints exactly these objects (zipapp included), and with --adopt the
    # ServiceAccount, Role and RoleBinding with which the run adopts them (rendering._adopt).
    result = CliRunner().invoke(app, ["render", "--adopt", *CONFIGS[name]])
    assert result.exit_code == 0, result.output
    assert list(yaml.safe_load_all(result.stdout)) == render(spec, adopt=True)
    result = CliRunner().invoke(app, ["render", *CONFIGS[name]])
    assert result.exit_code == 0, result.output
    assert list(yaml.safe_load_all(result.stdout)) == render(spec)


def _schema_cases() -> list[tuple[str, str]]:
    return [
        (name, v)
        for name in [*sorted(CONFIGS), "everything", "image-privileged", "host"]
        for v in K8S_VERSIONS
    ]


def _objs_for(name: str) -> list[dict[str, Any]]:
    if name in _SPECS:
        return render(_SPECS[name])
    if name == "everything":
        return render(build_run_spec(**EVERYTHING))  # type: ignore[arg-type]
    if name == "host":
        return render(
            build_run_spec(world_size=16, run_id="nccl-host", security="host", spread="none")
        )
    return render(
        build_run_spec(
            world_size=16, run_id="nccl-priv", engine="image", image="registry.example/nccl-k8s:1.0",
            security="privileged", workload="statefulset",
        )
    )  # fmt: skip


@pytest.mark.parametrize(("name", "version"), _schema_cases())
def test_every_object_passes_the_strict_upstream_schema(name: str, version: str) -> None:
    for obj in _objs_for(name):
        if obj["kind"] in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name}: {obj['kind']} invalid for Kubernetes {version}: {exc.message}")


# --- what the objects mean ----------------------------------------------------------------------


@pytest.mark.parametrize("name", [*sorted(_SPECS), "everything", "host", "image-privileged"])
def test_every_object_is_labelled_for_selection(name: str) -> None:
    objs = _objs_for(name)
    run_id = objs[-1]["metadata"]["name"]
    for obj in [*objs, {"kind": "pod", "metadata": objs[-1]["spec"]["template"]["metadata"]}]:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "nccl-k8s", obj["kind"]
        assert labels["app.kubernetes.io/instance"] == run_id, obj["kind"]
        assert labels["app.kubernetes.io/managed-by"] == "nccl-k8s", obj["kind"]
        assert "ownerReferences" not in obj["metadata"]


@pytest.mark.parametrize("name", [*sorted(_SPECS), "everything", "host", "image-privileged"])
def test_no_container_lists_a_variable_twice(name: str) -> None:
    # The API server keeps the last of two same-named entries (kubectl only warns): a variable
    # set twice is one silently lost.
    workload = _objs_for(name)[-1]
    for container in workload["spec"]["template"]["spec"]["containers"]:
        names = [e["name"] for e in container.get("env", [])]
        assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_render_is_deterministic() -> None:
    spec = _SPECS["job-2x8-ib"]
    assert dump(render(spec)) == dump(render(spec))
    assert build_zipapp() == build_zipapp()


def test_objects_in_apply_order() -> None:
    # The NetworkPolicy before the pods it guards (--network-policy auto, the default).
    assert [o["kind"] for o in render(_SPECS["job-8x4"])] == [
        "ConfigMap",
        "NetworkPolicy",
        "Service",
        "Job",
    ]
    assert [o["kind"] for o in render(_SPECS["statefulset-2x8"])] == [
        "ConfigMap",
        "NetworkPolicy",
        "Service",
        "StatefulSet",
    ]


def test_indexed_job_one_pod_per_node_failing_fast() -> None:
    objs = render(_SPECS["job-8x4"])
    job = by_kind(objs)["Job"]["spec"]
    assert job["completionMode"] == "Indexed"
    assert job["completions"] == job["parallelism"] == 8
    assert job["backoffLimit"] == 0
    assert job["activeDeadlineSeconds"] == 3600 and job["ttlSecondsAfterFinished"] == 86400
    rules = job["podFailurePolicy"]["rules"]
    assert {
        "action": "FailJob",
        "onExitCodes": {"containerName": "bench", "operator": "NotIn", "values": [0]},
    } in rules
    pod = pod_spec(objs)
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False
    assert pod["subdomain"] == "nccl-golden-8x4"
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    pod_labels = objs[-1]["spec"]["template"]["metadata"]["labels"]
    assert anti["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    res = container(objs)["resources"]
    assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"] == "4"
    assert not any(
        o["kind"] in ("Role", "RoleBinding", "ServiceAccount", "ClusterRole") for o in objs
    )


def test_each_pod_runs_torchrun_on_the_engine() -> None:
    spec = _SPECS["job-8x4"]
    c = container(render(spec))
    assert c["command"] == ["python3", "-c", POD_WRAPPER]
    args = c["args"]
    assert args[: args.index("-m")] == [
        "torchrun",
        "--nnodes=8",
        "--nproc-per-node=4",
        "--node-rank=$(JOB_COMPLETION_INDEX)",
        "--master-addr=nccl-golden-8x4-0.nccl-golden-8x4",
        f"--master-port={spec.master_port}",
        "--rdzv-conf=timeout=900",
        "--max-restarts=0",
    ]
    assert args[args.index("-m") :] == [
        "-m", "nccl_k8s.bench", "--metrics-port", "8080", "--gpus-requested", "4", "-b", "8",
        "-e", "1G", "-f", "2",
    ]  # fmt: skip
    env = env_of(render(spec))
    assert env["NCCL_K8S_RUN_ID"] == "nccl-golden-8x4"
    assert env["PYTHONPATH"] == f"/opt/nccl-k8s/{ZIPAPP_NAME}"
    assert env["JOB_COMPLETION_INDEX"] == {
        "fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        }
    }


def test_engine_args_cannot_expand_kubernetes_variables() -> None:
    spec = build_run_spec(world_size=8, run_id="r", engine_args=["--json", "/tmp/$(HOME).json"])
    assert container(render(spec))["args"][-1] == "/tmp/$$(HOME).json"


def test_headless_service_is_the_pods_subdomain() -> None:
    spec = _SPECS["job-2x8-ib"]
    objs = render(spec)
    svc = by_kind(objs)["Service"]
    assert svc["metadata"]["name"] == pod_spec(objs)["subdomain"]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert (
        svc["spec"]["selector"].items()
        <= objs[-1]["spec"]["template"]["metadata"]["labels"].items()
    )
    assert svc["spec"]["ports"][0]["port"] == spec.master_port


def test_dev_shm_is_a_memory_volume_of_the_requested_size() -> None:
    objs = render(build_run_spec(world_size=8, run_id="r", shm_size="16Gi"))
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod_spec(
        objs
    )["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container(objs)["volumeMounts"]


def test_configmap_carries_the_engine_zipapp() -> None:
    objs = render(_SPECS["job-8x4"])
    cm = by_kind(objs)["ConfigMap"]
    assert cm["immutable"] is True
    data = base64.b64decode(cm["binaryData"][ZIPAPP_NAME])
    assert data == engine_zipapp() == build_zipapp()
    volume = next(v for v in pod_spec(objs)["volumes"] if v["name"] == "engine")
    assert volume["configMap"]["name"] == cm["metadata"]["name"]


def test_zipapp_holds_only_the_engine_and_is_small() -> None:
    data = build_zipapp()
    assert len(data) < MAX_ZIPAPP_BYTES < 1 << 20
    names = zipfile.ZipFile(BytesIO(data)).namelist()
    assert names == sorted(names)
    assert "nccl_k8s/__init__.py" in names and "nccl_k8s/bench/config.py" in names
    # The engine, its own launcher (--launcher direct: launch and the errors it raises), and
    # prometheus_client (with its license) for the pods' metrics server.
    assert all(
        n in ("__main__.py", "nccl_k8s/__init__.py", "nccl_k8s/errors.py")
        or n.startswith(("nccl_k8s/bench/", "nccl_k8s/launch/", "prometheus_client/"))
        for n in names
    )
    assert "nccl_k8s/launch/_pod.py" in names
    assert {"prometheus_client/__init__.py", "prometheus_client/LICENSE"} <= set(names)
    assert {i.date_time for i in zipfile.ZipFile(BytesIO(data)).infolist()} == {
        (1980, 1, 1, 0, 0, 0)
    }


def test_zipapp_runs_the_engine_without_the_installed_package(tmp_path: Path) -> None:
    pyz = tmp_path / ZIPAPP_NAME
    pyz.write_bytes(build_zipapp())
    # -S: no site-packages, so nccl_k8s can only come from the archive (as in a stock image).
    run = subprocess.run(
        [sys.executable, "-S", str(pyz), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: python -m nccl_k8s.bench")
    run = subprocess.run(
        [sys.executable, "-S", "-c", "import nccl_k8s.bench.config as c; print(c.__file__)"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env={"PYTHONPATH": str(pyz)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"{pyz}/nccl_k8s/bench/config.py"


def test_engine_image_mode_ships_no_configmap() -> None:
    objs = render(build_run_spec(world_size=8, run_id="r", engine="image", image="reg/nccl-k8s:1"))
    assert [o["kind"] for o in objs] == ["NetworkPolicy", "Service", "Job"]
    assert "PYTHONPATH" not in env_of(objs)
    assert all(v["name"] != "engine" for v in pod_spec(objs)["volumes"])
    assert container(objs)["image"] == "reg/nccl-k8s:1"


# --- presets: network and security --------------------------------------------------------------


FABRIC_VARS = {"NCCL_NET", "NCCL_IB_HCA", "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME"}


def test_auto_network_sets_no_fabric_variable() -> None:
    env = env_of(render(_SPECS["job-8x4"]))
    assert not FABRIC_VARS & env.keys()
    assert env["NCCL_DEBUG"] == "INFO"


def test_ib_uses_every_hca_and_a_prefix_socket_filter() -> None:
    env = env_of(render(_SPECS["job-2x8-ib"]))
    assert env["NCCL_IB_HCA"] == "mlx5"  # a prefix: mlx5_0 .. mlx5_N, not only the first
    assert env["NCCL_SOCKET_IFNAME"] == "^lo,docker"
    assert env["NCCL_NET"] == "IB"


def test_socket_network_disables_ib() -> None:
    env = env_of(render(build_run_spec(world_size=8, run_id="r", network="socket")))
    assert env["NCCL_IB_DISABLE"] == "1" and env["NCCL_NET"] == "Socket"


def test_host_network_also_excludes_cni_interfaces() -> None:
    for kwargs in ({"host_network": True}, {"security": "host"}):
        spec = build_run_spec(world_size=8, run_id="r", network="socket", **kwargs)  # type: ignore[arg-type]
        ifname = env_of(render(spec))["NCCL_SOCKET_IFNAME"]
        assert ifname.startswith("^lo,docker,") and {"veth", "cni", "cali", "flannel"} <= set(
            ifname[1:].split(",")
        )


def test_user_env_beats_presets() -> None:
    spec = build_run_spec(
        world_size=8,
        run_id="r",
        network="socket",
        env=["NCCL_DEBUG=WARN", "NCCL_SOCKET_IFNAME==eth0", "X=1"],
    )
    env = env_of(render(spec))
    assert env["NCCL_DEBUG"] == "WARN" and env["NCCL_SOCKET_IFNAME"] == "=eth0" and env["X"] == "1"
    names = [e["name"] for e in container(render(spec))["env"]]
    assert len(names) == len(set(names))


def test_socket_profile_has_no_privilege() -> None:
    objs = render(_SPECS["job-8x4"])
    sc = container(objs)["securityContext"]
    assert sc == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    pod = pod_spec(objs)
    assert not {"hostNetwork", "hostIPC", "hostPID"} & pod.keys()


def test_rdma_profile_adds_only_ipc_lock_and_the_rdma_resource() -> None:
    objs = render(_SPECS["job-2x8-ib"])
    c = container(objs)
    assert c["securityContext"]["capabilities"] == {"add": ["IPC_LOCK"], "drop": ["ALL"]}
    assert "privileged" not in c["securityContext"]
    assert c["resources"]["limits"]["rdma/ib"] == c["resources"]["requests"]["rdma/ib"] == "1"
    assert not {"hostNetwork", "hostIPC"} & pod_spec(objs).keys()


def test_host_profile_shares_node_network_and_ipc() -> None:
    pod = pod_spec(_objs_for("host"))
    assert pod["hostNetwork"] is True and pod["hostIPC"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "podAntiAffinity" not in pod["affinity"]  # --spread none
    assert "privileged" not in pod["containers"][0]["securityContext"]


def test_privileged_only_when_asked() -> None:
    objs = _objs_for("image-privileged")
    assert container(objs)["securityContext"] == {"privileged": True}
    for name in ("job-8x4", "job-2x8-ib", "everything", "host"):
        assert "privileged" not in container(_objs_for(name)).get("securityContext", {})


def test_everything_option_lands_where_it_belongs() -> None:
    objs = _objs_for("everything")
    job = by_kind(objs)["Job"]
    pod = pod_spec(objs)
    c = container(objs)
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert job["metadata"]["labels"]["team"] == "infra"
    assert job["metadata"]["annotations"] == {
        "owner": "someone@example.com",
        "nccl-k8s/rendered-for": "nccl-everything",
        "nccl-k8s/pod-security": "privileged",
    }
    # --pod-annotation and --network-attachment land on the pods only, beside --annotation and
    # the mesh opt-outs (which the user's own value overrides); not on ConfigMap or Service.
    assert job["spec"]["template"]["metadata"]["annotations"] == {
        "sidecar.istio.io/inject": "false",
        "linkerd.io/inject": "enabled",
        "scheduling.k8s.io/group-name": "nccl-everything",
        "nccl-k8s/rendered-for": "nccl-everything",
        "nccl-k8s/user-env": "NCCL_DEBUG,NCCL_IB_GID_INDEX",  # which values bundle redacts
        "k8s.v1.cni.cncf.io/networks": "sriov-a,sriov-b",
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9400",
        "prometheus.io/path": "/metrics",
        "owner": "someone@example.com",
        "example.com/note": "rail-optimized",
    }
    # --pod-monitor: the run's pods, by their named port.
    assert by_kind(objs)["PodMonitor"]["spec"] == {
        "selector": {"matchLabels": pod_selector(objs)},
        "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics"}],
    }
    for kind in ("ConfigMap", "Service", "PodGroup", "PodMonitor"):
        assert by_kind(objs)[kind]["metadata"]["annotations"] == {
            "owner": "someone@example.com",
            "nccl-k8s/rendered-for": "nccl-everything",
        }
    assert (job["spec"]["activeDeadlineSeconds"], job["spec"]["ttlSecondsAfterFinished"]) == (
        7200,
        600,
    )
    assert job["spec"]["backoffLimit"] == 0
    # --scheduler beats the gang's scheduler name; the PodGroup carries the priority class.
    assert pod["schedulerName"] == "hami-scheduler" and pod["priorityClassName"] == "benchmark"
    assert by_kind(objs)["PodGroup"]["spec"] == {
        "minMember": 2,
        "minResources": {"nvidia.com/gpu": "16", "rdma/ib": "2", "rdma/ib_b": "4", "cpu": "64",
                         "memory": "512Gi"},
        "priorityClassName": "benchmark",
    }  # fmt: skip
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "pool": "a"}
    assert pod["tolerations"][2] == {"key": "spot", "operator": "Exists"}
    assert "preferredDuringSchedulingIgnoredDuringExecution" in pod["affinity"]["podAntiAffinity"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    # --qos guaranteed: every resource limited at its request.
    assert c["resources"]["requests"] == c["resources"]["limits"]
    assert c["resources"]["requests"]["cpu"] == "32"
    assert c["resources"]["requests"]["memory"] == "256Gi"
    assert c["ports"] == [
        {
            "name": "rendezvous",
            "containerPort": job_spec_port(objs),
            "hostPort": job_spec_port(objs),
            "protocol": "TCP",
        },
        # Under hostNetwork the metrics port is the node's too.
        {"name": "metrics", "containerPort": 9400, "hostPort": 9400, "protocol": "TCP"},
    ]
    assert c["args"][c["args"].index("nccl_k8s.bench") + 1 :][:2] == ["--metrics-port", "9400"]
    assert {"name": "results", "mountPath": "/workspace/results"} in c["volumeMounts"]
    assert c["args"][-2:] == ["--json", "/workspace/results/nccl-everything.json"]
    assert env_of(objs)["NCCL_DEBUG"] == "WARN"


def job_spec_port(objs: list[dict[str, Any]]) -> int:
    return int(by_kind(objs)["Service"]["spec"]["ports"][0]["port"])


# --- StatefulSet mode ---------------------------------------------------------------------------


def test_statefulset_is_parallel_with_the_headless_service() -> None:
    objs = render(_SPECS["statefulset-2x8"])
    sts = by_kind(objs)["StatefulSet"]["spec"]
    assert sts["serviceName"] == by_kind(objs)["Service"]["metadata"]["name"]
    assert sts["podManagementPolicy"] == "Parallel" and sts["replicas"] == 2
    assert sts["selector"]["matchLabels"].items() <= sts["template"]["metadata"]["labels"].items()
    assert pod_spec(objs)["restartPolicy"] == "Always"


def test_statefulset_script_ranks_by_ordinal_and_lets_the_engine_sweep(tmp_path: Path) -> None:
    """Run the pod's shell script as the kubelet would, with a torchrun that records its argv:
    one torchrun, whose engine sweeps until stopped; its failure is the container's."""
    spec = build_run_spec(
        nodes=2, gpus_per_node=8, workload="statefulset", interval="90s", run_id="soak", pvc="res",
        engine_args=["-b", "8", "--ops", "all_reduce,broadcast", "-d", "float"],
    )  # fmt: skip
    c = container(render(spec))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    fake = bindir / "torchrun"
    fake.write_text(
        "#!/bin/sh\n"
        f'for a in "$@"; do echo "$a"; done >> {calls}\n'
        f'echo --- >> {calls}\n'
        "exit 3\n"
    )  # fmt: skip
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    kubelet_expand = [a.replace("$$(", "$(") for a in c["command"] + c["args"]]
    wrapper = next(e["value"] for e in c["env"] if e["name"] == "NCCL_K8S_WRAPPER")
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "POD_NAME": "soak-1", "NCCL_K8S_WRAPPER": wrapper}
    run = subprocess.run(kubelet_expand, env=env, capture_output=True, text=True, timeout=30)
    assert run.returncode == 3  # not swallowed: the kubelet sees it and restarts the container
    sweeps = [s.strip().splitlines() for s in calls.read_text().split("---") if s.strip()]
    assert len(sweeps) == 1
    argv = sweeps[0]
    assert "--node-rank=1" in argv
    assert argv[argv.index("-m") :] == [
        "-m", "nccl_k8s.bench", "--sweeps", "0", "--sweep-interval", "90",
        "--metrics-port", "8080", "--gpus-requested", "8", "-b", "8", "--ops",
        "all_reduce,broadcast", "-d", "float", "--json", "/workspace/results/soak.json",
    ]  # fmt: skip


# --- ownership --------------------------------------------------------------------------------


def test_attach_owner_makes_deletion_cascade_from_the_workload() -> None:
    objs = render(_SPECS["job-8x4"])
    created = copy.deepcopy(objs[-1])
    created["metadata"]["uid"] = "0b7d1c52-1111-2222-3333-444455556666"
    owned = attach_owner(objs, created)
    ref = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "nccl-golden-8x4",
        "uid": created["metadata"]["uid"],
    }
    assert [o["metadata"].get("ownerReferences") for o in owned] == [[ref], [ref], [ref], None]
    assert all("ownerReferences" not in o["metadata"] for o in objs)  # inputs untouched
    assert attach_owner(owned, created) == owned  # idempotent
    for obj in owned:
        for version in K8S_VERSIONS[-1:]:
            kubernetes_validate.validate(obj, version, strict=True)


def test_attach_owner_needs_the_created_object() -> None:
    objs = render(_SPECS["job-8x4"])
    with pytest.raises(ValueError, match=r"has no metadata\.uid"):
        attach_owner(objs, objs[-1])


def test_json_output_is_a_kubectl_list() -> None:
    from nccl_k8s.cli.main import app

    result = CliRunner().invoke(app, ["render", "-o", "json", *CONFIGS["job-8x4"]])
    assert result.exit_code == 0
    doc = yaml.safe_load(result.stdout)
    assert doc["apiVersion"] == "v1" and doc["kind"] == "List"
    assert doc["items"] == render(_SPECS["job-8x4"])


def test_engine_flags_pass_through_after_the_separator_only() -> None:
    """After `--` every flag is the engine's (-n is nccl-tests' iterations, not the namespace);
    before it an engine flag is refused in one line, never taken silently."""
    from nccl_k8s.cli.main import app

    base = ["render", "--world-size", "16", "--gpus-per-node", "8", "--run-id", "r"]
    a = CliRunner().invoke(app, [*base, "--", "-b", "8", "-e", "1G", "-n", "5"])
    assert a.exit_code == 0, a.output
    args_a = container(list(yaml.safe_load_all(a.stdout)))["args"]
    assert args_a[args_a.index("nccl_k8s.bench") + 1 :] == [
        "--metrics-port", "8080", "--gpus-requested", "8", "-b", "8", "-e", "1G", "-n", "5",
    ]  # fmt: skip
    assert "namespace" not in yaml.safe_load_all(a.stdout).__next__()["metadata"]

    b = CliRunner().invoke(app, [*base, "-b", "8", "-e", "1G", "-n", "50"])
    assert b.exit_code == 2 and b.stdout == ""
    assert b.stderr.splitlines() == [
        "error: No such option: -b; engine flags go after `--`, e.g. `nccl-k8s render "
        "--world-size 16 -- -b 8 -e 1G` (see `nccl-k8s render --help`)"
    ]


def test_render_help_names_every_deploy_option() -> None:
    from nccl_k8s.cli.main import app

    result = CliRunner().invoke(app, ["render", "--help"], terminal_width=200)
    assert result.exit_code == 0
    for flag in (
        "--world-size", "--gpus-per-node", "--nodes", "--image", "--engine", "--workload", "--interval",
        "--scheduler", "--node-selector", "--toleration", "--spread", "--gpu-resource", "--rdma-resource",
        "--network", "--host-network", "--security", "--cpu", "--memory", "--shm-size", "--env", "--pvc",
        "--queue", "--priority-class", "--active-deadline", "--ttl", "--gang", "--qos", "--network-attachment", "--run-id",
        "--label", "--annotation", "--pod-annotation", "--namespace", "--output", "ENGINE_FLAGS",
    ):  # fmt: skip
        assert flag in result.stdout, flag


def test_spec_options_are_reusable_by_another_command() -> None:
    """What `deploy` will do: the same options and spec, plus its own flags."""
    from nccl_k8s.cli._options import with_spec_options

    seen: dict[str, object] = {}

    def fake_deploy(spec: RunSpec, wait: bool = True) -> None:
        seen.update(spec=spec, wait=wait)

    app = typer.Typer()
    app.callback()(lambda: None)
    app.command("deploy")(with_spec_options(fake_deploy))
    argv = ["deploy", "--world-size", "4", "--gpus-per-node", "2", "--run-id", "r", "--no-wait"]
    result = CliRunner().invoke(app, [*argv, "--", "--backend", "gloo", "--ops", "all", "-b", "1K"])
    assert result.exit_code == 0, result.output
    assert seen["wait"] is False
    assert seen["spec"] == build_run_spec(
        world_size=4,
        gpus_per_node=2,
        run_id="r",
        engine_args=["--backend", "gloo", "--ops", "all", "-b", "1K"],
    )
    help_text = CliRunner().invoke(app, ["deploy", "--help"], terminal_width=200).stdout
    assert "--no-wait" in help_text and "--rdma-resource" in help_text


# --- issue 11: a deploy that behaves on a production GPU cluster -------------------------------


def test_pods_request_cpu_and_memory_and_limit_memory_only_by_default() -> None:
    res = container(render(_SPECS["job-8x4"]))["resources"]
    # 4 GPUs: 2 cores and 4Gi each, plus the 8Gi /dev/shm that is charged to the pod's memory.
    assert res["requests"] == {"nvidia.com/gpu": "4", "cpu": "8", "memory": "24Gi"}
    assert res["limits"] == {"nvidia.com/gpu": "4", "memory": "24Gi"}  # Burstable: no CPU cap


def test_mesh_sidecars_are_kept_out_of_the_pods() -> None:
    meta = render(_SPECS["job-8x4"])[-1]["spec"]["template"]["metadata"]
    assert meta["labels"]["sidecar.istio.io/inject"] == "false"
    assert meta["annotations"]["sidecar.istio.io/inject"] == "false"
    assert meta["annotations"]["linkerd.io/inject"] == "disabled"


def test_host_network_declares_the_rendezvous_port_as_a_host_port() -> None:
    objs = _objs_for("host")
    port = job_spec_port(objs)
    assert container(objs)["ports"] == [
        {"name": "rendezvous", "containerPort": port, "hostPort": port, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 8080, "hostPort": 8080, "protocol": "TCP"},
    ]
    # Off the host network: the metrics port is declared, no host port at all.
    assert container(render(_SPECS["job-8x4"]))["ports"] == [
        {"name": "metrics", "containerPort": 8080, "protocol": "TCP"}
    ]


def test_a_disrupted_rank_fails_the_whole_gang() -> None:
    rules = by_kind(render(_SPECS["job-8x4"]))["Job"]["spec"]["podFailurePolicy"]["rules"]
    assert rules[0] == {
        "action": "FailJob",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }
    assert all(r["action"] == "FailJob" for r in rules)


@pytest.mark.parametrize(
    ("gang", "api_version", "scheduler"),
    [
        ("volcano", "scheduling.volcano.sh/v1beta1", "volcano"),
        ("coscheduling", "scheduling.x-k8s.io/v1alpha1", "scheduler-plugins-scheduler"),
        ("koordinator", "scheduling.sigs.k8s.io/v1alpha1", "koord-scheduler"),
    ],
)
def test_gang_renders_a_pod_group_the_pods_belong_to(
    gang: str, api_version: str, scheduler: str
) -> None:
    objs = render(build_run_spec(world_size=32, gpus_per_node=8, run_id="g", gang=gang))
    assert [o["kind"] for o in objs] == ["ConfigMap", "NetworkPolicy", "Service", "PodGroup", "Job"]
    group = by_kind(objs)["PodGroup"]
    assert group["apiVersion"] == api_version and group["metadata"]["name"] == "g"
    assert group["spec"] == {
        "minMember": 4,
        "minResources": {"nvidia.com/gpu": "32", "cpu": "64", "memory": "160Gi"},
    }
    template = objs[-1]["spec"]["template"]
    assert template["spec"]["schedulerName"] == scheduler
    if gang == "volcano":
        assert template["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "g"
    elif gang == "coscheduling":
        assert template["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "g"
    else:  # Koordinator's gang plugin reads the scheduler-plugins label of its original group
        assert template["metadata"]["labels"]["pod-group.scheduling.sigs.k8s.io"] == "g"


def test_render_names_the_pod_security_level_the_pods_need() -> None:
    socket = dump(render(_SPECS["job-8x4"]))
    head = "# Pod Security Admission (pod-security.kubernetes.io/enforce): these pods pass the "
    assert socket.startswith(head + '"restricted"\n# level (the strictest, so every namespace')
    ib = dump(render(_SPECS["job-2x8-ib"]))
    assert ib.startswith(head + '"privileged"\n# level (only: host namespaces, a hostPort')
    assert by_kind(render(_SPECS["job-2x8-ib"]))["Job"]["metadata"]["annotations"] == {
        "nccl-k8s/rendered-for": "nccl-golden-2x8-ib",
        "nccl-k8s/pod-security": "privileged",
    }


def test_socket_profile_runs_as_a_user_with_a_writable_home() -> None:
    objs = render(_SPECS["job-8x4"])
    assert pod_spec(objs)["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "fsGroup": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert env_of(objs)["HOME"] == "/tmp"
    assert "HOME" not in env_of(render(_SPECS["job-2x8-ib"]))  # rdma runs as the image's root


def _wrap(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    """The pod wrapper around a command, as the container runs it."""
    return subprocess.run(
        [sys.executable, "-c", POD_WRAPPER, sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )


def test_the_pod_carries_the_zipapps_digest_and_the_wrapper_checks_it_first(
    tmp_path: Path,
) -> None:
    """Issue 36: whoever may replace ConfigMaps could swap the engine before the pods start; the
    rendered digest is the ConfigMap's zipapp's, and the wrapper runs nothing when they differ."""
    objs = render(_SPECS["job-8x4"])
    zipapp = base64.b64decode(by_kind(objs)["ConfigMap"]["binaryData"]["nccl_k8s.pyz"])
    env = env_of(objs)
    assert env[ENGINE_DIGEST_ENV] == f"{hashlib.sha256(zipapp).hexdigest()}  {env['PYTHONPATH']}"
    assert ENGINE_DIGEST_ENV not in env_of(render(_SPECS["job-2x8-slim"]))  # the image's own
    engine = tmp_path / "nccl_k8s.pyz"
    engine.write_bytes(zipapp)
    ran = tmp_path / "ran"
    script = f"open({str(ran)!r}, 'w').write('yes'); print('hello')"
    good = f"{hashlib.sha256(zipapp).hexdigest()}  {engine}"
    for value, ok in ((good, True), ("0" * 64 + f"  {engine}", False),
                      (f"{hashlib.sha256(zipapp).hexdigest()}  {tmp_path}/gone.pyz", False)):  # fmt: skip
        ran.unlink(missing_ok=True)
        run = subprocess.run(
            [sys.executable, "-c", POD_WRAPPER, sys.executable, "-c", script],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
            env={**os.environ, ENGINE_DIGEST_ENV: value},
        )  # fmt: skip
        assert (run.returncode == 0) == ok == ran.exists(), run.stderr
        if not ok:
            assert run.stdout == "" and len(run.stderr.splitlines()) == 1, run.stderr
            assert "refusing to run it" in run.stderr and str(engine.parent) in run.stderr
    engine.write_bytes(zipapp + b"x")  # swapped after the render
    run = subprocess.run([sys.executable, "-c", POD_WRAPPER, sys.executable, "-c", script],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, ENGINE_DIGEST_ENV: good})  # fmt: skip
    assert run.returncode == 1 and not ran.exists()
    assert hashlib.sha256(zipapp + b"x").hexdigest() in run.stderr


def test_wrapper_streams_then_replays_results_and_an_nccl_digest_last(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "print('NCCL_K8S_RESULT {\"v\": 1, \"kind\": \"meta\"}')\n"
        "for i in range(1000):\n"
        "    print(f'host-0:41:{50 + i % 3} [0] NCCL INFO Channel {i:02d}/0 : 0[0] -> 1[1] via NET/IB/0')\n"
        "print('host-0:41:41 [0] transport.cc:9 NCCL WARN something odd')\n"
        "print('NCCL_K8S_RESULT {\"v\": 1, \"kind\": \"row\"}')\n"
        "sys.stdout.write('no newline at the end')\n"
    )  # fmt: skip
    run = _wrap(tmp_path, script)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    # Everything streamed as it came, then the digest, then the results block, last.
    assert lines[0].startswith("NCCL_K8S_RESULT") and lines[1003] == "no newline at the end"
    assert lines[1004] == "NCCL_K8S_BEGIN nccl 401"  # 400 INFO of that process, every WARN
    assert lines[1005].endswith("Channel 00/0 : 0[0] -> 1[1] via NET/IB/0")
    assert lines[1405].endswith("NCCL WARN something odd")
    assert lines[1406] == "NCCL_K8S_END nccl 401"
    assert lines[-4:] == [
        "NCCL_K8S_BEGIN results 2",
        'NCCL_K8S_RESULT {"v": 1, "kind": "meta"}',
        'NCCL_K8S_RESULT {"v": 1, "kind": "row"}',
        "NCCL_K8S_END results 2",
    ]


def test_wrapper_keeps_a_failed_command_s_exit_code_and_last_lines(tmp_path: Path) -> None:
    script = "print('NCCL_K8S_RESULT {}')\nprint('rank 3: boom', flush=True)\nraise SystemExit(7)"
    run = _wrap(tmp_path, script)
    assert run.returncode == 7
    assert run.stdout.splitlines()[-1] == "rank 3: boom"  # no block after a failure
    killed = _wrap(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    assert killed.returncode == 128 + 9
