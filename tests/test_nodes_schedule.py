"""`nccl-k8s nodes schedule` (issue 38): a CronJob running `nodes check` in the cluster, its
ServiceAccount and exactly the RBAC one check uses. Fast: the printed objects only; the check
run as that ServiceAccount is tests/test_nodes_schedule_e2e.py."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.k8s.api._access import ACCESS, nodes_check_access
from nccl_k8s.k8s.nodes._nodecheck import LABEL_KEY

BASE = ["nodes", "schedule", "-n", "fleet", "--image", "registry.example.com/nccl-k8s:0.1"]


def schedule(*args: str) -> list[dict[str, Any]]:
    res = CliRunner().invoke(app, [*BASE, *args])
    assert res.exit_code == 0, res.output
    return [d for d in yaml.safe_load_all(res.output) if d]


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in docs}


def rules_of(doc: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in doc["rules"] for g in rule["apiGroups"]
            for r in rule["resources"] for v in rule["verbs"]}  # fmt: skip


@pytest.mark.parametrize("version", ["1.30", "1.33", "1.37"])
def test_every_object_passes_the_strict_upstream_schema(version: str) -> None:
    docs = schedule("--cron", "*/30 1-5 * JAN-JUN MON-FRI", "--", "--gpus-per-node", "8",
                    "--label", "--taint", "--", "-b", "1M")  # fmt: skip
    assert [d["kind"] for d in docs] == [
        "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding",
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "CronJob",
    ]  # fmt: skip
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_cronjob_runs_nodes_check_with_the_options_and_only_it_has_a_token() -> None:
    docs = by_kind(schedule("--cron", "0 */6 * * *", "--", "--gpus-per-node", "8", "--label",
                            "--", "-b", "1M"))  # fmt: skip
    cj = docs["CronJob"]["spec"]
    assert (cj["schedule"], cj["concurrencyPolicy"]) == ("0 */6 * * *", "Forbid")
    assert cj["startingDeadlineSeconds"] > 0
    assert cj["successfulJobsHistoryLimit"] == cj["failedJobsHistoryLimit"] == 3
    pod = cj["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is True
    (c,) = pod["containers"]
    assert c["image"] == "registry.example.com/nccl-k8s:0.1"
    assert [*c["command"], *c["args"]] == ["nccl-k8s", "nodes", "check", "-n", "fleet",
                                          "--gpus-per-node", "8", "--label", "--", "-b", "1M"]  # fmt: skip
    # The pair tests the check deploys are ordinary runs: their pods carry no token.
    res = CliRunner().invoke(app, ["render", "-n", "fleet", "--run-id", "t1", "--nodes",
                                   "2", "--gpus-per-node", "8"])  # fmt: skip
    pods = [d["spec"]["template"]["spec"] for d in yaml.safe_load_all(res.output)
            if d and d["kind"] == "Job"]  # fmt: skip
    assert pods and all(p["automountServiceAccountToken"] is False for p in pods)


def test_no_object_carries_a_run_label_so_cleanup_never_takes_it_for_a_run() -> None:
    for doc in schedule("--", "--label"):
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "nccl-k8s"
        assert labels["nccl-k8s/schedule"] == "nccl-k8s-node-check"
        assert "app.kubernetes.io/instance" not in labels


@pytest.mark.parametrize(
    ("args", "label", "idle"),
    [([], False, False), (["--label"], True, False), (["--taint"], True, False)],
)
def test_the_rbac_is_the_table_cut_to_what_the_check_sends(
    args: list[str], label: bool, idle: bool
) -> None:
    docs = by_kind(schedule("--", *args))
    want = nodes_check_access(label=label, idle_only=idle)
    role = {(a.group, a.resource, v) for a in want if a.scope == "namespace" for v in a.verbs}
    crole = {(a.group, a.resource, v) for a in want if a.scope == "cluster" for v in a.verbs}
    assert rules_of(docs["Role"]) == role
    assert rules_of(docs["ClusterRole"]) == crole
    assert (("", "nodes", "patch") in crole) is label
    # Nothing beyond the permissions table, and none of what a check never sends: no write of
    # a StatefulSet, no optional kind made, nothing kubectl apply alone needs.
    table = {(a.group, a.resource, v, a.scope) for a in ACCESS for v in a.verbs}
    assert {(a.group, a.resource, v, a.scope) for a in want for v in a.verbs} <= table
    assert not {("apps", "statefulsets", v) for v in ("create", "patch", "delete")} & role
    assert not any(r == "podgroups" and v != "list" for _, r, v in role)
    assert ("", "pods", "list") not in crole  # --idle-only's read only with --idle-only
    # The pair tests' NetworkPolicy (on by default since the pod network has one): made and
    # removed; with --network-policy off none, and no grant for it.
    netpol = {("networking.k8s.io", "networkpolicies", v) for v in ("create", "delete", "patch")}
    assert netpol <= role
    off = by_kind(schedule("--", *args, "--network-policy", "off"))
    assert not netpol & rules_of(off["Role"])
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        assert docs[kind]["subjects"] == [
            {"kind": "ServiceAccount", "name": "nccl-k8s-node-check", "namespace": "fleet"}
        ]
    # The admission policy only when the check writes nodes, for this ServiceAccount alone.
    vap = docs.get("ValidatingAdmissionPolicy")
    assert (vap is not None) is label
    if vap is not None:
        who = vap["spec"]["matchConditions"][0]["expression"]
        assert who == ("request.userInfo.username == "
                       "'system:serviceaccount:fleet:nccl-k8s-node-check'")  # fmt: skip
        assert LABEL_KEY in str(vap["spec"]["validations"])


@pytest.mark.parametrize(
    "opts",
    [[], ["--security", "host"], ["--host-network"], ["--platform", "oke-roce"],
     ["--platform", "gke-tcpxo"], ["--network-policy", "off"],
     ["--platform", "eks-efa", "--instance-type", "p5.48xlarge"]],
)  # fmt: skip
def test_the_pair_tests_networkpolicy_is_granted_exactly_where_they_would_make_one(
    opts: list[str],
) -> None:
    # What a pair test makes is what `render` prints for it (two nodes, a Job, the check's
    # deploy options): the Role may write a NetworkPolicy only where that has one. On the node's
    # network a policy selects nothing, so none is made, and the grant went unused.
    rendered = CliRunner().invoke(app, ["render", "--nodes", "2", "--workload", "job", *opts])
    assert rendered.exit_code == 0, rendered.output
    makes = any(d and d["kind"] == "NetworkPolicy" for d in yaml.safe_load_all(rendered.output))
    role = rules_of(by_kind(schedule("--", *opts))["Role"])
    writes = {v for g, r, v in role if r == "networkpolicies"} - {"list"}
    assert writes == ({"create", "delete", "patch"} if makes else set()), (opts, makes)
    if opts in (["--security", "host"], ["--platform", "oke-roce"], ["--network-policy", "off"]):
        assert not makes  # the cases the test is about are among the ones that make none


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cron", "0 */6 * *"], '--cron "0 */6 * *": expected five cron fields'),
        (["--cron", "61 * * * *"], "bad minute"),
        (["--cron", "0 0 0 * *"], "bad day of month"),
        (["--cron", "0 0 * * FUNDAY"], "bad day of week"),
        (["--cron", "*/0 * * * *"], "bad minute"),
        (["--cron", "5-1 * * * *"], "bad minute"),
        (["--name", "Bad_Name"], '--name "Bad_Name": expected'),
        (["--", "--kubeconfig", "x"], "--kubeconfig cannot be given to a scheduled check"),
        (["--", "--gang", "volcano"], "--gang cannot be given"),
        (["--", "--no-such-flag"], "No such option: --no-such-flag"),
        (["--", "--gpus-per-node", "abc"], '--gpus-per-node "abc": expected a whole number'),
        (
            ["--", "--security", "host", "--network-policy", "on"],
            "--network-policy on with host networking",
        ),  # render refuses it: every pair test
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, [*BASE, *args])
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output


def test_the_image_is_required_and_named_in_the_message() -> None:
    res = CliRunner().invoke(app, ["nodes", "schedule", "-n", "fleet"])
    assert res.exit_code == 2 and "--image IMAGE is required" in res.output
