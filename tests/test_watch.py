"""The watch state machine (k8s.watch.informer) and the run monitor on scripted event streams.

No cluster: a scripted source plays lists and watch streams, including 410 Gone, dropped
connections, quiet streams and bookmarks, and the tests assert what the informer asked for next
(which resourceVersion), what it yielded, and what the monitor concluded (which rank it named).
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nccl_k8s.errors import Expired, FailureReason, RunFailed, Unreachable
from nccl_k8s.k8s import WaitOutcome, WaitSettings
from nccl_k8s.k8s.run import _monitor, _pods
from nccl_k8s.k8s.run._watch import Update, WatchSettings, informer, within

Obj = dict[str, Any]
FAST = WatchSettings(inactivity_timeout_s=0.2, max_reconnects=2, reconnect_backoff_s=0.0)


def obj(name: str, rv: int, **extra: Any) -> Obj:
    return {"metadata": {"name": name, "resourceVersion": str(rv)}, **extra}


class Script:
    """A WatchSource playing scripted lists and streams; records every call."""

    def __init__(self, lists: list[tuple[list[Obj], str]], streams: list[list[Any]]) -> None:
        self.lists = lists
        self.streams = streams
        self.calls: list[str] = []

    async def list(self) -> tuple[builtins.list[Obj], str]:
        self.calls.append("list")
        return self.lists.pop(0)

    def watch(self, resource_version: str) -> AsyncIterator[tuple[str, Obj]]:
        self.calls.append(f"watch@{resource_version}")
        steps = self.streams.pop(0) if self.streams else [("hang", None)]
        return self._play(steps)

    async def _play(self, steps: builtins.list[Any]) -> AsyncIterator[tuple[str, Obj]]:
        for step in steps:
            if isinstance(step, BaseException):
                raise step
            if step[0] == "hang":
                await asyncio.sleep(3600)
            yield step


async def take(source: Script, n: int, settings: WatchSettings = FAST) -> list[Update]:
    out: list[Update] = []
    gen = informer(source, settings, sleep=lambda s: asyncio.sleep(0))
    try:
        async for u in gen:
            out.append(Update(u.type, u.obj, dict(u.objects)))
            if len(out) == n:
                break
    finally:
        await gen.aclose()
    return out


def names(u: Update) -> list[str]:
    return sorted(u.objects)


def test_list_then_watch_from_its_version_applies_events() -> None:
    src = Script(
        [([obj("a", 5)], "10")],
        [
            [
                ("ADDED", obj("b", 11)),
                ("BOOKMARK", obj("", 12)),
                ("MODIFIED", obj("a", 13, status={"phase": "Running"})),
                ("DELETED", obj("b", 14)),
            ]
        ],
    )
    ups = asyncio.run(take(src, 4))
    assert [u.type for u in ups] == ["SYNCED", "ADDED", "MODIFIED", "DELETED"]
    assert names(ups[0]) == ["a"] and names(ups[1]) == ["a", "b"] and names(ups[3]) == ["a"]
    assert ups[2].objects["a"]["status"] == {"phase": "Running"}
    assert src.calls == ["list", "watch@10"]


def test_server_closing_the_stream_rewatches_from_the_last_version_bookmarks_included() -> None:
    src = Script(
        [([], "10")],
        [[("ADDED", obj("a", 11)), ("BOOKMARK", obj("", 20))], [("ADDED", obj("b", 21))]],
    )
    ups = asyncio.run(take(src, 3))
    assert [u.type for u in ups] == ["SYNCED", "ADDED", "ADDED"]
    assert src.calls == ["list", "watch@10", "watch@20"]


def test_410_gone_relists_and_the_relist_replaces_the_set() -> None:
    src = Script(
        [([obj("a", 5), obj("b", 6)], "10"), ([obj("b", 30), obj("c", 31)], "40")],
        [[("ADDED", obj("x", 11)), Expired("too old")], [("MODIFIED", obj("c", 41))]],
    )
    ups = asyncio.run(take(src, 4))
    assert [u.type for u in ups] == ["SYNCED", "ADDED", "SYNCED", "MODIFIED"]
    # a and x were deleted while we were away: the relist's set has only b and c.
    assert names(ups[2]) == ["b", "c"]
    assert src.calls == ["list", "watch@10", "list", "watch@40"]


def test_410_as_the_first_answer_of_a_watch_relists_too() -> None:
    src = Script([([], "10"), ([obj("a", 50)], "50")], [[Expired("gone")], []])
    ups = asyncio.run(take(src, 2))
    assert [u.type for u in ups] == ["SYNCED", "SYNCED"] and names(ups[1]) == ["a"]
    assert src.calls[:3] == ["list", "watch@10", "list"]


def test_a_dropped_connection_resumes_from_the_last_seen_version() -> None:
    src = Script(
        [([], "10")],
        [[("ADDED", obj("a", 11)), Unreachable("reset")], [("ADDED", obj("b", 12))]],
    )
    ups = asyncio.run(take(src, 3))
    assert [u.type for u in ups] == ["SYNCED", "ADDED", "ADDED"]
    assert src.calls == ["list", "watch@10", "watch@11"]  # no relist: nothing was lost


def test_a_quiet_stream_is_reopened_after_the_inactivity_timeout() -> None:
    src = Script(
        [([], "10")], [[("ADDED", obj("a", 11)), ("hang", None)], [("ADDED", obj("b", 12))]]
    )
    ups = asyncio.run(take(src, 3))
    assert [u.type for u in ups] == ["SYNCED", "ADDED", "ADDED"]
    assert src.calls == ["list", "watch@10", "watch@11"]


def test_a_server_that_keeps_dropping_us_is_reported_not_retried_forever() -> None:
    src = Script([([], "10")], [[Unreachable("refused")]] * 5)
    with pytest.raises(Unreachable, match="refused"):
        asyncio.run(take(src, 10))
    assert src.calls == ["list", "watch@10", "watch@10", "watch@10"]  # 1 + max_reconnects


# ---- pods as the monitor reads them ------------------------------------------------------------


def pod(
    name: str, rank: int, *, phase: str = "Pending", node: str | None = None, **status: Any
) -> Obj:
    p: Obj = {
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "annotations": {"batch.kubernetes.io/job-completion-index": str(rank)},
            "labels": {"app.kubernetes.io/instance": "r"},
            "creationTimestamp": "2026-12-03T05:00:00Z",
        },
        "spec": {"schedulerName": "default-scheduler"},
        "status": {"phase": phase, **status},
    }
    if node:
        p["spec"]["nodeName"] = node
    return p


def terminated(code: int, reason: str = "Error") -> list[Obj]:
    return [
        {
            "name": "bench",
            "restartCount": 0,
            "state": {"terminated": {"exitCode": code, "reason": reason, "finishedAt": "t1"}},
        }
    ]


@pytest.mark.parametrize(
    ("status", "reason", "words"),
    [
        (
            {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
                    }
                ]
            },
            "Unschedulable",
            "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
        ),
        (
            {
                "containerStatuses": [
                    {
                        "name": "bench",
                        "state": {
                            "waiting": {
                                "reason": "ImagePullBackOff",
                                "message": "Back-off pulling image",
                            }
                        },
                    }
                ]
            },
            "ImagePullBackOff",
            "ImagePullBackOff: Back-off pulling image",
        ),
        (
            {"containerStatuses": terminated(137, "OOMKilled")},
            "OOMKilled",
            "more memory than its limit",
        ),
        ({"containerStatuses": terminated(137)}, "Error", "exit code 137 (SIGKILL)"),
        ({"containerStatuses": terminated(1)}, "Error", "exit code 1"),
        (
            {"phase": "Failed", "reason": "Evicted", "message": "low on memory"},
            "Evicted",
            "Evicted: low on memory",
        ),
    ],
)
def test_pod_problems_are_worded(status: Obj, reason: str, words: str) -> None:
    problem = _pods.pod_problem(pod("p", 0, **status))
    assert problem is not None and problem.reason == reason and words in problem.message


def test_a_waiting_or_running_pod_has_no_problem() -> None:
    creating: dict[str, Any] = {
        "containerStatuses": [
            {"name": "bench", "state": {"waiting": {"reason": "ContainerCreating"}}}
        ]
    }
    assert _pods.pod_problem(pod("p", 0, **creating)) is None
    assert _pods.pod_problem(pod("p", 0, phase="Running", node="n")) is None
    assert (
        _pods.pod_problem(pod("p", 0, phase="Succeeded", containerStatuses=terminated(0))) is None
    )


# ---- the monitor on scripted streams -----------------------------------------------------------


class FakeKube:
    """What _monitor.follow_run asks of KubeClient, scripted per kind (Events: none unless
    scripted), with the nodes it may read and every write it is asked for."""

    server = "http://fake"

    def __init__(
        self,
        scripts: dict[str, Script],
        logs: str | dict[str, str] = "",
        nodes: dict[str, Obj] | None = None,
    ) -> None:
        self.scripts = scripts
        self.scripts.setdefault("Event", Script([([], "1")], []))
        self.log_text = logs
        self.nodes = nodes or {}
        self.writes: list[tuple[str, ...]] = []

    async def list(self, kind: str, **kw: Any) -> tuple[list[Obj], str]:
        if kind == "Event" and set(kw.get("fields") or {}) != {"involvedObject.name"}:
            return [], "1"  # the on-demand lookups (scheduling events); the watch is scripted
        return await self.scripts[kind].list()

    def watch(
        self, kind: str, *, resource_version: str, **kw: Any
    ) -> AsyncIterator[tuple[str, Obj]]:
        return self.scripts[kind].watch(resource_version)

    async def logs(self, name: str, **kw: Any) -> str:
        if isinstance(self.log_text, dict):
            return self.log_text.get(name, "")
        return self.log_text

    async def get(self, kind: str, name: str, **kw: Any) -> Obj | None:
        return self.nodes.get(name) if kind == "Node" else None

    async def patch(self, kind: str, name: str, patch: Obj, **kw: Any) -> Obj:
        self.writes.append(("patch", kind, name, repr(patch)))
        return {}

    async def delete(self, kind: str, name: str, **kw: Any) -> bool:
        self.writes.append(("delete", kind, name, str(kw.get("uid"))))
        return True


def job(**status: Any) -> Obj:
    return {
        "kind": "Job",
        "metadata": {"name": "r", "resourceVersion": "1", "uid": "job-uid"},
        "spec": {"completions": 2, "backoffLimit": 0},
        "status": status,
    }


def wait(
    kube: FakeKube,
    *,
    ending: _monitor.Ending | None = None,
    security: str | None = None,
    **settings: Any,
) -> WaitOutcome:
    s = WaitSettings(watch=FAST, tick_s=0.05, failure_settle_s=0.0, **settings)
    return asyncio.run(
        _monitor.follow_run(
            kube,  # type: ignore[arg-type]
            "ns",
            "r",
            expected=2,
            settings=s,
            progress=None,
            ending=ending,
            security=security,
        )
    )


def test_monitor_names_the_rank_that_exited_with_its_last_log_lines_across_a_410() -> None:
    running = [
        pod("r-0-a", 0, phase="Running", node="n0"),
        pod("r-1-b", 1, phase="Running", node="n1"),
    ]
    killed = pod("r-1-b", 1, phase="Failed", node="n1", containerStatuses=terminated(137))
    killed["metadata"]["resourceVersion"] = "30"
    pods = Script(
        [(running[:1], "10"), (running, "20")],
        [[Expired("compacted")], [("MODIFIED", killed)]],
    )
    jobs = Script([([job()], "10")], [])
    sts = Script([([], "10")], [])
    kube = FakeKube({"Pod": pods, "Job": jobs, "StatefulSet": sts}, logs="step 1\nKilled\n")
    with pytest.raises(RunFailed) as info:
        wait(kube)
    msg = str(info.value)
    assert "rank 1 (pod r-1-b, node n1): exit code 137 (SIGKILL)" in msg
    assert "last 20 log lines of rank 1:\n  step 1\n  Killed" in msg
    assert info.value.rank == 1 and info.value.pod == "r-1-b" and info.value.node == "n1"
    assert info.value.reason is FailureReason.KILLED
    assert pods.calls[:3] == ["list", "watch@10", "list"]


def test_monitor_returns_when_the_job_completes_after_a_dropped_connection() -> None:
    done = [
        pod("r-0-a", 0, phase="Succeeded", node="n0"),
        pod("r-1-b", 1, phase="Succeeded", node="n1"),
    ]
    complete = job(conditions=[{"type": "Complete", "status": "True"}])
    complete["metadata"]["resourceVersion"] = "12"
    pods = Script([(done, "10")], [])
    jobs = Script([([job()], "10")], [[Unreachable("reset")], [("MODIFIED", complete)]])
    kube = FakeKube({"Pod": pods, "Job": jobs, "StatefulSet": Script([([], "1")], [])})
    out = wait(kube)
    assert out.phase == "Succeeded" and [p.rank for p in out.pods] == [0, 1]
    assert jobs.calls[:3] == ["list", "watch@10", "watch@10"]


def test_monitor_says_no_scheduler_picked_the_pods_up() -> None:
    waiting = [pod("r-0-a", 0), pod("r-1-b", 1)]
    for p in waiting:
        p["spec"]["schedulerName"] = "hami-scheduler"
    kube = FakeKube(
        {
            "Pod": Script([(waiting, "10")], []),
            "Job": Script([([job()], "10")], []),
            "StatefulSet": Script([([], "1")], []),
        }
    )
    with pytest.raises(
        RunFailed, match=r"no scheduler has picked up its 2 pod.*schedulerName hami-scheduler"
    ) as info:
        wait(kube, schedule_timeout_s=0.2)
    assert info.value.reason is FailureReason.NO_SCHEDULER and info.value.reason.unplaced


def test_monitor_gives_up_at_the_timeout_and_says_the_run_goes_on() -> None:
    kube = FakeKube(
        {
            "Pod": Script([([pod("r-0-a", 0, phase="Running", node="n")], "10")], []),
            "Job": Script([([job()], "10")], []),
            "StatefulSet": Script([([], "1")], []),
        }
    )
    with pytest.raises(
        RunFailed, match=r"has not finished after 0.3s \(1 Running\); it keeps running"
    ) as info:
        wait(kube, timeout_s=0.3)
    assert info.value.reason is FailureReason.TIMED_OUT


def test_within_never_swallows_a_cancellation_that_meets_a_result() -> None:
    # asyncio.wait_for on 3.11 returns the result and drops the cancellation here (gh-86296);
    # a monitor task that ignores its cancellation hangs deploy at the end of a run.
    async def main() -> None:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(within(fut, 10))
        await asyncio.sleep(0)
        fut.set_result(1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_within_times_out_and_cancels_what_it_waited_for() -> None:
    async def main() -> None:
        slow: asyncio.Future[None] = asyncio.get_running_loop().create_future()  # never done
        with pytest.raises(asyncio.TimeoutError):
            await within(slow, 0.05)
        assert slow.cancelled()

    asyncio.run(main())


# ---- the monitor ends what cannot succeed, and names it -----------------------------------------


def kinds(pods: Script, jobs: Script | None = None, **more: Script) -> dict[str, Script]:
    return {
        "Pod": pods,
        "Job": jobs or Script([([job()], "10")], []),
        "StatefulSet": Script([([], "1")], []),
        **more,
    }


def test_a_run_deleted_from_another_shell_is_said_at_once() -> None:
    gone = job()
    gone["metadata"]["resourceVersion"] = "11"
    running = [pod("r-0-a", 0, phase="Running", node="n0")]
    kube = FakeKube(
        kinds(Script([(running, "10")], []), Script([([job()], "10")], [[("DELETED", gone)]]))
    )
    with pytest.raises(RunFailed) as info:
        wait(kube, ending=_monitor.Ending(stop=True))
    assert str(info.value) == (
        "run r was deleted while this command waited for it: its Job is gone (`nccl-k8s "
        "cleanup`, `kubectl delete` or its --ttl); nothing of it is left running"
    )
    assert info.value.reason is FailureReason.DELETED
    assert kube.writes == []  # nothing to end: it is gone


def test_failed_create_by_pod_security_names_the_level_and_the_profile() -> None:
    event = {
        "metadata": {"name": "r.1", "resourceVersion": "5"},
        "reason": "FailedCreate",
        "type": "Warning",
        "involvedObject": {"kind": "Job", "name": "r", "uid": "job-uid"},
        "message": 'Error creating: pods "r-0-x7k2p" is forbidden: violates PodSecurity '
        '"baseline:latest": non-default capabilities (container "bench" must not include '
        '"IPC_LOCK" in securityContext.capabilities.add)',
        "lastTimestamp": "2026-12-03T05:00:01Z",
    }
    stale = dict(event, involvedObject={"kind": "Job", "name": "r", "uid": "an-older-job"})
    stale["metadata"] = {"name": "r.0", "resourceVersion": "4"}
    events = Script([([stale], "10")], [[("ADDED", event)]])
    kube = FakeKube(kinds(Script([([], "10")], []), Event=events))
    with pytest.raises(RunFailed) as info:
        wait(kube, ending=_monitor.Ending(stop=True), security="rdma")
    msg = str(info.value)
    assert msg.startswith(
        'run r: the Job cannot create its pods: Error creating: pods "r-0-x7k2p" is forbidden: '
        'violates PodSecurity "baseline:latest"'
    )
    assert "Namespace ns enforces Pod Security level 'baseline'" in msg
    assert "the pods of --security rdma violate it" in msg
    assert info.value.reason is FailureReason.CREATE_REFUSED
    # Stopped, not left to retry forever: the Job is made to fail, the reason recorded on it.
    ((verb, kind, name, body),) = kube.writes
    assert (verb, kind, name) == ("patch", "Job", "r") and "'activeDeadlineSeconds': 1" in body
    assert "nccl-k8s/stopped-because" in body


def lost_pod() -> Obj:
    p = pod(
        "r-1-b",
        1,
        phase="Failed",
        node="n1",
        containerStatuses=terminated(137),
        reason="NodeLost",
        message="Node n1 which was running pod r-1-b is unresponsive",
        conditions=[{"type": "DisruptionTarget", "status": "True"}],
    )
    p["status"]["containerStatuses"][0]["state"]["terminated"]["startedAt"] = "t0"
    return p


def test_a_member_lost_with_its_node_ends_the_run_naming_the_node_and_deletes_it() -> None:
    from nccl_k8s.k8s.run._outcomes import Created

    replacement = pod("r-1-c", 1)  # what the Job made for it: it can never join the gang
    replacement["metadata"]["creationTimestamp"] = "2026-12-03T05:00:09Z"
    pods = Script(
        [
            ([pod("r-0-a", 0, phase="Running", node="n0"), lost_pod(), replacement], "10"),
            ([], "30"),
        ],
        [],
    )
    not_ready = {
        "metadata": {"name": "n1"},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "PLEG"}
            ]
        },
    }
    kube = FakeKube(kinds(pods), nodes={"n1": not_ready}, logs={"r-1-b": "step 7\n"})
    created = [
        Created("ConfigMap", "r-engine", "u1"),
        Created("Service", "r", "u2"),
        Created("Job", "r", "u3"),
    ]
    with pytest.raises(RunFailed) as info:
        wait(kube, ending=_monitor.Ending(stop=True, delete=created))
    msg = str(info.value)
    assert msg.startswith(
        "run r failed: rank 1 (pod r-1-b, node n1): its node n1 is NotReady (KubeletNotReady: "
        "PLEG); the pod was lost with it (NodeLost: Node n1 which was running pod r-1-b is "
        "unresponsive)"
    )
    assert info.value.node == "n1" and info.value.pod == "r-1-b"
    assert info.value.reason is FailureReason.NODE_LOST
    assert (
        "(deleted what this deploy created: Job/r, Service/r, ConfigMap/r-engine; its pods " in msg
    )
    # What failed, without what the deploy then did (nodes check shows it per pair test).
    assert info.value.headline == msg.split(" (deleted what this deploy created")[0]
    assert [w[:4] for w in kube.writes] == [
        ("delete", "Job", "r", "u3"),
        ("delete", "Service", "r", "u2"),
        ("delete", "ConfigMap", "r-engine", "u1"),
    ]


def test_the_engine_line_names_the_hung_rank_that_the_job_deleted() -> None:
    line = (
        'NCCL_K8S_FAULT {"v":1,"rank":0,"culprit":1,"host":"r-1","pid":7,'
        '"reason":"no heartbeat for 30s","kind":"no_heartbeat","where":"all_reduce"}'
    )
    gave_up = pod("r-0-a", 0, phase="Failed", node="n0", containerStatuses=terminated(1))
    gave_up["metadata"]["resourceVersion"] = "12"
    hung = pod("r-1-b", 1, phase="Running", node="n1")
    hung["spec"]["containers"] = [{"name": "bench", "args": ["--nproc-per-node=1"]}]
    hung["status"]["containerStatuses"] = [{"name": "bench", "state": {"running": {}}}]
    deleted = dict(hung, metadata=dict(hung["metadata"], resourceVersion="13"))
    pods = Script(
        [([pod("r-0-a", 0, phase="Running", node="n0"), hung], "10")],
        [[("MODIFIED", gave_up), ("DELETED", deleted)]],
    )
    failed = job(conditions=[{"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}])
    failed["metadata"]["resourceVersion"] = "14"
    jobs = Script([([job()], "10")], [[("MODIFIED", failed)]])
    kube = FakeKube(kinds(pods, jobs), logs={"r-0-a": f"warming up\n{line}\n"})
    with pytest.raises(RunFailed) as info:
        wait(kube, ending=_monitor.Ending(stop=True))
    msg = str(info.value)
    assert msg.startswith(
        "run r failed: rank 1 (pod r-1-b, node n1; global rank 1): stopped: no heartbeat for "
        "30s (all_reduce); global rank 0 noticed: no heartbeat for 30s (all_reduce); then "
        "rank 0 (pod r-0-a, node n0): exit code 1"
    )
    assert info.value.rank == 1 and info.value.global_rank == 1
    assert info.value.reason is FailureReason.NO_HEARTBEAT
    # Ended either way: the Job failed on its own, or is made to (whichever the monitor saw).
    assert "(the Job has ended and stopped its pods;" in msg or (
        "(stopped its ranks: Job r is failed" in msg and kube.writes[0][:3] == ("patch", "Job", "r")
    )


def unschedulable(name: str, rank: int) -> Obj:
    cond = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
    }
    return pod(name, rank, conditions=[cond])


def test_unschedulable_is_waited_for_until_the_schedule_timeout() -> None:
    import time

    pods = Script([([unschedulable("r-0-a", 0), unschedulable("r-1-b", 1)], "10")], [])
    kube = FakeKube(kinds(pods))
    start = time.monotonic()
    with pytest.raises(RunFailed) as info:
        wait(kube, schedule_timeout_s=0.6, ending=_monitor.Ending(stop=True))
    assert time.monotonic() - start >= 0.6
    assert str(info.value).startswith(
        "run r cannot be scheduled: rank 0 (pod r-0-a), rank 1 (pod r-1-b): Unschedulable for "
        "0.6s (--schedule-timeout): 0/4 nodes are available: 4 Insufficient nvidia.com/gpu. "
        "(stopped its ranks: Job r is failed and deletes its pods;"
    )
    assert info.value.reason is FailureReason.UNSCHEDULABLE and info.value.reason.unplaced


def test_wait_on_pods_unschedulable_long_before_says_how_long_not_the_timeout() -> None:
    """Issue 24, point 8: `wait --schedule-timeout 10s` on pods Unschedulable for 4 minutes said
    "for 10s"; the PodScheduled condition's lastTransitionTime says since when."""
    import datetime

    since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=4)
    old = [unschedulable("r-0-a", 0), unschedulable("r-1-b", 1)]
    for p in old:
        p["status"]["conditions"][0]["lastTransitionTime"] = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    kube = FakeKube(kinds(Script([(old, "10")], [])))
    with pytest.raises(RunFailed) as info:
        wait(kube, schedule_timeout_s=0.6, ending=_monitor.Ending(stop=True))
    text = str(info.value)
    head = "run r cannot be scheduled: rank 0 (pod r-0-a), rank 1 (pod r-1-b): Unschedulable for "
    assert text.startswith(head), text
    seconds, rest = text[len(head) :].split("s ", 1)
    assert 240 <= int(seconds) <= 240 + 60, text  # 4 minutes, on a slow machine a bit more
    assert rest.startswith("(0.6s of it watched, --schedule-timeout): 0/4 nodes are available")


def test_an_image_pull_error_is_waited_for_until_the_pull_timeout() -> None:
    import time

    backoff = pod(
        "r-0-a",
        0,
        node="n0",
        containerStatuses=[
            {
                "name": "bench",
                "state": {
                    "waiting": {
                        "reason": "ImagePullBackOff",
                        "message": 'Back-off pulling image "registry.example/pytorch:1"',
                    }
                },
            }
        ],
    )
    kube = FakeKube(kinds(Script([([backoff, pod("r-1-b", 1, node="n1")], "10")], [])))
    start = time.monotonic()
    with pytest.raises(RunFailed) as info:
        wait(kube, pull_timeout_s=0.5)
    assert time.monotonic() - start >= 0.5
    assert str(info.value).startswith(
        "run r: rank 0 (pod r-0-a, node n0) could not pull its image for 0.5s (--pull-timeout): "
        'ImagePullBackOff: Back-off pulling image "registry.example/pytorch:1"'
    )
