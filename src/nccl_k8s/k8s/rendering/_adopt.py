"""Adoption: a rendered run that makes its own objects dependents of its workload.

An ownerReference needs the owner's uid, which the API server assigns when the workload is
created, so `render` cannot print one (a made-up uid makes the garbage collector delete the
object at once). `deploy` patches them from the CLI once the workload exists (run._deploy).
A run applied from `render` (`render | kubectl apply -f -`, a GitOps repository) has no CLI
after the apply, so it adopts its objects from inside: `render` adds

    ServiceAccount <run>   the pods run as it (automount off, on it and on the pods)
    Role <run>             get on the workload; get and patch on each other object of the run,
                           the three adoption objects included, each rule by resourceNames
    RoleBinding <run>      the Role to the ServiceAccount

and an init container, `nccl-k8s-adopt` (rendering._wrapper.ADOPTER), which in the pod of index
0 reads the workload's uid and patches an ownerReference (controller false, blockOwnerDeletion
false) onto each object named in its ADOPT_ENV, only where the object carries the run's render
mark and run label. It is the only container with a token: a projected volume (a bound token of
ten minutes, the CA bundle, the namespace) mounted there alone; the pods' automount stays off,
so neither the benchmark nor any platform container holds a token (the adopter of any other
index exits at once). Deleting the workload (by hand, or its ttlSecondsAfterFinished) then
deletes all of them, and `nccl-k8s cleanup --run` still removes whatever was not adopted.

The Role grants nothing beyond the run's own objects, and only get and patch: a patch can change
more than ownerReferences, but only of objects the run's own pods already depend on. RBAC's
escalation rule lets the ServiceAccount patch its own Role and RoleBinding: it holds every
permission the Role grants (through that RoleBinding).

Opt-in (`render --adopt`): by default a rendered run carries no ServiceAccount, Role or token,
and `nccl-k8s cleanup --run ID` (by its labels and render mark) or `kubectl delete -f` of the
same render removes it. `deploy` does not render these (its objects get their owner from the
CLI).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.rendering._names import CONTAINER_NAME, RENDERED_ANNOTATION
from nccl_k8s.k8s.rendering._wrapper import ADOPT_ENV, ADOPT_TOKEN_DIR, ADOPTER
from nccl_k8s.spec import LABEL_INSTANCE

RBAC_VERSION = "rbac.authorization.k8s.io/v1"

#: The init container that adopts, and its token volume (mounted there alone).
ADOPTER_NAME = "nccl-k8s-adopt"
TOKEN_VOLUME = "nccl-k8s-adopt-token"

#: The kinds of a run's adoption objects, in apply order (the ServiceAccount before the pods).
ADOPTION_KINDS = ("ServiceAccount", "Role", "RoleBinding")


def plural(kind: str) -> str:
    """The resource of a kind the renderer makes (`<kind in lower case>s`, `-ies` for a `-y`:
    networkpolicies; tests check it against the API client's table)."""
    lower = kind.lower()
    return lower[:-1] + "ies" if lower.endswith("y") else lower + "s"


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def _ref(obj: Obj) -> Obj:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "plural": plural(obj["kind"]),
        "name": obj["metadata"]["name"],
    }


def _rule(ref: Obj, verbs: list[str]) -> Obj:
    return {
        "apiGroups": [_group(ref["apiVersion"])],
        "resources": [ref["plural"]],
        "resourceNames": [ref["name"]],
        "verbs": verbs,
    }


def with_adoption(objs: list[Obj], meta: Callable[[str], Obj]) -> list[Obj]:
    """The run's objects (the workload last) with the adoption objects first and the pods set
    to adopt: run as the ServiceAccount, with its token, and the plan in ADOPT_ENV.

    `meta(name)` gives the metadata of an adoption object (the run's labels and marks)."""
    workload = copy.deepcopy(objs[-1])
    name = workload["metadata"]["name"]
    namespace = workload["metadata"].get("namespace")
    account: Obj = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta(name),
        # Only pods that ask for the token get it (ours do); others naming it by mistake do not.
        "automountServiceAccountToken": False,
    }
    role: Obj = {"apiVersion": RBAC_VERSION, "kind": "Role", "metadata": meta(name)}
    subject: Obj = {"kind": "ServiceAccount", "name": name}
    if namespace is not None:
        subject["namespace"] = namespace  # else the RoleBinding's own, wherever it is applied
    binding: Obj = {
        "apiVersion": RBAC_VERSION,
        "kind": "RoleBinding",
        "metadata": meta(name),
        "roleRef": {"apiGroup": _group(RBAC_VERSION), "kind": "Role", "name": name},
        "subjects": [subject],
    }
    adopted = [_ref(o) for o in [account, role, binding, *objs[:-1]]]
    owner = _ref(workload)
    role["rules"] = [_rule(owner, ["get"]), *(_rule(r, ["get", "patch"]) for r in adopted)]
    marks = meta(name)
    plan = {
        "owner": owner,
        "objects": adopted,
        # Only an object carrying the run's render mark and run label is adopted.
        "mark": {
            "labels": {LABEL_INSTANCE: marks["labels"][LABEL_INSTANCE]},
            "annotations": {RENDERED_ANNOTATION: marks["annotations"][RENDERED_ANNOTATION]},
        },
    }

    pod = workload["spec"]["template"]["spec"]
    pod["serviceAccountName"] = name
    # No container gets the token by automount; the adopter's own volume holds it.
    pod["automountServiceAccountToken"] = False
    pod.setdefault("volumes", []).append(_token_volume())
    bench = next(c for c in pod["containers"] if c["name"] == CONTAINER_NAME)
    pod["initContainers"] = [_adopter(bench, plan), *pod.get("initContainers", [])]
    return [account, role, binding, *objs[:-1], workload]


def _token_volume() -> Obj:
    """What the ServiceAccount admission plugin's kube-api-access volume holds (a bound token,
    the cluster's CA bundle, the namespace), as a volume that only the adopter mounts."""
    return {
        "name": TOKEN_VOLUME,
        "projected": {
            "defaultMode": 0o444,
            "sources": [
                # The shortest life the API server grants; the adopter is done in seconds.
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 600}},
                {"configMap": {"name": "kube-root-ca.crt",
                               "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                                            "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            ],
        },
    }  # fmt: skip


def _adopter(bench: Obj, plan: Obj) -> Obj:
    """The init container that adopts (rendering._wrapper.ADOPTER): the benchmark's image and
    index variables, the token volume, no privilege whatever the benchmark's."""
    index = [e for e in bench.get("env", []) if e["name"] in ("JOB_COMPLETION_INDEX", "POD_NAME")]
    small = {"cpu": "100m", "memory": "128Mi"}
    return {
        "name": ADOPTER_NAME,
        "image": bench["image"],
        "imagePullPolicy": bench.get("imagePullPolicy", "IfNotPresent"),
        "command": ["python3", "-c", ADOPTER],
        "env": [*index, {"name": ADOPT_ENV, "value": json.dumps(plan, separators=(",", ":"))}],
        # requests = limits: a Guaranteed pod stays Guaranteed; the pod's own request is the
        # benchmark's, which is larger.
        "resources": {"requests": dict(small), "limits": dict(small)},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "privileged": False,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [{"name": TOKEN_VOLUME, "mountPath": ADOPT_TOKEN_DIR, "readOnly": True}],
    }


__all__ = ["ADOPTER_NAME", "ADOPTION_KINDS", "TOKEN_VOLUME", "plural", "with_adoption"]
