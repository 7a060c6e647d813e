"""Issue 36 (least privilege), render level: run ids and environment names that would rewrite
what the namespace or the renderer owns are refused before anything is sent, and the user's
values reach the container exactly as given."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from tests.cluster.expansion import expand
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.k8s import render
from nccl_k8s.k8s.rendering._names import APP_NAME, CONTAINER_NAME
from nccl_k8s.k8s.rendering._presets import pod_env
from nccl_k8s.spec import RESERVED_ENV, build_run_spec
from nccl_k8s.spec._model import RESERVED_RUN_IDS

SMALL = ["--world-size", "2", "--gpus-per-node", "1"]


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def one_line_exit_2(res: Any, *words: str) -> None:
    assert res.exit_code == 2, res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    for w in words:
        assert w in res.output, res.output


# ---- run ids -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rid", ["default", "kubernetes", "kube-system", "kube-root", "openshift-x", "nccl-k8s"]
)
@pytest.mark.parametrize("command", ["render", "deploy"])
def test_a_run_id_naming_the_namespaces_own_objects_is_refused(command: str, rid: str) -> None:
    """`--run-id default` made `kubectl apply` rewrite the namespace's default ServiceAccount
    (and cleanup delete it later); `nccl-k8s` the Role that `nccl-k8s rbac` grants."""
    # deploy: refused while the options are read, before any kubeconfig is even looked at.
    kube = ["--kubeconfig", "/nonexistent"] if command == "deploy" else []
    res = cli(command, "-n", "team", "--run-id", rid, *kube, *SMALL)
    one_line_exit_2(res, f'--run-id "{rid}": reserved (', "expected another run id")


def test_every_name_a_run_gives_its_objects_is_checked() -> None:
    """Every object of a run is named after its run id; none may equal a reserved name."""
    assert ("nccl-k8s", "the Role that `nccl-k8s rbac` grants its users") in RESERVED_RUN_IDS
    assert APP_NAME == "nccl-k8s"  # the Role's name in rendering._rbac
    for ok in ("defaults", "bench-default", "kubeflow", "my-kube-run"):
        res = cli("render", "-n", "team", "--run-id", ok, *SMALL)
        assert res.exit_code == 0, res.output


# ---- environment -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["MY-VAR", "a.b", "1X", "X Y", "A+B"])
def test_env_names_must_be_shell_names(name: str) -> None:
    res = cli("render", "-n", "team", "--env", f"{name}=1", *SMALL)
    one_line_exit_2(res, f'"{name}" is not a valid variable name', "shell name")


def renderer_env_names(spec_args: dict[str, Any], adopt: bool) -> set[str]:
    """The environment names the renderer sets itself in the engine's container: all of them
    but the presets and the user's (pod_env), which the user may replace."""
    spec = build_run_spec(world_size=2, gpus_per_node=1, run_id="r", **spec_args)
    names: set[str] = set()
    for obj in render(spec, adopt=adopt):
        pod = (obj.get("spec") or {}).get("template", {}).get("spec")
        for c in (pod or {}).get("containers", []):
            if c["name"] == CONTAINER_NAME:
                names |= {e["name"] for e in c.get("env", [])}
    return names - {k for k, _ in pod_env(spec)} - {"NCCL_K8S_METRICS_ADDR"}


@pytest.mark.parametrize("adopt", [False, True])
@pytest.mark.parametrize(
    "spec_args",
    [
        {},
        {"workload": "statefulset"},
        {"metrics_port": "8080"},
        {"workload": "statefulset", "metrics_port": "8080"},
        {"engine": "image", "image": "x/y:1"},
    ],
)
def test_every_name_the_renderer_sets_is_reserved(spec_args: dict[str, Any], adopt: bool) -> None:
    assert renderer_env_names(spec_args, adopt) <= RESERVED_ENV


@pytest.mark.parametrize(
    "name", ["NCCL_K8S_ADOPT", "POD_IP", "NCCL_K8S_NODE_NAME", "NCCL_K8S_RUN_ID", "POD_NAME"]
)
def test_reserved_env_names_are_refused(name: str) -> None:
    res = cli("render", "-n", "team", "--env", f"{name}=x", *SMALL)
    one_line_exit_2(res, f"{name} is set by nccl-k8s")


@pytest.mark.parametrize("value", ["$(POD_IP)", "a$$(HOME)b", "$$", "cost $5", "$(", "x$"])
def test_env_values_reach_the_container_as_given(value: str) -> None:
    """Kubernetes expands `$(VAR)` and reads `$$` as `$` in env values, as in args."""
    res = cli("render", "-n", "team", "--env", f"MY_VALUE={value}", *SMALL)
    assert res.exit_code == 0, res.output
    job = next(d for d in yaml.safe_load_all(res.output) if d and d["kind"] == "Job")
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    known = {"POD_IP": "10.0.0.7", "HOME": "/root"}
    assert expand(env["MY_VALUE"], known) == value


# ---- adoption: only what is the run's ----------------------------------------------------------


def wrapper_adopt(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, objects: dict[str, Any]) -> Any:
    """The wrapper's own `adopt` (the text that runs in the pod of index 0), against an API
    server of `objects` by URL path; returns the function and the list of patched paths."""
    import io
    import json
    import ssl
    import urllib.request

    from nccl_k8s.k8s.rendering._wrapper import ADOPT_TOKEN_DIR, ADOPTER

    for name, text in (("namespace", "team"), ("token", "t"), ("ca.crt", "")):
        (tmp_path / name).write_text(text)
    code = ADOPTER[ADOPTER.index("def adopt(plan):") : ADOPTER.index("\nindex = ")]
    code = code.replace(ADOPT_TOKEN_DIR, str(tmp_path))
    patched: list[str] = []

    class Answer(io.BytesIO):
        def __enter__(self) -> Any:
            return self

        def __exit__(self, *_: Any) -> None:
            pass

    def urlopen(req: Any, timeout: float, context: Any) -> Answer:
        path = req.full_url.split(":443", 1)[1]
        if req.get_method() == "PATCH":
            patched.append(path)
            objects[path]["metadata"].update(json.loads(req.data)["metadata"])
        return Answer(json.dumps(objects[path]).encode())

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(ssl, "create_default_context", lambda cafile: None)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "api")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    scope: dict[str, Any] = {}
    exec("import json, os, ssl, urllib.error, urllib.request\n" + code, scope)
    return scope["adopt"], patched


def test_adoption_leaves_an_object_of_the_same_name_that_is_not_the_runs(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any object of the right name used to be adopted (and so deleted with the Job)."""
    import json

    spec = build_run_spec(world_size=2, gpus_per_node=1, run_id="r", namespace="team")
    objs = render(spec, adopt=True)
    job = objs[-1]
    env = job["spec"]["template"]["spec"]["initContainers"][0]["env"]
    plan = json.loads(next(e["value"] for e in env if e["name"] == "NCCL_K8S_ADOPT"))
    served: dict[str, Any] = {}
    for o in objs:
        group = "apis" if "/" in o["apiVersion"] else "api"
        plural = o["kind"].lower() + "s"
        path = f"/{group}/{o['apiVersion']}/namespaces/team/{plural}/{o['metadata']['name']}"
        served[path] = {"metadata": {**o["metadata"], "uid": f"u-{plural}",
                                     "resourceVersion": "1"}}  # fmt: skip
    # The user's Service of that name: the run's labels copied, but no render mark.
    svc = next(p for p in served if "/services/" in p)
    served[svc]["metadata"]["annotations"] = {}
    # A ConfigMap of another run's rendering.
    cm = next(p for p in served if "/configmaps/" in p)
    served[cm]["metadata"]["labels"] = {**served[cm]["metadata"]["labels"],
                                        "app.kubernetes.io/instance": "other"}  # fmt: skip
    adopt, patched = wrapper_adopt(tmp_path, monkeypatch, served)
    line = adopt(plan)
    assert svc not in patched and cm not in patched
    assert "ownerReferences" not in served[svc]["metadata"]
    assert "Service/r: not this run's" in line and "ConfigMap/r-engine: not this run's" in line
    assert sorted(p.rsplit("/", 2)[1] for p in patched) == [
        "rolebindings", "roles", "serviceaccounts"
    ]  # fmt: skip


# ---- --security and the platforms --------------------------------------------------------------

ESCALATING = ("nebius", "oke-roce")


def pods_of(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o["spec"]["template"]["spec"] for o in objs if o["kind"] in ("Job", "StatefulSet")]


def test_the_escalating_platforms_are_the_ones_that_need_privileged_or_host_network() -> None:
    from nccl_k8s.spec.platforms import PLATFORMS

    assert tuple(n for n, p in PLATFORMS.items() if p.escalation) == ESCALATING


@pytest.mark.parametrize("platform", ESCALATING)
@pytest.mark.parametrize("security", ["socket", "rdma", "host"])
def test_an_explicit_lesser_security_is_refused_with_the_reason(
    platform: str, security: str
) -> None:
    """It used to render `privileged: true` whatever --security said."""
    res = cli("render", "-n", "team", "--platform", platform, "--security", security,
              "--rdma-resource", "rdma/ib=1", *SMALL)  # fmt: skip
    one_line_exit_2(
        res,
        f"--security {security} --platform {platform}: its pods need a privileged container",
        "expected --security privileged, or no --security",
    )


@pytest.mark.parametrize("platform", ESCALATING)
@pytest.mark.parametrize("security", [[], ["--security", "privileged"]])
def test_a_named_platform_with_privileged_or_no_security_renders_privileged(
    platform: str, security: list[str]
) -> None:
    res = cli("render", "-n", "team", "--platform", platform, *security, *SMALL)
    assert res.exit_code == 0, res.output
    pod = pods_of([d for d in yaml.safe_load_all(res.output) if d])[0]
    assert pod["containers"][0]["securityContext"]["privileged"] is True


def gpu_node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


@pytest.mark.parametrize(
    ("platform", "labels"),
    [
        ("nebius", {"topology.nebius.com/gpu-cluster-id": "computegpucluster-e00abc"}),
        ("oke-roce", {"node.kubernetes.io/instance-type": "BM.GPU.H200.8"}),
    ],
)
def test_platform_auto_never_escalates_and_says_how_to_ask(
    platform: str, labels: dict[str, str]
) -> None:
    """`--platform auto` used to make a plain deploy privileged (and host-networked) because
    of node labels alone."""
    from nccl_k8s.k8s.preflight._platforms import node_facts, resolve
    from nccl_k8s.spec.platforms import PLATFORMS, detect

    nodes = [gpu_node(f"n{i}", labels) for i in range(2)]
    assert detect(node_facts(nodes, []), PLATFORMS).platform == platform  # what the nodes say
    spec = build_run_spec(world_size=2, gpus_per_node=1, run_id="r", platform="auto")
    resolved = resolve(spec, nodes, [])
    assert resolved.spec.platform == "generic"
    assert f"pass --platform {platform} to use it" in resolved.note
    assert "never chooses on its own" in resolved.note
    for pod in pods_of(render(resolved.spec)):
        assert not pod.get("hostNetwork")
        for c in pod["containers"] + pod.get("initContainers", []):
            assert not c.get("securityContext", {}).get("privileged"), c["name"]


# ---- tokens ------------------------------------------------------------------------------------


CLI_PLATFORMS = ("generic", "gke-tcpxo", "oke-roce")


def every_variant() -> list[dict[str, Any]]:
    """Every platform (with what it needs to render), workload and gang."""
    from nccl_k8s.spec import GANGS
    from nccl_k8s.spec.platforms import PLATFORMS

    needs: dict[str, dict[str, Any]] = {"eks-efa": {"instance_type": "p5.48xlarge"}, "gke-tcpx": {"instance_type":
             "a3-highgpu-8g"}, "gke-tcpxo": {"instance_type": "a3-megagpu-8g"},
             "gke-rdma": {"instance_type": "a3-ultragpu-8g"}, "aks-ib": {"instance_type":
             "Standard_ND96isr_H100_v5"}, "oke-roce": {"instance_type": "BM.GPU.H100.8"},
             "together": {"rdma_resource": ["rdma/ib=1"]}}  # fmt: skip
    out: list[dict[str, Any]] = []
    for platform in PLATFORMS:
        for workload in ("job", "statefulset"):
            for gang in (None, *GANGS):
                out.append({"platform": platform, "workload": workload, "gang": gang,
                            **needs.get(platform, {})})  # fmt: skip
    return out


def pod_specs(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o["spec"]["template"]["spec"] for o in objs if "template" in o.get("spec", {})]


def token_mounts(pod: dict[str, Any]) -> dict[str, list[str]]:
    """Per container (init containers too), the volumes it mounts that hold an API token."""
    tokens = {v["name"] for v in pod.get("volumes", [])
              if any("serviceAccountToken" in s for s in v.get("projected", {}).get("sources", []))
              or "kube-api-access" in v["name"]}  # fmt: skip
    return {
        c["name"]: [m["name"] for m in c.get("volumeMounts", []) if m["name"] in tokens]
        for c in pod.get("initContainers", []) + pod["containers"]
    }


def test_a_default_render_mounts_no_token_anywhere() -> None:
    """Issue 36: `render` used to mount the adoption token in every container of every pod."""
    variants = every_variant()
    assert len(variants) >= 10 * 2 * 4
    for v in variants:
        spec = build_run_spec(world_size=16, gpus_per_node=8, run_id="r", **v)
        # The CLI's default once per platform (it is the same function): the suite stays fast.
        by_cli = v["workload"] == "job" and v["gang"] is None and v["platform"] in CLI_PLATFORMS
        for objs in (render(spec), *([rendered_by_cli(spec)] if by_cli else [])):
            pods = pod_specs(objs)
            assert pods, v
            for pod in pods:
                assert pod["automountServiceAccountToken"] is False, v
                assert "serviceAccountName" not in pod, v
                assert not any(token_mounts(pod).values()), v
            assert not [o for o in objs if o["kind"] in ("ServiceAccount", "Role", "RoleBinding")]


def rendered_by_cli(spec: Any) -> list[dict[str, Any]]:
    """What `nccl-k8s render` prints for the spec's options (its default, no --adopt)."""
    args = ["render", "--run-id", spec.run_id, "--world-size", "16", "--gpus-per-node", "8",
            "--platform", spec.platform, "--workload", spec.workload]  # fmt: skip
    if spec.gang:
        args += ["--gang", spec.gang]
    if spec.instance_type:
        args += ["--instance-type", spec.instance_type]
    res = cli(*args)
    assert res.exit_code == 0, res.output
    return [d for d in yaml.safe_load_all(res.output) if d]


def test_with_adopt_the_token_is_in_one_init_container_only() -> None:
    for v in every_variant():
        spec = build_run_spec(world_size=16, gpus_per_node=8, run_id="r", **v)
        (pod,) = pod_specs(render(spec, adopt=True))
        assert pod["automountServiceAccountToken"] is False and pod["serviceAccountName"] == "r"
        mounts = token_mounts(pod)
        assert {c: m for c, m in mounts.items() if m} == {
            "nccl-k8s-adopt": ["nccl-k8s-adopt-token"]
        }
        adopter = pod["initContainers"][0]
        assert adopter["name"] == "nccl-k8s-adopt"
        assert adopter["securityContext"]["privileged"] is False
        assert adopter["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert "restartPolicy" not in adopter  # a short init container, not a sidecar
        for c in pod["containers"] + pod["initContainers"][1:]:
            assert "NCCL_K8S_ADOPT" not in [e["name"] for e in c.get("env", [])], c["name"]
