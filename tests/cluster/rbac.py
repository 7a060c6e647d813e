"""Who is asking and what they may do: bearer-token authentication, the RBAC authorizer over the
store's Roles, RoleBindings, ClusterRoles and ClusterRoleBindings, SelfSubjectAccessReview, and
the request attributes both work on (which a test can also record).

As kube-apiserver: a request is first turned into attributes (`request_attributes`, upstream's
RequestInfoFactory: verb from the method, `watch`/`list`/`deletecollection`, the API group, the
resource and subresource, the namespace, the name), then the user is authorized against
rbac.authorization.k8s.io/v1 rules (verbs, apiGroups, resources with `*` and `*/sub`,
resourceNames, nonResourceURLs with a trailing `*`), and a denial is a 403 `Status` worded as
upstream's (`pods "x" is forbidden: User "u" cannot get resource "pods/log" in API group "" in
the namespace "n"`). Members of `system:masters` are allowed everything without a rule, as
upstream's superuser group is.

Unlike a real cluster, a request without credentials is the admin (`ADMIN`, in system:masters):
every test written before users existed keeps its all-powerful identity. Users are added with a
token (`Authenticator.add`); an unknown token is 401. The bootstrap policy that lets every
authenticated user discover the API and review its own access (`system:discovery`,
`system:basic-user`) is created as objects at start, as kube-apiserver does. Not modelled:
aggregated ClusterRoles, impersonation, SelfSubjectRulesReview, escalation checks on writing
RBAC objects.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tests.cluster.errors import ApiError

Obj = dict[str, Any]

RBAC = "rbac.authorization.k8s.io"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()


#: Who a request without credentials is: the test cluster's all-powerful identity.
ADMIN = User("system:admin", (MASTERS, AUTHENTICATED))


@dataclass(frozen=True)
class Attributes:
    """One request as the authorizer sees it (upstream's authorizer.Attributes)."""

    user: User
    verb: str
    resource_request: bool
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    @property
    def qualified(self) -> str:
        """resource[/subresource] as rules name it."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


# ---- request attributes -------------------------------------------------------------------------

_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


def _exact_name(selector: str) -> str:
    """The name a field selector requires exactly (`metadata.name=X` or `==X`, among others
    ANDed), as RequestInfoFactory reads it (fields.Selector.RequiresExactMatch); else ""."""
    for term in selector.split(","):
        key, sep, value = term.partition("==") if "==" in term else term.partition("=")
        if sep and key.strip() == "metadata.name":
            return value.strip()
    return ""


def request_attributes(user: User, method: str, path: str, query: Mapping[str, str]) -> Attributes:
    """Upstream's RequestInfoFactory over /api/v1/... and /apis/GROUP/VERSION/...; any other
    path is a non-resource request (verb: the method in lower case)."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        rest = []
    if not rest:
        return Attributes(user, method.lower(), False, path=path)
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        # /namespaces/NS/pods/...: the resource is what follows (NS's own status stays put).
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if method == "GET":
        verb = "get" if name else "list"
        if query.get("watch", "").lower() in ("1", "true"):
            verb = "watch"
        if not name:  # upstream: a list or watch of one name by field selector is of that name
            name = _exact_name(query.get("fieldSelector") or "")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = _VERBS.get(method, method.lower())
    return Attributes(user, verb, True, group, rest[0], sub, namespace, name, path)


# ---- authentication -----------------------------------------------------------------------------


class Authenticator:
    """Bearer tokens -> users. No token: ADMIN (see the module's docstring)."""

    def __init__(self) -> None:
        self._tokens: dict[str, tuple[User, Callable[[], bool] | None]] = {}
        self._lock = threading.Lock()

    def add(
        self, name: str, groups: tuple[str, ...] = (), *, valid: Callable[[], bool] | None = None
    ) -> tuple[User, str]:
        """A new token for user `name` (also in system:authenticated, as every user is);
        `valid()`, when given, is asked at each request (a bound ServiceAccount token stops
        authenticating once its ServiceAccount is gone: incluster.TokenIssuer)."""
        user = User(name, (*groups, AUTHENTICATED))
        token = secrets.token_hex(16)
        with self._lock:
            self._tokens[token] = (user, valid)
        return user, token

    def user(self, authorization: str | None) -> User:
        if not authorization:
            return ADMIN
        scheme, _, token = authorization.partition(" ")
        with self._lock:
            found = self._tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if found is None or (found[1] is not None and not found[1]()):
            raise ApiError(401, "Unauthorized", "Unauthorized")
        return found[0]


def service_account(namespace: str, name: str) -> tuple[str, tuple[str, ...]]:
    """The user name and groups a ServiceAccount's token authenticates as."""
    return (
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}"),
    )


# ---- authorization ------------------------------------------------------------------------------


def _subject_matches(subject: Obj, user: User, binding_namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == user.name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_namespace
        return bool(ns) and user.name == f"system:serviceaccount:{ns}:{name}"
    return False


def _resource_matches(rule: Obj, attrs: Attributes) -> bool:
    for res in rule.get("resources") or []:
        if res in ("*", attrs.qualified):
            return True
        if attrs.subresource and res == f"*/{attrs.subresource}":
            return True
    return False


def _url_matches(rule: Obj, path: str) -> bool:
    for url in rule.get("nonResourceURLs") or []:
        if url == "*" or url == path or (url.endswith("*") and path.startswith(url[:-1])):
            return True
    return False


def rule_allows(rule: Obj, attrs: Attributes) -> bool:
    """One PolicyRule against one request (upstream's RuleAllows)."""
    verbs = rule.get("verbs") or []
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    if not attrs.resource_request:
        return _url_matches(rule, attrs.path)
    groups = rule.get("apiGroups") or []
    if "*" not in groups and attrs.group not in groups:
        return False
    if not _resource_matches(rule, attrs):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


class Authorizer:
    """RBAC over the objects in `store` (read at each request: a binding applies at once)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def _role_rules(self, ref: Obj, namespace: str) -> list[Obj]:
        try:
            if ref.get("kind") == "ClusterRole":
                role = self.store.get("clusterroles", None, ref.get("name", ""))
            else:
                role = self.store.get("roles", namespace, ref.get("name", ""))
        except ApiError:
            return []  # a binding to a role that does not exist grants nothing
        return list(role.get("rules") or [])

    def decide(self, attrs: Attributes) -> tuple[bool, str]:
        """(allowed, reason); the reason says which binding allowed it, as RBAC's does."""
        if MASTERS in attrs.user.groups:
            return True, ""
        scopes: list[tuple[str, str]] = [("clusterrolebindings", "")]
        if attrs.namespace:
            scopes.append(("rolebindings", attrs.namespace))
        for resource, ns in scopes:
            bindings, _ = self.store.list(resource, ns or None)
            for b in bindings:
                bns = b["metadata"].get("namespace") or ""
                if not any(_subject_matches(s, attrs.user, bns) for s in b.get("subjects") or []):
                    continue
                ref = b.get("roleRef") or {}
                if any(rule_allows(r, attrs) for r in self._role_rules(ref, bns)):
                    kind = (
                        "ClusterRoleBinding" if resource == "clusterrolebindings" else "RoleBinding"
                    )
                    where = f'{kind} "{b["metadata"]["name"]}"' + (
                        f' of namespace "{bns}"' if bns else ""
                    )
                    return True, (
                        f'RBAC: allowed by {where} of {ref.get("kind")} "{ref.get("name")}" '
                        f'to User "{attrs.user.name}"'
                    )
        return False, ""


def forbidden(attrs: Attributes) -> ApiError:
    """The 403 kube-apiserver sends for a denied request (responsewriters.Forbidden)."""
    who = f'User "{attrs.user.name}"'
    if not attrs.resource_request:
        return ApiError(
            403, "Forbidden", f'forbidden: {who} cannot {attrs.verb} path "{attrs.path}"'
        )
    where = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    why = (
        f'{who} cannot {attrs.verb} resource "{attrs.qualified}" in API group "{attrs.group}" '
        f"{where}"
    )
    gr = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
    head = f'{gr} "{attrs.name}"' if attrs.name else gr
    details: Obj = {"kind": attrs.resource}
    if attrs.name:
        details["name"] = attrs.name
    if attrs.group:
        details["group"] = attrs.group
    return ApiError(403, "Forbidden", f"{head} is forbidden: {why}", details=details)


def self_subject_access_review(authorizer: Authorizer, user: User, body: Obj) -> Obj:
    """The review of `body` for `user`, with its status filled in."""
    spec = body.get("spec") or {}
    res, non = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if res is not None:
        attrs = Attributes(
            user,
            str(res.get("verb") or ""),
            True,
            str(res.get("group") or ""),
            str(res.get("resource") or ""),
            str(res.get("subresource") or ""),
            str(res.get("namespace") or ""),
            str(res.get("name") or ""),
        )
    elif non is not None:
        attrs = Attributes(user, str(non.get("verb") or ""), False, path=str(non.get("path") or ""))
    else:
        raise ApiError(
            422,
            "Invalid",
            'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes: '
            "Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes "
            "must be specified",
        )
    allowed, reason = authorizer.decide(attrs)
    status: Obj = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    return {
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": status,
    }


# ---- the bootstrap policy -----------------------------------------------------------------------

_DISCOVERY = [
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/healthz",
    "/livez",
    "/readyz",
    "/openapi",
    "/openapi/*",
    "/version",
    "/version/",
]


def bootstrap(store: Any) -> None:
    """system:discovery and system:basic-user bound to every authenticated user (upstream's
    bootstrap ClusterRoles; their rules as `kubectl get clusterrole -o yaml` shows them)."""
    roles = {
        "system:discovery": [{"nonResourceURLs": _DISCOVERY, "verbs": ["get"]}],
        "system:basic-user": [
            {
                "apiGroups": ["authorization.k8s.io"],
                "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                "verbs": ["create"],
            }
        ],
    }
    for name, rules in roles.items():
        meta = {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}}
        store.create(
            "clusterroles",
            {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole", "metadata": meta, "rules": rules},
        )
        store.create(
            "clusterrolebindings",
            {
                "apiVersion": f"{RBAC}/v1",
                "kind": "ClusterRoleBinding",
                "metadata": dict(meta),
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": name},
                "subjects": [{"apiGroup": RBAC, "kind": "Group", "name": AUTHENTICATED}],
            },
        )


# ---- recording ----------------------------------------------------------------------------------


class Recorder:
    """Every request's attributes while a `recording()` is open (tests: which requests did a
    command send)."""

    def __init__(self) -> None:
        self._open: list[list[Attributes]] = []
        self._lock = threading.Lock()

    def add(self, attrs: Attributes) -> None:
        with self._lock:
            for sink in self._open:
                sink.append(attrs)

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[Attributes]]:
        sink: list[Attributes] = []
        with self._lock:
            self._open.append(sink)
        try:
            yield sink
        finally:
            with self._lock:
                self._open.remove(sink)
