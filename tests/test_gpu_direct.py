"""The torch-free direct path on a GPU (runs on the lent device; skipped without a GPU).

- the NVRTC kernels write on the GPU the bytes bench.data writes on torch, and count the same
  wrong elements on correct and sabotaged results;
- the engine runs with torch unimportable (a meta-path finder refuses it) and every op's check
  passes, with -G, -z, -a, a soak and the metrics server;
- a sabotaged result (bytes overwritten after the op, before the check) fails the same rows with
  the same wrong counts on both data paths (kernels, and NCCL_K8S_DATA=torch).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nccl_k8s.bench import cuda

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(cuda.device_count() == 0, reason="needs a CUDA GPU"),
]
SRC = str(Path(__file__).resolve().parents[1] / "src")
ROW = re.compile(r"^\s+\d+\s+\d+\s+\w+")
ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

NO_TORCH = textwrap.dedent(
    """
    import sys
    class NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError("torch is blocked in this test")
    sys.meta_path.insert(0, NoTorch())
    """
)
SABOTAGE = textwrap.dedent(
    """
    import ctypes
    from nccl_k8s.bench import cuda, ops
    _check = ops.Collectives.check
    def check(self, b, root, rep):
        nbytes = min(b.recv0.numel() * self.elt, 24)
        if nbytes:
            cuda.driver().cuMemsetD8_v2(ctypes.c_uint64(b.recv0.data_ptr()), 0x55, ctypes.c_size_t(nbytes))
            cuda.driver().cuCtxSynchronize()
        return _check(self, b, root, rep)
    ops.Collectives.check = check
    """
)


def _engine(tmp: Path, args: list[str], *, prelude: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    script = tmp / "run.py"
    script.write_text(
        prelude
        + "\nimport sys\nfrom nccl_k8s.bench.__main__ import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    full = {**os.environ, **ENV, "PYTHONPATH": SRC, **(env or {})}
    full.pop("RANK", None)
    return subprocess.run(
        [sys.executable, str(script), "--backend", "nccl", "--no-result-lines", *args],
        env=full, capture_output=True, text=True, timeout=240,
    )  # fmt: skip


def _wrong(out: str) -> list[tuple[str, ...]]:
    """Per row: size and the two wrong columns."""
    rows: list[tuple[str, ...]] = []
    for line in out.splitlines():
        if ROW.match(line):
            f = line.split()
            rows.append((f[0], f[8], f[12] if len(f) > 12 else ""))
    return rows


def test_kernels_match_bench_data_on_the_gpu() -> None:
    import torch

    from nccl_k8s.bench import data, kernels
    from nccl_k8s.bench.collectives import Reduced
    from nccl_k8s.bench.dtypes import DTYPE_FACTS
    from nccl_k8s.bench.memory import expected_values

    dev = cuda.Device(0)
    stream = dev.stream()
    k = kernels.Kernels(dev, stream)
    gpu = torch.device("cuda", 0)
    n = 1 << 20
    for dtype in (d for d, f in DTYPE_FACTS.items() if f.kernel is not None):
        for redop in (None, "sum", "prod", "max", "min", "avg"):
            p = data.choose_pattern(redop, dtype, 8)  # type: ignore[arg-type]
            ours = torch.empty(n, dtype=data.torch_dtype(dtype), device=gpu)
            theirs = torch.empty_like(ours)
            k.fill(ours.data_ptr(), n, dtype, p, 3, 5, 1 << 33)
            cuda.sync(stream)
            data.fill(theirs, p, 3, 5, start=1 << 33)
            torch.cuda.synchronize()
            assert torch.equal(ours.view(torch.uint8), theirs.view(torch.uint8)), (dtype, redop)
            if redop is None:
                continue
            e = Reduced(0)
            good = data._cast(data.reduced(p, 0, n, 5, gpu), ours.dtype)
            for got in (
                good,
                torch.roll(good.view(torch.uint8), 16 * good.element_size()).view(good.dtype),
                data._cast(data.reduced(p, 0, n, 4, gpu), ours.dtype),
            ):
                got = got.contiguous()
                mode, a, b = kernels.expectation(e)
                mine = k.count_wrong(got.data_ptr(), n, dtype, p, 5, mode, a, b, p.tolerance)
                ref = data.count_wrong(got, expected_values(e, p, 5, gpu), rel_tol=p.tolerance)
                assert mine == ref, (dtype, redop)


def test_the_engine_runs_without_torch(tmp_path: Path) -> None:
    flags = ["-b", "8", "-e", "1M", "-f", "32", "-n", "5", "-w", "1"]
    runs = {
        "every op": ["--ops", "all", *flags],
        "-G": ["--ops", "all_reduce,sendrecv", *flags, "-G", "3"],
        "-z 1": ["--ops", "reduce", *flags, "-z", "1"],
        "-a 2": ["--ops", "all_gather", *flags, "-a", "2"],
        "soak": ["--ops", "all_reduce", "-b", "1M", "-e", "1M", "--duration", "2", "--report-interval", "1"],
        "metrics": ["--ops", "broadcast", *flags, "--metrics-port", "19477"],
    }  # fmt: skip
    for what, args in runs.items():
        proc = _engine(tmp_path, args, prelude=NO_TORCH)
        assert proc.returncode == 0, (what, proc.stdout[-2000:], proc.stderr[-3000:])
        assert "torch=none" in proc.stdout and "driver=direct" in proc.stdout, what
        assert "Out of bounds values : 0 OK" in proc.stdout or what == "soak", (
            what,
            proc.stdout[-1500:],
        )


def test_sabotage_fails_alike_on_both_data_paths(tmp_path: Path) -> None:
    args = ["--ops", "all", "-b", "8", "-e", "64K", "-f", "64", "-n", "2", "-w", "1"]
    kernels_run = _engine(tmp_path, args, prelude=SABOTAGE)
    torch_run = _engine(tmp_path, args, prelude=SABOTAGE, env={"NCCL_K8S_DATA": "torch"})
    for proc in (kernels_run, torch_run):
        assert proc.returncode == 1, (proc.stdout[-2000:], proc.stderr[-2000:])
    ours, theirs = _wrong(kernels_run.stdout), _wrong(torch_run.stdout)
    assert ours and ours == theirs
    # Every row with elements shows the overwritten bytes (a 0-byte row has none to overwrite).
    assert all(int(out) > 0 for size, out, _ in ours if int(size) > 0), ours
    assert sum(int(size) > 0 for size, _, _ in ours) >= 14, ours


def test_no_torch_module_is_loaded_on_the_direct_path() -> None:
    code = (
        "import sys\nfrom nccl_k8s.bench.__main__ import main\nrc = main(['--backend', 'nccl', "
        "'-b', '8', '-e', '8', '--no-result-lines'])\n"
        "print('TORCH', sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, **ENV, "PYTHONPATH": SRC},
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "TORCH []" in proc.stdout, proc.stdout[-1500:] + proc.stderr[-1500:]
