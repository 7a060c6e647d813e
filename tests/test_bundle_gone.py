"""deploy --bundle-on-failure when the Job has deleted the culprit's pod by the time the bundle
is taken (seen in a full suite run beside two CPU hogs: both ranks crash at start, rank 1 first,
but rank 0's failure reached the Job first and the Job deleted rank 1's still-running pod). The
bundle keeps such pods as the deploy last saw them, and the culprit's log as the failure quoted
it, and says so."""

from __future__ import annotations

from tests.test_k8s_culprit import pod

from nccl_k8s.k8s.run._bundle import gone_pods

TAIL = ["last 20 log lines of rank 1:", "  rank 1: NCCL WARN boom", "  exit 1"]


def test_pods_the_job_deleted_are_kept_as_last_seen_with_the_culprits_quoted_log() -> None:
    seen = {"r-0-a": pod("r-0-a", 0, exit_code=1), "r-1-b": pod("r-1-b", 1, node="node-2")}
    gone, logs, notes = gone_pods(seen, {"r-0-a"}, "r-1-b", TAIL)
    assert [p["metadata"]["name"] for p in gone] == ["r-1-b"]
    assert gone[0]["spec"]["nodeName"] == "node-2"
    assert logs == {"r-1-b.log": "rank 1: NCCL WARN boom\nexit 1\n"}
    assert notes == [
        "objects/pod-r-1-b.yaml: gone when the bundle was taken (a failed Job deletes its pods "
        "still running); as the deploy last saw it",
        "logs/r-1-b.log: only the last 2 lines, as the failure quoted them (the pod was gone)",
    ]


def test_a_culprit_still_there_has_its_whole_log_read_not_the_quote() -> None:
    seen = {"r-0-a": pod("r-0-a", 0, exit_code=1)}
    assert gone_pods(seen, {"r-0-a"}, "r-0-a", TAIL) == ([], {}, [])
    assert gone_pods({}, set(), None, []) == ([], {}, [])
