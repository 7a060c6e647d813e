"""benchmarks/pod_entry.py: a rendered `--launcher direct` Job's pod, as the kubelet starts it
(the GPU check of issue 23 runs it; here what it hands the process is checked on the CPU)."""

from __future__ import annotations

import hashlib
import importlib.util
import zipfile
from pathlib import Path
from types import ModuleType

from nccl_k8s.k8s import render
from nccl_k8s.spec import build_run_spec

ROOT = Path(__file__).resolve().parent.parent


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pod_entry", ROOT / "benchmarks" / "pod_entry.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_expand_is_kubernetes_dependent_variable_expansion() -> None:
    pe = _module()
    env = {"A": "x", "POD_IP": "10.0.0.7"}
    assert pe.expand("--node-rank=$(A)", env) == "--node-rank=x"
    assert pe.expand("$$(A) $(B) $(POD_IP)", env) == "$(A) $(B) 10.0.0.7"


def test_pod_of_a_direct_job_gets_its_index_zipapp_and_downward_values(tmp_path: Path) -> None:
    pe = _module()
    spec = build_run_spec(world_size=2, gpus_per_node=1, run_id="pe", launcher="direct")
    argv, env = pe.pod(render(spec), tmp_path, 1)
    assert argv[:2] == ["python3", "-c"]
    assert argv[3:6] == ["python3", "-m", "nccl_k8s.launch._pod"]
    assert "--node-rank=1" in argv and "--nnodes=2" in argv
    assert env["JOB_COMPLETION_INDEX"] == "1"
    assert env["NCCL_K8S_METRICS_ADDR"] == "127.0.0.1"  # $(POD_IP), the downward API's podIP
    pyz = Path(env["PYTHONPATH"])
    assert pyz.is_relative_to(tmp_path) and pyz.name == "nccl_k8s.pyz"
    # The wrapper checks the zipapp it finds there against the rendered digest.
    assert env["NCCL_K8S_ENGINE_SHA256"] == f"{hashlib.sha256(pyz.read_bytes()).hexdigest()}  {pyz}"
    with zipfile.ZipFile(pyz) as z:
        assert "nccl_k8s/launch/_pod.py" in z.namelist()
