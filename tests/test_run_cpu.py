"""`nccl-k8s run` on a machine without a GPU: sizes that end in seconds unless the user names
some, and nccl-tests' -g/-t read as the rank count."""

from __future__ import annotations

import pytest

from nccl_k8s.errors import UsageError
from nccl_k8s.launch import local


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_cpu_run_without_sizes_sweeps_8_bytes_to_1_mib() -> None:
    run = local.prepare([])
    assert run.backend == "gloo"
    c = run.config
    assert (c.minbytes, c.maxbytes, c.stepfactor) == (8, 1 << 20, 4)
    assert local.CPU_SIZES == ("-b", "8", "-e", "1M", "-f", "4")
    assert " ".join(local.CPU_SIZES) in " ".join(run.rank_argv)


@pytest.mark.parametrize(
    ("given", "sizes"),
    [
        (["-b", "1K"], (1024, 32 << 20, 1)),
        (["-e64M"], (32 << 20, 64 << 20, 1)),
        (["-b", "8", "--maxbytes=2M"], (8, 2 << 20, 1)),
        (["-f", "2"], (32 << 20, 32 << 20, 2)),
    ],
)
def test_sizes_the_user_names_are_kept_as_nccl_tests_reads_them(
    given: list[str], sizes: tuple[int, int, int]
) -> None:
    run = local.prepare(given)
    assert (run.config.minbytes, run.config.maxbytes, run.config.stepfactor) == sizes
    assert " ".join(local.CPU_SIZES) not in " ".join(run.rank_argv)


def test_g_is_the_rank_count_and_a_different_nproc_is_refused() -> None:
    run = local.prepare(["-g", "3"])
    assert run.nproc == 3 and "-g" in run.rank_argv
    with pytest.raises(UsageError, match=r"-g 3 -t 1: each rank here is one process"):
        local.prepare(["-g", "3", "--nproc", "2"])
