"""The package's error tree, one place for every error a user can see.

    NcclK8sError                 base; `exit_code` says how the CLI ends
     ├─ UsageError               bad input: one line, exit 2, nothing created
     ├─ RunFailed                a benchmark ran and failed (rank, pod, node when known): exit 1
     ├─ ResultsError             a results file or log that cannot be read: exit 2
     ├─ Interrupted              SIGINT/SIGTERM/SIGHUP stopped the command: exit 128 + signal
     └─ ClusterError             the API server refused a request or cannot be reached: exit 1
         ├─ NotFound             404: the object (run, pod, namespace) does not exist
         ├─ Conflict             409: the run's objects already exist, or another manager owns them
         ├─ Forbidden            403: RBAC denies a verb on a resource (both named)
         ├─ Expired              410: a watch's resourceVersion is too old; relist (internal)
         └─ Unreachable          the server does not answer (refused, timed out, connection lost)

Cluster errors are raised only by nccl_k8s.k8s._client, which translates the HTTP client's
exceptions once, with messages a user can act on.

Exceptions carry fields, not just text, so callers can act on them.
"""

from __future__ import annotations

import signal


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


class Interrupted(NcclK8sError):
    """The command was ended by a signal (Ctrl-C, SIGTERM, a closed terminal) after stopping
    what it had started; exits 128 + the signal's number (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, signum: int, *, detail: str = "") -> None:
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        super().__init__(f"interrupted by {name}" + (f": {detail}" if detail else ""))
        self.signum = signum
        self.exit_code = 128 + signum


class ClusterError(NcclK8sError):
    """The API server refused a request or could not be reached.

    `status` is the HTTP status (None when no answer came), `verb` and `resource` what was
    asked (e.g. "create", "jobs"), `server` the API server URL.
    """

    exit_code = 1

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        verb: str | None = None,
        resource: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        server: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.verb = verb
        self.resource = resource
        self.namespace = namespace
        self.name = name
        self.server = server


class NotFound(ClusterError):
    """404: the object does not exist (a run, its pods, a namespace)."""


class Conflict(ClusterError):
    """409: the object already exists, or server-side apply found fields another manager owns."""


class Forbidden(ClusterError):
    """403: the credentials may not do `verb` on `resource`; the message names both."""


class Expired(ClusterError):
    """410 Gone: a watch asked for a resourceVersion the server no longer keeps; relist."""


class Unreachable(ClusterError):
    """No answer from the API server: connection refused, timed out, or dropped mid-stream."""


__all__ = [
    "ClusterError",
    "Conflict",
    "Expired",
    "Forbidden",
    "Interrupted",
    "NcclK8sError",
    "NotFound",
    "ResultsError",
    "RunFailed",
    "Unreachable",
    "UsageError",
]
