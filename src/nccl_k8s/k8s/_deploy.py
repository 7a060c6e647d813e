"""deploy: apply the run's objects (all or nothing), then optionally follow it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable

from nccl_k8s.errors import ClusterError, Conflict, Forbidden, UsageError
from nccl_k8s.k8s._client import ClientSettings, KubeClient
from nccl_k8s.k8s._manifests import attach_owner, render
from nccl_k8s.k8s._monitor import follow_run
from nccl_k8s.k8s._outcomes import Deployed, ProgressFn, WaitOutcome
from nccl_k8s.k8s._plumbing import run_sync
from nccl_k8s.k8s._settings import WaitSettings
from nccl_k8s.k8s._types import Obj
from nccl_k8s.spec import RunSpec


def deploy(
    spec: RunSpec,
    *,
    client: ClientSettings,
    create_namespace: bool = False,
    wait: bool = True,
    wait_settings: WaitSettings | None = None,
    progress: ProgressFn | None = None,
    on_deployed: Callable[[Deployed], None] | None = None,
) -> tuple[Deployed, WaitOutcome | None]:
    """Apply the run's objects; with `wait`, follow it until it ends (RunFailed when it fails)."""

    async def main(kc: KubeClient) -> tuple[Deployed, WaitOutcome | None]:
        deployed = await _deploy(kc, spec, create_namespace=create_namespace)
        if on_deployed is not None:
            on_deployed(deployed)
        if not wait:
            return deployed, None
        outcome = await follow_run(
            kc,
            deployed.namespace,
            spec.run_id,
            expected=spec.nodes,
            settings=wait_settings or WaitSettings(),
            progress=progress,
        )
        return deployed, outcome

    return run_sync(main, client)


async def _deploy(kc: KubeClient, spec: RunSpec, *, create_namespace: bool) -> Deployed:
    namespace = spec.namespace or kc.namespace
    spec = dataclasses.replace(spec, namespace=namespace)
    objs = render(spec)  # pure; same objects `render` prints

    # Everything that can be checked is checked before the first write.
    ns_known = True
    try:
        ns_obj = await kc.get("Namespace", namespace)
    except Forbidden:
        ns_known, ns_obj = False, None  # many users may not read namespaces; apply will tell
    must_create = ns_known and ns_obj is None
    if must_create and not create_namespace:
        raise UsageError(
            f"namespace {namespace} does not exist on {kc.server}: create it (kubectl create "
            "namespace ...) or pass --create-namespace",
            key="--namespace",
        )
    if not must_create:
        taken = await asyncio.gather(
            *(
                kc.get(
                    o["kind"],
                    o["metadata"]["name"],
                    namespace=namespace,
                    api_version=o["apiVersion"],
                )
                for o in objs
            )
        )
        clash = [o for o, got in zip(objs, taken, strict=True) if got is not None]
        if clash:
            names = ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in clash)
            raise Conflict(
                f"run {spec.run_id} already exists in namespace {namespace}: use --run-id or "
                f"cleanup ({names})",
                status=409,
                verb="apply",
                namespace=namespace,
                name=spec.run_id,
                server=kc.server,
            )

    created: list[Obj] = []
    created_ns = False
    try:
        if must_create:
            await kc.create_namespace(namespace)
            created_ns = True
        applied: Obj | None = None
        for obj in objs:
            applied = await kc.apply(obj)
            created.append(obj)
        assert applied is not None  # render always ends with the workload
        # The ConfigMap and Service now get an ownerReference to the workload (whose uid only
        # exists now), so deleting the workload cascades to them.
        for obj in attach_owner(objs, applied)[:-1]:
            await kc.apply(obj, force=True)
    except BaseException:
        await _undo(kc, namespace, created, created_ns)
        raise
    return Deployed(
        run_id=spec.run_id,
        namespace=namespace,
        objects=[f"{o['kind']}/{o['metadata']['name']}" for o in objs],
        created_namespace=created_ns,
    )


async def _undo(kc: KubeClient, namespace: str, created: list[Obj], created_ns: bool) -> None:
    """Remove what a failed deploy created, newest first; a failure here must not hide the
    original error, so each delete is best effort."""
    for obj in reversed(created):
        with contextlib.suppress(ClusterError):
            await kc.delete(
                obj["kind"],
                obj["metadata"]["name"],
                namespace=namespace,
                api_version=obj["apiVersion"],
            )
    if created_ns:
        with contextlib.suppress(ClusterError):
            await kc.delete("Namespace", namespace)
