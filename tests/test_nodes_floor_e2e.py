"""Issue 35, acceptance 5: on the test cluster a floor above what the cluster measures fails
`nodes check` as "the whole cluster is below the floor": one finding about the cluster (its
level against the floor), exit 1, no node named bad for it. The test cluster has no known
platform, so the floor is given (--floor); a platform's own floor comes from the same verdict
(tests/test_floors.py). The engine flags are tests/test_nodes_check_e2e.py's (gloo, 32-64 MB);
pass 1's two pairs run at once (about 45 s here, half of one at a time): the floor is far above
what either measures, whatever the two share of this machine's cores."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from tests.cluster.cluster import Cluster
from tests.e2e_helpers import cli, labelled

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("runs_dir")]

ENGINE = ["--", "--backend", "gloo", "--ops", "all_reduce", "-b", "32M", "-e", "64M", "-f", "2"]
ENGINE += ["-n", "3", "-w", "1", "-c", "0"]
#: GB/s: far above what gloo between two of this machine's "nodes" measures (about 1 GB/s).
FLOOR = 1000


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(nodes=4, gpus_per_node=1) as c:
        yield c


def test_a_floor_above_the_cluster_fails_it_as_a_whole(cluster: Cluster, namespace: str) -> None:
    got = cli(
        cluster, "nodes", "check", "-n", namespace, "--gpus-per-node", "1", "--threshold", "0.4",
        "--floor", str(FLOOR), "-o", "json", *ENGINE,
    )  # fmt: skip
    assert got.exit_code == 1, got.output
    doc = json.loads(got.output[got.output.index("{") :])
    floor = doc["floor"]
    assert floor["below"] is True and floor["floor_gbps"] == FLOOR and floor["row"] is None
    assert 0 < floor["measured"] < FLOOR
    assert floor["finding"].startswith("the whole cluster is below the floor: ")
    assert "given by --floor" in floor["finding"]
    # The cluster's level is the finding: no node is called bad for it.
    assert [v["node"] for v in doc["nodes"] if v["verdict"] == "bad"] == []
    assert labelled(cluster, namespace) == []  # every test run was removed


def test_deploy_min_busbw_auto_without_a_known_floor_is_refused(
    cluster: Cluster, namespace: str
) -> None:
    """The test cluster is `generic` (--platform auto finds no fabric): no floor is known, so
    `--min-busbw auto` is one exit-2 line saying for what and how to give a number, and nothing
    is created."""
    got = cli(
        cluster, "deploy", "-n", namespace, "--world-size", "2", "--gpus-per-node", "1",
        "--", "-b", "32M", "-e", "64M", "--min-busbw", "auto",
    )  # fmt: skip
    assert got.exit_code == 2, got.output
    line = got.output.strip().splitlines()[-1]
    assert "--min-busbw auto: no expected floor is known for generic" in line
    assert "give a number: --min-busbw GBPS" in line
    assert labelled(cluster, namespace) == []
