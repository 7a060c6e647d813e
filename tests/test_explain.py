"""`doctor --run`'s table, pure (k8s.run._explain.rows), and the pieces it adds to the run's objects:
pods pinned by --node, each rank's node in the results. Each row is what a user asks "why is it
there" about: unscheduled, waiting for an absent scheduler, refused by admission, out of
memory, on a NotReady node."""

from __future__ import annotations

import datetime
from typing import Any

import kubernetes_validate
import pytest

from nccl_k8s.errors import UsageError
from nccl_k8s.k8s import Explained, render, table_text
from nccl_k8s.k8s.run._collect import name_nodes
from nccl_k8s.k8s.run._explain import rows
from nccl_k8s.k8s.run._pods import pod_info
from nccl_k8s.results.schema import Device, Run, RunMeta
from nccl_k8s.spec import build_run_spec

Obj = dict[str, Any]
NOW = datetime.datetime(2026, 12, 3, 12, 10, tzinfo=datetime.timezone.utc)
MADE = "2026-12-03T12:00:00Z"
JOB: Obj = {
    "kind": "Job",
    "metadata": {"name": "r", "uid": "job-uid"},
    "spec": {"completions": 2},
}


def pod(
    rank: int,
    *,
    node: str | None = None,
    status: Obj | None = None,
    scheduler: str = "default-scheduler",
) -> Obj:
    return {
        "metadata": {
            "name": f"r-{rank}-abcde",
            "creationTimestamp": MADE,
            "annotations": {"batch.kubernetes.io/job-completion-index": str(rank)},
        },
        "spec": {"nodeName": node, "schedulerName": scheduler},
        "status": {"phase": "Pending", **(status or {})},
    }


def event(name: str, reason: str, message: str, uid: str | None = None) -> Obj:
    return {
        "involvedObject": {"name": name, "uid": uid},
        "reason": reason,
        "message": message,
        "lastTimestamp": "2026-12-03T12:05:00Z",
    }


UNSCHEDULABLE = {
    "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "cond"}
    ]
}


def test_unschedulable_pods_get_the_schedulers_words_and_how_long() -> None:
    pods = [pod(0, status=UNSCHEDULABLE), pod(1, status=UNSCHEDULABLE)]
    msg = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    events = [
        event("r-0-abcde", "FailedScheduling", msg),
        event("r-1-abcde", "FailedScheduling", msg),
    ]
    table = rows("r", "ns", JOB, pods, events, {}, {}, now=NOW)
    assert [(r.rank, r.phase, r.why) for r in table] == [
        (0, "Pending", f"Unschedulable for 600s: {msg}"),
        (1, "Pending", f"Unschedulable for 600s: {msg}"),
    ]


def test_a_pod_no_scheduler_has_looked_at_names_its_scheduler() -> None:
    table = rows("r", "ns", JOB, [pod(0, scheduler="hami-scheduler")], [], {}, {}, now=NOW)
    assert table[0].why == (
        "no scheduler has looked at it for 600s: it asks for schedulerName hami-scheduler; is that "
        "scheduler running? (`nccl-k8s doctor --scheduler hami-scheduler`)"
    )
    fresh = NOW.replace(minute=0, second=30)
    assert (
        rows("r", "ns", JOB, [pod(0)], [], {}, {}, now=fresh)[0].why == "waiting: not scheduled yet"
    )


def test_failed_create_oom_and_a_notready_node() -> None:
    refused = event(
        "r",
        "FailedCreate",
        'Error creating: pods "r-0-x" is forbidden: violates PodSecurity "baseline:latest": '
        "non-default capabilities",
        uid="job-uid",
    )
    oom = pod(
        0,
        node="n0",
        status={
            "phase": "Failed",
            "containerStatuses": [
                {"name": "bench", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
            ],
        },
    )
    lost = pod(
        1,
        node="n1",
        status={
            "phase": "Running",
            "containerStatuses": [{"name": "bench", "state": {"running": {}}}],
        },
    )
    notready = {
        "metadata": {"name": "n1"},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "PLEG"}
            ]
        },
    }
    three = {**JOB, "spec": {"completions": 3}}  # the third pod could not be created
    table = rows(
        "r", "ns", three, [oom, lost], [refused], {"n1": notready}, {"r-0-abcde": "a\nb\nkilled\n"},
        culprit_pod="r-0-abcde", now=NOW,
    )  # fmt: skip
    assert table[0].pod is None and table[0].why.startswith(
        'the Job cannot create its pods: Error creating: pods "r-0-x" is forbidden: violates '
        'PodSecurity "baseline:latest"'
    )
    assert "Namespace ns enforces Pod Security level 'baseline'" in table[0].why
    assert table[1].culprit and table[1].why == (
        "OOMKilled: the container used more memory than its limit; last log lines: a | b | killed"
    )
    assert table[2].why == "its node n1 is NotReady (KubeletNotReady: PLEG)"
    text = table_text(Explained("r", "ns", "Job", "Failed", "the verdict", table))
    lines = text.splitlines()
    assert lines[0] == "run r in ns (Job): Failed: the verdict"
    assert lines[2].startswith("-     -          -     -        the Job cannot create its pods")
    assert lines[3].startswith("0*    r-0-abcde  n0    Failed   OOMKilled")


def test_node_pins_render_as_matchfields_and_fewer_nodes_than_pods_is_refused() -> None:
    spec = build_run_spec(
        world_size="4", gpus_per_node="2", namespace="b", node=["gpu-a", "gpu-b", "gpu-a"]
    )
    assert spec.node_names == ("gpu-a", "gpu-b")
    job = next(o for o in render(spec) if o["kind"] == "Job")
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["affinity"]["nodeAffinity"] == {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": ["gpu-a", "gpu-b"]}
                    ]
                }
            ]
        }
    }
    assert "podAntiAffinity" in pod_spec["affinity"]
    env = {e["name"]: e for e in pod_spec["containers"][0]["env"]}
    assert env["NCCL_K8S_NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    kubernetes_validate.validate(job, "1.33", strict=True)
    with pytest.raises(UsageError, match=r"--node gpu-a: 1 node\(s\) for 2 pods"):
        build_run_spec(world_size="4", gpus_per_node="2", node=["gpu-a"])


def test_results_name_each_ranks_node_from_its_pod() -> None:
    run = Run(meta=RunMeta(gpus_per_node=2, devices=[Device(rank=r) for r in range(4)]))
    run.meta.devices[3].node = "said-by-engine"
    pods = [pod_info(pod(0, node="n0")), pod_info(pod(1, node="n1"))]
    name_nodes(run, pods)
    assert [d.node for d in run.meta.devices] == ["n0", "n0", "n1", "said-by-engine"]


def test_an_image_that_cannot_be_pulled_gets_the_kubelets_words() -> None:
    message = 'failed to pull and unpack image "reg.example/nccl:does-not-exist": not found'
    pulling = pod(
        0,
        node="n0",
        status={
            "containerStatuses": [
                {
                    "name": "bench",
                    "state": {"waiting": {"reason": "ErrImagePull", "message": message}},
                }
            ]
        },
    )
    table = rows("r", "ns", JOB, [pulling], [], {"n0": {"metadata": {"name": "n0"}}}, {}, now=NOW)
    assert (table[0].node, table[0].phase) == ("n0", "Pending")
    assert table[0].why == f"ErrImagePull: {message}"
