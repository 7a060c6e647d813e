"""The package's error tree, one place for every error a user can see.

    NcclK8sError                 base; `exit_code` says how the CLI ends
     ├─ UsageError               bad input: one line, exit 2, nothing created
     ├─ RunFailed                a benchmark ran and failed (rank, pod, node when known): exit 1
     └─ ResultsError             a results file or log that cannot be read: exit 2

Exceptions carry fields, not just text, so callers can act on them.
"""

from __future__ import annotations


class NcclK8sError(Exception):
    """Base of every error nccl-k8s raises on purpose."""

    exit_code: int = 1


class UsageError(NcclK8sError):
    """The user's input is invalid; the message names the value and the expected form."""

    exit_code = 2

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class RunFailed(NcclK8sError):
    """A run started and failed; names the rank (and pod/node on Kubernetes) when known."""

    exit_code = 1

    def __init__(
        self,
        message: str,
        *,
        rank: int | None = None,
        pod: str | None = None,
        node: str | None = None,
        exit_status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.rank = rank
        self.pod = pod
        self.node = node
        self.exit_status = exit_status


class ResultsError(NcclK8sError):
    """A results file, nccl-tests output or NCCL log cannot be read."""

    exit_code = 2

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


__all__ = ["NcclK8sError", "ResultsError", "RunFailed", "UsageError"]
