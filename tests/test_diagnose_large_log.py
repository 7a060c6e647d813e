"""Issue 22: `diagnose` on a large real log. The 87 kB log of a DeepSpeed job on one p4d.24xlarge
pod (four processes, NCCL_DEBUG=INFO; gnosia93/training-on-eks, see tests/data/nccl-logs/
README.md) is read whole: the values below are read from the file (its `rank N nranks 4 cudaDev
N` lines, the `host:pid` prefixes 212..215, 192 `via P2P/CUMEM/read` lines, no WARN)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.results import diagnose_text

LOG = (
    Path(__file__).parent
    / "data"
    / "nccl-logs"
    / "training-on-eks_p4d_1pod_4proc_deepspeed_efa.log"
)


def test_the_large_pod_log_is_read_whole() -> None:
    d = diagnose_text(LOG.read_text())
    assert [(r.rank, r.key) for r in d.ranks] == [
        (n, f"llama-3-8b-node-0-0:{212 + n} [{n}]") for n in range(4)
    ]
    assert all(r.transports == ["P2P/CUMEM"] for r in d.ranks)
    assert (d.nodes, d.network_needed, d.findings) == (1, False, [])


def test_diagnose_cli_on_the_large_log_exits_0_naming_one_node() -> None:
    res = CliRunner().invoke(app, ["diagnose", str(LOG)])
    assert res.exit_code == 0, res.output
    assert "nodes: 1; no network needed (all ranks on one node)" in res.stdout
