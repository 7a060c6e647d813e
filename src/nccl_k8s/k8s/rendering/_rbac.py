"""`nccl-k8s rbac`: the least-privilege Role, ClusterRoles and their bindings for one user,
group or ServiceAccount, built from the permissions table (api._access), never written by hand.

    Role nccl-k8s                      in the namespace: every "run" entry (deploy ... cleanup),
                                       the "render-apply" ones with --render-apply, the
                                       "remove-schedule" ones with --remove-schedule
    RoleBinding nccl-k8s:<subject>     binds it to the subject, in that namespace
    ClusterRole nccl-k8s:<feature>     one per cluster feature asked for (--cluster-reads,
    ClusterRoleBinding ...:<subject>   --create-namespace, --label-nodes, --remove-schedule)
    ValidatingAdmissionPolicy(+Binding) --label-nodes: the subject's node patches may touch only
                                       our label and taint (rendering._nodepolicy)

One ClusterRole per feature, named after it, so that granting it to a second user applies the
same ClusterRole again and only adds a binding. Nothing namespaced is ever granted cluster-wide:
--create-namespace's ClusterRole holds `namespaces create` alone, and the Role and RoleBinding
are applied in the new namespace once it exists (no one gets rights in a namespace by creating
it; a deploy into it stops at its first 403 until then). Pure: no client, no cluster.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Literal

import yaml

from nccl_k8s.errors import UsageError
from nccl_k8s.k8s.api._access import ACCESS, FEATURES, Access, Feature
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.rendering._names import APP_NAME
from nccl_k8s.k8s.rendering._nodepolicy import NODE_LABEL_KEYS, NODE_TAINT_KEY, node_policy_objects
from nccl_k8s.spec import LABEL_NAME

RBAC_GROUP = "rbac.authorization.k8s.io"
ROLE_NAME = APP_NAME
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


@dataclasses.dataclass(frozen=True)
class Subject:
    """Who is granted: a user, a group, or a ServiceAccount (its namespace)."""

    kind: Literal["User", "Group", "ServiceAccount"]
    name: str
    namespace: str = ""

    def to_obj(self) -> Obj:
        if self.kind == "ServiceAccount":
            return {"kind": "ServiceAccount", "name": self.name, "namespace": self.namespace}
        return {"kind": self.kind, "apiGroup": RBAC_GROUP, "name": self.name}

    @property
    def slug(self) -> str:
        """The subject in an object name (`user:alice`, `serviceaccount:ns:bench`): names may
        not hold `/` or `%`, which user names from an OIDC issuer may."""
        who = f"{self.namespace}:{self.name}" if self.kind == "ServiceAccount" else self.name
        return re.sub(r"[/%]", "-", f"{self.kind.lower()}:{who}")

    @property
    def flag(self) -> str:
        """The `nccl-k8s rbac` flag that names this subject."""
        if self.kind == "ServiceAccount":
            return f"--service-account {self.namespace}/{self.name}"
        return f"--{self.kind.lower()} {self.name}"


def subject_of(
    namespace: str, *, user: str | None, group: str | None, service_account: str | None
) -> Subject:
    """The one subject the flags name; a ServiceAccount without `NS/` is in `namespace`."""
    given = [(k, v) for k, v in (("--user", user), ("--group", group),
                                 ("--service-account", service_account)) if v is not None]  # fmt: skip
    if len(given) != 1:
        raise UsageError(
            "rbac: name exactly one of --user NAME, --group NAME, --service-account [NS/]NAME "
            f"(got {' and '.join(k for k, _ in given) or 'none'})",
            key="--user",
        )
    flag, value = given[0]
    if not value.strip():
        raise UsageError(f'{flag} "{value}": expected a name', key=flag)
    if flag != "--service-account":
        return Subject("User" if flag == "--user" else "Group", value)
    ns, _, name = value.rpartition("/")
    ns = ns or namespace
    if not _LABEL.match(ns) or not _SUBDOMAIN.match(name) or len(name) > 253:
        raise UsageError(
            f'--service-account "{value}": expected [NAMESPACE/]NAME in lower case, such as '
            "bench or team-a/bench",
            key="--service-account",
        )
    return Subject("ServiceAccount", name, ns)


def _rule(a: Access) -> Obj:
    return {"apiGroups": [a.group], "resources": [a.resource], "verbs": sorted(a.verbs)}


def _meta(name: str, namespace: str | None = None) -> Obj:
    meta: Obj = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = {LABEL_NAME: APP_NAME}
    return meta


def rbac_objects(
    namespace: str, subject: Subject, *, features: tuple[Feature, ...] = ("run",)
) -> list[Obj]:
    """The Role and RoleBinding in `namespace` (the namespace-scoped entries of `features`: "run"
    always, "render-apply" and "remove-schedule" when asked), then a ClusterRole and ClusterRoleBinding per feature
    in `features` with cluster-scoped entries, in the table's order."""
    if not _LABEL.match(namespace) or len(namespace) > 63:
        raise UsageError(
            f'-n "{namespace}": expected a namespace name (lower case letters, digits, "-")',
            key="--namespace",
        )
    ref = {"apiGroup": RBAC_GROUP}
    asked = ("run", *features)
    objs: list[Obj] = [
        {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "Role",
         "metadata": _meta(ROLE_NAME, namespace),
         "rules": [_rule(a) for a in ACCESS if a.scope == "namespace" and a.feature in asked]},
        {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "RoleBinding",
         "metadata": _meta(f"{ROLE_NAME}:{subject.slug}", namespace),
         "roleRef": {**ref, "kind": "Role", "name": ROLE_NAME},
         "subjects": [subject.to_obj()]},
    ]  # fmt: skip
    for feature in FEATURES:
        rules = [_rule(a) for a in ACCESS if a.scope == "cluster" and a.feature == feature]
        if feature in features and rules:
            objs += _cluster_role(feature, rules, subject)
    if "label-nodes" in features:
        objs += node_policy_objects(subject)
    return objs


def _cluster_role(feature: str, rules: list[Obj], subject: Subject) -> list[Obj]:
    ref = {"apiGroup": RBAC_GROUP}
    name = f"{APP_NAME}:{feature}"
    return [
        {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRole",
         "metadata": _meta(name), "rules": rules},
        {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRoleBinding",
         "metadata": _meta(f"{name}:{subject.slug}"),
         "roleRef": {**ref, "kind": "ClusterRole", "name": name},
         "subjects": [subject.to_obj()]},
    ]  # fmt: skip


_FEATURE_TEXT = {
    "run": "deploy, wait, status, list, logs, results, cleanup, bundle, doctor in {ns}",
    "render-apply": "kubectl apply of render's output in {ns}",
    "cluster-reads": "doctor's node and scheduler checks, nodes check, doctor --run, bundle",
    "create-namespace": "deploy --create-namespace",
    "label-nodes": "nodes check --label/--taint",
    "remove-schedule": "cleanup --schedule NAME (what `nodes schedule` printed)",
}


def rbac_text(objs: list[Obj]) -> str:
    """The objects as YAML, each preceded by a comment per rule saying who needs it and why."""
    docs = []
    for obj in objs:
        comment = ""
        if obj["kind"] in ("Role", "ClusterRole"):
            comment = _comment(obj)
        elif obj["kind"] == "ValidatingAdmissionPolicy":
            comment = (
                "# ValidatingAdmissionPolicy (Kubernetes 1.30 or later): the subject's node updates\n"
                f"# may change the labels {' and '.join(NODE_LABEL_KEYS)} and the taint "
                f"{NODE_TAINT_KEY}, nothing else\n"
            )
        body = yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, width=100)
        docs.append(comment + body)
    return "---\n".join(docs)


def _comment(role: Obj) -> str:
    """Per feature a Role or ClusterRole holds: who sends its requests, then each rule's why."""
    ns = role["metadata"].get("namespace")
    if ns is None:
        features: tuple[str, ...] = (role["metadata"]["name"].split(":")[1],)
        lines = [f"ClusterRole {role['metadata']['name']}, at the cluster scope:"]
    else:
        features = tuple(f for f in FEATURES if any(
            a.feature == f and a.scope == "namespace" and _rule(a) in role["rules"]
            for a in ACCESS))  # fmt: skip
        lines = [
            f"Role {role['metadata']['name']} in namespace {ns} (a namespace that deploy "
            "--create-namespace makes: apply this Role and its RoleBinding once it exists):"
        ]
    for feature in features:
        lines.append(f"the requests of {_FEATURE_TEXT[feature].format(ns=ns)}:")
        for a in ACCESS:
            if a.feature == feature and a.scope == ("namespace" if ns else "cluster"):
                extra = f" (only with {a.optional})" if a.optional else ""
                lines.append(f"  {a.qualified} {','.join(sorted(a.verbs))}: {a.why}{extra}")
    return "".join(f"# {line}\n" for line in lines)


__all__ = ["Subject", "rbac_objects", "rbac_text", "subject_of"]
