"""`nccl-k8s rbac` and doctor's permissions check (issue 24, acceptance 7).

The Role is proven, not guessed: on a test cluster that enforces RBAC for users other than the
admin, a user bound to exactly what `nccl-k8s rbac` prints runs the commands, every request it
sends is recorded (verb, group, resource, subresource, scope), and the recorded set must equal
the permissions table: a request the table lacks is a 403 a user would meet, an entry no command
uses is a permission granted for nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from tests.cluster import rbac as cluster_rbac
from tests.cluster.cluster import Cluster
from tests.conftest import fresh_namespace
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.k8s.api._access import ACCESS, RENDER_APPLY
from nccl_k8s.k8s.nodes._labels import BUSBW_KEY, CHECKED_AT_KEY, LABEL_KEY, RUN_KEY, TAINT_KEY
from nccl_k8s.k8s.rendering._nodepolicy import policy_name
from nccl_k8s.k8s.rendering._rbac import Subject

K8S_VERSIONS = ("1.29", "1.33", "1.37")
ENGINE = ["--", "--backend", "gloo", "--ops", "all_reduce", "-b", "1K", "-e", "4K",
          "-c", "1", "-w", "1", "-n", "2"]  # fmt: skip
SMALL = ["--world-size", "2", "--gpus-per-node", "1"]
CRDS = Path(__file__).parent / "data" / "crds"


def nccl(*args: str, kubeconfig: Path | None = None) -> Any:
    """`nccl-k8s ARGS` in this process, as the user of `kubeconfig` (engine flags stay last)."""
    cut = args.index("--") if "--" in args else len(args)
    kc = ["--kubeconfig", str(kubeconfig)] if kubeconfig is not None else []
    return CliRunner().invoke(app, [*args[:cut], *kc, *args[cut:]])


def rbac_docs(*args: str) -> list[dict[str, Any]]:
    return rbac_docs_of(nccl("rbac", *args))


def rbac_docs_of(res: Any) -> list[dict[str, Any]]:
    assert res.exit_code == 0, res.output
    return [d for d in yaml.safe_load_all(res.output) if d]


# ---- the output --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_object_passes_the_strict_upstream_schema(version: str) -> None:
    docs = rbac_docs("-n", "team-a", "--service-account", "ci/bench", "--cluster-reads",
                     "--create-namespace", "--label-nodes", "--render-apply",
                     "--remove-schedule")  # fmt: skip
    assert [(d["kind"], d["metadata"]["name"]) for d in docs[::2]] == [
        ("Role", "nccl-k8s"),
        ("ClusterRole", "nccl-k8s:cluster-reads"),
        ("ClusterRole", "nccl-k8s:create-namespace"),
        ("ClusterRole", "nccl-k8s:label-nodes"),
        ("ClusterRole", "nccl-k8s:remove-schedule"),
        ("ValidatingAdmissionPolicy", policy_name(Subject("ServiceAccount", "bench", "ci"))),
    ]
    assert docs[3]["metadata"]["name"] == "nccl-k8s:cluster-reads:serviceaccount:ci:bench"
    for doc in docs:
        if doc["apiVersion"].startswith("admissionregistration") and version < "1.30":
            continue  # admissionregistration.k8s.io/v1's policies are GA from 1.30 on
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_rules_are_the_table_and_the_subject_is_named_once() -> None:
    role, binding = rbac_docs("-n", "team-a", "--user", "alice@example.com")
    assert role["metadata"] == {"name": "nccl-k8s", "namespace": "team-a",
                                "labels": {"app.kubernetes.io/name": "nccl-k8s"}}  # fmt: skip
    table = [a for a in ACCESS if a.feature == "run" and a.scope == "namespace"]
    assert role["rules"] == [
        {"apiGroups": [a.group], "resources": [a.resource], "verbs": sorted(a.verbs)} for a in table
    ]
    jobs = next(r for r in role["rules"] if r["resources"] == ["jobs"])
    assert jobs == {"apiGroups": ["batch"], "resources": ["jobs"],
                    "verbs": ["create", "delete", "list", "patch", "watch"]}  # fmt: skip
    assert binding["subjects"] == [
        {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice@example.com"}
    ]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "nccl-k8s"}  # fmt: skip
    # A ServiceAccount without NS/ is in -n's namespace.
    _, sa = rbac_docs("-n", "team-a", "--service-account", "bench")
    assert sa["subjects"] == [{"kind": "ServiceAccount", "name": "bench", "namespace": "team-a"}]
    # Nothing cluster-scoped unless asked.
    assert all(d["kind"] in ("Role", "RoleBinding") for d in rbac_docs("-n", "a", "--group", "g"))


def label_nodes_policy(*who: str) -> tuple[dict[str, Any], dict[str, Any]]:
    docs = rbac_docs("-n", "a", *who, "--label-nodes")
    vap = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy")
    binding = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding")
    return vap, binding


@pytest.mark.parametrize(
    ("who", "condition"),
    [
        (["--user", "alice@example.com"], "request.userInfo.username == 'alice@example.com'"),
        (["--user", "o'brien\\x"], "request.userInfo.username == 'o\\'brien\\\\x'"),
        (["--group", "gpu-ops"], "'gpu-ops' in request.userInfo.groups"),
        (["--service-account", "ci/bench"],
         "request.userInfo.username == 'system:serviceaccount:ci:bench'"),
    ],
)  # fmt: skip
def test_label_nodes_prints_a_policy_for_the_subjects_node_updates(
    who: list[str], condition: str
) -> None:
    """Issue 36: --label-nodes granted patch on every label and taint of every node; the
    ValidatingAdmissionPolicy limits the subject's node updates to our label and taint."""
    vap, binding = label_nodes_policy(*who)
    for doc in (vap, binding):
        assert doc["apiVersion"] == "admissionregistration.k8s.io/v1"
        kubernetes_validate.validate(doc, "1.33", strict=True)
    spec = vap["spec"]
    # Only the subject's UPDATE (a PATCH is one) of nodes, nothing else, nobody else.
    assert spec["matchConstraints"] == {"resourceRules": [
        {"apiGroups": [""], "apiVersions": ["*"], "operations": ["UPDATE"],
         "resources": ["nodes"]}]}  # fmt: skip
    assert [c["expression"] for c in spec["matchConditions"]] == [condition]
    assert spec["failurePolicy"] == "Fail"
    assert binding["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}
    text = json.dumps(spec)
    # The keys nodes check writes, and no other key of ours.
    assert f"'{LABEL_KEY}'" in text and f"'{TAINT_KEY}'" in text
    assert set(re.findall(r"nccl-k8s/[a-z-]+", text)) == {
        LABEL_KEY, CHECKED_AT_KEY, BUSBW_KEY, RUN_KEY, TAINT_KEY}  # fmt: skip
    # Without --label-nodes, no policy.
    assert not [d for d in rbac_docs("-n", "a", *who) if "admission" in d["apiVersion"]]


def test_two_subjects_get_two_policies_named_as_names_may_be() -> None:
    names = {label_nodes_policy("--user", u)[0]["metadata"]["name"] for u in ("A/b", "a-b", "a%b")}
    assert len(names) == 3
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", n) and len(n) <= 253 for n in names)


def _admit(vap: dict[str, Any], old: dict[str, Any], new: dict[str, Any], user: str) -> str:
    """The policy's answer to `user` updating node `old` to `new`, with a CEL interpreter."""
    import celpy  # a dev dependency
    from celpy.adapter import json_to_cel

    env = celpy.Environment()

    def run(expr: str, act: dict[str, Any]) -> Any:
        return env.program(env.compile(expr)).evaluate(act)

    act = {"object": json_to_cel(new), "oldObject": json_to_cel(old),
           "request": json_to_cel({"userInfo": {"username": user, "groups": []}})}  # fmt: skip
    if not all(run(c["expression"], act) for c in vap["spec"]["matchConditions"]):
        return "not matched"
    act["variables"] = celpy.celtypes.MapType(
        {
            celpy.celtypes.StringType(v["name"]): run(v["expression"], act)
            for v in vap["spec"]["variables"]
        }
    )
    denied = [v["message"] for v in vap["spec"]["validations"] if not run(v["expression"], act)]
    return "; ".join(denied) or "allowed"


def test_the_policy_allows_our_label_and_taint_and_denies_any_other_change() -> None:
    vap, _ = label_nodes_policy("--user", "alice")
    old = {"metadata": {"name": "n1", "labels": {"zone": "a"}, "annotations": {"x": "1"}},
           "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]}}  # fmt: skip

    def changed(edit: Any) -> dict[str, Any]:
        new = json.loads(json.dumps(old))
        edit(new)
        return new

    ours = changed(lambda n: (n["metadata"]["labels"].update({LABEL_KEY: "bad",
                                                              CHECKED_AT_KEY: "1765000000",
                                                              BUSBW_KEY: "9.8",
                                                              RUN_KEY: "nodes-check-1a2b"}),
                              n["spec"]["taints"].append(
                                  {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"})))  # fmt: skip
    assert _admit(vap, old, ours, "alice") == "allowed"
    assert _admit(vap, ours, old, "alice") == "allowed"  # taken off again
    cases = {
        "label": lambda n: n["metadata"]["labels"].update({"zone": "b"}),
        "label removed": lambda n: n["metadata"]["labels"].pop("zone"),
        "label of ours not written": lambda n: n["metadata"]["labels"].update({"nccl-k8s/x": "1"}),
        "taint": lambda n: n["spec"].update({"taints": []}),
        "spec.unschedulable": lambda n: n["spec"].update({"unschedulable": True}),
        "metadata.annotations": lambda n: n["metadata"]["annotations"].update({"x": "2"}),
    }
    for what, edit in cases.items():
        answer = _admit(vap, old, changed(edit), "alice")
        assert answer.startswith("nccl-k8s may") and what.split()[0] in answer, (what, answer)
        assert _admit(vap, old, changed(edit), "bob") == "not matched"


def test_the_policy_keys_are_the_keys_nodes_check_writes() -> None:
    from nccl_k8s.k8s.rendering._nodepolicy import NODE_LABEL_KEYS, NODE_TAINT_KEY

    assert (NODE_LABEL_KEYS, NODE_TAINT_KEY) == (
        (LABEL_KEY, CHECKED_AT_KEY, BUSBW_KEY, RUN_KEY),
        TAINT_KEY,
    )


def rules_of(doc: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in doc["rules"] for g in rule["apiGroups"]
            for r in rule["resources"] for v in rule["verbs"]}  # fmt: skip


def test_create_namespace_grants_only_namespaces_create_cluster_wide() -> None:
    """Issue 36: --create-namespace used to bind the whole run Role cluster-wide (configmaps
    patch, jobs create, pods/log in every namespace, kube-system included)."""
    docs = rbac_docs("-n", "made", "--user", "u", "--create-namespace")
    cluster_wide = [d for d in docs if d["kind"] == "ClusterRole"]
    assert [rules_of(d) for d in cluster_wide] == [{("", "namespaces", "create")}]
    bindings = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert [b["roleRef"]["name"] for b in bindings] == ["nccl-k8s:create-namespace"]
    # The run's rules are granted in the new namespace only, by its own Role and RoleBinding.
    role, binding = (d for d in docs if d["kind"] in ("Role", "RoleBinding"))
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "made"
    assert ("batch", "jobs", "create") in rules_of(role)
    text = nccl("rbac", "-n", "made", "--user", "u", "--create-namespace").output
    assert "apply this Role and its RoleBinding once it exists" in text
    # Whatever else is asked, nothing namespaced is ever granted cluster-wide.
    every = rbac_docs("-n", "made", "--user", "u", "--create-namespace", "--cluster-reads",
                      "--label-nodes", "--render-apply", "--remove-schedule")  # fmt: skip
    writes = {"create", "patch", "delete", "update", "*"}
    rbac, admission = "rbac.authorization.k8s.io", "admissionregistration.k8s.io"
    for d in every:
        if d["kind"] == "ClusterRole":
            assert not {(g, r, v) for g, r, v in rules_of(d) if v in writes} - {
                ("", "namespaces", "create"),
                ("", "nodes", "patch"),
                # cleanup --schedule: a schedule's own cluster-scoped objects
                (rbac, "clusterroles", "delete"),
                (rbac, "clusterrolebindings", "delete"),
                (admission, "validatingadmissionpolicies", "delete"),
                (admission, "validatingadmissionpolicybindings", "delete"),
            }, d


def test_render_apply_verbs_and_rbac_objects_only_when_asked() -> None:
    """Issue 36: the Role granted serviceaccounts/roles/rolebindings create and patch, which
    only `kubectl apply` of render's output sends, to every user."""
    role, _ = rbac_docs("-n", "a", "--user", "u")
    plain = rules_of(role)
    for resource in ("serviceaccounts", "roles", "rolebindings"):
        assert not {v for _, r, v in plain if r == resource} & {"create", "patch", "get"}
    assert not [a for a in ACCESS if a.optional == RENDER_APPLY and a.feature == "run"]
    role, _ = rbac_docs("-n", "a", "--user", "u", "--render-apply")
    asked = rules_of(role)
    assert ("", "serviceaccounts", "create") in asked and ("batch", "jobs", "get") in asked
    assert plain < asked


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--user", "a"], "rbac: -n NAMESPACE is required"),
        (["-n", "a"], "name exactly one of --user NAME, --group NAME, --service-account"),
        (["-n", "a", "--user", "x", "--group", "y"], "(got --user and --group)"),
        (["-n", "Team_A", "--user", "x"], '-n "Team_A": expected a namespace name'),
        (["-n", "a", "--service-account", "x/Bad"], '--service-account "x/Bad": expected'),
        (["-n", "a", "--user", "x", "-o", "xml"], '--output "xml": expected yaml or json'),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    res = nccl("rbac", *args)
    assert res.exit_code == 2 and message in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output


# ---- on the test cluster -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(nodes=4, gpus_per_node=4) as c:
        for f in ("volcano-podgroups.yaml", "coscheduling-podgroups.yaml",
                  "koordinator-podgroups.yaml", "monitoring-podmonitors.yaml",
                  "nvidia-computedomains.yaml"):  # fmt: skip
            for doc in yaml.safe_load_all((CRDS / f).read_text()):
                if doc:
                    c.store.create("customresourcedefinitions", doc)
        yield c


def kubectl_apply(cluster: Cluster, text: str) -> None:
    """As the admin, with unmodified kubectl: what a cluster admin does with rbac's output."""
    env = {**os.environ, **cluster.kubectl_env()}
    subprocess.run(["kubectl", "apply", "-f", "-"], input=text, text=True, env=env, check=True,
                   capture_output=True, timeout=60)  # fmt: skip


def grant(cluster: Cluster, namespace: str, user: str, *flags: str) -> Path:
    """A new user, bound to exactly what `nccl-k8s rbac` prints for it; its kubeconfig."""
    res = nccl("rbac", "-n", namespace, "--user", user, *flags)
    assert res.exit_code == 0, res.output
    kubectl_apply(cluster, res.output)
    return cluster.add_user(user)


def requests_of(
    seen: list[cluster_rbac.Attributes], user: str, runs_in: set[str]
) -> set[tuple[str, str, str, str]]:
    """(group, resource[/sub], verb, scope) of the user's resource requests; the access reviews
    doctor sends are every authenticated user's (system:basic-user) and not the table's. A
    request in a namespace the runs are not in (an add-on's DaemonSet in kube-system) is a
    cluster-scope one: only a ClusterRole grants it."""
    return {
        (a.group, a.qualified, a.verb, "namespace" if a.namespace in runs_in else "cluster")
        for a in seen
        if a.user.name == user and a.resource_request
        and a.resource != "selfsubjectaccessreviews"
    }  # fmt: skip


def denied(cluster: Cluster, seen: list[cluster_rbac.Attributes], user: str) -> list[str]:
    assert cluster.apiserver is not None
    return sorted(
        f"{a.verb} {a.qualified} {a.namespace}"
        for a in seen
        if a.user.name == user and not cluster.apiserver.authorizer.decide(a)[0]
    )


@pytest.mark.slow
def test_a_user_bound_to_exactly_the_role_runs_a_run_and_doctor_names_a_removed_verb(
    cluster: Cluster, runs_dir: Path
) -> None:
    with fresh_namespace(cluster) as ns:
        kc = grant(cluster, ns, f"alice-{ns}")
        rid = f"a-{ns[-6:]}"
        with cluster.record_requests() as seen:
            rendered = nccl("render", "-n", ns, "--run-id", rid, *SMALL, *ENGINE)
            assert rendered.exit_code == 0 and "kind: Job" in rendered.output
            res = nccl("deploy", "-n", ns, "--run-id", rid, *SMALL, *ENGINE, kubeconfig=kc)
            assert res.exit_code == 0, res.output
            assert f"run {rid} succeeded" in res.output
            st = nccl("status", "-n", ns, "--run", rid, "-o", "json", kubeconfig=kc)
            assert json.loads(st.output)["phase"] == "Succeeded"
            lg = nccl("logs", "-n", ns, "--run", rid, kubeconfig=kc)
            assert lg.exit_code == 0 and "[rank 0] NCCL_K8S_RESULT " in lg.output
            got = nccl("results", "-n", ns, "--run", rid, kubeconfig=kc)
            assert got.exit_code == 0, got.output
            assert (runs_dir / rid / "results.json").exists()
            done = nccl("cleanup", "-n", ns, "--run", rid, kubeconfig=kc)
            assert done.exit_code == 0 and f"deleted {rid} in {ns}" in done.output
        # Only what --platform auto tries without cluster reads was refused, and deploy said so
        # and went on as generic.
        assert denied(cluster, seen, f"alice-{ns}") == ["list nodes ", "list resourceslices "]
        assert "platform generic: may not list nodes (RBAC)" in res.output
        assert cluster.store.list("jobs", ns)[0] == []

        # doctor with the Role intact: nothing the run needs is missing; the node reads doctor
        # itself would like are a warning naming --cluster-reads.
        doc = nccl("doctor", "-n", ns, *SMALL, "-o", "json", kubeconfig=kc)
        checks = [c for c in json.loads(doc.output)["checks"] if c["name"] == "permissions"]
        assert [(c["status"], c["message"].split(":")[0]) for c in checks] == [
            ("warn", "cannot get, list nodes at the cluster scope"),
            ("warn", "cannot list pods at the cluster scope"),  # free GPUs per topology domain
            ("warn", "cannot list resourceslices.resource.k8s.io at the cluster scope"),
        ]
        assert checks[0]["hint"] == (
            f"`nccl-k8s rbac -n {ns} --user NAME --cluster-reads` prints what to grant"
        )

        def drop_create(role: dict[str, Any]) -> None:
            for rule in role["rules"]:
                if rule["resources"] == ["jobs"] and "create" in rule["verbs"]:
                    rule["verbs"].remove("create")

        cluster.store.mutate("roles", ns, "nccl-k8s", drop_create)
        doc = nccl("doctor", "-n", ns, *SMALL, kubeconfig=kc)
        assert doc.exit_code == 1
        line = next(x for x in doc.output.splitlines() if x.startswith("permissions"))
        assert f"cannot create jobs.batch in namespace {ns}" in line
        assert f"`nccl-k8s rbac -n {ns} --user NAME` prints what to grant" in doc.output
        # And the 403 a deploy then meets says the same thing in the server's words.
        res = nccl("deploy", "-n", ns, "--run-id", rid, *SMALL, *ENGINE, kubeconfig=kc)
        assert res.exit_code != 0
        assert 'cannot create resource "jobs" in API group "batch"' in res.output


@pytest.mark.slow
def test_the_commands_send_exactly_the_requests_of_the_table(
    cluster: Cluster, runs_dir: Path
) -> None:
    user = "everything"
    with fresh_namespace(cluster) as ns:
        made = f"{ns}-made"
        kc = grant(cluster, ns, user, "--cluster-reads", "--create-namespace", "--label-nodes",
                   "--render-apply", "--remove-schedule")  # fmt: skip
        # --create-namespace grants only namespaces create cluster-wide: the new namespace has
        # no RoleBinding until the admin applies rbac's Role there. With every part granted,
        # the user may still write nothing namespaced outside its namespace (kube-system).
        assert cluster.apiserver is not None
        who = cluster_rbac.User(user, (cluster_rbac.AUTHENTICATED,))
        for group, resource in (
            ("", "configmaps"),
            ("batch", "jobs"),
            ("", "serviceaccounts"),
            ("rbac.authorization.k8s.io", "rolebindings"),
            ("", "pods"),
        ):
            for verb in ("create", "patch", "delete"):
                asked = cluster_rbac.Attributes(
                    who, verb, True, group, resource, namespace="kube-system", name="x"
                )
                assert not cluster.apiserver.authorizer.decide(asked)[0], asked
        rid = f"e-{ns[-6:]}"

        def ok(*args: str, code: int = 0) -> str:
            res = nccl(*args, kubeconfig=kc)
            assert res.exit_code == code, (args, res.output)
            return str(res.output)

        with cluster.record_requests() as seen:
            # A run, start to end, and every command that reads it.
            ok("deploy", "-n", ns, "--run-id", rid, *SMALL, *ENGINE)
            ok("wait", "-n", ns, "--run", rid)
            ok("status", "-n", ns, "--run", rid)
            ok("list", "-n", ns)
            ok("logs", "-n", ns, "--run", rid)
            ok("logs", "-n", ns, "--run", rid, "-f", "--rank", "0")
            ok("results", "-n", ns, "--run", rid)
            ok("bundle", "-n", ns, "--run", rid, "-o", str(runs_dir / "b.tar.gz"))
            ok("doctor", "-n", ns, "--run", rid)
            # A taken run id is named from what is there (get).
            assert "already exists" in ok(
                "deploy", "-n", ns, "--run-id", rid, *SMALL, *ENGINE, code=1
            )
            ok("cleanup", "-n", ns, "--run", rid)
            ok("doctor", "-n", ns, "--gang", "volcano", "--queue", "q", *SMALL, code=1)
            # A platform's prerequisites (DaemonSets, CRDs, GKE's Network objects) and a
            # compute domain's objects: doctor reads them, deploy makes and owns the domain.
            for extra in (
                ["--platform", "eks-efa"],
                ["--platform", "gke-tcpxo", "--instance-type", "a3-megagpu-8g"],
                ["--compute-domain"],
            ):  # none of them is installed here: what matters is what doctor asks
                res = nccl("doctor", "-n", ns, *extra, *SMALL, kubeconfig=kc)
                assert res.exit_code in (0, 1) and "permissions" in res.output, res.output
            ok("deploy", "-n", ns, "--run-id", f"{rid}-cd", "--compute-domain", "--no-wait",
               *SMALL, *ENGINE)  # fmt: skip
            ok("cleanup", "-n", ns, "--run", f"{rid}-cd")
            # ... and deletes it when the deploy fails half way (a 500 on the Job).
            cluster.faults.fail_requests("/jobs$", 500, count=20, method="POST")
            ok("deploy", "-n", ns, "--run-id", f"{rid}-cf", "--compute-domain", "--no-wait",
               *SMALL, *ENGINE, code=1)  # fmt: skip
            cluster.faults.clear()
            # Every gang's PodGroup and the PodMonitor: made and owned (create, patch), and
            # deleted when the deploy fails half way (a 500 on the Job).
            for gang in ("volcano", "coscheduling", "koordinator"):
                g = f"{rid}-{gang[:4]}"
                ok(
                    "deploy",
                    "-n",
                    ns,
                    "--run-id",
                    g,
                    "--gang",
                    gang,
                    "--pod-monitor",
                    "--network-policy",
                    "on",
                    "--no-wait",
                    *SMALL,
                    *ENGINE,
                )
                cluster.faults.fail_requests("/jobs$", 500, count=20, method="POST")
                ok(
                    "deploy",
                    "-n",
                    ns,
                    "--run-id",
                    f"{g}-x",
                    "--gang",
                    gang,
                    "--pod-monitor",
                    "--network-policy",
                    "on",
                    *SMALL,
                    *ENGINE,
                    code=1,
                )
                cluster.faults.clear()
                ok("cleanup", "-n", ns, "--run", g)
            # A failed run kept: its ranks stopped (Job patched, StatefulSet scaled to 0).
            for workload in ("job", "statefulset"):
                ok("deploy", "-n", ns, "--run-id", f"{rid}-{workload[:3]}", "--workload", workload,
                   "--scheduler", "absent", "--schedule-timeout", "1s", "--keep-on-failure",
                   *SMALL, *ENGINE, code=1)  # fmt: skip
            ok("cleanup", "-n", ns, "--all")
            made_first = ("deploy", "-n", made, "--create-namespace", "--run-id", rid,
                          "--no-wait", *SMALL, *ENGINE)  # fmt: skip
            # It makes the namespace, then meets the 403 of its first object there, and keeps
            # the namespace for the admin to grant the Role in ...
            said = ok(*made_first, code=1)
            assert f"namespace {made} was created and stays" in said, said
            assert cluster.store.get("namespaces", None, made)["metadata"]["name"] == made
            # ... until the admin applies rbac's Role and RoleBinding in it.
            kubectl_apply(cluster, nccl("rbac", "-n", made, "--user", user).output)
            ok(*made_first)
            ok("cleanup", "-n", made, "--all")
            # Its measured verdicts depend on the machine's load (on a noisy 2-core machine
            # every healthy node may end "suspect", which labels nothing), so one node crashes
            # its pods: named the culprit of its failed test, it is bad whatever the noise, and
            # labelled.
            cluster.faults.node_crash("node-3", True)
            try:
                res = nccl("nodes", "check", "-n", ns, "--gpus-per-node", "1", "--label",
                           *ENGINE, kubeconfig=kc)  # fmt: skip
            finally:
                cluster.faults.node_crash("node-3", False)
            assert res.exit_code == 1, res.output
            assert "label node node-3 nccl-k8s/node-check=bad" in res.output, res.output
            # The check went into the namespace's history, which nodes history reads (get).
            assert "node-3: " in ok("nodes", "history", "-n", ns, "--node", "node-3")
            # A schedule of nodes check --label, applied by the admin, removed by the user.
            printed = nccl("nodes", "schedule", "-n", ns, "--name", "fleet", "--image", "x",
                           "--", "--label")  # fmt: skip
            kubectl_apply(cluster, printed.output)
            assert "deleted schedule fleet" in ok("cleanup", "-n", ns, "--schedule", "fleet")
            # kubectl apply of render's output, as the user (over https: kubectl sends a token
            # nowhere else), with every optional object, then again with the adoption objects
            # changed (a GitOps sync: patch); cleanup then deletes them.
            as_user = cluster.add_user(user, https=True)
            env = {**os.environ, **cluster.kubectl_env(), "KUBECONFIG": str(as_user)}
            with cluster.record_requests() as applied:
                for i, extra in enumerate(
                    (["--pod-monitor", "--compute-domain", "--gang", "volcano",
                      "--network-policy", "on"],
                     ["--gang", "coscheduling", "--workload", "statefulset"],
                     ["--gang", "koordinator"])
                ):  # fmt: skip
                    docs = rbac_docs_of(
                        nccl(
                            "render",
                            "-n",
                            ns,
                            "--run-id",
                            f"{rid}-r{i}",
                            "--scheduler",
                            "nobody",
                            "--adopt",
                            *extra,
                            *SMALL,
                            *ENGINE,
                        )
                    )
                    for again in (False, True):
                        for d in docs[:3] if again else ():
                            d["metadata"]["annotations"]["synced"] = "again"
                        subprocess.run(["kubectl", "apply", "-f", "-"], env=env, check=True,
                                       input=yaml.safe_dump_all(docs), text=True,
                                       capture_output=True, timeout=60)  # fmt: skip
                ok("cleanup", "-n", ns, "--all")
        assert denied(cluster, seen, user) == []
        by_kubectl = [a for a in ACCESS if a.feature == "render-apply"]
        table = {(a.group, a.resource, v, a.scope) for a in ACCESS for v in a.verbs}
        sent = requests_of(seen, user, {ns, made})
        assert sorted(sent - table) == [], "requests the table lacks"
        commands = {(a.group, a.resource, v, a.scope) for a in ACCESS if a not in by_kubectl
                    for v in a.verbs}  # fmt: skip
        assert sorted(commands - sent) == [], "table entries no command used"
        # What kubectl apply of render's output sends is in the table, and the entries that are
        # there only for it are all used by it.
        kubectl_sent = requests_of(applied, user, {ns})
        assert sorted(kubectl_sent - table) == [], "requests of kubectl apply the table lacks"
        for_kubectl = {(a.group, a.resource, v, a.scope) for a in by_kubectl for v in a.verbs}
        assert sorted(for_kubectl - kubectl_sent) == [], "render-apply entries kubectl never used"
