"""PATCH semantics of the test API server: JSON merge, strategic merge, JSON patch, apply.

Approximations of kube-apiserver, close enough for kubectl and lightkube:
- strategic merge knows the merge keys of the lists our manifests use (containers by name,
  volumeMounts by mountPath, ...) and the `$patch`/`$setElementOrder`/`$retainKeys` directives
  only so far as to not store them;
- server-side apply tracks field ownership per manager as kube-apiserver's FieldsV1 in
  metadata.managedFields, and reports a conflict only when another manager owns a field the
  applied configuration sets to a different value (force takes the field over). Fields a manager
  applied before and leaves out now are removed unless another manager owns them.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any

from tests.cluster import errors
from tests.cluster.errors import ApiError
from tests.cluster.store import now_rfc3339

Obj = dict[str, Any]
Path = tuple[str, ...]

# List fields merged item by item, and the key that names an item (first one present wins).
MERGE_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "volumes": ("name",),
    "env": ("name",),
    "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",),
    "ports": ("containerPort", "port"),
    "imagePullSecrets": ("name",),
    "conditions": ("type",),
    "ownerReferences": ("uid",),
    "hostAliases": ("ip",),
    "topologySpreadConstraints": ("topologyKey",),
    "resourceClaims": ("name",),
}


def _merge_key(field: str, items: list[Any]) -> str | None:
    for key in MERGE_KEYS.get(field, ()):
        if items and all(isinstance(i, dict) and key in i for i in items):
            return key
    return None


# ---- JSON merge patch (RFC 7386) --------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


# ---- strategic merge patch ---------------------------------------------------------------------


def strategic_merge(target: Any, patch: Any, field: str = "") -> Any:
    """Merge `patch` into `target` as kubectl's strategic merge patch does (approximately)."""
    if isinstance(patch, dict):
        directive = patch.get("$patch")
        clean = {k: v for k, v in patch.items() if not k.startswith("$")}
        if directive == "replace":
            return strip_directives(clean)
        if directive == "delete":
            return None
        out = copy.deepcopy(target) if isinstance(target, dict) else {}
        for k, v in clean.items():
            if v is None:
                out.pop(k, None)
            else:
                merged = strategic_merge(out.get(k), v, k)
                if merged is None and isinstance(v, dict) and v.get("$patch") == "delete":
                    out.pop(k, None)
                else:
                    out[k] = merged
        return out
    if isinstance(patch, list):
        key = _merge_key(field, [i for i in patch if not _is_directive(i)] + (target or []))
        if key is None or not isinstance(target, list):
            return [strip_directives(i) for i in patch if not _is_directive(i)]
        out_list = copy.deepcopy(target)
        for item in patch:
            if not isinstance(item, dict) or key not in item:
                continue
            idx = next((n for n, t in enumerate(out_list) if t.get(key) == item[key]), None)
            if item.get("$patch") == "delete":
                if idx is not None:
                    out_list.pop(idx)
            elif idx is None:
                out_list.append(strip_directives(item))
            else:
                out_list[idx] = strategic_merge(out_list[idx], item, field)
        return out_list
    return copy.deepcopy(patch)


def _is_directive(item: Any) -> bool:
    return isinstance(item, dict) and set(item) == {"$patch"}


def strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [strip_directives(i) for i in value]
    return value


# ---- JSON patch (RFC 6902) ---------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise errors.bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str]) -> Any:
    cur = doc
    for p in parts:
        if isinstance(cur, dict):
            if p not in cur:
                raise errors.ApiError(422, "Invalid", f"JSON patch: path element {p!r} not found")
            cur = cur[p]
        elif isinstance(cur, list):
            cur = cur[_index(cur, p, allow_end=False)]
        else:
            raise errors.ApiError(422, "Invalid", f"JSON patch: cannot descend into {p!r}")
    return cur


def _index(lst: list[Any], p: str, *, allow_end: bool) -> int:
    if p == "-" and allow_end:
        return len(lst)
    try:
        i = int(p)
    except ValueError:
        raise errors.ApiError(422, "Invalid", f"JSON patch: bad array index {p!r}") from None
    if i < 0 or i > len(lst) or (i == len(lst) and not allow_end):
        raise errors.ApiError(422, "Invalid", f"JSON patch: array index {i} out of range")
    return i


def json_patch(doc: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise errors.bad_request("JSON patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise errors.bad_request(f"invalid JSON patch operation {op!r}")
        kind, parts = op["op"], _pointer(op["path"])
        if kind in ("add", "replace", "test") and "value" not in op:
            raise errors.bad_request(f"JSON patch {kind} needs a value")
        if kind == "test":
            if _walk(doc, parts) != op["value"]:
                raise errors.ApiError(422, "Invalid", f"JSON patch test failed at {op['path']}")
            continue
        if kind in ("move", "copy"):
            value = copy.deepcopy(_walk(doc, _pointer(op["from"])))
            if kind == "move":
                doc = _remove(doc, _pointer(op["from"]))
            doc = _add(doc, parts, value)
        elif kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op["value"]))
        elif kind == "remove":
            doc = _remove(doc, parts)
        elif kind == "replace":
            _walk(doc, parts)  # must exist
            doc = _add(_remove(doc, parts), parts, copy.deepcopy(op["value"]))
        else:
            raise errors.bad_request(f"unknown JSON patch op {kind!r}")
    return doc


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise errors.ApiError(422, "Invalid", f"JSON patch: cannot add at {last!r}")
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    if not parts:
        return None
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise errors.ApiError(422, "Invalid", f"JSON patch: nothing to remove at {last!r}")
        del parent[last]
    elif isinstance(parent, list):
        parent.pop(_index(parent, last, allow_end=False))
    return doc


# ---- server-side apply -------------------------------------------------------------------------


def _item_key(key: str, item: Obj) -> str:
    return "k:" + json.dumps({key: item[key]}, separators=(",", ":"))


def leaves(obj: Any, prefix: Path = ()) -> dict[Path, Any]:
    """Owned-field paths of a configuration and their values (lists without a merge key are
    atomic leaves; keyed list items are `k:{"name":"x"}` path elements, as in FieldsV1)."""
    out: dict[Path, Any] = {}
    if not isinstance(obj, dict):
        return out
    for k, v in obj.items():
        p = (*prefix, f"f:{k}")
        if isinstance(v, dict) and v:
            out.update(leaves(v, p))
        elif isinstance(v, list) and (key := _merge_key(k, v)) is not None:
            for item in v:
                out.update(leaves(item, (*p, _item_key(key, item))))
        else:
            out[p] = v
    return out


def _config_leaves(config: Obj) -> dict[Path, Any]:
    skip = {("f:apiVersion",), ("f:kind",), ("f:metadata", "f:name"), ("f:metadata", "f:namespace")}
    return {
        p: v
        for p, v in leaves(config).items()
        if p not in skip
        and p[0] != "f:status"
        and p[:2] not in (("f:metadata", "f:managedFields"), ("f:metadata", "f:resourceVersion"))
    }


def _get(obj: Any, path: Path) -> tuple[bool, Any]:
    cur = obj
    for el in path:
        if el.startswith("f:") and isinstance(cur, dict):
            if el[2:] not in cur:
                return False, None
            cur = cur[el[2:]]
        elif el.startswith("k:") and isinstance(cur, list):
            ((key, value),) = json.loads(el[2:]).items()
            found = [i for i in cur if isinstance(i, dict) and i.get(key) == value]
            if not found:
                return False, None
            cur = found[0]
        else:
            return False, None
    return True, cur


def _delete(obj: Any, path: Path) -> None:
    """Remove one owned field; removing an item's key field removes the item."""
    parents: list[Any] = []
    cur = obj
    for el in path[:-1]:
        parents.append(cur)
        ok, cur = _get(cur, (el,))
        if not ok:
            return
    last = path[-1]
    if isinstance(cur, dict) and last.startswith("f:"):
        cur.pop(last[2:], None)
        if len(path) >= 2 and path[-2].startswith("k:"):
            ((key, value),) = json.loads(path[-2][2:]).items()
            if last[2:] == key and parents and isinstance(parents[-1], list):
                parents[-1][:] = [i for i in parents[-1] if i is not cur]
    elif isinstance(cur, list) and last.startswith("k:"):
        ((key, value),) = json.loads(last[2:]).items()
        cur[:] = [i for i in cur if not (isinstance(i, dict) and i.get(key) == value)]


def fields_v1(paths: Iterable[Path]) -> Obj:
    """Encode paths as kube-apiserver's FieldsV1 tree (`{"f:spec": {"f:replicas": {}}}`)."""
    root: Obj = {}
    for p in paths:
        cur = root
        for el in p:
            cur = cur.setdefault(el, {})
    return root


def paths_of(tree: Obj, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    for k, v in tree.items():
        if k == ".":
            continue
        p = (*prefix, k)
        if isinstance(v, dict) and any(key != "." for key in v):
            out |= paths_of(v, p)
        else:
            out.add(p)
    return out


def _managers(obj: Obj | None) -> list[Obj]:
    if not obj:
        return []
    return list(obj.get("metadata", {}).get("managedFields") or [])


def server_side_apply(
    current: Obj | None,
    config: Obj,
    *,
    manager: str,
    force: bool,
    api_version: str,
) -> Obj:
    """The object after `manager` applies `config` over `current` (None: creation).

    Raises ApiError(409, Conflict) naming each conflicting manager and field, as kubectl shows.
    """
    if not manager:
        raise errors.bad_request("PATCH with application/apply-patch+yaml requires fieldManager")
    applied = _config_leaves(config)
    entries = _managers(current)
    owned = {
        (e.get("manager", ""), e.get("operation", "")): paths_of(e.get("fieldsV1") or {})
        for e in entries
    }
    conflicts: list[tuple[str, Path]] = []
    for (other, op), paths in owned.items():
        if other == manager and op == "Apply":
            continue
        for p in paths & set(applied):
            present, value = _get(current, p)
            if present and value != applied[p]:
                conflicts.append((other, p))
    if conflicts and not force:
        raise conflict_error(conflicts, api_version)
    for other, p in conflicts:
        for (mgr, op), paths in owned.items():
            if mgr == other and not (mgr == manager and op == "Apply"):
                paths.discard(p)
    new = copy.deepcopy(current) if current else {}
    mine = owned.get((manager, "Apply"), set())
    others = set().union(*(ps for k, ps in owned.items() if k != (manager, "Apply")))
    for p in sorted(mine - set(applied) - others, key=len, reverse=True):
        _delete(new, p)
    clean = {k: v for k, v in config.items() if k != "status"}
    clean_meta = {
        k: v
        for k, v in (clean.get("metadata") or {}).items()
        if k not in ("managedFields", "resourceVersion")
    }
    clean["metadata"] = clean_meta
    new = strategic_merge(new, clean)
    owned[(manager, "Apply")] = set(applied)
    stamp = now_rfc3339()
    previous = {(e.get("manager"), e.get("operation")): e for e in entries}
    managed = []
    for (mgr, op), paths in owned.items():
        if not paths:
            continue
        entry = dict(previous.get((mgr, op)) or {})
        entry.update(
            manager=mgr,
            operation=op,
            apiVersion=api_version,
            fieldsType="FieldsV1",
            fieldsV1=fields_v1(paths),
        )
        if mgr == manager and op == "Apply":
            entry["time"] = stamp
        managed.append(entry)
    new.setdefault("metadata", {})["managedFields"] = managed
    return new  # type: ignore[no-any-return]


def conflict_error(conflicts: list[tuple[str, Path]], api_version: str) -> ApiError:
    def dotted(p: Path) -> str:
        return "".join("." + el[2:] if el.startswith("f:") else f"[{el[2:]}]" for el in p)

    lines = [f'conflict with "{mgr}" using {api_version}: {dotted(p)}' for mgr, p in conflicts]
    n = len(conflicts)
    if n == 1:
        message = f"Apply failed with 1 conflict: {lines[0]}"
    else:
        message = f"Apply failed with {n} conflicts: " + "\n".join(lines)
    causes = [
        {"reason": "FieldManagerConflict", "message": f'conflict with "{mgr}"', "field": dotted(p)}
        for mgr, p in conflicts
    ]
    return ApiError(409, "Conflict", message, details={"causes": causes})


def record_update(before: Obj | None, after: Obj, *, manager: str, api_version: str) -> None:
    """Account a non-apply write: fields it removed leave every manager; fields it changed move
    to `manager` (the request's fieldManager, when it gave one), as kube-apiserver does."""
    old = _config_leaves(before or {})
    new = _config_leaves(after)
    removed = set(old) - set(new)
    changed = {p for p, v in new.items() if old.get(p, object()) != v} if manager else set()
    entries = _managers(after)
    if not entries and not changed:
        return
    if not removed and not changed:
        return
    for e in entries:
        drop = (
            removed
            if (e.get("manager"), e.get("operation")) == (manager, "Update")
            else (removed | changed)
        )
        e["fieldsV1"] = fields_v1(paths_of(e.get("fieldsV1") or {}) - drop)
    entries = [e for e in entries if e.get("fieldsV1")]
    if changed:
        mine = next(
            (e for e in entries if (e.get("manager"), e.get("operation")) == (manager, "Update")),
            None,
        )
        if mine is None:
            mine = {"manager": manager, "operation": "Update", "fieldsType": "FieldsV1"}
            entries.append(mine)
        mine["apiVersion"] = api_version
        mine["time"] = now_rfc3339()
        mine["fieldsV1"] = fields_v1(paths_of(mine.get("fieldsV1") or {}) | changed)
    meta = after.setdefault("metadata", {})
    if entries:
        meta["managedFields"] = entries
    else:
        meta.pop("managedFields", None)
