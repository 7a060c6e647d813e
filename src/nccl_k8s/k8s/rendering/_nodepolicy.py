"""`nccl-k8s rbac --label-nodes`'s admission policy: RBAC can grant `nodes patch` only whole, so
a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA since Kubernetes 1.30) and its
binding deny the granted subject every node update that changes anything but our own labels
(`nccl-k8s/node-check`, the verdict, `nccl-k8s/checked-at`, its time, `nccl-k8s/busbw`, the
node's measured bus bandwidth, and `nccl-k8s/check-run`, the check's run id) and our own taint
(`nccl-k8s/bad-node`), what `nodes check --label/--taint` writes. Other users' node updates are not matched.

Pure: the objects are data; the CEL expressions are built here, with the subject's name as an
escaped CEL string literal. A cluster older than 1.30 lacks the v1 kind: apply fails there,
and the ClusterRole alone grants every label and taint.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING

from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.rendering._names import APP_NAME
from nccl_k8s.spec import LABEL_NAME

if TYPE_CHECKING:
    from nccl_k8s.k8s.rendering._rbac import Subject

ADMISSION = "admissionregistration.k8s.io/v1"
#: The label and the taint `nodes check --label/--taint` writes (k8s.nodes._labels names them
#: LABEL_KEY and TAINT_KEY: these very strings, so the policy and the writer cannot drift).
NODE_LABEL_KEY = "nccl-k8s/node-check"
#: Beside the verdict: when the check that gave it ended, in unix seconds (a label value may
#: hold only [A-Za-z0-9._-], so no ISO time), read back by `--skip-checked-within`.
NODE_CHECKED_AT_KEY = "nccl-k8s/checked-at"
#: Beside the verdict: the node's measured bus bandwidth in GB/s, three significant digits
#: (`42.1`: the median of its tests, nodes._badnodes' score); absent when none measured one.
NODE_BUSBW_KEY = "nccl-k8s/busbw"
#: Beside the verdict: the run id of the check that gave it (its pair tests are `<id>-t<n>`;
#: its row in `nodes history`).
NODE_RUN_KEY = "nccl-k8s/check-run"
#: Every node label key the tool writes: the admission policy allows these and no other.
NODE_LABEL_KEYS = (NODE_LABEL_KEY, NODE_CHECKED_AT_KEY, NODE_BUSBW_KEY, NODE_RUN_KEY)
NODE_TAINT_KEY = "nccl-k8s/bad-node"
#: Node fields the subject may not change, beside labels and taints: (CEL path, what it is).
_KEPT = (
    ("metadata", "annotations"),
    ("metadata", "finalizers"),
    ("metadata", "ownerReferences"),
    ("spec", "unschedulable"),
    ("spec", "podCIDR"),
    ("spec", "podCIDRs"),
    ("spec", "providerID"),
    ("spec", "configSource"),
    ("spec", "externalID"),
)


def cel_string(text: str) -> str:
    """`text` as a single-quoted CEL string literal: quotes, backslashes and every character
    outside printable ASCII escaped, so no user name can end the literal."""
    out = []
    for ch in text:
        if ch in "\\'":
            out.append("\\" + ch)
        elif " " <= ch <= "~":
            out.append(ch)
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return "'" + "".join(out) + "'"


def _who(subject: Subject) -> str:
    """The CEL condition true for requests of `subject` alone."""
    if subject.kind == "Group":
        return f"{cel_string(subject.name)} in request.userInfo.groups"
    name = subject.name
    if subject.kind == "ServiceAccount":
        name = f"system:serviceaccount:{subject.namespace}:{subject.name}"
    return f"request.userInfo.username == {cel_string(name)}"


def _same(part: str, field: str) -> str:
    new, old = f"object.{part}", f"oldObject.{part}"
    return (
        f"has({new}.{field}) == has({old}.{field}) && "
        f"(!has({new}.{field}) || {new}.{field} == {old}.{field})"
    )


def policy_name(subject: Subject) -> str:
    """A DNS-subdomain name per subject: its slug folded to [a-z0-9-], plus a digest of the
    exact subject so that two subjects that fold alike (`A/b`, `a%b`) do not share a policy."""
    folded = re.sub(r"[^a-z0-9]+", "-", subject.slug.lower()).strip("-")[:150]
    digest = hashlib.sha256(repr(subject).encode()).hexdigest()[:8]
    return f"{APP_NAME}-label-nodes-{folded}-{digest}"


def node_policy_objects(subject: Subject) -> list[Obj]:
    """The ValidatingAdmissionPolicy and its binding for `subject`'s node updates."""
    label = "[" + ", ".join(cel_string(k) for k in NODE_LABEL_KEYS) + "]"
    taint = cel_string(NODE_TAINT_KEY)
    name = policy_name(subject)
    variables = [
        {"name": "newLabels", "expression": "has(object.metadata.labels) ? object.metadata.labels : {}"},
        {"name": "oldLabels", "expression": "has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}"},
        {"name": "newTaints", "expression": f"has(object.spec.taints) ? object.spec.taints.filter(t, t.key != {taint}) : []"},
        {"name": "oldTaints", "expression": f"has(oldObject.spec.taints) ? oldObject.spec.taints.filter(t, t.key != {taint}) : []"},
    ]  # fmt: skip
    validations = [
        {"expression": f"variables.newLabels.all(k, k in {label} || (k in variables.oldLabels "
                       "&& variables.oldLabels[k] == variables.newLabels[k])) && "
                       f"variables.oldLabels.all(k, k in {label} || k in variables.newLabels)",
         "message": f"nccl-k8s may change only the node labels {', '.join(NODE_LABEL_KEYS)}",
         "reason": "Forbidden"},
        {"expression": "variables.newTaints == variables.oldTaints",
         "message": f"nccl-k8s may change only the node taint {NODE_TAINT_KEY}",
         "reason": "Forbidden"},
        *({"expression": _same(part, field),
           "message": f"nccl-k8s may not change the node's {part}.{field}",
           "reason": "Forbidden"} for part, field in _KEPT),
    ]  # fmt: skip
    meta = {"name": name, "labels": {LABEL_NAME: APP_NAME}}
    return [
        {"apiVersion": ADMISSION, "kind": "ValidatingAdmissionPolicy", "metadata": meta,
         "spec": {
             "failurePolicy": "Fail",
             "matchConstraints": {"resourceRules": [
                 {"apiGroups": [""], "apiVersions": ["*"], "operations": ["UPDATE"],
                  "resources": ["nodes"]}]},
             "matchConditions": [{"name": "granted-subject", "expression": _who(subject)}],
             "variables": variables,
             "validations": validations}},
        {"apiVersion": ADMISSION, "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {**meta, "name": name},
         "spec": {"policyName": name, "validationActions": ["Deny"]}},
    ]  # fmt: skip


__all__ = [
    "NODE_BUSBW_KEY",
    "NODE_CHECKED_AT_KEY",
    "NODE_LABEL_KEY",
    "NODE_LABEL_KEYS",
    "NODE_RUN_KEY",
    "NODE_TAINT_KEY",
    "cel_string",
    "node_policy_objects",
]
