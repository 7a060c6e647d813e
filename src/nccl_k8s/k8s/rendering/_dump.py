"""The objects of a run as text: the YAML `nccl-k8s render` prints (multi-line strings as
literal blocks, a comment naming the Pod Security level the pods need) or kubectl's JSON List."""

from __future__ import annotations

import json
import textwrap
from typing import Literal

import yaml

from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.rendering._names import PSA_ANNOTATION


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the soak script) as literal blocks, so the YAML reads like the script."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


_PSA_WHY = {
    "restricted": "the strictest, so every namespace admits them",
    "baseline": "a namespace enforcing restricted refuses them",
    "privileged": "only: host namespaces, a hostPort or capabilities beyond baseline's; a "
    "namespace enforcing baseline or restricted refuses them",
}
_PSA_COMMENT = (
    'Pod Security Admission (pod-security.kubernetes.io/enforce): these pods pass the "{level}" '
    "level ({why}). docs/deploy.md gives the level of each --security profile."
)


def dump(objs: list[Obj], fmt: Literal["yaml", "json"] = "yaml") -> str:
    """Objects as a multi-document YAML stream, or as a JSON `List` (kubectl's -o json shape).
    YAML starts with a comment naming the Pod Security Admission level the pods need (JSON
    carries it as the workload's PSA_ANNOTATION)."""
    if fmt == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}, indent=2) + "\n"
    text = yaml.dump_all(objs, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
    levels = [
        (o["metadata"].get("annotations") or {}).get(PSA_ANNOTATION)
        for o in objs
        if o.get("kind") in ("Job", "StatefulSet")
    ]
    level = next((lv for lv in levels if lv in _PSA_WHY), None)
    if level is None:
        return text
    comment = _PSA_COMMENT.format(level=level, why=_PSA_WHY[level])
    return (
        textwrap.fill(comment, width=96, initial_indent="# ", subsequent_indent="# ") + "\n" + text
    )


__all__ = ["dump"]
