"""A failed Job whose Failed condition reached the monitor before the event of the pod that
failed it (seen in a full suite run beside two CPU hogs: `nodes check` then said "run X failed:
Job PodFailurePolicy: Container bench for pod ... failed with exit code 1 matching FailJob rule"
instead of naming the rank, pod and node). The verdict reads the run's pods again first."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.test_k8s_culprit import pod

from nccl_k8s.errors import FailureReason
from nccl_k8s.k8s.run._settings import WaitSettings
from nccl_k8s.k8s.run._verdicts import RunState, failure
from nccl_k8s.spec import LABEL_INSTANCE as INSTANCE

Obj = dict[str, Any]
NS = "team"
RUN = "r-1"


class _Cluster:
    """The API as it is by the time the monitor reads it: rank 1's pod has failed on node-4."""

    def __init__(self) -> None:
        self.pods = [
            pod(f"{RUN}-0-aaaaa", 0, node="node-1"),
            pod(f"{RUN}-1-bbbbb", 1, node="node-4", exit_code=1),
        ]
        self.listed: list[tuple[str, Any]] = []

    async def list(self, kind: str, *, namespace: str | None = None, **kw: Any) -> Any:
        self.listed.append((kind, kw.get("labels")))
        return (self.pods if kind == "Pod" else []), "7"

    async def get(self, kind: str, name: str, namespace: str | None = None) -> Obj:
        return {"metadata": {"name": name}, "status": {"conditions": []}}

    async def logs(self, name: str, **kw: Any) -> str:
        return "rank 1 exits 1\n" if name.endswith("bbbbb") else "rank 0 waits\n"


def test_a_failed_job_seen_before_its_failed_pod_still_names_the_rank_pod_and_node() -> None:
    run = RunState(RUN)
    # What the watches had shown: both pods running, then the Job's Failed condition.
    for p in (pod(f"{RUN}-0-aaaaa", 0, node="node-1"), pod(f"{RUN}-1-bbbbb", 1, node="node-4")):
        run.seen[p["metadata"]["name"]] = p
    run.workloads["Job"] = {
        "kind": "Job",
        "metadata": {"name": RUN, "uid": "u1"},
        "status": {
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "PodFailurePolicy",
                    "message": f"Container bench for pod {NS}/{RUN}-1-bbbbb failed with exit "
                    "code 1 matching FailJob rule at index 1",
                }
            ]
        },
    }
    kc = _Cluster()
    failed, tail = asyncio.run(failure(kc, NS, run, WaitSettings()))  # type: ignore[arg-type]
    headline = str(failed)
    assert "PodFailurePolicy" not in headline, headline
    assert f"rank 1 (pod {RUN}-1-bbbbb, node node-4): exit code 1" in headline, headline
    assert failed.pod == f"{RUN}-1-bbbbb" and failed.node == "node-4"
    assert failed.reason is FailureReason.EXITED
    assert tail[-1] == "  rank 1 exits 1"
    # The run's own pods were read again, by its instance label.
    assert any(k == "Pod" and (sel or {}).get(INSTANCE) == RUN for k, sel in kc.listed), kc.listed
