"""deploy: create the run's objects (all or nothing), then optionally follow it.

Ownership of a run id is decided by the API server, not by a check before writing: every object
is created (POST), never applied, so an object of that name already there is a 409
AlreadyExists and this deploy stops. Two deploys of one run id whose requests interleave cannot
both succeed: the one whose create comes second fails and rolls back only what it created
itself (run._rollback: the objects of the run's labels that carry this attempt's mark, even
those whose create reply never arrived, each delete carrying its uid as a precondition), so
nothing of the winner's is touched. The 409 says "run X already exists" only when the object there is
one of a run's; otherwise it names the object that is in the way.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import functools
import signal
from collections.abc import Callable
from pathlib import Path

from nccl_k8s.errors import (
    ClusterError,
    Conflict,
    FailureReason,
    Forbidden,
    Interrupted,
    Refused,
    RunFailed,
    UsageError,
)
from nccl_k8s.k8s.api._client import ClientSettings, KubeClient
from nccl_k8s.k8s.api._sync import run_sync
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.preflight._doctor import refusal
from nccl_k8s.k8s.preflight._fleet import healthy_shortfall
from nccl_k8s.k8s.preflight._platforms import NodeList, may_use, resolve_async
from nccl_k8s.k8s.rendering._manifests import render
from nccl_k8s.k8s.rendering._names import APP_NAME
from nccl_k8s.k8s.rendering._topology import plan_order, rank_order_levels, with_rank_plan
from nccl_k8s.k8s.run._bundle import write_bundle
from nccl_k8s.k8s.run._collect import keep_measured
from nccl_k8s.k8s.run._fabric import check_fabric
from nccl_k8s.k8s.run._images import pin_images
from nccl_k8s.k8s.run._monitor import Ending, Seen, follow_run
from nccl_k8s.k8s.run._outcomes import Created, Deployed, ProgressFn, WaitOutcome
from nccl_k8s.k8s.run._plumbing import WORKLOADS
from nccl_k8s.k8s.run._rollback import marked, new_attempt, removed_text, roll_back, settled
from nccl_k8s.k8s.run._settings import WaitSettings
from nccl_k8s.k8s.run._tracing import span
from nccl_k8s.results.floors import with_floor
from nccl_k8s.spec import LABEL_INSTANCE, LABEL_NAME, RunSpec
from nccl_k8s.spec.platforms import PLATFORMS


def deploy(
    spec: RunSpec,
    *,
    client: ClientSettings,
    create_namespace: bool = False,
    wait: bool = True,
    wait_settings: WaitSettings | None = None,
    keep_on_failure: bool = False,
    bundle_on_failure: Path | None = None,
    progress: ProgressFn | None = None,
    on_deployed: Callable[[Deployed], None] | None = None,
    keep_rows: bool = True,
    pin: bool = False,
) -> tuple[Deployed, WaitOutcome | None]:
    """Create the run's objects; with `wait`, follow it until it ends (`deploy_async` over a
    client of its own)."""
    return run_sync(
        lambda kc: deploy_async(
            kc,
            spec,
            create_namespace=create_namespace,
            wait=wait,
            wait_settings=wait_settings,
            keep_on_failure=keep_on_failure,
            bundle_on_failure=bundle_on_failure,
            progress=progress,
            on_deployed=on_deployed,
            keep_rows=keep_rows,
            pin=pin,
        ),
        client,
    )


async def deploy_async(
    kc: KubeClient,
    spec: RunSpec,
    *,
    create_namespace: bool = False,
    wait: bool = True,
    wait_settings: WaitSettings | None = None,
    keep_on_failure: bool = False,
    bundle_on_failure: Path | None = None,
    progress: ProgressFn | None = None,
    on_deployed: Callable[[Deployed], None] | None = None,
    keep_rows: bool = False,
    pin: bool = False,
) -> tuple[Deployed, WaitOutcome | None]:
    """Create the run's objects; with `wait`, follow it until it ends.

    A run that fails while followed (a rank failed or was lost, pods unschedulable past the
    schedule timeout, the Job cannot create pods) is ended: what this deploy created is deleted
    (and its pods waited for), or with `keep_on_failure` kept with its ranks stopped; RunFailed
    says which; with `bundle_on_failure`, the debug bundle is written there first, while the
    whole run is still there. When waiting itself fails (the API server goes away), the
    ClusterError says the run keeps going and how to follow it again. With `keep_rows`
    (`deploy --wait`; `nodes check` collects its tests itself) the rows a failed run measured
    are kept in the runs directory first, and its verdicts added to the message, one line
    each (run._collect.keep_measured). `on_deployed` hears of
    the run once all its objects exist (an exception it raises ends the deploy there, the run
    left as it is). With `pin`, the pods' tag-only images are pinned to their registries'
    digests first (run._images; one note line each)."""
    ns = spec.namespace or kc.namespace
    nodes = NodeList(kc, spec)  # listed once, for whichever step below reads them first
    resolved = await resolve_async(kc, spec, reader=nodes)  # --platform auto: choose
    spec, floor_note = with_floor(resolved.spec)  # --min-busbw auto: the platform's floor
    note = "\n".join(n for n in (resolved.note, floor_note) if n)
    with span("deploy", run_id=spec.run_id, namespace=ns, **_span_attributes(spec)):
        with span("apply", run_id=spec.run_id, namespace=ns):
            deployed = await _deploy(
                kc,
                spec,
                create_namespace=create_namespace,
                platform_note=note,
                nodes=nodes,
                pin=pin,
            )
        if on_deployed is not None:
            on_deployed(deployed)
        if not wait:
            return deployed, None
        before = functools.partial(
            _before_end, kc, deployed.namespace, spec.run_id, keep_rows, bundle_on_failure
        )
        ending = Ending(
            stop=True, delete=None if keep_on_failure else deployed.created, before=before
        )
        try:
            outcome = await follow_run(
                kc,
                deployed.namespace,
                spec.run_id,
                expected=spec.nodes,
                settings=wait_settings or WaitSettings(),
                progress=progress,
                ending=ending,
                security=spec.security,
            )
        except ClusterError as e:
            raise _still_running(e, deployed) from e
        await _fabric_gate(kc, spec, outcome)
        return deployed, outcome


async def _fabric_gate(kc: KubeClient, spec: RunSpec, outcome: WaitOutcome) -> None:
    """A run rendered for a platform that succeeded on another fabric fails (RunFailed, exit
    1), naming the ranks and hosts; its objects stay for `results` and `logs`."""
    platform = PLATFORMS.get(spec.platform)
    if platform is None or not platform.fabric or outcome.phase != "Succeeded":
        return
    if spec.nodes == 1:
        # One node sends no byte over the network: its logs cannot show the platform's fabric,
        # and the gate fails what it cannot confirm. The gate is for runs that span nodes.
        return
    with span("fabric", run_id=spec.run_id, namespace=outcome.namespace):
        checked = await check_fabric(kc, outcome.namespace, outcome.pods, platform)
    if not checked.ok:
        raise RunFailed(
            f"run {spec.run_id}: {checked.message()} (`nccl-k8s results --run {spec.run_id} "
            f"-n {outcome.namespace}` diagnoses its logs)",
            reason=FailureReason.WRONG_FABRIC,
        )


def _span_attributes(spec: RunSpec) -> dict[str, object]:
    """What the deploy span says of the run (OpenTelemetry attribute values: str, int)."""
    return {
        "nccl_k8s.workload": spec.workload,
        "nccl_k8s.nodes": spec.nodes,
        "nccl_k8s.gpus_per_node": spec.gpus_per_node,
        "nccl_k8s.image": spec.image,
    }


async def _before_end(
    kc: KubeClient, namespace: str, run_id: str, keep: bool, bundle: Path | None, seen: Seen
) -> str:
    """Before a failed run is ended: with `keep` its measured rows kept in the runs directory
    (with its verdicts, one line each), and with --bundle-on-failure its debug bundle
    written; what the message adds."""
    why = str(seen.failure).splitlines()[0]
    notes = await keep_measured(kc, namespace, run_id, why) if keep else []
    if bundle is not None:
        culprit, tail = seen.failure.pod, seen.tail
        await write_bundle(
            kc, namespace, run_id, bundle, seen=seen.pods, culprit=culprit, tail=tail
        )
        note = f"(debug bundle: {bundle})"
        notes = [f"{notes[0]} {note}", *notes[1:]] if notes else [note]
    return "\n".join(notes)


def _still_running(e: ClusterError, d: Deployed) -> ClusterError:
    """The same error, saying that the run it was following goes on without it."""
    out = copy.copy(e)
    out.args = (
        f"{e}; waiting gave up, but run {d.run_id} was deployed and keeps running: "
        f"`nccl-k8s wait --run {d.run_id} -n {d.namespace}` follows it again, "
        f"`nccl-k8s cleanup --run {d.run_id} -n {d.namespace}` removes it",
    )
    return out


async def _namespace(
    kc: KubeClient, namespace: str, *, create_namespace: bool
) -> tuple[Obj | None, bool]:
    """The namespace (None when absent or unreadable) and whether the deploy creates it."""
    ns_known = True
    try:
        ns_obj = await kc.get("Namespace", namespace)
    except Forbidden:
        ns_known, ns_obj = False, None  # many users may not read namespaces; create will tell
    # Who may only create namespaces (rbac --create-namespace) cannot read one it has no Role
    # in yet: then create, and an existing one answers AlreadyExists.
    must_create = ns_obj is None and (ns_known or create_namespace)
    if must_create and not create_namespace:
        raise UsageError(
            f"namespace {namespace} does not exist on {kc.server}: create it (kubectl create "
            "namespace ...) or pass --create-namespace",
            key="--namespace",
        )
    return ns_obj, must_create


async def _forbidden(
    kc: KubeClient,
    spec: RunSpec,
    objs: list[Obj],
    attempt: str,
    created: list[Created],
    e: Forbidden,
) -> BaseException:
    """A 403 half way: roll back what this deploy created, but a namespace it made stays when
    the user may create namespaces but has no rights in them until an admin applies the Role
    there (rbac --create-namespace); the error then says so."""
    namespace = spec.namespace or kc.namespace
    keep = bool(created) and created[0].kind == "Namespace"
    gone = await roll_back(
        kc, namespace, spec.run_id, objs, attempt, created[1:] if keep else created
    )
    if not keep:
        return _rolled_back(e, spec.run_id, gone)
    return Forbidden(
        f"{e} (namespace {namespace} was created and stays: a cluster admin applies "
        f"`nccl-k8s rbac -n {namespace} --user NAME` there, then deploy again)",
        status=e.status, reason=e.reason, verb=e.verb, resource=e.resource,
        namespace=e.namespace, name=e.name, server=e.server,
    )  # fmt: skip


async def _deploy(
    kc: KubeClient,
    spec: RunSpec,
    *,
    create_namespace: bool,
    platform_note: str = "",
    nodes: NodeList | None = None,
    pin: bool = False,
) -> Deployed:
    namespace = spec.namespace or kc.namespace
    spec = dataclasses.replace(spec, namespace=namespace)
    objs = render(spec)  # pure; same objects `render` prints
    # ... plus, where the nodes can be read, the order of the ranks by topology
    nodes = nodes or NodeList(kc, spec)
    objs, order_note = await _rank_plan(spec, objs, nodes)
    health_note = await _healthy_enough(spec, nodes)
    pin_note = ""
    if pin:  # the images as their registries name them now (before anything is created)
        objs, pin_note = await pin_images(objs)
    platform_note = "\n".join(n for n in (platform_note, order_note, health_note, pin_note) if n)

    ns_obj, must_create = await _namespace(kc, namespace, create_namespace=create_namespace)
    refused = await refusal(kc, spec, namespace, ns_obj)
    if refused is not None:
        raise Refused(
            f"deploy refused, nothing was created: {refused.text()} (`nccl-k8s doctor` with "
            "the same flags runs every check)",
            check=refused.name,
        )

    created: list[Created] = []
    attempt = new_attempt()
    try:
        if must_create:
            try:
                made = await kc.create_namespace(namespace)
                created.append(Created("Namespace", namespace, made["metadata"]["uid"]))
            except Conflict as e:
                if e.reason != "AlreadyExists":
                    raise  # AlreadyExists: another deploy made it meanwhile; use it
        workload: Obj | None = None
        for obj in objs:
            try:
                made = await settled(kc.create(marked(obj, attempt)))
            except Conflict as e:
                if e.reason == "AlreadyExists":
                    raise await _taken(kc, spec, obj, e) from e
                raise
            created.append(
                Created(
                    made["kind"],
                    made["metadata"]["name"],
                    made["metadata"]["uid"],
                    api_version=made.get("apiVersion"),
                )
            )
            if made["kind"] in WORKLOADS:
                workload = made
        assert workload is not None  # render always includes the workload
        await _owned_by(kc, namespace, objs, workload)
    except Forbidden as e:
        raise await _forbidden(kc, spec, objs, attempt, created, e) from e
    except BaseException as exc:
        gone = await roll_back(kc, namespace, spec.run_id, objs, attempt, created)
        raise _rolled_back(exc, spec.run_id, gone) from exc
    return Deployed(
        run_id=spec.run_id,
        namespace=namespace,
        objects=[f"{o['kind']}/{o['metadata']['name']}" for o in objs],
        created_namespace=any(c.kind == "Namespace" for c in created),
        created=created,
        platform=spec.platform,
        platform_note=platform_note,
    )


async def _rank_plan(spec: RunSpec, objs: list[Obj], nodes: NodeList) -> tuple[list[Obj], str]:
    """The run's objects with the rank plan (rendering._topology: the nodes the run may use in
    topology order, which the pods' launcher numbers them by), and one line on the rank order
    when the nodes carry topology labels but the plan cannot be followed (empty otherwise)."""
    levels, why = rank_order_levels(spec)
    if not levels:
        return objs, ""
    try:
        usable = may_use(spec, await nodes.read())
    except Forbidden:
        return objs, "rank order: completion index (may not list nodes, RBAC)"
    carried = {k for n in usable for k in n["metadata"].get("labels") or {}}
    levels = tuple(k for k in levels if k in carried)  # a level no node has orders nothing
    if not levels or why:  # no topology to follow, or one the pods cannot follow
        return objs, why if levels else ""
    return with_rank_plan(spec, objs, levels, plan_order(usable, levels)), ""


async def _healthy_enough(spec: RunSpec, nodes: NodeList) -> str:
    """--healthy-only: enough nodes qualify (their last check good within the window), or
    UsageError in one line before anything is created; a note when the nodes cannot be read
    (the pods' affinity still keeps them off the others)."""
    if spec.healthy_since is None:
        return ""
    try:
        short = healthy_shortfall(spec, await nodes.read())
    except Forbidden:
        return "--healthy-only: may not list nodes (RBAC): the nodes that qualify were not counted"
    if short is not None:
        raise UsageError(f"deploy refused, nothing was created: {short}", key="--healthy-only")
    return ""


async def _owned_by(kc: KubeClient, namespace: str, objs: list[Obj], workload: Obj) -> None:
    """The other objects get an ownerReference to the workload (whose uid exists only now), so
    that deleting the workload, by hand or by its TTL, takes them along."""
    for obj in attach_owner(objs, workload):
        if obj["kind"] in WORKLOADS:
            continue
        refs = obj["metadata"]["ownerReferences"]
        await kc.patch(
            obj["kind"],
            obj["metadata"]["name"],
            {"metadata": {"ownerReferences": refs}},
            namespace=namespace,
            api_version=obj["apiVersion"],
        )


def _rolled_back(exc: BaseException, run_id: str, gone: list[str]) -> BaseException:
    """The error to end a rolled-back deploy with: an interrupt as Interrupted naming the run
    and what was deleted; a cluster error (a create refused, the server gone) with the same
    words added; anything else, and a 409 (which says what is in the way), as it was."""
    if isinstance(exc, asyncio.CancelledError):
        return Interrupted(signal.SIGINT, detail=removed_text(run_id, gone))
    if isinstance(exc, ClusterError) and not isinstance(exc, Conflict):
        out = copy.copy(exc)
        out.args = (f"{exc}; {removed_text(run_id, gone)}",)
        return out
    return exc


async def _taken(kc: KubeClient, spec: RunSpec, obj: Obj, e: Conflict) -> Conflict:
    """The 409 of a create, worded by what is actually there."""
    kind, name = obj["kind"], obj["metadata"]["name"]
    ns = spec.namespace
    there: Obj | None = None
    with contextlib.suppress(ClusterError):
        there = await kc.get(kind, name, namespace=ns, api_version=obj["apiVersion"])
    labels = (there or {}).get("metadata", {}).get("labels") or {}
    fields = {
        "status": 409,
        "reason": "AlreadyExists",
        "verb": "create",
        "resource": e.resource,
        "namespace": ns,
        "name": name,
        "server": kc.server,
    }
    if there is not None and labels.get(LABEL_NAME) == APP_NAME:
        owner = labels.get(LABEL_INSTANCE)
        if owner == spec.run_id:
            return Conflict(
                f"run {spec.run_id} already exists in namespace {ns}: use --run-id or cleanup "
                f"({kind} {name} is part of it); nothing was changed",
                **fields,
            )
        return Conflict(
            f"{kind} {name} in namespace {ns} belongs to nccl-k8s run {owner}, not to "
            f"{spec.run_id}: use another --run-id; nothing was changed",
            **fields,
        )
    if there is None:
        return Conflict(
            f"{kind} {name} appeared in namespace {ns} while this deploy ran and is gone again "
            "(another deploy of the same run id, rolled back?): deploy again; nothing was "
            "changed",
            **fields,
        )
    return Conflict(
        f"{kind} {name} already exists in namespace {ns} and is not part of an nccl-k8s run "
        f"(it has no {LABEL_NAME}={APP_NAME} label): use another --run-id; nothing was changed",
        **fields,
    )


def attach_owner(objs: list[Obj], owner: Obj) -> list[Obj]:
    """Copies of `objs` in which every object except `owner` itself is owned by `owner`.

    Call with the workload as the API server returned it (it has metadata.uid); apply the result
    so that deleting the workload cascades to the ConfigMap and Service.
    """
    meta = owner.get("metadata", {})
    uid = meta.get("uid")
    if not uid:
        raise ValueError(
            f"{owner.get('kind')} {meta.get('name')!r} has no metadata.uid: pass the created object"
        )
    ref = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": uid,
    }
    out: list[Obj] = []
    for obj in objs:
        obj = copy.deepcopy(obj)
        same = obj.get("kind") == owner["kind"] and obj["metadata"].get("name") == meta["name"]
        if not same:
            refs = [r for r in obj["metadata"].get("ownerReferences", []) if r.get("uid") != uid]
            obj["metadata"]["ownerReferences"] = [*refs, ref]
        out.append(obj)
    return out
