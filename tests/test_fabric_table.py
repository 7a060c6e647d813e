"""The fabric table is one fact: the deploy's fabric gate and `diagnose --platform` are one rule
(issue 34, acceptance 1), the platform table and `--expect-fabric` read the table, and the docs
list it as it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccl_k8s.cli.main import app
from nccl_k8s.fabrics import FABRICS, Fabric, fabric_of, fabrics_table, member
from nccl_k8s.k8s.run._fabric import judge
from nccl_k8s.spec.platforms import PLATFORMS, Platform

LOGS = Path(__file__).parent / "data" / "nccl-logs"

#: One real public log of each fabric a platform asks for (sources: tests/data/nccl-logs/README.md).
OWN: dict[Fabric, str] = {
    Fabric.EFA: "aws-ofi-nccl-24_horovod_efa_ring_ompi.log",
    Fabric.TCPX: "gke-a3high-tcpx_gpudirecttcpx_v7_init_excerpt.log",
    Fabric.TCPXO: "gke-a3mega-tcpxo_fastrak_using_network_16ranks.log",
    Fabric.GIB: "gke-a3ultra-ray_gib_gdrdma_benchmarkworker.log",
    Fabric.IB: "ibext_v8_a100x8_4nodes_gdr.log",
    Fabric.ROCE: "nccl-tests-185_roce_h100x2.log",
}
#: AKS's own InfiniBand log (Azure/aks-rdma-infiniband) for aks-ib rather than HPC-X's.
OWN_OF_PLATFORM = {"aks-ib": "aks-rdma-infiniband-30_mpijob_ib_gdrdma_connections.log"}
GIB_LOG = LOGS / OWN[Fabric.GIB]


def _log_of(p: Platform) -> Path:
    assert p.fabric is not None
    return LOGS / OWN_OF_PLATFORM.get(p.name, OWN[p.fabric])


def _of_fabric(code: str) -> bool:
    """A finding of the fabric gate (the expectation, or ranks that fell back to sockets); the
    other errors of a log (a failed NCCL call, say) fail diagnose on their own."""
    return code.startswith(("expect-", "socket-"))


def _diagnose(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, ["diagnose", *args])
    return res.exit_code, res.stdout, res.stderr


def test_a_gke_rdma_run_passes_its_gate_and_fails_the_efa_one_naming_what_it_used() -> None:
    assert _diagnose("--platform", "gke-rdma", str(GIB_LOG))[0] == 0
    assert judge(PLATFORMS["gke-rdma"], [GIB_LOG.read_text()]).ok
    code, _, stderr = _diagnose("--platform", "eks-efa", str(GIB_LOG))
    assert code == 1
    assert "error: rendered for eks-efa, but ranks 2 (hosts " in stderr
    assert "used NET/gIB: the image has no aws-ofi-nccl" in stderr
    assert "use roce, expected efa" in stderr


@pytest.mark.parametrize("name", [n for n, p in PLATFORMS.items() if p.fabric], ids=str)
def test_each_platform_gate_and_diagnose_agree_on_real_logs(name: str) -> None:
    """For every platform: its own fabric's log passes both, every other fabric's log fails
    both (or passes both), and the failure is the same message."""
    platform = PLATFORMS[name]
    own = _log_of(platform)
    checked = judge(platform, [own.read_text()])
    assert checked.ok and checked.expected == platform.fabric, checked
    assert platform.fabric is not None
    logs: dict[Fabric, str] = {**OWN, platform.fabric: own.name}
    for fabric, log in logs.items():
        text = (LOGS / log).read_text()
        gate = judge(platform, [text])
        code, stdout, _ = _diagnose("--platform", name, str(LOGS / log), "-o", "json")
        seen = json.loads(stdout)
        assert seen["platform"]["ok"] is gate.ok, (fabric, gate)
        assert seen["platform"]["message"] == (None if gate.ok else gate.message())
        fabric_errors = [
            f for f in seen["findings"] if f["severity"] == "error" and _of_fabric(f["code"])
        ]
        assert (code == 1) if not gate.ok else not fabric_errors, (fabric, seen["findings"])
        # A log of another fabric fails, except where the platform's fabric is carried too
        # (gIB runs on RoCE, so an oke-roce gate passes on it).
        assert gate.ok is (
            fabric == platform.fabric or (fabric, platform.fabric) == ("gib", "roce")
        )


def test_the_generic_platform_expects_no_fabric() -> None:
    generic = PLATFORMS["generic"]
    assert generic.fabric is None
    socket = LOGS / "nccl-447_gcp_slurm_socket_2nodes_nccl278.log"
    assert judge(generic, [socket.read_text()]).ok
    assert _diagnose("--platform", "generic", str(socket))[0] == 0


def test_a_gate_that_cannot_see_the_fabric_fails_both_ways() -> None:
    efa = PLATFORMS["eks-efa"]
    nothing = judge(efa, ["no NCCL line at all\n"])
    assert not nothing.ok
    assert nothing.message().startswith(
        "rendered for eks-efa, but the NCCL logs cannot confirm efa: the pods' logs hold no "
        "NCCL INFO line"
    )


def test_bad_platform_and_both_options_are_usage_errors() -> None:
    code, _, stderr = _diagnose("--platform", "eks", str(GIB_LOG))
    assert code == 2 and "--platform 'eks': expected one of generic, eks-efa" in stderr
    code, _, stderr = _diagnose("--platform", "eks-efa", "--expect-fabric", "efa", str(GIB_LOG))
    assert code == 2 and "expected one of the two" in stderr


def test_every_platform_names_a_fabric_of_the_table() -> None:
    for p in PLATFORMS.values():
        assert p.fabric is None or p.fabric in FABRICS
    with pytest.raises(ValueError, match="'ethernet' is not a fabric: expected one of ib, roce"):
        member("ethernet")


def test_network_names_resolve_through_the_table() -> None:
    assert fabric_of("gIB", set()) == Fabric.ROCE  # gIB carries RoCE; gates ask for it by plugin
    assert fabric_of("GPUDirectTCPX_v7", set()) == Fabric.TCPX
    assert fabric_of("FasTrak", set()) == Fabric.TCPXO
    assert fabric_of("IBext_v8", {"RoCE"}) == Fabric.ROCE
    assert fabric_of("AWS Libfabric", set(), "tcp") == Fabric.SOCKET
    assert fabric_of("AWS Libfabric", set(), None) == Fabric.EFA
    assert fabric_of("SomePlugin", set()) == "SomePlugin"


def test_the_docs_list_the_table_as_it_is() -> None:
    doc = (Path(__file__).parents[1] / "docs" / "diagnosis.md").read_text()
    assert fabrics_table() in doc
    for f in Fabric:
        assert f"| `{f}` | {f.about} |" in doc
    code, _, _ = _diagnose("--help")
    help_text = CliRunner().invoke(app, ["diagnose", "--help"]).stdout
    assert code == 0 and all(str(f) in help_text for f in FABRICS)


def test_hpe_slingshot_is_one_entry_of_the_table() -> None:
    """The proof that a fabric is one entry: cxi (HPE Slingshot through aws-ofi-nccl's cxi
    provider) was added as a member alone; the gate, `--expect-fabric` and the docs follow."""
    polaris = LOGS / "polaris-cxi_aws-ofi-nccl_16ranks_4nodes_working.log"
    code, stdout, stderr = _diagnose(str(polaris), "--expect-fabric", "cxi")
    assert code == 0, stderr
    assert "info expect-cxi: inter-node traffic uses cxi, as expected" in stderr
    assert "inter-node: cxi" in stdout
    code, _, stderr = _diagnose(str(polaris), "--expect-fabric", "efa")
    assert code == 1 and "use cxi (HPE Slingshot), expected efa" in stderr
    socket = LOGS / "nccl-447_gcp_slurm_socket_2nodes_nccl278.log"
    code, _, stderr = _diagnose(str(socket), "--expect-fabric", "cxi")
    assert code == 1 and "error socket-fallback" in stderr and "expected cxi" in stderr
