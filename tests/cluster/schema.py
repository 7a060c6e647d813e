"""Strict field validation (`?fieldValidation=Strict`) against the upstream schemas.

kubectl sends fieldValidation=Strict by default and then trusts the server to reject unknown
fields, so a typo such as `spec.completion` would otherwise pass silently here and fail on a real
cluster. The schemas come from the kubernetes-validate package (already a dev dependency); only
unknown-field errors are reported, because patches and apply configurations are partial objects
that need not satisfy `required`. Without the package, validation is skipped.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from tests.cluster.errors import ApiError

SCHEMA_VERSION = "1.34"


@functools.lru_cache(maxsize=64)
def _validator(kind: str, api_version: str) -> Any:
    try:
        import jsonschema
        import kubernetes_validate
        import referencing
    except ImportError:
        return None
    from importlib import resources

    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    base = resources.files(kubernetes_validate) / "kubernetes-json-schema"
    versions = sorted(
        (d.name[1:].split("-")[0] for d in base.iterdir() if d.name.endswith("-local-strict")),
        key=_mm,
    )
    usable = [v for v in versions if _mm(v) <= _mm(SCHEMA_VERSION)]
    if not usable:
        return None
    folder = base / f"v{usable[-1]}-local-strict"
    try:
        schema = json.loads((folder / f"{kind.lower()}-{group}.json").read_text())
        defs = _definitions(str(folder))
    except (FileNotFoundError, OSError):
        return None
    registry = referencing.Registry().with_resources(
        [
            (schema["$id"], referencing.Resource.from_contents(schema)),
            (defs["$id"], referencing.Resource.from_contents(defs)),
        ]
    )
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


@functools.lru_cache(maxsize=2)
def _definitions(folder: str) -> Any:
    from pathlib import Path

    return json.loads((Path(folder) / "_definitions.json").read_text())


def _mm(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split(".")[:2])


def _dotted(path: list[Any]) -> str:
    out = ""
    for el in path:
        out += f"[{el}]" if isinstance(el, int) else (f".{el}" if out else str(el))
    return out


def unknown_fields(obj: dict[str, Any]) -> list[str]:
    """Dotted paths of the fields of `obj` its kind's schema does not declare."""
    validator = _validator(str(obj.get("kind", "")), str(obj.get("apiVersion", "")))
    if validator is None:
        return []
    found = []
    for err in validator.iter_errors(obj):
        for e in [err, *(err.context or [])]:
            if e.validator != "additionalProperties" or not isinstance(e.instance, dict):
                continue
            declared = (e.schema or {}).get("properties") or {}
            for key in e.instance:
                if key not in declared:
                    found.append(_dotted([*e.absolute_path, key]))
    return sorted(set(found))


def check_strict(obj: Any, *, kind: str, api_version: str, apply: bool = False) -> None:
    """Raise 400 BadRequest, worded as kube-apiserver, when `obj` has undeclared fields."""
    if not isinstance(obj, dict):
        return
    body = {
        **obj,
        "kind": obj.get("kind") or kind,
        "apiVersion": obj.get("apiVersion") or api_version,
    }
    refuse_unknown(unknown_fields(body), kind=kind, api_version=api_version, apply=apply)


def refuse_unknown(unknown: list[str], *, kind: str, api_version: str, apply: bool) -> None:
    """400 BadRequest naming the undeclared fields, as kube-apiserver words it."""
    if not unknown:
        return
    if apply:
        message = "\n".join(f".{p}: field not declared in schema" for p in unknown)
    else:
        fields = ", ".join(f'unknown field "{p}"' for p in unknown)
        message = (
            f'{kind} in version "{api_version.split("/")[-1]}" cannot be handled as a {kind}: '
            f"strict decoding error: {fields}"
        )
    raise ApiError(400, "BadRequest", message)
