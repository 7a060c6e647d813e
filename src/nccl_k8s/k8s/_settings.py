"""How the run functions wait: settings dataclasses, importable without the API client (the CLI
reads their defaults for --help)."""

from __future__ import annotations

import dataclasses

from nccl_k8s.k8s._watch import WatchSettings


@dataclasses.dataclass(frozen=True, kw_only=True)
class WaitSettings:
    """How `deploy --wait` and `cleanup` wait."""

    timeout_s: float | None = None
    """--timeout: give up (exit 1) when the run has not ended by then; None waits for the Job's
    own activeDeadlineSeconds."""
    schedule_timeout_s: float = 60.0
    """Seconds pods may sit with no scheduler touching them (no binding, no PodScheduled
    condition, no scheduling event) before deploy says no scheduler has picked them up. A busy
    default scheduler answers within seconds; a minute is far past that."""
    failure_log_lines: int = 20
    """Last log lines shown for a rank that exited non-zero."""
    failure_settle_s: float = 0.5
    """After the first failure, how long to gather the others (a killed rank takes its peers
    down within moments) before naming them; the first is still named well within 10 s."""
    tick_s: float = 1.0
    """How often the live summary's clock and the deadlines are checked (a local timer, not a
    request: the API is only watched)."""
    watch: WatchSettings = dataclasses.field(default_factory=WatchSettings)
    """The watches' own patience (inactivity, reconnects)."""


__all__ = ["WaitSettings", "WatchSettings"]
