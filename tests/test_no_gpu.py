"""Issue 39 item 1: a rank whose pod asked for GPUs and sees none fails at start, naming the likely
causes, instead of `--backend auto` measuring the CPU with gloo; gloo only when no GPU was
requested or when asked for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import nccl_k8s.bench.cuda as cuda
from nccl_k8s.bench.rank import NoGpu, resolve_backend
from nccl_k8s.bench.report import parse_fault_line
from nccl_k8s.errors import FailureReason, UsageError
from nccl_k8s.k8s import render
from nccl_k8s.k8s.run._culprit import attribute, parse_faults
from nccl_k8s.spec import build_run_spec

SRC = Path(__file__).resolve().parent.parent / "src"


@pytest.mark.parametrize(
    ("requested", "gpus", "seen", "want"),
    [
        ("auto", 0, 0, "gloo"),  # nothing asked for: the CPU, as `nccl-k8s run` on a laptop
        ("auto", 0, 2, "nccl"),
        ("auto", 2, 2, "nccl"),
        ("gloo", 8, 0, "gloo"),  # the CPU on purpose
        ("nccl", 0, 0, "nccl"),  # asked for, no request to check against: NCCL's own error
    ],
)
def test_backend_follows_the_request_and_the_devices(
    monkeypatch: pytest.MonkeyPatch, requested: str, gpus: int, seen: int, want: str
) -> None:
    monkeypatch.setattr(cuda, "device_count", lambda: seen)
    assert resolve_backend(requested, gpus_requested=gpus) == want  # type: ignore[arg-type]


@pytest.mark.parametrize("requested", ["auto", "nccl"])
def test_gpus_requested_and_none_seen_is_no_gpu(
    monkeypatch: pytest.MonkeyPatch, requested: str
) -> None:
    monkeypatch.setattr(cuda, "device_count", lambda: 0)
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "void")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(NoGpu) as err:
        resolve_backend(requested, gpus_requested=2)  # type: ignore[arg-type]
    text = str(err.value)
    assert err.value.gpus == 2 and "\n" not in text
    assert text.startswith(
        "its pod asked for 2 GPUs (--gpus-per-node) but the CUDA driver sees none"
    )
    assert "CUDA_VISIBLE_DEVICES=(unset), NVIDIA_VISIBLE_DEVICES=void" in text
    for cause in ("runtimeClass", "device plugin", "visible-devices", "--backend gloo"):
        assert cause in text


def _engine(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=str(SRC), NCCL_K8S_NODE_NAME="node-7", CUDA_VISIBLE_DEVICES="")
    return subprocess.run(
        [sys.executable, "-m", "nccl_k8s.bench", *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_the_engine_asked_for_gpus_without_any_fails_at_start_naming_itself() -> None:
    # CUDA_VISIBLE_DEVICES="" hides every GPU, even on a machine that has some.
    proc = _engine("--gpus-requested", "1", "-b", "1K", "-e", "1K")
    assert proc.returncode == 1, proc.stderr
    (line,) = [ln for ln in proc.stdout.splitlines() if parse_fault_line(ln)]
    fault = parse_fault_line(line)
    assert fault is not None
    assert (fault["rank"], fault["culprit"], fault["kind"]) == (0, 0, "no_gpu")
    assert fault["reason"].startswith("its pod asked for 1 GPU (--gpus-per-node)")
    assert "# nccl-k8s" not in proc.stdout and "out-of-place" not in proc.stdout  # no table
    (err,) = proc.stderr.strip().splitlines()
    assert err.startswith("error: rank 0 (host ") and ", node node-7): its pod asked for" in err
    assert "CUDA_VISIBLE_DEVICES=," in err


def test_backend_gloo_runs_on_the_cpu_as_asked_even_when_gpus_were_requested() -> None:
    proc = _engine("--gpus-requested", "1", "--backend", "gloo", "-b", "1K", "-e", "1K",
                   "-n", "1", "-w", "0", "--no-result-lines")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "NCCL_K8S_FAULT" not in proc.stdout
    assert "Avg bus bandwidth" in proc.stdout


def test_deploy_tells_every_rank_how_many_gpus_its_pod_asked_for() -> None:
    for workload in ("job", "statefulset"):
        spec = build_run_spec(world_size=6, gpus_per_node=3, run_id="g", workload=workload)
        pod = next(o for o in render(spec) if o["kind"] in ("Job", "StatefulSet"))
        (c,) = pod["spec"]["template"]["spec"]["containers"]
        args = c["args"]
        at = args.index("--gpus-requested")
        assert args[at + 1] == "3", args
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "3"


def test_the_user_may_not_set_gpus_requested_among_the_engine_flags() -> None:
    with pytest.raises(UsageError) as err:
        build_run_spec(world_size=2, gpus_per_node=1, engine_args=["--gpus-requested", "0"])
    assert str(err.value) == (
        "engine arguments: --gpus-requested is set by the deploy option --gpus-per-node "
        "(the GPUs each pod asks for)"
    )


def _pod(name: str, rank: int, node: str) -> dict[str, object]:
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {"batch.kubernetes.io/job-completion-index": str(rank)},
        },
        "spec": {"nodeName": node, "containers": [{"name": "bench", "args": ["--nproc-per-node=1"]}]},
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "bench", "state": {"terminated": {
                "exitCode": 1, "reason": "Error", "startedAt": "2026-01-01T00:00:01Z",
                "finishedAt": "2026-01-01T00:00:02Z"}}}],
        },
    }  # fmt: skip


def test_the_culprit_line_is_the_ranks_own_words_with_its_pod_and_node() -> None:
    reason = "its pod asked for 1 GPU (--gpus-per-node) but the CUDA driver sees none (...)"
    lines = {
        name: "NCCL_K8S_FAULT " + json.dumps({
            "v": 1, "rank": rank, "culprit": rank, "host": name, "pid": 7, "reason": reason,
            "kind": "no_gpu", "where": "start"})
        for name, rank in (("r-0-a", 0), ("r-1-b", 1))
    }  # fmt: skip
    pods = [_pod("r-0-a", 0, "n0"), _pod("r-1-b", 1, "n1")]
    faults = [f for name, text in lines.items() for f in parse_faults(text, name)]
    v = attribute(pods, faults=faults)
    assert v is not None and v.culprit.reason is FailureReason.NO_GPU
    assert v.text().startswith(f"rank 0 (pod r-0-a, node n0; global rank 0): {reason}")
    assert "stopped:" not in v.text().split(";")[1]


def test_what_ran_names_backend_devices_and_fabric() -> None:
    from nccl_k8s.results import what_ran
    from nccl_k8s.results.schema import Device, RunMeta

    cpu = RunMeta(backend="gloo", world_size=2,
                  devices=[Device(rank=r, name="Intel Xeon") for r in range(2)])  # fmt: skip
    assert (
        what_ran(cpu) == "# backend gloo, 2 CPU processes (Intel Xeon), fabric TCP (gloo, no NCCL)"
    )
    gpu = RunMeta(backend="nccl", world_size=1, gpu_model="NVIDIA H200", fabric="ib",
                  devices=[Device(rank=0, name="NVIDIA H200")])  # fmt: skip
    assert what_ran(gpu) == "# backend nccl, 1 GPU (NVIDIA H200), fabric ib"
    assert what_ran(RunMeta(backend="nccl", world_size=16)) == (
        "# backend nccl, 16 GPUs, fabric unknown (no NCCL network lines)"
    )
