"""Lists in pages, and lists the server makes small: tables and metadata alone.

A list of whole pods is most of the cost of `status` at scale: at 4,096 pods it is ~10 MB of
JSON the API server encodes and the client decodes (a quarter of a second each way on one
core), though the summary needs a few fields of each pod. kube-apiserver can send less:

- a server-side table (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`, what `kubectl
  get` asks for): per object the printer's cells (a pod's Status, Restarts, Node ...) and its
  metadata (`includeObject=Metadata`, the default), ~10x less to decode;
- metadata alone (`as=PartialObjectMetadataList`, client-go's metadata client): labels,
  annotations, timestamps, owners and managedFields, no spec or status.

Both ask with `application/json` as the fallback, as client-go does: a server (or proxy) that
does not convert answers with whole objects, which the caller then reads as such (`Table.objects`,
or items that are whole objects, a superset of their metadata).

Every list goes in pages of `PAGE_SIZE` (`limit`/`continue`, kubectl's chunk size), so that
neither side holds one response of every object of a large run. A continue token the server
has compacted away (410 Expired) restarts the list whole, once, without a limit (client-go's
pager does the same: `FullListIfExpired`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nccl_k8s.errors import Expired
from nccl_k8s.k8s.api._types import Kind, Obj

if TYPE_CHECKING:
    from nccl_k8s.k8s.api._client import KubeClient

#: Objects per page: kubectl's default --chunk-size, and client-go's pager's.
PAGE_SIZE = 500
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
METADATA = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"


@dataclasses.dataclass(frozen=True)
class Row:
    """One object of a server-side table: its metadata and its cells by column name."""

    metadata: Obj
    cells: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Table:
    """A table list: its rows; or, from a server that answered with whole objects instead,
    those (`rows` then empty)."""

    rows: list[Row]
    objects: list[Obj]
    resource_version: str


async def pages(
    kc: KubeClient,
    kind: Kind,
    params: dict[str, Any],
    *,
    namespace: str | None,
    api_version: str | None = None,
    accept: str | None = None,
    paged: bool = True,
) -> list[Obj]:
    """Every page's body of one list, in order: pages of PAGE_SIZE, or one answer."""
    params = {**params, "limit": PAGE_SIZE if paged else None}
    bodies: list[Obj] = []
    while True:
        try:
            body = await kc.list_page(
                kind, params, namespace=namespace, api_version=api_version, accept=accept
            )
        except Expired:
            if not params.get("continue"):
                raise
            # The snapshot the token named is gone: the whole list again, in one answer.
            return await pages(
                kc, kind, {**params, "continue": None}, namespace=namespace,
                api_version=api_version, accept=accept, paged=False,
            )  # fmt: skip
        bodies.append(body)
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return bodies
        params["continue"] = token


def _params(label_selector: str | None, field_selector: str | None) -> dict[str, Any]:
    return {"labelSelector": label_selector or None, "fieldSelector": field_selector or None}


async def list_table(
    kc: KubeClient,
    kind: Kind,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
) -> Table:
    """The server-side table of the matching objects (selectors in kubectl's syntax)."""
    ns = kc.namespace_for(kind, namespace)
    bodies = await pages(
        kc, kind, _params(label_selector, field_selector), namespace=ns, accept=TABLE
    )
    rows: list[Row] = []
    objects: list[Obj] = []
    for body in bodies:
        if body.get("kind") != "Table":
            for item in body.get("items") or []:
                item.setdefault("kind", kind)
                objects.append(item)
            continue
        names = [str(c.get("name")) for c in body.get("columnDefinitions") or []]
        for row in body.get("rows") or []:
            meta = (row.get("object") or {}).get("metadata") or {}
            rows.append(Row(meta, dict(zip(names, row.get("cells") or [], strict=False))))
    rv = str((bodies[-1].get("metadata") or {}).get("resourceVersion") or "")
    return Table(rows, objects, rv)


async def list_metadata(
    kc: KubeClient,
    kind: Kind,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
) -> tuple[list[Obj], str]:
    """(the matching objects with their metadata alone, the list's resourceVersion); each has
    `kind` and `metadata`, and from a server that does not convert, everything else too."""
    ns = kc.namespace_for(kind, namespace)
    bodies = await pages(kc, kind, _params(label_selector, None), namespace=ns, accept=METADATA)
    items: list[Obj] = []
    for body in bodies:
        for item in body.get("items") or []:
            if item.get("kind") == "PartialObjectMetadata":  # its own kind, not the object's
                item.pop("apiVersion", None)
            item["kind"] = kind
            items.append(item)
    rv = str((bodies[-1].get("metadata") or {}).get("resourceVersion") or "")
    return items, rv


__all__ = ["METADATA", "PAGE_SIZE", "TABLE", "Row", "Table", "list_metadata", "list_table", "pages"]
