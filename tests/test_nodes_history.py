"""Issue 38, history: the bounded record of node checks in the namespace (nodes._history), its
optimistic writes, `nodes history`'s per-node view and change line (nodes._timeline), and the
labels a verdict writes (nodes._labels). The scheduled check that writes and reads it on the test
cluster is tests/test_nodes_schedule_e2e.py's acceptance 2."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.errors import ClusterError, Conflict, UsageError
from nccl_k8s.k8s.nodes._badnodes import Findings, NodeVerdict
from nccl_k8s.k8s.nodes._history import (
    HISTORY_KEY,
    HISTORY_NAME,
    MAX_BYTES,
    MAX_CHECKS,
    Check,
    append_check,
    bounded,
    check_of,
    dump,
    history_object,
    load,
)
from nccl_k8s.k8s.nodes._labels import BUSBW_KEY, CHECKED_AT_KEY, LABEL_KEY, RUN_KEY, verdict_labels
from nccl_k8s.k8s.nodes._timeline import Entry, change_of, iso, timelines
from nccl_k8s.spec import LABEL_INSTANCE

T0 = 1_796_652_000  # 2026-12-07T14:00:00Z


def check(run: str, at: int, **nodes: tuple[str, float | None]) -> Check:
    return Check(run, at, {k.replace("_", "-"): v for k, v in nodes.items()})


def test_a_check_is_recorded_with_every_verdict_and_round_trips() -> None:
    findings = Findings(1.0, 0.9, [NodeVerdict("node-1", "good", 42.1234, ""),
                                   NodeVerdict("node-2", "bad", None, "failed"),
                                   NodeVerdict("node-3", "suspect", 9.8, "")], [])  # fmt: skip
    c = check_of(findings, "nc-1", T0)
    assert c.nodes == {"node-1": ("good", 42.123), "node-2": ("bad", None),
                       "node-3": ("suspect", 9.8)}  # fmt: skip
    older = check("nc-0", T0 - 60, node_1=("good", 40.0))
    assert load(dump([older, c])) == [c, older]  # newest first, whatever the stored order


@pytest.mark.parametrize("text", ["{", '[{"run": "x"}]', '[{"run": "x", "at": 1, "nodes": 3}]'])
def test_a_history_that_does_not_parse_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=HISTORY_KEY):
        load(text)


def test_the_history_keeps_the_newest_checks_under_both_bounds() -> None:
    many = [check(f"r{i}", T0 - i, node_0=("good", 1.0)) for i in range(MAX_CHECKS + 5)]
    kept = bounded(many)
    assert [c.run_id for c in kept] == [f"r{i}" for i in range(MAX_CHECKS)]
    # Checks of 4,000 nodes: fewer fit the byte bound, the newest first, always at least one.
    big = [Check(f"b{i}", T0 - i, {f"node-{n}": ("good", 123.456) for n in range(4000)})
           for i in range(8)]  # fmt: skip
    kept = bounded(big)
    assert 1 <= len(kept) < 8 and [c.run_id for c in kept] == [f"b{i}" for i in range(len(kept))]
    assert len(dump(kept)) <= MAX_BYTES < len(dump(big[: len(kept) + 1]))
    huge = [Check("h", T0, {f"node-{n}": ("good", 1.5) for n in range(20_000)})]
    assert bounded(huge) == huge


class FakeConfigMaps:
    """A ConfigMap store with resourceVersions, as the API server keeps them: a patch whose
    resourceVersion is not the object's is a 409; `meanwhile` writes before the first patch."""

    def __init__(self, meanwhile: Check | None = None, labels: dict[str, str] | None = None):
        self.obj: Any = None
        self.rv = 0
        self.meanwhile = meanwhile
        self.patches = 0
        if labels is not None:
            self.obj = {"metadata": {"name": HISTORY_NAME, "labels": labels,
                                     "resourceVersion": "0"}, "data": {}}  # fmt: skip

    async def get(self, kind: str, name: str, *, namespace: str | None = None) -> Any:
        return None if self.obj is None else json.loads(json.dumps(self.obj))

    async def create(self, obj: dict[str, Any]) -> Any:
        if self.obj is not None:
            raise Conflict("exists", status=409, reason="AlreadyExists")
        self.obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "1"}}
        self.rv = 1
        return self.obj

    async def patch(self, kind: str, name: str, patch: Any, *, namespace: str | None = None) -> Any:
        assert self.obj is not None
        self.patches += 1
        if self.meanwhile is not None:  # another check wrote between our read and our patch
            other, self.meanwhile = self.meanwhile, None
            self.obj["data"][HISTORY_KEY] = dump([other, *load(self.obj["data"][HISTORY_KEY])])
            self.rv += 1
            self.obj["metadata"]["resourceVersion"] = str(self.rv)
        if patch["metadata"]["resourceVersion"] != self.obj["metadata"]["resourceVersion"]:
            raise Conflict("changed", status=409, reason="Conflict")
        self.obj["data"].update(patch["data"])
        self.rv += 1
        self.obj["metadata"]["resourceVersion"] = str(self.rv)
        return self.obj


def test_appends_are_optimistic_a_concurrent_write_is_kept_and_a_retry_is_not_doubled() -> None:
    first, other, mine = (check(r, T0 + i, node_0=("good", 1.0)) for i, r in
                          enumerate(("a", "b", "c")))  # fmt: skip
    store = FakeConfigMaps(meanwhile=other)
    assert asyncio.run(append_check(store, "ns", first)) == 1  # type: ignore[arg-type]
    made = store.obj
    assert (
        made is not None
        and made["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "nccl-k8s"
    )
    assert LABEL_INSTANCE not in made["metadata"]["labels"]  # never a run to cleanup/list
    # The first patch meets a 409 (the other check wrote): read again, append to both.
    assert asyncio.run(append_check(store, "ns", mine)) == 3  # type: ignore[arg-type]
    assert [c.run_id for c in load(store.obj["data"][HISTORY_KEY])] == ["c", "b", "a"]
    assert store.patches == 2
    # The same check again (a patch retried after its answer was lost): not appended twice.
    assert asyncio.run(append_check(store, "ns", mine)) == 3  # type: ignore[arg-type]
    assert store.patches == 2


def test_a_configmap_of_that_name_that_is_not_ours_is_left_alone() -> None:
    store = FakeConfigMaps(labels={"team": "x"})
    with pytest.raises(ClusterError, match="is not nccl-k8s's"):
        asyncio.run(append_check(store, "ns", check("a", T0)))  # type: ignore[arg-type]
    assert store.patches == 0
    obj = history_object("ns", [])
    assert obj["metadata"]["name"] == HISTORY_NAME and json.loads(obj["data"][HISTORY_KEY]) == []


def entries(*rows: tuple[int, str, float | None]) -> list[Entry]:
    return [Entry(T0 + 3600 * h, f"r{h}", v, b) for h, v, b in rows]


def test_the_change_since_the_last_good_check() -> None:
    bad_now = entries((6, "bad", 9.8), (5, "bad", 10.1), (2, "good", 42.1), (1, "good", 41.0))
    assert change_of(bad_now) == (
        f"bad since {iso(T0 + 5 * 3600)} (last good {iso(T0 + 2 * 3600)}, 42.1 GB/s; now 9.8 GB/s)"
    )
    assert iso(T0 + 5 * 3600) == "2026-12-07T19:00:00Z"
    mixed = entries((6, "bad", None), (5, "suspect", 20.0), (2, "good", 42.1))
    assert change_of(mixed).startswith(f"not good (now bad) since {iso(T0 + 5 * 3600)}")
    assert change_of(mixed).endswith("now no busbw measured)")
    never = entries((6, "bad", 9.8))
    assert (
        change_of(never)
        == f"bad since {iso(T0 + 6 * 3600)} (never good in the history; now 9.8 GB/s)"
    )
    again = entries((7, "good", 41.9), (6, "good", 40.0), (5, "bad", 9.8))
    assert change_of(again) == (
        f"good since {iso(T0 + 6 * 3600)}, now 41.9 GB/s (bad at {iso(T0 + 5 * 3600)}, 9.8 GB/s)"
    )


def test_timelines_per_node_newest_first_and_an_unknown_node_is_bad_input() -> None:
    checks = [check("r1", T0, node_1=("good", 40.0), node_10=("good", 41.0)),
              check("r2", T0 + 60, node_1=("bad", 9.0), node_2=("good", 40.5))]  # fmt: skip
    got = timelines(checks, "ns")
    assert [t.node for t in got.nodes] == ["node-1", "node-2", "node-10"]
    assert [e.run_id for e in got.nodes[0].entries] == ["r2", "r1"] and got.checks == 2
    doc = got.to_dict()
    assert doc["configmap"] == HISTORY_NAME
    assert doc["nodes"][0]["history"][0] == {"at": T0 + 60, "time": iso(T0 + 60), "run_id": "r2",
                                             "verdict": "bad", "busbw": 9.0}  # fmt: skip
    assert [t.node for t in timelines(checks, "ns", "node-2").nodes] == ["node-2"]
    with pytest.raises(
        UsageError, match=r"--node 'node-9': no check .* \(nodes there: node-1, node-2, node-10\)"
    ):
        timelines(checks, "ns", "node-9")


def test_a_verdict_writes_its_time_busbw_and_run_and_drops_a_stale_busbw() -> None:
    assert verdict_labels("good", 42.149, at=T0, run_id="nc-1") == {
        LABEL_KEY: "good", CHECKED_AT_KEY: str(T0), BUSBW_KEY: "42.1", RUN_KEY: "nc-1"}  # fmt: skip
    assert [verdict_labels("good", b, at=T0, run_id="r")[BUSBW_KEY]
            for b in (0.036171, 387.4, 1234.5, 9.0)] == ["0.0362", "387", "1234", "9"]  # fmt: skip
    # A bad node none of whose tests measured: its older busbw is removed (null in a merge patch).
    assert verdict_labels("bad", None, at=T0, run_id="nc-1")[BUSBW_KEY] is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--node", "Node_1"], "--node 'Node_1': expected a node name"),
        (["-o", "table"], '--output "table": expected text or json'),
    ],
)
def test_history_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["nodes", "history", "-n", "ns", *args])
    assert res.exit_code == 2 and message in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1, res.output


def test_history_text_shows_each_node_newest_first_under_its_change_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from nccl_k8s import k8s

    checks = [check("nc-0b9e41", T0 - 6 * 3600, node_2=("good", 42.1)),
              check("nc-5f1c2a", T0, node_2=("bad", 9.8), node_3=("good", None))]  # fmt: skip
    asked: dict[str, Any] = {}

    def fake(*, client: Any, namespace: str | None = None, node: str | None = None) -> Any:
        asked.update(namespace=namespace, node=node)
        return timelines(checks, "bench", node)

    monkeypatch.setattr(k8s, "node_history", fake)
    res = CliRunner().invoke(app, ["nodes", "history", "-n", "bench"])
    assert res.exit_code == 0, res.output
    assert asked == {"namespace": "bench", "node": None}
    assert res.output.splitlines() == [
        "2 checks recorded in namespace bench",
        "",
        "node-2: bad since 2026-12-07T14:00:00Z (last good 2026-12-07T08:00:00Z, 42.1 GB/s; "
        "now 9.8 GB/s)",
        "  CHECKED AT            VERDICT  BUSBW GB/S  RUN",
        "  2026-12-07T14:00:00Z  bad             9.8  nc-5f1c2a",
        "  2026-12-07T08:00:00Z  good           42.1  nc-0b9e41",
        "",
        "node-3: good since 2026-12-07T14:00:00Z, now no busbw measured",
        "  CHECKED AT            VERDICT  BUSBW GB/S  RUN",
        "  2026-12-07T14:00:00Z  good              -  nc-5f1c2a",
    ]
