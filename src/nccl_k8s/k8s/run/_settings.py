"""How the run functions wait: settings dataclasses, importable without the API client (the CLI
reads their defaults for --help)."""

from __future__ import annotations

import dataclasses

from nccl_k8s.k8s.run._watch import WatchSettings


@dataclasses.dataclass(frozen=True, kw_only=True)
class WaitSettings:
    """How `deploy --wait`, `wait` and `cleanup` wait. Every patience is counted from when this
    command first saw the condition (its own clock: a client whose clock is off from the API
    server's cannot fail a run early)."""

    timeout_s: float | None = None
    """--timeout: give up (exit 1) when the run has not ended by then; it keeps running. None
    waits for the Job's own activeDeadlineSeconds."""
    schedule_timeout_s: float = 300.0
    """--schedule-timeout: how long a pod may stay unscheduled (Unschedulable, or not yet looked
    at) before the run fails naming the scheduler's message. Five minutes: a cluster autoscaler
    adds a GPU node in about that time, and until it does, FailedScheduling is normal."""
    scheduler_check_s: float = 60.0
    """When no scheduler has touched any pod (no binding, no PodScheduled condition, no
    scheduling event) by min(this, schedule_timeout_s), the pods ask for a scheduler that is
    not there: say so then. A running scheduler answers within seconds, autoscaler or not."""
    pull_timeout_s: float = 300.0
    """--pull-timeout: how long a pod may sit in ErrImagePull/ImagePullBackOff before the run
    fails with the kubelet's message. The kubelet retries pulls (a registry hiccup is normal
    on a large cluster); five minutes of back-off is past any hiccup."""
    failure_log_lines: int = 20
    """Last log lines shown for the rank held responsible."""
    fault_log_lines: int = 300
    """How far back in a failed pod's log to look for the engine's NCCL_K8S_FAULT line (it is
    printed just before the rank exits; torchrun's own report follows it)."""
    fault_pods: int = 8
    """How many failed pods' logs are read for fault lines (the first to fail): enough to hear
    the noticing ranks, bounded for runs of a thousand pods."""
    failure_settle_s: float = 0.5
    """After the first failure, how long to gather the others (a killed rank takes its peers
    down within moments) before naming them; the first is still named well within 10 s."""
    end_timeout_s: float = 60.0
    """After deleting a failed run's objects, how long to wait for its pods to be gone (their
    GPUs free) before saying which still terminate. Pods get 30 s of grace by default."""
    tick_s: float = 1.0
    """How often the live summary's clock and the deadlines are checked (a local timer, not a
    request: the API is only watched)."""
    watch: WatchSettings = dataclasses.field(default_factory=WatchSettings)
    """The watches' own patience (inactivity, reconnects)."""


#: `nodes check`'s engine flags when none follow `--`: one collective at large sizes, where the
#: bus bandwidth has reached its plateau (what a slow NIC, link or PCIe slot lowers).
NODES_CHECK_ENGINE_ARGS = ("--ops", "all_reduce", "-b", "64M", "-e", "1G", "-f", "4", "-n", "20")

__all__ = ["NODES_CHECK_ENGINE_ARGS", "WaitSettings", "WatchSettings"]
