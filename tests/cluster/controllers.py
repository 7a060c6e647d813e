"""The test cluster's Job and StatefulSet controllers.

Why write them rather than fake their results: the deployer's default workload is an Indexed Job
whose pods find rank 0 as `<job>-0.<svc>`, and its failure handling leans on backoffLimit,
podFailurePolicy and activeDeadlineSeconds. Those must behave (and word their conditions) as
kube-controller-manager's do, or tests would pass against a cluster no user has.

Both controllers are level-triggered, as upstream: any change to the owner or one of its pods
(found through the controller ownerReference) queues the owner's key; one thread per controller
syncs a key by reading the owner and its pods and writing what differs. Time-based work
(activeDeadlineSeconds, ttlSecondsAfterFinished) re-queues the key for when it is due instead of
polling. Writes use store.mutate, so a sync never overwrites a concurrent change.

Simplifications, on purpose: a pod deleted before it finished is replaced but not counted as
failed (upstream counts it through its tracking finalizer); no pod-creation back-off delay (tests
want to see replacements at once); StatefulSets have one revision (no rolling update of pods).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.cluster.errors import ApiError
from tests.cluster.node_common import (
    Obj,
    StoreLike,
    condition_true,
    controller_ref,
    get_condition,
    now_iso,
    parse_iso,
    pod_terminal,
    set_condition,
)
from tests.cluster.worker import StoreWorker

log = logging.getLogger(__name__)

INDEX_KEY = "batch.kubernetes.io/job-completion-index"


class _Controller(StoreWorker):
    """A work queue of owner keys, fed by store changes, drained by one thread."""

    resource = ""
    kind = ""
    component = ""
    batch_s = 0.1  # pod changes within this window share one sync of their owner

    def __init__(self, store: StoreLike) -> None:
        super().__init__(store)
        self._due: dict[tuple[str, str], float] = {}
        self._cache_lock = threading.Lock()
        self._cache: dict[str, dict[str, Obj]] = {}  # owner uid -> pod uid -> pod
        self._pod_owner: dict[str, str] = {}
        self._deleted: set[str] = set()  # uids of pods gone for good

    def _prime(self) -> None:
        for pod in self._store.list("pods")[0]:
            self._cache_pod("ADDED", pod)
        for obj in self._store.list(self.resource)[0]:
            self._enqueue(_key(obj))

    def _loops(self) -> list[tuple[str, Callable[[], None]]]:
        return [(self.component, self._run)]

    def _on_change(self, etype: str, resource: str, obj: Obj) -> None:
        if resource == self.resource:
            if etype == "DELETED":
                self._forget(obj)
            self._enqueue(_key(obj))
        elif resource == "pods":
            ref = self._cache_pod(etype, obj)
            if ref is not None:
                ns = obj["metadata"].get("namespace", "default")
                # Batch a burst of pod changes into one sync, as upstream's syncJobBatchPeriod.
                self._enqueue((ns, ref.get("name", "")), self.batch_s)

    def _cache_pod(self, etype: str, pod: Obj) -> Obj | None:
        """Keep our own index of pods by owner, fed by events: listing the pods of a 1,024-pod
        Job on every sync would copy them all under the store's lock each time. Returns the
        controller reference when the pod is (or was) one of ours."""
        meta = pod["metadata"]
        uid = meta["uid"]
        ref = controller_ref(pod)
        mine = ref if ref and ref.get("kind") == self.kind else None
        with self._cache_lock:
            before = self._pod_owner.get(uid)
            if before is not None and (
                etype == "DELETED" or mine is None or mine.get("uid") != before
            ):
                self._cache.get(before, {}).pop(uid, None)
                del self._pod_owner[uid]
            if etype == "DELETED":
                # A pod's DELETED can come before our own delete call has returned (the kubelet
                # ends a pod at once); the terminating copy that call then records must not
                # bring the pod back (it stayed in the cache and the status counted it forever).
                self._deleted.add(uid)
            if etype == "DELETED" or mine is None or uid in self._deleted:
                return mine
            owner = str(mine.get("uid"))
            pods = self._cache.setdefault(owner, {})
            current = pods.get(uid)
            if current is None or _rv(pod) >= _rv(current):
                pods[uid] = pod
            self._pod_owner[uid] = owner
        return mine

    def _enqueue(self, key: tuple[str, str], delay_s: float = 0.0) -> None:
        at = time.monotonic() + max(0.0, delay_s)
        with self._cond:
            if key not in self._due or at < self._due[key]:
                self._due[key] = at
                self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    now = time.monotonic()
                    ready = [k for k, at in self._due.items() if at <= now]
                    if ready:
                        break
                    wait = min(self._due.values()) - now if self._due else None
                    self._cond.wait(wait)
                if self._stopping:
                    return
                for k in ready:
                    del self._due[k]
            for k in ready:
                try:
                    self.sync(*k)
                except ApiError as e:
                    if e.code not in (404, 409):
                        log.warning("%s: sync %s/%s: %s", self.component, *k, e)
                    if e.code == 409:
                        self._enqueue(k, 0.05)
                except Exception:
                    log.exception("%s: sync %s/%s failed", self.component, *k)

    def sync(self, namespace: str, name: str) -> None:
        raise NotImplementedError

    def _forget(self, obj: Obj) -> None:
        """Drop per-owner memory when the owner is gone."""

    def _event(self, obj: Obj, reason: str, message: str, type_: str = "Normal") -> None:
        with contextlib.suppress(ApiError):
            self._store.record_event(obj, reason, message, type=type_, component=self.component)

    def _owned_pods(self, namespace: str, uid: str, selector: Any) -> list[Obj]:
        """The owner's pods as the event cache knows them (the selector is implied by uid)."""
        with self._cache_lock:
            pods = list(self._cache.get(uid, {}).values())
        return sorted(
            (p for p in pods if p["metadata"].get("namespace", "default") == namespace),
            key=lambda p: p["metadata"]["name"],
        )

    def _created(self, pod: Obj) -> None:
        """Record a pod we just created before its ADDED event arrives (upstream's
        "expectations"), so the next sync does not create it a second time."""
        self._cache_pod("ADDED", pod)

    def _delete_pod(self, owner: Obj, pod: Obj) -> None:
        meta = pod["metadata"]
        try:
            gone = self._store.delete("pods", meta.get("namespace"), meta["name"])
        except ApiError:
            return
        if gone["metadata"].get("deletionTimestamp"):
            self._cache_pod("MODIFIED", gone)  # terminating: no longer counted as active
        else:
            self._cache_pod("DELETED", gone)
        self._event(owner, "SuccessfulDelete", f"Deleted pod: {meta['name']}")


def _rv(obj: Obj) -> int:
    try:
        return int(obj["metadata"].get("resourceVersion") or 0)
    except ValueError:
        return 0


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "default", meta.get("name") or "")


def _owner_ref(obj: Obj, api_version: str, kind: str) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _pod_ready(pod: Obj) -> bool:
    return condition_true(pod, "Ready")


# ---- Job -----------------------------------------------------------------------------------


@dataclass
class _JobMemory:
    """Terminal pods already counted, so counts survive those pods being deleted later."""

    succeeded: dict[str, int | None] = field(default_factory=dict)  # pod uid -> index
    failed: set[str] = field(default_factory=set)
    ignored: set[str] = field(default_factory=set)


class JobController(_Controller):
    """batch/v1 Job: NonIndexed and Indexed, with the failure policy knobs the deployer uses."""

    resource = "jobs"
    kind = "Job"
    component = "job-controller"

    def __init__(self, store: StoreLike) -> None:
        super().__init__(store)
        self._memory: dict[str, _JobMemory] = {}

    def _forget(self, obj: Obj) -> None:
        self._memory.pop(obj["metadata"].get("uid", ""), None)

    def sync(self, namespace: str, name: str) -> None:
        try:
            job = self._store.get("jobs", namespace, name)
        except ApiError:
            return
        meta, spec = job["metadata"], job.get("spec") or {}
        uid = meta["uid"]
        if meta.get("deletionTimestamp"):
            return
        status = job.get("status") or {}
        pods = self._owned_pods(namespace, uid, f"batch.kubernetes.io/controller-uid={uid}")
        mem = self._memory.setdefault(uid, _JobMemory())
        indexed = spec.get("completionMode") == "Indexed"
        policy = spec.get("podFailurePolicy") or {}

        active: list[Obj] = []
        terminating = 0
        fail_job: tuple[str, str] | None = None
        for pod in pods:
            pmeta = pod["metadata"]
            puid = pmeta["uid"]
            phase = (pod.get("status") or {}).get("phase")
            if phase == "Succeeded":
                if puid not in mem.succeeded:
                    mem.succeeded[puid] = _index(pod) if indexed else None
            elif phase == "Failed":
                if puid not in mem.failed and puid not in mem.ignored:
                    action, msg = _failure_action(policy, pod)
                    if action == "Ignore":
                        mem.ignored.add(puid)
                    else:
                        mem.failed.add(puid)
                        if action == "FailJob" and fail_job is None:
                            fail_job = ("PodFailurePolicy", msg)
            elif pmeta.get("deletionTimestamp"):
                terminating += 1
            else:
                active.append(pod)

        finished = _finished(job)
        now = time.time()
        succeeded_indexes = {i for i in mem.succeeded.values() if i is not None}
        n_succeeded = max(len(mem.succeeded), int(status.get("succeeded", 0) or 0))
        n_failed = max(len(mem.failed), int(status.get("failed", 0) or 0))
        completions = spec.get("completions")
        parallelism = int(spec.get("parallelism", 1) if spec.get("parallelism") is not None else 1)
        suspended = bool(spec.get("suspend"))
        start_time = status.get("startTime")

        conditions: list[tuple[str, str, str | None, str | None]] = []
        completion_time = status.get("completionTime")
        if finished:
            self._after_finish(job, active)
            self._write_status(job, active, terminating, mem, n_succeeded, n_failed, [], None)
            return

        # Failure, in upstream's order: pod failure policy, backoff limit, deadline.
        if fail_job is None:
            restarts = 0
            if (spec.get("template") or {}).get("spec", {}).get("restartPolicy") == "OnFailure":
                restarts = sum(_restarts(p) for p in active)
            backoff_limit = int(spec.get("backoffLimit", 6))
            if n_failed + restarts > backoff_limit:
                fail_job = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
        deadline = spec.get("activeDeadlineSeconds")
        started = parse_iso(start_time)
        if fail_job is None and deadline is not None and started is not None and not suspended:
            if now >= started + int(deadline):
                fail_job = ("DeadlineExceeded", "Job was active longer than specified deadline")
            else:
                self._enqueue((namespace, name), started + int(deadline) - now + 0.05)

        if fail_job is not None:
            reason, message = fail_job
            conditions = [
                ("FailureTarget", "True", reason, message),
                ("Failed", "True", reason, message),
            ]
            self._event(job, reason, message, "Warning")
            self._finish(
                job, active, terminating, mem, n_succeeded, n_failed, conditions, completion_time
            )
            return

        complete = False
        if indexed:
            complete = completions is not None and set(range(int(completions))) <= succeeded_indexes
        elif completions is None:
            complete = n_succeeded > 0 and not active
        else:
            complete = n_succeeded >= int(completions)
        if complete:
            msg = "Reached expected number of succeeded pods"
            conditions = [
                ("SuccessCriteriaMet", "True", "CompletionsReached", msg),
                ("Complete", "True", "CompletionsReached", msg),
            ]
            self._event(job, "Completed", "Job completed")
            self._finish(
                job, active, terminating, mem, n_succeeded, n_failed, conditions, now_iso()
            )
            return

        if suspended:
            for pod in active:
                self._delete_pod(job, pod)
            conditions = [("Suspended", "True", "JobSuspended", "Job suspended")]
            self._write_status(
                job,
                [],
                terminating + len(active),
                mem,
                n_succeeded,
                n_failed,
                conditions,
                None,
                start_time="",
            )
            return
        resumed = get_condition(job, "Suspended")
        if resumed and resumed.get("status") == "True":
            conditions = [("Suspended", "False", "JobResumed", "Job resumed")]

        # Make the number of active pods right.
        template = spec.get("template") or {}
        if indexed:
            active_indexes = {_index(p) for p in active}
            dupes = self._surplus_indexed(active, parallelism, succeeded_indexes)
            for pod in dupes:
                self._delete_pod(job, pod)
                active.remove(pod)
            total = int(completions or 0)
            missing = [
                i for i in range(total) if i not in succeeded_indexes and i not in active_indexes
            ]
            for i in missing[: max(0, parallelism - len(active))]:
                created = self._create_pod(job, template, i)
                if created is not None:
                    active.append(created)
        else:
            if completions is None:
                want = parallelism if n_succeeded == 0 else 0
            else:
                want = min(parallelism, int(completions) - n_succeeded)
            while len(active) > want:
                pod = active.pop()
                self._delete_pod(job, pod)
            for _ in range(want - len(active)):
                created = self._create_pod(job, template, None)
                if created is not None:
                    active.append(created)
        if not start_time:
            start_time = now_iso()
            if deadline is not None:
                self._enqueue((namespace, name), int(deadline) + 0.05)
        self._write_status(
            job,
            active,
            terminating,
            mem,
            n_succeeded,
            n_failed,
            conditions,
            None,
            start_time=start_time,
        )

    def _surplus_indexed(self, active: list[Obj], parallelism: int, done: set[int]) -> list[Obj]:
        """Pods of an index already done or running twice, then the highest beyond parallelism."""
        seen: set[int | None] = set()
        surplus = []
        for pod in sorted(active, key=lambda p: (_index(p) or 0, p["metadata"]["name"])):
            i = _index(pod)
            if i in done or i in seen or i is None:
                surplus.append(pod)
            seen.add(i)
        keep = [p for p in active if p not in surplus]
        keep.sort(key=lambda p: _index(p) or 0)
        surplus += keep[parallelism:]
        return surplus

    def _create_pod(self, job: Obj, template: Obj, index: int | None) -> Obj | None:
        meta = job["metadata"]
        name, uid = meta["name"], meta["uid"]
        tmeta = dict(template.get("metadata") or {})
        labels = dict(tmeta.get("labels") or {})
        labels.update(
            {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": name,
                "controller-uid": uid,
                "job-name": name,
            }
        )
        annotations = dict(tmeta.get("annotations") or {})
        pspec = _copy(template.get("spec") or {})
        if index is not None:
            labels[INDEX_KEY] = str(index)
            annotations[INDEX_KEY] = str(index)
            pspec["hostname"] = f"{name}-{index}"
            env = {
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_KEY}']"}},
            }
            for c in (pspec.get("containers") or []) + (pspec.get("initContainers") or []):
                c["env"] = [env] + [e for e in c.get("env") or [] if e.get("name") != env["name"]]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{name}-{index}-" if index is not None else f"{name}-",
                "namespace": meta.get("namespace", "default"),
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [_owner_ref(job, "batch/v1", "Job")],
            },
            "spec": pspec,
        }
        try:
            created = self._store.create("pods", pod)
        except ApiError as e:
            self._event(job, "FailedCreate", f"Error creating: {e.message}", "Warning")
            return None
        self._created(created)
        self._event(job, "SuccessfulCreate", f"Created pod: {created['metadata']['name']}")
        return created

    def _after_finish(self, job: Obj, active: list[Obj]) -> None:
        for pod in active:
            self._delete_pod(job, pod)
        self._enqueue_ttl(job)

    def _finish(
        self,
        job: Obj,
        active: list[Obj],
        terminating: int,
        mem: _JobMemory,
        n_succeeded: int,
        n_failed: int,
        conditions: list[tuple[str, str, str | None, str | None]],
        completion_time: str | None,
    ) -> None:
        """A Job that ended (Complete or Failed): its running pods go, status and TTL follow."""
        for pod in active:
            self._delete_pod(job, pod)
        self._write_status(
            job,
            [],
            terminating + len(active),
            mem,
            n_succeeded,
            n_failed,
            conditions,
            completion_time,
        )
        self._enqueue_ttl(job)

    def _enqueue_ttl(self, job: Obj) -> None:
        """ttlSecondsAfterFinished: delete the finished Job (its pods go by GC) when due."""
        ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
        if ttl is None:
            return
        done = get_condition(job, "Complete") or get_condition(job, "Failed")
        finished_at = parse_iso((done or {}).get("lastTransitionTime")) or time.time()
        left = finished_at + int(ttl) - time.time()
        if left <= 0 and _finished(job):
            with contextlib.suppress(ApiError):
                meta = job["metadata"]
                self._store.delete(
                    "jobs", meta.get("namespace"), meta["name"], propagation="Background"
                )
            return
        self._enqueue(_key(job), max(left, 0.0) + 0.05)

    def _write_status(
        self,
        job: Obj,
        active: list[Obj],
        terminating: int,
        mem: _JobMemory,
        succeeded: int,
        failed: int,
        conditions: list[tuple[str, str, str | None, str | None]],
        completion_time: str | None,
        *,
        start_time: str | None = None,
    ) -> None:
        indexed = (job.get("spec") or {}).get("completionMode") == "Indexed"
        ready = sum(1 for p in active if _pod_ready(p))
        indexes = sorted({i for i in mem.succeeded.values() if i is not None})

        def edit(obj: Obj) -> None:
            st = obj.setdefault("status", {})
            st["active"] = len(active)
            st["ready"] = ready
            st["succeeded"] = succeeded
            st["failed"] = failed
            st["terminating"] = terminating
            st["uncountedTerminatedPods"] = {}
            if indexed:
                st["completedIndexes"] = _ranges(indexes)
            if start_time == "":
                st.pop("startTime", None)
            elif start_time:
                st["startTime"] = start_time
            if completion_time and not st.get("completionTime"):
                st["completionTime"] = completion_time
            conds = st.setdefault("conditions", [])
            for type_, status, reason, message in conditions:
                set_condition(conds, type_, status, reason=reason, message=message, probe_time=True)
            for key in ("active", "succeeded", "failed", "terminating", "ready"):
                if not st.get(key):
                    st.pop(key, None)
            if not st["conditions"]:
                st.pop("conditions")

        meta = job["metadata"]
        self._store.mutate("jobs", meta.get("namespace"), meta["name"], edit, subresource="status")


def _finished(job: Obj) -> bool:
    return condition_true(job, "Complete") or condition_true(job, "Failed")


def _index(pod: Obj) -> int | None:
    meta = pod.get("metadata") or {}
    value = (meta.get("annotations") or {}).get(INDEX_KEY) or (meta.get("labels") or {}).get(
        INDEX_KEY
    )
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _restarts(pod: Obj) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    statuses += (pod.get("status") or {}).get("initContainerStatuses") or []
    return sum(int(s.get("restartCount", 0)) for s in statuses)


def _failure_action(policy: Obj, pod: Obj) -> tuple[str, str]:
    """podFailurePolicy: the first matching rule's action (Count when none match)."""
    meta = pod["metadata"]
    who = f"{meta.get('namespace', 'default')}/{meta['name']}"
    status = pod.get("status") or {}
    terminated = []
    for s in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        t = (s.get("state") or {}).get("terminated")
        if t and int(t.get("exitCode", 0)) != 0:
            terminated.append((s.get("name", ""), int(t["exitCode"])))
    for i, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action", "Count")
        codes = rule.get("onExitCodes")
        if codes:
            values = {int(v) for v in codes.get("values") or []}
            wanted = codes.get("containerName")
            for cname, code in terminated:
                if wanted and cname != wanted:
                    continue
                hit = code in values if codes.get("operator", "In") == "In" else code not in values
                if hit:
                    return action, (
                        f"Container {cname} for pod {who} failed with exit code {code} "
                        f"matching {action} rule at index {i}"
                    )
        for pattern in rule.get("onPodConditions") or []:
            for cond in status.get("conditions") or []:
                if cond.get("type") == pattern.get("type") and cond.get("status") == pattern.get(
                    "status", "True"
                ):
                    return action, (
                        f"Pod {who} has condition {cond['type']} matching {action} rule at index {i}"
                    )
    return "Count", ""


def _ranges(indexes: list[int]) -> str:
    """completedIndexes as upstream writes it: "0-2,5"."""
    out: list[str] = []
    start = prev = None
    for i in indexes:
        if start is None:
            start = prev = i
        elif prev is not None and i == prev + 1:
            prev = i
        else:
            out.append(f"{start}-{prev}" if start != prev else str(start))
            start = prev = i
    if start is not None:
        out.append(f"{start}-{prev}" if start != prev else str(start))
    return ",".join(out)


def _copy(obj: Any) -> Any:
    return copy.deepcopy(obj)


# ---- StatefulSet -------------------------------------------------------------------------


class StatefulSetController(_Controller):
    """apps/v1 StatefulSet: stable `<name>-<ordinal>` pods, Parallel and OrderedReady."""

    resource = "statefulsets"
    kind = "StatefulSet"
    component = "statefulset-controller"

    def sync(self, namespace: str, name: str) -> None:
        try:
            sts = self._store.get("statefulsets", namespace, name)
        except ApiError:
            return
        meta, spec = sts["metadata"], sts.get("spec") or {}
        if meta.get("deletionTimestamp"):
            return
        uid = meta["uid"]
        replicas = int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)
        parallel = spec.get("podManagementPolicy") == "Parallel"
        selector = (spec.get("selector") or {}).get("matchLabels") or None
        pods = self._owned_pods(namespace, uid, selector)
        by_ordinal: dict[int, Obj] = {}
        pattern = re.compile(rf"^{re.escape(name)}-(\d+)$")
        for pod in pods:
            m = pattern.match(pod["metadata"]["name"])
            if m:
                by_ordinal[int(m.group(1))] = pod

        # Pods that ended are replaced (restartPolicy Always restarts in place before that).
        for ordinal, pod in list(by_ordinal.items()):
            if pod_terminal(pod) and not pod["metadata"].get("deletionTimestamp"):
                self._delete_pod(sts, pod)
                del by_ordinal[ordinal]

        for i in range(replicas):
            existing = by_ordinal.get(i)
            if existing is None:
                created = self._create_pod(sts, i)
                if created is not None:
                    by_ordinal[i] = created
                if not parallel:
                    break
            elif not parallel and not (
                _pod_ready(existing) and not existing["metadata"].get("deletionTimestamp")
            ):
                break

        extra = sorted((o for o in by_ordinal if o >= replicas), reverse=True)
        if extra:
            if parallel:
                for o in extra:
                    if not by_ordinal[o]["metadata"].get("deletionTimestamp"):
                        self._delete_pod(sts, by_ordinal[o])
            else:
                # One at a time, highest first, once nothing else is on its way out.
                if not any(p["metadata"].get("deletionTimestamp") for p in by_ordinal.values()):
                    self._delete_pod(sts, by_ordinal[extra[0]])

        live = [p for p in by_ordinal.values() if not pod_terminal(p)]
        ready = sum(1 for p in live if _pod_ready(p) and not p["metadata"].get("deletionTimestamp"))
        revision = f"{name}-{uid[:10]}"

        def edit(obj: Obj) -> None:
            st = obj.setdefault("status", {})
            st["observedGeneration"] = obj["metadata"].get("generation", 1)
            st["replicas"] = len(live)
            st["readyReplicas"] = ready
            st["availableReplicas"] = ready
            st["currentReplicas"] = len(live)
            st["updatedReplicas"] = len(live)
            st["currentRevision"] = revision
            st["updateRevision"] = revision
            st["collisionCount"] = 0
            if not ready:
                st.pop("readyReplicas", None)

        self._store.mutate("statefulsets", namespace, name, edit, subresource="status")

    def _create_pod(self, sts: Obj, ordinal: int) -> Obj | None:
        meta, spec = sts["metadata"], sts.get("spec") or {}
        name, ns = meta["name"], meta.get("namespace", "default")
        template = spec.get("template") or {}
        tmeta = template.get("metadata") or {}
        pod_name = f"{name}-{ordinal}"
        labels = dict(tmeta.get("labels") or {})
        labels.update(
            {
                "statefulset.kubernetes.io/pod-name": pod_name,
                "apps.kubernetes.io/pod-index": str(ordinal),
                "controller-revision-hash": f"{name}-{meta['uid'][:10]}",
            }
        )
        pspec = _copy(template.get("spec") or {})
        pspec["hostname"] = pod_name
        if spec.get("serviceName"):
            pspec["subdomain"] = spec["serviceName"]
        volumes = pspec.setdefault("volumes", [])
        for vct in spec.get("volumeClaimTemplates") or []:
            vname = vct["metadata"]["name"]
            claim = f"{vname}-{name}-{ordinal}"
            self._ensure_claim(sts, vct, claim)
            if not any(v.get("name") == vname for v in volumes):
                volumes.append({"name": vname, "persistentVolumeClaim": {"claimName": claim}})
        if not volumes:
            pspec.pop("volumes")
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": ns,
                "labels": labels,
                "annotations": dict(tmeta.get("annotations") or {}),
                "ownerReferences": [_owner_ref(sts, "apps/v1", "StatefulSet")],
            },
            "spec": pspec,
        }
        try:
            created = self._store.create("pods", pod)
        except ApiError as e:
            if e.code != 409:  # 409: the old pod is still terminating; its DELETED re-queues us
                self._event(
                    sts, "FailedCreate", f"create Pod {pod_name} failed: {e.message}", "Warning"
                )
            return None
        self._created(created)
        self._event(
            sts, "SuccessfulCreate", f"create Pod {pod_name} in StatefulSet {name} successful"
        )
        return created

    def _ensure_claim(self, sts: Obj, vct: Obj, claim: str) -> None:
        ns = sts["metadata"].get("namespace", "default")
        pvc = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": claim,
                "namespace": ns,
                "labels": dict((vct.get("metadata") or {}).get("labels") or {}),
            },
            "spec": _copy(vct.get("spec") or {}),
        }
        with contextlib.suppress(ApiError):
            self._store.create("persistentvolumeclaims", pvc)


__all__ = ["JobController", "StatefulSetController"]
