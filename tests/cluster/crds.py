"""CustomResourceDefinitions: a CRD object makes its resource servable, as kube-apiserver does.

Creating an `apiextensions.k8s.io/v1` CustomResourceDefinition registers its storage version in
the store's resource table, so the API server routes `/apis/<group>/<version>/...` to it and lists
it in discovery (kubectl and lightkube's generic resources then work unmodified); deleting the CRD
deletes its objects and unregisters it. Custom objects are treated as kube-apiserver treats them
with a structural schema (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/
custom-resource-definitions/#specifying-a-structural-schema): fields the schema does not declare
are pruned (or, with fieldValidation=Strict, refused), `default`s are applied, and types,
`required`, `enum`, `minimum`/`maximum` and `pattern` are validated, a failure being a 422 with
kube-apiserver's wording (`spec.minMember: Invalid value: "string": spec.minMember in body must
be of type integer: "string"`).

Simplifications: one served version per CRD (the storage one; no conversion), no CEL rules, no
`x-kubernetes-list-type` merge semantics, no status/scale subresource beyond `/status`.

The CRDs tests install are the projects' own, as they publish them (tests/data/crds, each with
its repository, path and commit in SOURCES.md there): `published()` reads them, so a schema here
is never one we wrote.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from tests.cluster import errors

Obj = dict[str, Any]

#: The fields every object has whatever its schema says (ObjectMeta is never pruned).
_ROOT_FIELDS = ("apiVersion", "kind", "metadata")
#: The upstream CRDs, verbatim.
PUBLISHED = Path(__file__).resolve().parent.parent / "data" / "crds"


def published(file: str | None = None) -> list[Obj]:
    """The CRDs in PUBLISHED (all of them, or those of one file), as their projects ship them."""
    paths = [PUBLISHED / file] if file else sorted(PUBLISHED.glob("*.yaml"))
    return [doc for p in paths for doc in yaml.safe_load_all(p.read_text()) if doc]


def install_published(store: Any) -> None:
    """Create every published CRD in `store`, as `kubectl apply -f tests/data/crds` would."""
    for crd in published():
        store.create("customresourcedefinitions", crd)


def storage_schema(crd: Obj) -> Obj:
    """The openAPIV3Schema of the CRD's storage version (the one this server serves)."""
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    return version["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def resource_info(crd: Obj) -> Any:
    """The ResourceInfo serving `crd`'s storage version; 422 when the CRD is malformed."""
    from tests.cluster.store import ResourceInfo

    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group, plural, kind = (
        str(x or "") for x in (spec.get("group"), names.get("plural"), names.get("kind"))
    )
    name = (crd.get("metadata") or {}).get("name", "")
    causes: list[tuple[str, str]] = []
    if not group:
        causes.append(("spec.group", "Required value"))
    if not plural:
        causes.append(("spec.names.plural", "Required value"))
    if not kind:
        causes.append(("spec.names.kind", "Required value"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(
            ("spec.scope", 'Unsupported value: supported values: "Cluster", "Namespaced"')
        )
    storage = [v for v in spec.get("versions") or [] if v.get("storage")]
    if len(storage) != 1:
        causes.append(
            (
                "spec.versions",
                "Invalid value: must have exactly one version marked as storage version",
            )
        )
    if group and plural and name != f"{plural}.{group}":
        causes.append(
            ("metadata.name", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group')
        )
    if causes:
        raise errors.invalid("CustomResourceDefinition", name, causes, "apiextensions.k8s.io")
    version = storage[0]
    schema = ((version.get("schema") or {}).get("openAPIV3Schema")) or None
    subresources = ("status",) if "status" in (version.get("subresources") or {}) else ()
    return ResourceInfo(
        plural,
        kind,
        group,
        version["name"],
        spec["scope"] == "Namespaced",
        tuple(names.get("shortNames") or ()),
        subresources,
        storage_key=f"{plural}.{group}",
        schema=schema,
    )  # fmt: skip


def established(crd: Obj) -> None:
    """The status kube-apiserver gives an accepted CRD (what `kubectl wait` looks for)."""
    from tests.cluster.store import now_rfc3339

    now = now_rfc3339()
    names = (crd.get("spec") or {}).get("names") or {}
    crd["status"] = {
        "acceptedNames": dict(names),
        "storedVersions": [v["name"] for v in crd["spec"]["versions"] if v.get("storage")],
        "conditions": [
            {"type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": now}
            for t, r, m in (
                ("NamesAccepted", "NoConflicts", "no conflicts found"),
                ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
            )
        ],
    }


# ---- structural schemas ------------------------------------------------------------------------


def _dotted(path: list[str]) -> str:
    return ".".join(path)


def unknown_fields(obj: Obj, schema: Obj) -> list[str]:
    """Dotted paths of the fields of `obj` that `schema` does not declare."""
    found: list[str] = []
    _walk(obj, schema, [], found, prune=False, root=True)
    return sorted(found)


def prune_and_default(obj: Obj, schema: Obj) -> None:
    """Drop undeclared fields and fill `default`s in place, as kube-apiserver stores the object."""
    _walk(obj, schema, [], [], prune=True, root=True)


def _walk(
    value: Any, schema: Obj, path: list[str], found: list[str], *, prune: bool, root: bool = False
) -> None:
    if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get(
        "x-kubernetes-int-or-string"
    ):
        return
    if isinstance(value, dict) and schema.get("type", "object") == "object":
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key in list(value):
            if root and key in _ROOT_FIELDS and key not in (props or {}):
                continue
            if root and key == "metadata":
                continue
            sub = (props or {}).get(key)
            if sub is None and isinstance(extra, dict):
                sub = extra
            if sub is None and props is None and extra is None:
                continue  # `type: object` without properties: free-form, as for metadata
            if sub is None:
                if prune:
                    del value[key]
                else:
                    found.append(_dotted([*path, key]))
                continue
            _walk(value[key], sub, [*path, key], found, prune=prune)
        if prune:
            for key, sub in (props or {}).items():
                if key not in value and "default" in sub:
                    value[key] = sub["default"]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _walk(
                item,
                schema["items"],
                [*path[:-1], f"{path[-1]}[{i}]"] if path else [f"[{i}]"],
                found,
                prune=prune,
            )


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    names: dict[type, str] = {dict: "object", list: "array", str: "string"}
    return names.get(type(value), "null")


def schema_causes(value: Any, schema: Obj, path: str = "") -> list[tuple[str, str]]:
    """(field, message) for every way `value` breaks `schema`, worded as kube-apiserver."""
    where = path or "<root>"
    if value is None:
        return (
            []
            if schema.get("nullable")
            else [
                (
                    where,
                    f'Invalid value: "null": {where} in body must be of type {schema.get("type", "object")}: "null"',
                )
            ]
        )
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            return [
                (
                    where,
                    f'Invalid value: "{_type_name(value)}": {where} in body must be of type int-or-string',
                )
            ]
        if isinstance(value, str):
            patterns = [schema.get("pattern")] + [
                a.get("pattern") for a in schema.get("anyOf") or []
            ]
            for pattern in filter(None, patterns):
                if not re.search(pattern, value):
                    return [
                        (
                            where,
                            f"Invalid value: \"{value}\": {where} in body should match '{pattern}'",
                        )
                    ]
        return []
    kind = schema.get("type")
    if kind in _TYPES:
        ok = isinstance(value, _TYPES[kind]) and not (
            kind in ("integer", "number") and isinstance(value, bool)
        )
        if not ok:
            return [
                (
                    where,
                    f'Invalid value: "{_type_name(value)}": {where} in body must be of type {kind}: "{_type_name(value)}"',
                )
            ]
    causes: list[tuple[str, str]] = []
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(f'"{v}"' for v in schema["enum"])
        causes.append((where, f'Unsupported value: "{value}": supported values: {allowed}'))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            causes.append(
                (
                    where,
                    f"Invalid value: {value}: {where} in body should be greater than or equal to {schema['minimum']}",
                )
            )
        if "maximum" in schema and value > schema["maximum"]:
            causes.append(
                (
                    where,
                    f"Invalid value: {value}: {where} in body should be less than or equal to {schema['maximum']}",
                )
            )
        if schema.get("format") == "int32" and not -(2**31) <= value < 2**31:
            causes.append((where, f"Invalid value: {value}: {where} in body must be an int32"))
    if isinstance(value, str) and schema.get("pattern") and not re.search(schema["pattern"], value):
        causes.append(
            (
                where,
                f"Invalid value: \"{value}\": {where} in body should match '{schema['pattern']}'",
            )
        )
    if isinstance(value, dict):
        for req in schema.get("required") or []:
            if req not in value:
                causes.append((f"{path}.{req}" if path else req, "Required value"))
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, sub_value in value.items():
            if not path and key == "metadata":
                continue
            sub = props.get(key) or (extra if isinstance(extra, dict) else None)
            if sub is not None:
                causes += schema_causes(sub_value, sub, f"{path}.{key}" if path else key)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            causes += schema_causes(item, schema["items"], f"{where}[{i}]")
    return causes


__all__ = ["established", "prune_and_default", "resource_info", "schema_causes", "unknown_fields"]
