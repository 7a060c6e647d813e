"""`cleanup --schedule NAME` removes what `nodes schedule --name NAME` printed and a user applied
(docs/fleet.md, "Removing it"), and nothing else: not another schedule's objects (the same name
in another namespace included), not a user's object that carries the schedule's label, not the
node labels, the node history or the pair-test runs. The CronJob's Jobs and their pods go with it
(the test cluster's garbage collector, by ownerReferences). Fast: the printed objects are
applied with kubectl; no pod runs."""

from __future__ import annotations

import itertools
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from tests.cluster.cluster import Cluster
from tests.cluster.errors import ApiError
from tests.conftest import fresh_namespace
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.k8s.api._kinds import plural
from nccl_k8s.k8s.nodes._history import HISTORY_NAME
from nccl_k8s.k8s.nodes._nodecheck import CHECK_LABEL
from nccl_k8s.k8s.rendering._schedule import Schedule, schedule_members, schedule_objects

IMAGE = "registry.example.com/nccl-k8s:0.1"
OURS = {"app.kubernetes.io/name": "nccl-k8s", "app.kubernetes.io/managed-by": "nccl-k8s"}
#: The options that change what `nodes schedule` prints (the others change arguments only).
OPTIONS = ("--label", "--taint", "--idle-only", "--network-policy=off")


def test_the_members_are_what_every_option_combination_prints() -> None:
    """One source of truth: cleanup deletes the kinds and names the renderer prints, whatever
    the options; a kind the renderer gains is one schedule_members has."""
    members = {(m.kind, m.name, m.namespaced) for m in schedule_members("fleet", "bench")}
    seen: set[tuple[str, str, bool]] = set()
    for n in range(len(OPTIONS) + 1):
        for opts in itertools.combinations(OPTIONS, n):
            s = Schedule("fleet", "bench", "@daily", IMAGE, args=opts)
            printed = {(o["kind"], o["metadata"]["name"], "namespace" in o["metadata"])
                       for o in schedule_objects(s)}  # fmt: skip
            assert printed <= members, opts
            seen |= printed
    assert seen == members
    assert {k for k, _, _ in members} >= {"CronJob", "ClusterRole", "ValidatingAdmissionPolicy"}


def nccl(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--schedule", "Fleet_1"], '--schedule "Fleet_1": expected at most 52 lower case'),
        (["--schedule", "a" * 53], f'--schedule "{"a" * 53}": expected at most 52'),
        (["--schedule", "x", "--run", "r"], "--run and --schedule: give one of them"),
        (["--schedule", "x", "--all"], "--all and --schedule: give one of them"),
        (["--schedule", "x", "-n", "Bad_NS"], '-n "Bad_NS": expected a namespace name'),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_any_request(args: list[str], message: str) -> None:
    res = nccl("cleanup", *args, "--kubeconfig", "/nonexistent/kubeconfig")
    assert res.exit_code == 2 and message in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1, res.output


# ---- on the test cluster -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(nodes=1, gpus_per_node=1) as c:
        yield c


def apply(cluster: Cluster, docs: list[dict[str, Any]]) -> None:
    env = {**os.environ, **cluster.kubectl_env()}
    subprocess.run(["kubectl", "apply", "-f", "-"], input=yaml.safe_dump_all(docs), text=True,
                   env=env, check=True, capture_output=True, timeout=60)  # fmt: skip


def schedule(cluster: Cluster, ns: str, name: str, *opts: str) -> list[dict[str, Any]]:
    """`nodes schedule` printed and applied, as docs/fleet.md says."""
    res = nccl("nodes", "schedule", "-n", ns, "--name", name, "--image", IMAGE, "--", *opts)
    assert res.exit_code == 0, res.output
    docs = [d for d in yaml.safe_load_all(res.output) if d]
    apply(cluster, docs)
    return docs


def get(cluster: Cluster, doc: dict[str, Any]) -> dict[str, Any] | None:
    meta = doc["metadata"]
    try:
        return cluster.store.get(plural(doc["kind"]), meta.get("namespace"), meta["name"])
    except ApiError:
        return None


def names(cluster: Cluster, kind: str, ns: str | None) -> set[str]:
    return {o["metadata"]["name"] for o in cluster.store.list(plural(kind), ns)[0]}


def started_job(cluster: Cluster, cron: dict[str, Any], n: int) -> tuple[str, str]:
    """A Job the CronJob controller would start (owned by the CronJob, the jobTemplate's labels;
    suspended, so the test cluster's Job controller makes no pod) and its pod, ended as a
    finished check's is (owned by the Job, kept for its logs: successfulJobsHistoryLimit)."""
    meta = cron["metadata"]
    ns, name = meta["namespace"], f"{meta['name']}-{n}"
    labels = cron["spec"]["jobTemplate"]["metadata"]["labels"]

    def owner(kind: str, obj: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"apiVersion": "batch/v1", "kind": kind, "name": obj["metadata"]["name"],
                 "uid": obj["metadata"]["uid"], "controller": True,
                 "blockOwnerDeletion": True}]  # fmt: skip

    template = cron["spec"]["jobTemplate"]["spec"]
    job = cluster.store.create("jobs", {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": labels,
                     "ownerReferences": owner("CronJob", cron)},
        "spec": {**template, "suspend": True}})  # fmt: skip
    pod_spec = {**template["template"]["spec"], "schedulerName": "nobody"}
    cluster.store.create("pods", {
        "metadata": {"name": f"{name}-pod", "namespace": ns, "labels": labels,
                     "ownerReferences": owner("Job", job)},
        "spec": pod_spec, "status": {"phase": "Succeeded"}})  # fmt: skip
    return name, f"{name}-pod"


@pytest.mark.slow
def test_cleanup_schedule_deletes_exactly_its_objects_and_its_checks(cluster: Cluster) -> None:
    with fresh_namespace(cluster) as ns, fresh_namespace(cluster) as ns2:
        mine = schedule(cluster, ns, "fleet", "--gpus-per-node", "1", "--label")
        other = schedule(cluster, ns, "other", "--gpus-per-node", "1", "--label", "--idle-only")
        # The same name in another namespace: its ClusterRole, binding and policy carry
        # nccl-k8s/schedule=fleet too, under other names.
        elsewhere = schedule(cluster, ns2, "fleet", "--gpus-per-node", "1", "--taint")
        # A user's look-alikes: the schedule's label, not our managed-by.
        look = {"nccl-k8s/schedule": "fleet", "app.kubernetes.io/name": "nccl-k8s"}
        cluster.store.create("serviceaccounts", {"metadata": {
            "name": "users-sa", "namespace": ns, "labels": look}})  # fmt: skip
        cluster.store.create("clusterroles", {"metadata": {
            "name": f"users-role-{ns}", "labels": look}, "rules": []})  # fmt: skip
        # The fleet's record and a pair test's run left behind: not the schedule's.
        cluster.store.create("configmaps", {"metadata": {
            "name": HISTORY_NAME, "namespace": ns, "labels": OURS}, "data": {}})  # fmt: skip
        test_run = {**OURS, "app.kubernetes.io/instance": "nodes-check-ab12-t1",
                    CHECK_LABEL: "nodes-check-ab12"}  # fmt: skip
        cluster.store.create("configmaps", {"metadata": {
            "name": "nodes-check-ab12-t1", "namespace": ns, "labels": test_run}})  # fmt: skip
        crons = {n: cluster.store.get("cronjobs", ns, n) for n in ("fleet", "other")}
        jobs = [started_job(cluster, crons["fleet"], i) for i in (1, 2)]
        kept_job = started_job(cluster, crons["other"], 1)

        res = nccl("cleanup", "-n", ns, "--schedule", "fleet", "--timeout", "60s",
                   "--kubeconfig", str(cluster.kubeconfig))  # fmt: skip
        assert res.exit_code == 0, res.output

        # Exactly the schedule's objects are gone, each kind listed and each fetched by name.
        for doc in mine:
            assert get(cluster, doc) is None, doc["kind"]
        for doc in other + elsewhere:
            assert get(cluster, doc) is not None, (doc["kind"], doc["metadata"]["name"])
        assert names(cluster, "CronJob", ns) == {"other"}
        assert names(cluster, "ServiceAccount", ns) >= {"other", "users-sa"}
        assert "fleet" not in names(cluster, "ServiceAccount", ns) | names(cluster, "Role", ns)
        assert f"users-role-{ns}" in names(cluster, "ClusterRole", None)
        assert f"nccl-k8s:{ns}:fleet" not in names(cluster, "ClusterRole", None)
        assert f"nccl-k8s:{ns2}:fleet" in names(cluster, "ClusterRole", None)
        assert len(names(cluster, "ValidatingAdmissionPolicy", None) & {
            d["metadata"]["name"] for d in mine + other + elsewhere}) == 2  # fmt: skip
        # The CronJob's Jobs and their pods went with it (garbage collection); OTHER's stay.
        assert names(cluster, "Job", ns) == {kept_job[0]}
        assert names(cluster, "Pod", ns) == {kept_job[1]}
        assert not {p for _, p in jobs} & names(cluster, "Pod", ns)
        # Kept, and said so: the history, the pair test's run.
        assert {HISTORY_NAME, "nodes-check-ab12-t1"} <= names(cluster, "ConfigMap", ns)
        out = res.output
        assert f"deleted schedule fleet in {ns} (8 objects, " in out, out
        assert "CronJob/fleet, " in out
        assert "its CronJob's 2 Job(s) and their pods are gone" in out
        assert "skipped ServiceAccount/users-sa: carries nccl-k8s/schedule=fleet" in out
        assert f"skipped ClusterRole/users-role-{ns}: carries" in out
        assert f"kept the node labels and configmap {HISTORY_NAME}" in out
        assert "1 pair-test run(s) of a nodes check are still in" in out
        assert "nodes-check-ab12-t1" in out and "--run ID` (or --all)" in out
        assert f"nccl-k8s:{ns2}:fleet" not in out  # another namespace's: not even mentioned


@pytest.mark.slow
def test_a_bad_name_deletes_nothing_and_a_missing_one_is_exit_2(cluster: Cluster) -> None:
    kc = str(cluster.kubeconfig)
    with fresh_namespace(cluster) as ns:
        docs = schedule(cluster, ns, "fleet", "--gpus-per-node", "1")
        bad = nccl("cleanup", "-n", ns, "--schedule", "Fleet", "--kubeconfig", kc)
        assert bad.exit_code == 2 and '--schedule "Fleet": expected' in bad.output
        assert len(bad.output.strip().splitlines()) == 1, bad.output
        missing = nccl("cleanup", "-n", ns, "--schedule", "nope", "--kubeconfig", kc)
        assert missing.exit_code == 2, missing.output
        assert f"no schedule nope in namespace {ns}" in missing.output
        assert len(missing.output.strip().splitlines()) == 1, missing.output
        assert all(get(cluster, d) is not None for d in docs)
        # Only a user's look-alike carries the name: listed, nothing deleted, exit 1 (as
        # cleanup --run of a run whose every object is someone else's).
        cluster.store.create("serviceaccounts", {"metadata": {
            "name": "users", "namespace": ns, "labels": {"nccl-k8s/schedule": "mine"}}})  # fmt: skip
        only = nccl("cleanup", "-n", ns, "--schedule", "mine", "--kubeconfig", kc)
        assert only.exit_code == 1, only.output
        assert "skipped ServiceAccount/users: carries nccl-k8s/schedule=mine" in only.output
        assert "cleanup --schedule mine: nothing deleted" in only.output
        assert cluster.store.get("serviceaccounts", ns, "users")
        # Our labels without the render mark: not made by nodes schedule, left alone.
        cron = next(d for d in docs if d["kind"] == "CronJob")
        cluster.store.mutate(
            "cronjobs", ns, "fleet", lambda o: o["metadata"].update(annotations={})
        )
        res = nccl("cleanup", "-n", ns, "--schedule", "fleet", "--kubeconfig", kc)
        assert res.exit_code == 0, res.output
        assert "skipped CronJob/fleet: no render mark nccl-k8s/rendered-for" in res.output
        assert get(cluster, cron) is not None
        assert f"deleted schedule fleet in {ns} (5 objects, " in res.output
        assert "Job(s)" not in res.output  # no CronJob deleted: no Jobs said to have gone
