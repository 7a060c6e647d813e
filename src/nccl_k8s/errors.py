"""The package's error tree, one place for every error a user can see.

    NcclK8sError                 base; `exit_code` says how the CLI ends
     ├─ UsageError               bad input: one line, exit 2, nothing created
     ├─ RunFailed                a benchmark ran and failed (a FailureReason; rank, pod, node when
     │                           known): exit 1
     ├─ Refused                  the cluster would refuse the run's pods (Pod Security, a quota, a
     │                           limit range, a missing queue): nothing created, exit 1
     ├─ ResultsError             a results file or log that cannot be read: exit 2
     ├─ Interrupted              SIGINT/SIGTERM/SIGHUP stopped the command: exit 128 + signal
     └─ ClusterError             the API server refused a request or cannot be reached: exit 1
         ├─ NotFound             404: the object (run, pod, namespace) does not exist
         │   ├─ NoSuchRun        the run id names no run: exit 2 (bad input, as ResultsError)
         │   └─ NoSuchSchedule   cleanup --schedule's name names no schedule: exit 2 (the same)
         ├─ Conflict             409: the run's objects already exist, or another manager owns them
         ├─ Forbidden            403: RBAC denies a verb on a resource (both named)
         ├─ Expired              410: a watch's resourceVersion is too old; relist (internal)
         └─ Unreachable          the server does not answer (refused, timed out, connection lost);
                                 exit 2 when it never answered this command (see below)

Cluster errors are raised only by nccl_k8s.k8s.api._client, which translates the HTTP client's
exceptions once, with messages a user can act on, after retrying what is `transient` (5xx, 429,
dropped connections) within a bound.

Exit codes: a cluster error is 1 (the run or the request failed), except an API server that
never answered this command at all (connection refused, no such host, connect timeout at the
first request): the kubeconfig points nowhere, which is configuration, exit 2. A server that
answered and then went away is 1.

Exceptions carry fields, not just text, so callers can act on them: a RunFailed's `reason` is a
FailureReason, and code that must tell one failure from another reads it, never the message.
"""

from __future__ import annotations

import enum
import shlex
import signal
from pathlib import Path
from typing import Any


def install_hint(extra: str) -> str:
    """The command that installs one of pyproject's extras. nccl-k8s is not on PyPI, so
    the package name alone finds nothing: the hint names the clone this code runs from
    when there is one (an editable install or a source tree), else the clone to make."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file():
        return f"pip install {shlex.quote(f'{root}[{extra}]')}"
    return f"pip install '<clone of nccl-k8s>[{extra}]' (nccl-k8s is not on PyPI; README, Install)"


class FailureReason(enum.Enum):
    """Why a run failed, as every reader decides on it (`nodes check`, the CLI, doctor): one
    member per kind of failure the code tells apart or reports. The values are the words the
    engine's fault lines use for the kinds it names (bench.report.FAULT_KINDS)."""

    CRASHED = "crashed"
    """A rank died of its own fault: a crash signal (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL;
    exit 128+n on Kubernetes)."""
    EXITED = "exited"
    """A rank ended non-zero on its own with an error of its own (a traceback, an exit code):
    its words say why."""
    KILLED = "killed"
    """A rank was killed from outside: a signal nccl-k8s did not send (SIGKILL from the OOM
    killer or a user), OOMKilled or exit 137 on Kubernetes."""
    STOPPED = "stopped"
    """A rank was stopped (SIGSTOP, SIGTSTP, a debugger): state T in /proc."""
    NO_PROGRESS = "no_progress"
    """A rank was alive but made no progress while its peers waited: the only rank still
    running after they timed out, or one the engine's watchdog found busy outside the
    collective or behind."""
    NO_HEARTBEAT = "no_heartbeat"
    """The engine's heartbeats of a rank stopped (never sent, or not for seconds): the rank or
    its host stopped, died or lost the network."""
    STORE_LOST = "store_lost"
    """The rendezvous store does not answer (the rank hosting it is gone)."""
    NO_GPU = "no_gpu"
    """A rank whose pod asked for GPUs sees none (no runtimeClass, a broken device plugin,
    visible-device variables that hide them): it fails at start rather than measure the CPU."""
    NODE_LOST = "node_lost"
    """A rank's node is NotReady or unreachable, or its pod was lost with it, evicted or
    preempted."""
    NEVER_STARTED = "never_started"
    """A rank never started (or never joined the rendezvous) while the others waited for it."""
    CANNOT_START = "cannot_start"
    """A rank's container cannot start (a bad image name, its config, a crash loop)."""
    IMAGE_PULL = "image_pull"
    """A rank's image was not pulled within --pull-timeout."""
    UNSCHEDULABLE = "unschedulable"
    """Pods stayed Unschedulable past --schedule-timeout."""
    NO_SCHEDULER = "no_scheduler"
    """No scheduler picked up the pods (the schedulerName they ask for is not running)."""
    NO_PODS = "no_pods"
    """The workload created no pods and no event says why (its controller is not running)."""
    CREATE_REFUSED = "create_refused"
    """The workload's controller cannot create the pods: admission refused them (Pod Security,
    a quota)."""
    WORKLOAD_FAILED = "workload_failed"
    """The Job failed (its Failed condition: a deadline, its backoff limit) and no rank can be
    blamed."""
    DELETED = "deleted"
    """The run was deleted while the command waited for it."""
    TIMED_OUT = "timed_out"
    """The command's --timeout passed before the run ended; the run goes on."""
    WRONG_FABRIC = "wrong_fabric"
    """The run succeeded on another fabric than the one its platform was rendered for."""
    NO_RESULTS_YET = "no_results_yet"
    """A continuous run has ended no sweep yet: there is nothing to collect."""
    STILL_TERMINATING = "still_terminating"
    """Cleanup deleted the run, but its pods were still terminating at its timeout."""
    NOTHING_OURS = "nothing_ours"
    """Cleanup of a named run deleted nothing: every object with its labels was not created by
    nccl-k8s."""

    @property
    def unplaced(self) -> bool:
        """No scheduler placed the run's pods: a failure that says nothing of any node (the
        GPUs were busy, or the scheduler is missing); `nodes check` calls such a test
        inconclusive."""
        return self in (FailureReason.UNSCHEDULABLE, FailureReason.NO_SCHEDULER)


#: Signals a process gets from its own fault, not from another process: FailureReason.CRASHED.
CRASH_SIGNALS = frozenset(
    {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL}
)


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
        reason: FailureReason,
        rank: int | None = None,
        pod: str | None = None,
        node: str | None = None,
        exit_status: int | None = None,
        global_rank: int | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        """Why it failed: what readers decide on (the message is for people)."""
        self.headline = message.splitlines()[0] if message else ""
        """The failure's own first line, as raised: it stays when whoever ends the run adds
        what it did (deleted, kept) to the message."""
        self.rank = rank
        """The pod's rank (Job completion index; its GPUs are ranks rank*G .. rank*G+G-1)."""
        self.pod = pod
        self.node = node
        self.exit_status = exit_status
        self.global_rank = global_rank
        """The process rank, when the engine named it (NCCL_K8S_FAULT lines)."""


class Refused(NcclK8sError):
    """deploy's preflight found a failure that is certain (admission would refuse every pod):
    nothing was created. Exit 1, as when admission itself refuses the pods (a user who may not
    read the namespace meets that instead): the flags are well formed, the cluster says no."""

    exit_code = 1

    def __init__(self, message: str, *, check: str) -> None:
        super().__init__(message)
        self.check = check
        """The doctor check that failed (pod-security, quota, limit-range, queue)."""


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
        self.detail = detail
        """What was stopped on the way out ("stopped 2 ranks"); "" when nothing."""
        self.exit_code = 128 + signum


class ClusterError(NcclK8sError):
    """The API server refused a request or could not be reached.

    `status` is the HTTP status (None when no answer came), `reason` the Status reason the
    server gave (AlreadyExists, Conflict, TooManyRequests ...), `verb` and `resource` what was
    asked (e.g. "create", "jobs"), `server` the API server URL.
    """

    exit_code = 1

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str | None = None,
        verb: str | None = None,
        resource: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        server: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.verb = verb
        self.resource = resource
        self.namespace = namespace
        self.name = name
        self.server = server

    @property
    def transient(self) -> bool:
        """Worth asking again: the server was overloaded or failed inside (429, 500, 502, 503,
        504) or the connection dropped; a retry after a pause may succeed."""
        return self.status in TRANSIENT_STATUS


class NotFound(ClusterError):
    """404: the object does not exist (a run, its pods, a namespace)."""


class NoSuchRun(NotFound):
    """The run id names no run in the namespace: bad input, exit 2, as `compare` and `report`
    answer a run id that names no results (ResultsError)."""

    exit_code = 2


class NoSuchSchedule(NotFound):
    """`cleanup --schedule NAME`: no object in the namespace carries the schedule's label: bad
    input, exit 2, as NoSuchRun answers `cleanup --run` of a run that is not there."""

    exit_code = 2


class Conflict(ClusterError):
    """409: the object already exists, or server-side apply found fields another manager owns."""


class Forbidden(ClusterError):
    """403: the credentials may not do `verb` on `resource`; the message names both."""


class Expired(ClusterError):
    """410 Gone: a watch asked for a resourceVersion the server no longer keeps; relist."""


class Unreachable(ClusterError):
    """No answer from the API server: connection refused, timed out, or dropped mid-stream.

    `reached` says whether the server had answered this command before: False means the
    kubeconfig points at nothing that answers (exit 2, configuration); True means it went away
    (exit 1)."""

    def __init__(self, message: str, *, reached: bool = True, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.reached = reached
        self.exit_code = 1 if reached else 2

    @property
    def transient(self) -> bool:
        return self.reached


#: HTTP statuses a retry may cure: rate limiting and the server's (or a proxy's) own failures.
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


__all__ = [
    "CRASH_SIGNALS",
    "TRANSIENT_STATUS",
    "ClusterError",
    "Conflict",
    "Expired",
    "FailureReason",
    "Forbidden",
    "Interrupted",
    "NcclK8sError",
    "NoSuchRun",
    "NoSuchSchedule",
    "NotFound",
    "ResultsError",
    "RunFailed",
    "Unreachable",
    "UsageError",
]
