"""Culprit attribution (k8s.run._culprit), pure: pods, nodes and the engine's fault lines in, the
rank, pod and node held responsible out. Each case is a failure whose obvious reading (the rank
that exited first, the one with the loudest error) names the wrong rank."""

from __future__ import annotations

from typing import Any

from nccl_k8s.errors import FailureReason
from nccl_k8s.k8s.run._culprit import (
    Rendezvous,
    attribute,
    gpus_per_pod,
    parse_faults,
    parse_rendezvous,
)

Obj = dict[str, Any]


def pod(
    name: str,
    rank: int,
    *,
    node: str | None = "n0",
    phase: str = "Running",
    exit_code: int | None = None,
    finished: str = "2026-01-01T00:00:10Z",
    reason: str = "Error",
    deleted_at: str | None = None,
    conditions: list[Obj] | None = None,
    status: Obj | None = None,
    waiting: str | None = None,
    gpus: int = 2,
) -> Obj:
    cs: Obj = {"name": "bench", "restartCount": 0, "state": {}}
    if exit_code is not None:
        cs["state"] = {
            "terminated": {
                "exitCode": exit_code,
                "reason": reason,
                "startedAt": "2026-01-01T00:00:00Z",
                "finishedAt": finished,
            }
        }
        phase = "Failed" if exit_code else "Succeeded"
    elif waiting:
        cs["state"] = {"waiting": {"reason": waiting, "message": f"{waiting} message"}}
        phase = "Pending"
    elif phase == "Running":
        cs["state"] = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    meta: Obj = {
        "name": name,
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "annotations": {"batch.kubernetes.io/job-completion-index": str(rank)},
    }
    if deleted_at:
        meta["deletionTimestamp"] = deleted_at
        meta["deletionGracePeriodSeconds"] = 30
    spec: Obj = {
        "hostname": name.rsplit("-", 1)[0],
        "containers": [
            {"name": "bench", "command": ["torchrun"], "args": [f"--nproc-per-node={gpus}"]}
        ],
    }
    if node:
        spec["nodeName"] = node
    st: Obj = {"phase": phase, "containerStatuses": [cs], **(status or {})}
    if conditions:
        st["conditions"] = conditions
    return {"metadata": meta, "spec": spec, "status": st}


def fault(rank: int, culprit: int | None, host: str | None = None, **more: Any) -> str:
    doc = {
        "v": 1,
        "rank": rank,
        "culprit": culprit,
        "host": host,
        "pid": 4242,
        "reason": f"no progress from rank {culprit} for 30s",
        "where": "all_reduce 1M",
        **more,
    }
    import json

    return "NCCL_K8S_FAULT " + json.dumps(doc)


def test_fault_lines_are_found_anywhere_in_a_line_and_bad_ones_ignored() -> None:
    text = "\n".join(
        [
            "[default0]:" + fault(0, 3, "r-1"),
            "NCCL_K8S_FAULT {not json",
            'NCCL_K8S_FAULT {"v": 0, "rank": 1}',
            "NCCL_K8S_FAULT [1, 2]",
            "an ordinary line",
        ]
    )
    (f,) = parse_faults(text, "r-0-a")
    assert (f.rank, f.culprit, f.host, f.pid, f.pod) == (0, 3, "r-1", 4242, "r-0-a")
    assert f.reason == "no progress from rank 3 for 30s" and f.where == "all_reduce 1M"
    assert f.kind is None  # a line without "kind" (an older engine)
    (f,) = parse_faults(fault(0, 3, kind="no_heartbeat"), "r-0-a")
    assert f.kind is FailureReason.NO_HEARTBEAT
    (f,) = parse_faults(fault(0, 3, kind="a kind from a newer engine"), "r-0-a")
    assert f.kind is None


def test_the_engine_names_a_hung_rank_whose_pod_the_job_then_deleted() -> None:
    # Rank 0 (pod 0) timed out waiting for global rank 3 (pod 1, hung): rank 0 exited first,
    # and pod 1 was ended by the Job's deletion (a victim, not a culprit).
    pods = [
        pod("r-0-a", 0, node="n0", exit_code=1, finished="2026-01-01T00:00:40Z"),
        pod(
            "r-1-b",
            1,
            node="n1",
            exit_code=137,
            finished="2026-01-01T00:00:41Z",
            deleted_at="2026-01-01T00:01:11Z",
        ),
    ]
    v = attribute(pods, faults=parse_faults(fault(0, 3) + "\n" + fault(1, 3), "r-0-a"))
    assert v is not None
    assert v.culprit.reason is FailureReason.NO_PROGRESS  # the lines name no kind
    lines = fault(0, 3, kind="no_heartbeat") + "\n" + fault(1, 3, kind="no_heartbeat")
    named = attribute(pods, faults=parse_faults(lines, "r-0-a"))
    assert named is not None and named.culprit.reason is FailureReason.NO_HEARTBEAT
    assert (v.culprit.rank, v.culprit.pod, v.culprit.node, v.culprit.global_rank) == (
        1,
        "r-1-b",
        "n1",
        3,
    )
    text = v.text()
    assert text.startswith("rank 1 (pod r-1-b, node n1; global rank 3): stopped: no progress")
    assert "global rank 0 and 1 more noticed: no progress from rank 3 for 30s (all_reduce 1M)" in (
        text
    )
    assert "then rank 0 (pod r-0-a, node n0): exit code 1" in text


def test_without_the_engine_line_exit_order_blames_the_first_not_the_victims() -> None:
    pods = [
        pod("r-0-a", 0, node="n0", exit_code=1, finished="2026-01-01T00:00:12Z"),
        pod("r-1-b", 1, node="n1", exit_code=137, finished="2026-01-01T00:00:11Z"),
        pod(
            "r-2-c",
            2,
            node="n2",
            exit_code=143,
            finished="2026-01-01T00:00:05Z",  # earliest, but it was being deleted
            deleted_at="2026-01-01T00:00:34Z",
        ),
    ]
    v = attribute(pods)
    assert v is not None and v.culprit.pod == "r-1-b" and v.culprit.exit_code == 137
    assert v.culprit.why == "exit code 137 (SIGKILL)"
    assert v.culprit.reason is FailureReason.KILLED
    assert [b.pod for b in v.others] == ["r-0-a"]
    assert v.others[0].reason is FailureReason.EXITED


def test_in_one_second_a_signal_from_outside_comes_before_a_peer_that_gave_up() -> None:
    same = "2026-01-01T00:00:11Z"
    pods = [
        pod("r-0-a", 0, node="n0", exit_code=1, finished=same),
        pod("r-1-b", 1, node="n1", exit_code=137, finished=same),
    ]
    v = attribute(pods)
    assert v is not None and v.culprit.rank == 1


def test_a_notready_node_is_named_even_when_its_pod_looks_fine() -> None:
    node = {
        "metadata": {"name": "n1"},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "Unknown",
                    "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status.",
                }
            ]
        },
    }
    pods = [
        pod("r-0-a", 0, node="n0", exit_code=1),  # its peer vanished: it gave up
        pod("r-1-b", 1, node="n1"),  # still "Running" as far as the API knows
    ]
    v = attribute(pods, nodes={"n0": {"metadata": {"name": "n0"}}, "n1": node})
    assert v is not None and v.culprit.pod == "r-1-b" and v.culprit.node_lost
    assert v.culprit.reason is FailureReason.NODE_LOST
    assert v.culprit.why == (
        "its node n1 is unreachable: its kubelet stopped posting status (NodeStatusUnknown: "
        "Kubelet stopped posting node status.)"
    )


def test_a_pod_lost_with_its_node_is_named_behind_its_replacement() -> None:
    lost = pod(
        "r-1-b",
        1,
        node="n1",
        exit_code=137,
        conditions=[
            {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}
        ],
        status={
            "reason": "NodeLost",
            "message": "Node n1 which was running pod r-1-b is unresponsive",
        },
    )
    replacement = pod("r-1-c", 1, node="n2")
    replacement["metadata"]["creationTimestamp"] = "2026-01-01T00:00:20Z"
    pods = [pod("r-0-a", 0, node="n0", exit_code=1), lost, replacement]
    v = attribute(pods)  # nodes unreadable (no RBAC): the pod's own words
    assert v is not None and (v.culprit.pod, v.culprit.node) == ("r-1-b", "n1")
    assert v.culprit.why == "lost: NodeLost: Node n1 which was running pod r-1-b is unresponsive"
    assert [b.pod for b in v.others] == ["r-0-a"]


def test_a_rank_that_never_started_is_blamed_for_the_others_timing_out() -> None:
    unscheduled = pod("r-1-b", 1, node=None, phase="Pending")
    unscheduled["status"]["containerStatuses"] = []
    unscheduled["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
        }
    ]
    pods = [pod("r-0-a", 0, exit_code=1), unscheduled]
    # Rank 0's log unread (no evidence either way), or read and saying it waited: for torchrun's
    # store, our pod launcher's rendezvous, torch's client that never reached rank 0's store.
    waited = [
        "DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.",
        "nccl-k8s launcher: rendezvous: node 0 did not start the run within 900 s",
        "DistNetworkError: The client socket has timed out after 900000ms while trying to "
        "connect to (r-0.r.ns.svc, 29500).",
    ]
    for logs in [{}, *({"r-0-a": f"starting\n{line}\n"} for line in waited)]:
        v = attribute(pods, logs=logs)
        assert v is not None and v.culprit.pod == "r-1-b", logs
        assert v.culprit.reason is FailureReason.NEVER_STARTED
        assert v.culprit.why == (
            "never started (Unschedulable: 0/4 nodes are available: 4 Insufficient "
            "nvidia.com/gpu.); the others waited for it"
        )


def test_a_rank_that_crashed_at_start_is_blamed_not_the_pod_still_being_created() -> None:
    # Rank 2 crashed on its own within seconds (its log says why, and no word of waiting) while
    # rank 1's pod was still being created on a healthy node: the crash is the cause, and the
    # node of the pod not yet started must not be named (a user would drain it).
    creating = pod("r-1-b", 1, node="n1", waiting="ContainerCreating")
    crashed = pod("r-2-c", 2, node="n2", exit_code=1)
    pods = [pod("r-0-a", 0, node="n0"), creating, crashed]
    v = attribute(pods, logs={"r-2-c": "CUDA error: no CUDA-capable device is detected\n"})
    assert v is not None
    assert (v.culprit.rank, v.culprit.pod, v.culprit.node) == (2, "r-2-c", "n2")
    assert v.culprit.reason is FailureReason.EXITED
    # The same crash with its log unread still reads as the others waiting (the old evidence).
    v = attribute(pods)
    assert v is not None and v.culprit.pod == "r-1-b"


def test_global_rank_maps_to_pod_by_gpus_per_pod_or_by_host() -> None:
    pods = [pod(f"r-{i}-x", i, node=f"n{i}", gpus=4) for i in range(3)]
    assert gpus_per_pod(pods) == 4
    v = attribute(pods, faults=parse_faults(fault(0, 9), "r-0-x"))
    assert v is not None and (v.culprit.rank, v.culprit.pod, v.culprit.global_rank) == (
        2,
        "r-2-x",
        9,
    )
    # Culprit unknown to the engine, its host known: the hostname is the pod's.
    v = attribute(pods, faults=parse_faults(fault(0, None, "r-1.r.ns.svc"), "r-0-x"))
    assert v is not None and v.culprit.pod == "r-1-x" and v.culprit.global_rank is None


def test_nothing_failed_is_no_verdict() -> None:
    assert attribute([pod("r-0-a", 0), pod("r-1-b", 1, exit_code=0)]) is None


def test_torchruns_rendezvous_timeout_names_the_rank_whose_pod_never_joined() -> None:
    # What rank 0's torchrun prints when pod 1 never came (its pod then deleted with the Job).
    log = (
        "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. "
        "1/2 clients joined."
    )
    rdzv = parse_rendezvous(log)
    assert rdzv == Rendezvous(901, 1, 2)
    v = attribute([pod("r-0-a", 0, exit_code=1)], rendezvous=rdzv)
    assert v is not None and (v.culprit.rank, v.culprit.pod) == (1, None)
    assert v.text().startswith(
        "rank 1 (pod gone, node none): never joined the rendezvous (1/2 pods joined in 901s; "
        "its pod is gone); then rank 0 (pod r-0-a, node n0): exit code 1"
    )


def test_without_node_access_the_node_controllers_mark_on_the_pod_names_the_node() -> None:
    marked = pod("r-1-b", 1, node="n1")
    marked["status"]["conditions"] = [
        {"type": "ContainersReady", "status": "True"},
        {
            "type": "Ready",
            "status": "False",
            "reason": "NodeNotReady",
            "message": "Node is not ready",
        },
    ]
    v = attribute([pod("r-0-a", 0, node="n0", exit_code=1), marked])  # nodes unreadable
    assert v is not None and (v.culprit.pod, v.culprit.node) == ("r-1-b", "n1")
    assert v.culprit.why == (
        "its node n1 stopped reporting (the pod was marked not ready: NodeNotReady: Node is "
        "not ready)"
    )


def test_the_engines_line_names_the_culprits_own_host_before_its_rank() -> None:
    # Under a topology rank plan (issue 37) pod r-0-x (index 0) on node n0 runs node rank 1 and
    # pod r-1-x runs node rank 0: global rank 3 (of 2 GPUs a pod) is in node rank 1, the pod
    # of index 0. The line's host (the culprit's own hostname) names it; rank // G would name
    # r-1-x and its healthy node.
    pods = [pod(f"r-{i}-x", i, node=f"n{i}", gpus=2) for i in range(2)]
    v = attribute(pods, faults=parse_faults(fault(0, 3, "r-0.r.ns.svc"), "r-1-x"))
    assert v is not None and (v.culprit.pod, v.culprit.node, v.culprit.global_rank) == (
        "r-0-x",
        "n0",
        3,
    )
