"""Who broke a failed run: the rank that stopped, its pod, and its node when the node is the
cause. Pure: pods, nodes and the engine's fault lines in; a verdict out. No I/O.

When one rank dies or hangs, its peers fail too (a collective cannot finish without it), often
first: the rank that timed out waiting exits before the hung one is killed. So the rank that
exited first, or the one with the loudest error, is often the wrong one to blame. The evidence,
strongest first:

1. The node. A pod whose node is NotReady or unreachable (Ready False/Unknown), or that was lost
   with its node or evicted after it had started (DisruptionTarget, reason NodeLost/Evicted):
   the node is named, with its condition's words. Users who may not read nodes still see one
   sign on the pod: a running pod whose Ready condition is False while ContainersReady is True
   was marked so by the node lifecycle controller (the kubelet would have set both).
2. The engine's own line. A rank that notices a peer failure prints one line to stdout before it
   exits, `NCCL_K8S_FAULT {"v":1,"rank":R,"culprit":C,"host":H,"pid":P,"reason":...,"where":...}`:
   rank R saw rank C (global rank; on host H, the culprit pod's hostname) stop. Global rank C
   lives in pod rank C // G (G GPUs per pod, the Job completion index is the pod rank).
3. A rank that never started while the others did (unscheduled, image never pulled): the others
   waited for it in the rendezvous until they gave up. torchrun's own words for that, in rank 0's
   log (`Timed out after 901 seconds waiting for clients. 1/2 clients joined.`), name the ranks
   with no started pod even when their pods are gone (the Job deletes them when it fails).
   Only when the failed ranks waited: a failed rank whose log was read and says no word of a
   rendezvous or store timeout ended on its own (a crash at start beside a pod still being
   created), and exit order blames it.
4. Exit order: the first container to end non-zero, not counting those ended by a deletion
   (the Job controller stops the survivors once the Job has failed); within one second (the
   API's resolution) a container killed by a signal from outside (SIGKILL, OOM) before one that
   exited on its own, then the lower rank.
5. Any other problem (a container that cannot be created, a crash loop).

Each blame carries its FailureReason (node lost, the kind the engine's line names, never started,
how the container ended), which the run's RunFailed carries on to its readers.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from nccl_k8s.bench.report import FAULT_PREFIX
from nccl_k8s.errors import FailureReason
from nccl_k8s.k8s.api._types import Obj, timestamp
from nccl_k8s.k8s.run._pods import (
    LOST_REASONS,
    PodInfo,
    latest_per_rank,
    pod_info,
    rank_key,
)
from nccl_k8s.k8s.run._torchrun import RootCause

_NPROC = re.compile(r"^--nproc[-_]per[-_]node(?:=(\d+))?$")
#: torch's TCPStore when not every torchrun agent (pod) joined the static rendezvous in time.
_RDZV = re.compile(
    r"Timed out after (\d+) seconds waiting for (?:clients|workers)\. (\d+)/(\d+) "
    r"(?:clients|workers) joined"
)
#: A rank gave up waiting for the others: torchrun's store (above), our pod launcher's
#: rendezvous line (launch._pod: `nccl-k8s launcher: rendezvous: ...`), torch's TCPStore client
#: that could not reach rank 0's store.
_WAITED = re.compile(
    r"Timed out after \d+ seconds waiting for (?:clients|workers)"
    r"|nccl-k8s launcher: rendezvous:"
    r"|client socket has timed out"
)


@dataclasses.dataclass(frozen=True)
class Rendezvous:
    """torchrun's rendezvous gave up: `joined` of `total` pods came, after `waited_s`."""

    waited_s: int
    joined: int
    total: int


def parse_rendezvous(text: str) -> Rendezvous | None:
    m = _RDZV.search(text) if "waiting for" in text else None
    return Rendezvous(int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


@dataclasses.dataclass(frozen=True)
class Fault:
    """One NCCL_K8S_FAULT line: rank `rank` (global) noticed rank `culprit` stop."""

    rank: int | None
    culprit: int | None
    host: str | None
    pid: int | None
    reason: str
    where: str
    pod: str
    """The pod whose log held the line (the noticing rank's pod)."""
    kind: FailureReason | None = None
    """The kind of culprit the engine named (the line's "kind"); None when it named none or
    is older than the field."""


def parse_faults(text: str, pod: str) -> list[Fault]:
    """Every well-formed fault line in a log (anywhere in a line: torchrun may prefix it)."""
    out: list[Fault] = []
    if FAULT_PREFIX not in text:
        return out
    for line in text.splitlines():
        at = line.find(FAULT_PREFIX)
        if at < 0:
            continue
        try:
            doc = json.loads(line[at + len(FAULT_PREFIX) :].strip())
        except ValueError:
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("v"), int) or doc["v"] < 1:
            continue
        out.append(
            Fault(
                rank=_int(doc.get("rank")),
                culprit=_int(doc.get("culprit")),
                host=str(doc["host"]) if doc.get("host") else None,
                pid=_int(doc.get("pid")),
                reason=str(doc.get("reason") or "stopped"),
                where=str(doc.get("where") or ""),
                pod=pod,
                kind=_kind(doc.get("kind")),
            )
        )
    return out


def _kind(value: object) -> FailureReason | None:
    try:
        return FailureReason(value)
    except ValueError:
        return None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclasses.dataclass(frozen=True)
class Blame:
    """One rank held responsible (or failing after it)."""

    rank: int | None
    """The pod rank (Job completion index)."""
    pod: str | None
    node: str | None
    why: str
    """What happened to it, in Kubernetes' or the engine's words."""
    reason: FailureReason
    """The kind of failure: what readers decide on."""
    global_rank: int | None = None
    node_lost: bool = False
    exit_code: int | None = None

    def label(self) -> str:
        """`rank 1 (pod P, node N; global rank 3)`."""
        rank = "?" if self.rank is None else str(self.rank)
        inside = [f"pod {self.pod or 'gone'}", f"node {self.node or 'none'}"]
        extra = f"; global rank {self.global_rank}" if self.global_rank is not None else ""
        return f"rank {rank} ({', '.join(inside)}{extra})"


@dataclasses.dataclass(frozen=True)
class Verdict:
    culprit: Blame
    others: list[Blame]
    """The other failed ranks, in the order they failed."""
    noticed: list[Fault]
    """The engine lines that named the culprit."""

    def text(self) -> str:
        """One line: the culprit, how it was seen, then the others."""
        parts = [f"{self.culprit.label()}: {self.culprit.why}"]
        if self.noticed:
            f = self.noticed[0]
            who = f"global rank {f.rank}" if f.rank is not None else f"pod {f.pod}"
            where = f" ({f.where})" if f.where else ""
            more = f" and {len(self.noticed) - 1} more" if len(self.noticed) > 1 else ""
            parts.append(f"{who}{more} noticed: {f.reason}{where}")
        if self.others:
            parts.append(
                "then "
                + "; ".join(f"{b.label()}: {b.why}" for b in self.others[:8])
                + (f"; and {len(self.others) - 8} more" if len(self.others) > 8 else "")
            )
        return "; ".join(parts)


def gpus_per_pod(pods: Iterable[Obj]) -> int | None:
    """G from the pods' torchrun arguments (--nproc-per-node), as the deployer renders them."""
    for pod in pods:
        for c in (pod.get("spec") or {}).get("containers") or []:
            args = [*(c.get("command") or []), *(c.get("args") or [])]
            for i, arg in enumerate(args):
                m = _NPROC.match(arg.split(" ")[0]) if isinstance(arg, str) else None
                if m is None:
                    continue
                value = m.group(1) or (args[i + 1] if i + 1 < len(args) else "")
                if str(value).isdigit() and int(value) > 0:
                    return int(value)
    return None


def node_trouble(node: Obj | None) -> str | None:
    """Why a node cannot run pods now (`is NotReady (KubeletNotReady: ...)`), or None."""
    if node is None:
        return None
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") != "Ready":
            continue
        words = f"{cond.get('reason') or 'NotReady'}: {cond.get('message') or 'no message'}"
        if cond.get("status") == "False":
            return f"is NotReady ({words})"
        if cond.get("status") == "Unknown":
            return f"is unreachable: its kubelet stopped posting status ({words})"
    return None


def _terminated(pod: Obj) -> Obj | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term:
            return dict(term)
    return None


def started(pod: Obj) -> bool:
    """Whether any container of the pod ever ran."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        state = cs.get("state") or {}
        term = state.get("terminated") or {}
        if state.get("running") or term.get("startedAt"):
            return True
        if term.get("exitCode") is not None and term.get("reason") != "ContainerStatusUnknown":
            return True
        if (cs.get("lastState") or {}).get("terminated"):
            return True
    return False


def lost(pod: Obj) -> str | None:
    """How the pod was taken away (its node lost, evicted, preempted), or None."""
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            reason = status.get("reason") or cond.get("reason") or "DisruptionTarget"
            message = status.get("message") or cond.get("message") or ""
            return f"{reason}: {message}" if message else str(reason)
    if status.get("phase") == "Failed" and status.get("reason") in LOST_REASONS:
        return f"{status['reason']}: {status.get('message') or ''}".rstrip(": ")
    return None


def marked_unready(pod: Obj) -> str | None:
    """The node controller's mark on a running pod of a node that stopped reporting, or None."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return None
    conds = {c.get("type"): c for c in status.get("conditions") or []}
    ready, containers = conds.get("Ready") or {}, conds.get("ContainersReady") or {}
    if ready.get("status") == "False" and containers.get("status") == "True":
        words = f"{ready.get('reason') or 'NotReady'}: {ready.get('message') or ''}"
        return words.rstrip(": ")
    return None


def _victim(pod: Obj, term: Obj) -> bool:
    """Ended by a deletion (the Job stopping survivors), not by itself."""
    meta = pod.get("metadata") or {}
    deleted = timestamp(meta.get("deletionTimestamp"))
    finished = timestamp(term.get("finishedAt"))
    if deleted is None:
        return False
    asked = deleted - datetime.timedelta(seconds=int(meta.get("deletionGracePeriodSeconds") or 0))
    return finished is None or finished >= asked


def _blame(
    info: PodInfo,
    why: str,
    reason: FailureReason,
    *,
    node_lost: bool = False,
    exit_code: int | None = None,
) -> Blame:
    return Blame(
        info.rank, info.name, info.node, why, reason, node_lost=node_lost, exit_code=exit_code
    )


def _of(info: PodInfo, exit_code: int | None = None, cause: RootCause | None = None) -> Blame:
    """A pod blamed for its own problem, in Kubernetes' words; where its container says only
    that it exited (torchrun's exit code 1), in torchrun's root cause's: the worker's signal or
    error, and its global rank. OOMKilled or a signal on the container itself is the most
    specific and stays."""
    reason = info.problem.failure if info.problem else FailureReason.EXITED
    if cause is not None and cause.says_more and reason is FailureReason.EXITED:
        why = f"{cause.text()}; its container: {_why(info)}"
        return Blame(info.rank, info.name, info.node, why, cause.failure,
                     global_rank=cause.rank, exit_code=exit_code)  # fmt: skip
    return _blame(info, _why(info), reason, exit_code=exit_code)


def attribute(
    pods: Sequence[Obj],
    *,
    faults: Sequence[Fault] = (),
    nodes: Mapping[str, Obj | None] | None = None,
    rendezvous: Rendezvous | None = None,
    causes: Mapping[str, RootCause] | None = None,
    logs: Mapping[str, str] | None = None,
) -> Verdict | None:
    """The verdict on a failed run from every pod seen (replaced ones included), the engine's
    fault lines, the nodes' objects (those that could be read), torchrun's rendezvous
    timeout when a log held one, its root cause per pod (by name) where a log held one and the
    log tails read (by pod name); None when nothing failed."""
    nodes = nodes or {}
    causes = causes or {}
    logs = logs or {}
    infos = {str(p["metadata"]["name"]): pod_info(p) for p in pods}
    by_name = {str(p["metadata"]["name"]): p for p in pods}
    failed = _failed_in_order(pods, infos)

    culprit: Blame | None = None
    noticed: list[Fault] = []
    # 1. the node
    for pod in sorted(pods, key=lambda p: rank_key(infos[p["metadata"]["name"]])):
        info = infos[pod["metadata"]["name"]]
        trouble = node_trouble(nodes.get(info.node or "")) if info.node else None
        gone = lost(pod) if started(pod) else None
        unready = marked_unready(pod)
        if info.phase == "Succeeded" or (trouble is None and gone is None and unready is None):
            continue
        if trouble:
            why = f"its node {info.node} {trouble}"
        elif gone:
            why = f"lost: {gone}"
        else:
            why = (
                f"its node {info.node} stopped reporting (the pod was marked not ready: {unready})"
            )
        if trouble and gone:
            why += f"; the pod was lost with it ({gone})"
        culprit = _blame(info, why, FailureReason.NODE_LOST, node_lost=True, exit_code=_code(pod))
        break
    # 2. the engine's line
    if culprit is None and faults:
        culprit, noticed = _from_faults(pods, infos, faults, causes)
    # 3. a rank that never started while others ran, waited for it and failed
    if culprit is None and failed and _waited(failed, logs, rendezvous):
        current = latest_per_rank(infos.values())
        waiting = [p for p in current if not started(by_name[p.name]) and p.phase == "Pending"]
        if waiting:
            w = waiting[0]
            what = f"{w.reason}: {w.message}" if w.message else (w.reason or "Pending")
            why = f"never started ({what}); the others waited for it"
            culprit = _blame(w, why, FailureReason.NEVER_STARTED)
        elif rendezvous is not None:
            culprit = _never_joined(infos, by_name, rendezvous)
    # 4./5. exit order, then any problem
    if culprit is None and failed:
        first = failed[0]
        culprit = _of(infos[first], _code(by_name[first]), causes.get(first))
    if culprit is None:
        problems = sorted((i for i in infos.values() if i.problem), key=rank_key)
        if not problems:
            return None
        culprit = _of(problems[0])
    others = [
        _of(infos[n], _code(by_name[n]), causes.get(n))
        for n in failed
        if n != culprit.pod
        and infos[n].rank != culprit.rank  # a replaced pod of the culprit's rank
    ]
    return Verdict(culprit, others, noticed)


def _waited(failed: Sequence[str], logs: Mapping[str, str], rdzv: Rendezvous | None) -> bool:
    """Whether the failed ranks may have died waiting for the others: a rendezvous timeout was
    seen, or a failed rank's log says it waited, or no failed rank's log could be read (no
    evidence either way: the others' waiting is then the likelier story)."""
    read = [logs[n] for n in failed if n in logs]
    return rdzv is not None or not read or any(_WAITED.search(t) for t in read)


def _never_joined(
    infos: Mapping[str, PodInfo], by_name: Mapping[str, Obj], rendezvous: Rendezvous
) -> Blame | None:
    """The first rank with no started pod, by torchrun's rendezvous timeout; None if none."""
    ran = {i.rank for n, i in infos.items() if started(by_name[n])}
    absent = [r for r in range(rendezvous.total) if r not in ran]
    if not absent:
        return None
    mine = [i for i in infos.values() if i.rank == absent[0]]
    last = max(mine, key=lambda i: (i.created or "", i.name)) if mine else None
    why = (
        f"never joined the rendezvous ({rendezvous.joined}/{rendezvous.total} pods "
        f"joined in {rendezvous.waited_s}s" + ("" if last else "; its pod is gone") + ")"
    )
    never = FailureReason.NEVER_STARTED
    return _blame(last, why, never) if last else Blame(absent[0], None, None, why, never)


def _why(info: PodInfo) -> str:
    return info.problem.message if info.problem else (info.reason or info.phase)


def _code(pod: Obj) -> int | None:
    term = _terminated(pod)
    code = (term or {}).get("exitCode")
    return int(code) if isinstance(code, int) else None


def _failed_in_order(pods: Sequence[Obj], infos: Mapping[str, PodInfo]) -> list[str]:
    """Pods whose container ended non-zero by itself, first to last (see the module docstring)."""
    rows = []
    for pod in pods:
        name = str(pod["metadata"]["name"])
        term = _terminated(pod)
        if term is None or (
            term.get("exitCode") in (0, None) and term.get("reason") != "OOMKilled"
        ):
            continue
        if _victim(pod, term):
            continue
        code = int(term.get("exitCode") or 0)
        killed = term.get("reason") == "OOMKilled" or code in (137, 139)
        when = timestamp(term.get("finishedAt")) or datetime.datetime.max.replace(
            tzinfo=datetime.timezone.utc
        )
        rows.append((when, not killed, rank_key(infos[name]), name))
    return [r[-1] for r in sorted(rows)]


def _from_faults(
    pods: Sequence[Obj],
    infos: Mapping[str, PodInfo],
    faults: Sequence[Fault],
    causes: Mapping[str, RootCause],
) -> tuple[Blame | None, list[Fault]]:
    """The rank the engine's lines name most often (ties: the one named first)."""
    g = gpus_per_pod(pods)
    keys: list[tuple[int | None, str | None]] = []
    for f in faults:
        if f.culprit is not None or f.host:
            keys.append((f.culprit, f.host if f.culprit is None else None))
    if not keys:
        return None, []
    (global_rank, host), _ = Counter(keys).most_common(1)[0]
    named = [
        f
        for f in faults
        if (f.culprit, f.host if f.culprit is None else None)
        == (
            global_rank,
            host,
        )
    ]
    host = host or next((f.host for f in named if f.host), None)
    pod_rank = global_rank // g if global_rank is not None and g else None
    pod = _pod_for(pods, infos, pod_rank, host)
    # The culprit's own line (it named itself: it asked for GPUs and saw none) is first-hand:
    # its words are the cause; a peer's line says what the peer saw of it.
    itself = next((x for x in named if x.rank is not None and x.rank == global_rank), None)
    first = itself or named[0]
    why = (
        first.reason
        if itself
        else f"stopped: {first.reason}" + (f" ({first.where})" if first.where else "")
    )
    # A line without a kind (an engine older than the field) still names a rank its peers
    # waited for.
    kind = first.kind or FailureReason.NO_PROGRESS
    if pod is not None:
        info = infos[pod]
        own = info.problem.message if info.problem else None
        cause = causes.get(pod)
        if cause is not None and cause.says_more and itself is None:
            # torchrun saw the worker end: a signal is the rank's own cause, first-hand.
            why += f"; {cause.text()}"
            kind = cause.failure if cause.signal is not None else kind
        if own:
            why += f"; its container: {own}"
        blame = Blame(
            info.rank if info.rank is not None else pod_rank,
            info.name,
            info.node,
            why,
            kind,
            global_rank=global_rank,
            exit_code=info.problem.exit_code if info.problem else None,
        )
    else:
        where = f"host {host}" if host else "its pod is gone"
        blame = Blame(pod_rank, None, None, f"{why} ({where})", kind, global_rank=global_rank)
    # The noticing ranks' own lines, not the culprit's (a culprit may report itself last).
    return blame, [f for f in named if f.rank != global_rank]


def _pod_for(
    pods: Sequence[Obj], infos: Mapping[str, PodInfo], pod_rank: int | None, host: str | None
) -> str | None:
    """The culprit's pod: by hostname or pod name where the line has one, else by rank (the
    newest pod of it). The host first: under a topology rank plan (launch._pod, issue 37) a
    pod's node rank is the place of its node, not its completion index, so rank // G names
    another pod; the culprit's hostname is its own."""
    if host:
        short = host.split(".")[0]
        for pod in pods:
            meta, spec = pod["metadata"], pod.get("spec") or {}
            if short in (meta.get("name"), spec.get("hostname")):
                return str(meta["name"])
    if pod_rank is not None:
        same = [i for i in infos.values() if i.rank == pod_rank]
        if same:
            return max(same, key=lambda i: (i.created or "", i.name)).name
    return None


__all__ = [
    "FAULT_PREFIX",
    "Blame",
    "Fault",
    "Rendezvous",
    "Verdict",
    "attribute",
    "gpus_per_pod",
    "lost",
    "node_trouble",
    "parse_faults",
    "parse_rendezvous",
    "started",
]
