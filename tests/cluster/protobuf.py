"""Just enough of Kubernetes' protobuf encoding to accept `kubectl create namespace|configmap|...`.

kubectl's typed clients (the imperative `create` subcommands) send protobuf bodies and do not fall
back to JSON on 415. Decoding every API type would need the upstream .proto files; the few small
kinds below cover what people type by hand. Anything else gets a 415 that says to use
`kubectl apply`, which sends JSON.
"""

from __future__ import annotations

import base64
from typing import Any

from tests.cluster.errors import ApiError

MAGIC = b"k8s\x00"

# Field tables: number -> (JSON name, how to decode). Kinds: "str", "bytes", "int", "bool",
# "map" (string->string), "bmap" (string->bytes as base64), "strs" (repeated string), or a nested
# table (message), "msgs:<table>" for repeated messages.
_Table = dict[int, tuple[str, Any]]

_OWNER_REF: _Table = {
    1: ("kind", "str"),
    3: ("name", "str"),
    4: ("uid", "str"),
    5: ("apiVersion", "str"),
    6: ("controller", "bool"),
    7: ("blockOwnerDeletion", "bool"),
}
_META: _Table = {
    1: ("name", "str"),
    2: ("generateName", "str"),
    3: ("namespace", "str"),
    6: ("resourceVersion", "str"),
    11: ("labels", "map"),
    12: ("annotations", "map"),
    13: ("ownerReferences", ("repeated", _OWNER_REF)),
    14: ("finalizers", "strs"),
}
_OBJECT_REF: _Table = {1: ("kind", "str"), 2: ("namespace", "str"), 3: ("name", "str")}
_LOCAL_REF: _Table = {1: ("name", "str")}
TYPES: dict[str, _Table] = {
    "Namespace": {1: ("metadata", _META), 2: ("spec", {1: ("finalizers", "strs")})},
    "ConfigMap": {
        1: ("metadata", _META),
        2: ("data", "map"),
        3: ("binaryData", "bmap"),
        4: ("immutable", "bool"),
    },
    "Secret": {
        1: ("metadata", _META),
        2: ("data", "bmap"),
        3: ("type", "str"),
        4: ("stringData", "map"),
        5: ("immutable", "bool"),
    },
    "ServiceAccount": {
        1: ("metadata", _META),
        2: ("secrets", ("repeated", _OBJECT_REF)),
        3: ("imagePullSecrets", ("repeated", _LOCAL_REF)),
        4: ("automountServiceAccountToken", "bool"),
    },
    # `kubectl auth can-i` (field numbers read off the bodies kubectl 1.32 sends).
    "SelfSubjectAccessReview": {
        1: ("metadata", _META),
        2: (
            "spec",
            {
                1: (
                    "resourceAttributes",
                    {
                        1: ("namespace", "str"),
                        2: ("verb", "str"),
                        3: ("group", "str"),
                        4: ("version", "str"),
                        5: ("resource", "str"),
                        6: ("subresource", "str"),
                        7: ("name", "str"),
                    },
                ),
                2: ("nonResourceAttributes", {1: ("path", "str"), 2: ("verb", "str")}),
            },
        ),
    },
}


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, raw value) for each field of one message."""
    out = []
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            n, i = _varint(buf, i)
            value, i = buf[i : i + n], i + n
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.append((num, wire, value))
    return out


def _message(buf: bytes, table: _Table) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for num, _wire, raw in _fields(buf):
        if num not in table:
            continue
        name, kind = table[num]
        # gogo-protobuf writes empty strings and false bools; JSON would omit them.
        if kind == "str":
            if raw:
                obj[name] = raw.decode()
        elif kind == "bool":
            if raw:
                obj[name] = True
        elif kind == "int":
            obj[name] = raw
        elif kind == "strs":
            obj.setdefault(name, []).append(raw.decode())
        elif kind in ("map", "bmap"):
            entry = {n: v for n, _w, v in _fields(raw)}
            key = entry.get(1, b"").decode()
            value = entry.get(2, b"")
            obj.setdefault(name, {})[key] = (
                value.decode() if kind == "map" else base64.b64encode(value).decode()
            )
        elif isinstance(kind, tuple):
            obj.setdefault(name, []).append(_message(raw, kind[1]))
        else:
            obj[name] = _message(raw, kind)
    return obj


def decode(body: bytes) -> dict[str, Any]:
    """A protobuf-encoded object (kubectl create) as the JSON-shaped dict; 415 if unknown."""
    try:
        if not body.startswith(MAGIC):
            raise ValueError("missing the k8s protobuf prefix")
        unknown = {n: v for n, _w, v in _fields(body[len(MAGIC) :])}
        type_meta = {n: v.decode() for n, _w, v in _fields(unknown.get(1, b""))}
        api_version, kind = type_meta.get(1, ""), type_meta.get(2, "")
        table = TYPES.get(kind)
        if table is None:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"this test API server decodes protobuf only for {', '.join(sorted(TYPES))}; "
                f"send {kind or 'the object'} as JSON (kubectl apply -f) instead",
            )
        obj = _message(unknown.get(2, b""), table)
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, "BadRequest", f"the protobuf body could not be decoded: {e}") from None
    return {"apiVersion": api_version, "kind": kind, **obj}
