"""nccl-tests' flags that have no twin among the engine's own, and what `-d all`/`-o all` skip.

nccl-tests' command lines are pasted as they are (`-g 8 -t 1 -y 0 ...`): every flag it takes
is accepted here. The ones the engine does (`-m`, `-N`, `-C`, `-u`, `-R`, `-J`, `-p`, `-g`/`-t`
through the rank count) are entries of bench.options; the ones it cannot do are listed below
with why, so that a pasted line that spells out their default still runs and any other value is
refused naming the flag and the reason. Standard library only: it travels in pods with the engine.
"""

from __future__ import annotations

import argparse

from nccl_k8s.bench.dtypes import DTYPE_FACTS, Dtype


class ConfigError(ValueError):
    """An engine flag has a value the engine cannot use. The message is one line."""


#: nccl-tests flags the engine does not honour: (short, long, nccl-tests' default, why). The
#: default is accepted, so a pasted command line that spells it out still runs; any other value
#: is refused with the reason.
NOT_HONOURED: tuple[tuple[str, str, str | None, str], ...] = (
    ("-y", "--stream_null", "0", "NCCL ops run on the engine's own CUDA stream (nccl-tests' "
     "default); the legacy default stream is not offered"),
    ("-S", "--report_timestamps", "0", "the table has no timestamp column; the result lines "
     "and --json carry the run's time"),
    ("-x", "--cta_policy", None, "the CTA policy is a communicator config "
     "(ncclCommInitRankConfig, NCCL 2.27+) the engine does not set"),
    ("-D", "--device_implementation", "0", "device-initiated collectives need kernels built "
     "against NCCL's device API; the engine calls the host API only"),
    ("-V", "--device_cta_count", "16", "it sizes the device implementation (-D), which the "
     "engine does not have"),
    ("-M", "--memory", "0", "NCCL's memory report is not gathered (nvidia-smi shows memory)"),
    ("-I", "--per_iter_timing", "0", "per-op times: --duration SECONDS times every op with "
     "CUDA events and reports min, median and p99"),
    ("-K", "--per_iter_skip", "0", "it trims -I's samples, which the engine does not take "
     "(see --duration)"),
)  # fmt: skip


def add_compat_flags(p: argparse.ArgumentParser) -> None:
    """nccl-tests' flags the engine refuses (those it does are bench.options' entries)."""
    for short, long, default, why in NOT_HONOURED:
        p.add_argument(
            short,
            long,
            default=None,
            metavar="N",
            help=f"refused unless {default}: {why}" if default else f"refused: {why}",
        )


def refuse_not_honoured(ns: argparse.Namespace) -> None:
    """nccl-tests flags with no counterpart here: their default passes, any other value is
    refused naming the flag and why."""
    for short, long, default, why in NOT_HONOURED:
        value = getattr(ns, long.lstrip("-"))
        if value is None or (default is not None and _same_int(value, default)):
            continue
        raise ConfigError(f"{short} {value} ({long}): not supported by nccl-k8s: {why}")


def _same_int(text: str, default: str) -> bool:
    try:
        return int(text, 0) == int(default)
    except ValueError:
        return False


#: Measured on an H200 with NCCL 2.28.9: ncclAllReduce with ncclAvg on ncclFloat8e4m3 returns
#: ncclInvalidArgument (NCCL reduces 8-bit floats with sum, prod, max and min only).
NCCL_NO_FP8_AVG = "NCCL averages no 8-bit floats (ncclAvg: invalid argument)"


GLOO_NO_FP8 = "gloo has no 8-bit floats"
GLOO_AVG_FLOATS_ONLY = "gloo averages only floating types"


def skipped(backend: str, dtype: Dtype, redop: str | None) -> str | None:
    """Why `-d all`/`-o all` skips this type and reduction on `backend` (None: it runs). A
    type or reduction named on its own is refused instead (check_backend)."""
    facts = DTYPE_FACTS[dtype]
    if backend == "nccl" and redop == "avg" and facts.eight_bit_float:
        return NCCL_NO_FP8_AVG
    if backend != "gloo":
        return None
    if facts.eight_bit_float:
        return GLOO_NO_FP8
    if redop == "avg" and not facts.floating:
        return GLOO_AVG_FLOATS_ONLY
    return None


__all__ = [
    "GLOO_AVG_FLOATS_ONLY",
    "GLOO_NO_FP8",
    "NCCL_NO_FP8_AVG",
    "NOT_HONOURED",
    "ConfigError",
    "add_compat_flags",
    "refuse_not_honoured",
    "skipped",
]
