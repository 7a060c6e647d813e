"""doctor's permissions check: a SelfSubjectAccessReview (authorization.k8s.io/v1) for every
verb of every entry of the permissions table (api._access) that this run needs, all at once, and
one line per resource where a verb is missing, naming the verbs and the `nccl-k8s rbac` command
that prints what to grant. A 403 then is known before a command fails half way.

Which entries: the namespace's "run" ones (their options' only for a run with those options:
--gang NAME, --pod-monitor, --queue) fail when missing; the cluster reads doctor itself uses
warn (its checks then say what they could not see); namespaces create fails only when the
deploy will create the namespace. nodes check's node writes are not its business.
"""

from __future__ import annotations

import asyncio

from nccl_k8s.errors import ClusterError
from nccl_k8s.k8s.api._access import ACCESS, DOMAIN_FIT, Access
from nccl_k8s.k8s.api._client import KubeClient
from nccl_k8s.k8s.preflight._domainfit import fit_levels
from nccl_k8s.k8s.preflight._preflight import Check
from nccl_k8s.k8s.rendering._gangs import scheduler_name
from nccl_k8s.k8s.rendering._netpolicy import renders_network_policy
from nccl_k8s.spec import RunSpec
from nccl_k8s.spec.platforms import PLATFORMS

_FLAG = {"cluster-reads": " --cluster-reads", "create-namespace": " --create-namespace"}


def _uses(a: Access, spec: RunSpec, create_namespace: bool) -> bool:
    """Does this run (as doctor checks it) send the entry's requests?"""
    if a.feature in ("label-nodes", "render-apply", "remove-schedule"):  # not a run's
        return False
    if a.feature == "create-namespace" and not create_namespace:
        return False
    if a.optional.startswith("--gang "):
        return spec.gang == a.optional.removeprefix("--gang ")
    if a.optional == "--platform":  # the platform's prerequisites are read by kind
        kinds = {"daemonsets": "daemonset", "customresourcedefinitions": "crd"}
        platform = PLATFORMS.get(spec.platform)
        wanted = kinds.get(a.resource, "object")
        return platform is not None and any(p.kind == wanted for p in platform.prerequisites)
    return {
        "": True,
        "--compute-domain": spec.compute_domain,
        "--pod-monitor": spec.pod_monitor,
        "--network-policy auto|on": renders_network_policy(spec),
        "--queue": spec.queue is not None,
        "--scheduler/--gang": scheduler_name(spec) is not None,
        "--idle-only": False,  # nodes check's, never a run's
        DOMAIN_FIT: fit_levels(spec) is not None,
    }[a.optional]


def _attributes(a: Access, verb: str, namespace: str) -> dict[str, str]:
    resource, _, sub = a.resource.partition("/")
    attrs = {"verb": verb, "group": a.group, "resource": resource}
    if sub:
        attrs["subresource"] = sub
    if a.scope == "namespace":
        attrs["namespace"] = namespace
        if resource == "namespaces":  # the namespace object itself, granted by its RoleBinding
            attrs["name"] = namespace
    return attrs


async def access_checks(
    kc: KubeClient, spec: RunSpec, namespace: str, *, create_namespace: bool = False
) -> list[Check]:
    """One `permissions` check per resource with a missing verb, or one pass."""
    asks = [
        (a, verb) for a in ACCESS if _uses(a, spec, create_namespace) for verb in sorted(a.verbs)
    ]
    try:
        allowed = await asyncio.gather(
            *(kc.review_access(_attributes(a, verb, namespace)) for a, verb in asks)
        )
    except ClusterError as e:
        return [
            Check(
                "permissions",
                "warn",
                f"could not review this user's permissions: {str(e).splitlines()[0]}",
                hint=f"`nccl-k8s rbac -n {namespace} --user NAME` prints what the tool needs",
            )
        ]
    missing: dict[Access, list[str]] = {}
    for (a, verb), ok in zip(asks, allowed, strict=True):
        if not ok:
            missing.setdefault(a, []).append(verb)
    if not missing:
        return [
            Check(
                "permissions",
                "pass",
                f"this user may send all {len(asks)} kinds of request the run needs "
                f"(namespace {namespace})",
            )
        ]
    return [_missing(a, verbs, namespace) for a, verbs in missing.items()]


def _missing(a: Access, verbs: list[str], namespace: str) -> Check:
    where = f"in namespace {namespace}" if a.scope == "namespace" else "at the cluster scope"
    flag = _FLAG.get(a.feature, "")
    return Check(
        "permissions",
        "warn" if a.feature == "cluster-reads" else "fail",
        f"cannot {', '.join(verbs)} {a.qualified} {where}: {a.why}",
        hint=f"`nccl-k8s rbac -n {namespace} --user NAME{flag}` prints what to grant",
    )


__all__ = ["access_checks"]
