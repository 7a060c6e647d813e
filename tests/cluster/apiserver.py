"""HTTP front of the test cluster: the Kubernetes REST API over the Store, for unmodified kubectl.

Standard library only (ThreadingHTTPServer, HTTP/1.1, chunked streams), so the test cluster adds no
dependency. It serves legacy discovery (kubectl falls back to it when the aggregated form is not
offered), the resource paths of the store's resource table (built-in kinds and every
CustomResourceDefinition created, see crds.py), and answers 404 on /openapi/* so that kubectl
with --validate=false does not need schemas. Everything with a state lives in the Store; this
module translates HTTP to store calls and ApiError to `Status`.

Watches are event-driven (they block on the store's Watch); only `logs -f` polls, because the
kubelet's log file is the source and a file has no change notification in the standard library.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import select
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol, cast
from urllib.parse import parse_qs, urlsplit

import yaml
from tests.cluster import crds, errors, patch, protobuf, rbac, schema, tables
from tests.cluster.errors import ApiError
from tests.cluster.faults import Faults
from tests.cluster.store import ResourceInfo, Store, clone, now_rfc3339

log = logging.getLogger(__name__)

Obj = dict[str, Any]

KUBE_VERSION = {
    "major": "1",
    "minor": "34",
    "gitVersion": "v1.34.0-nccl-k8s-test",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

LOG_POLL_S = 0.1  # how often `logs -f` looks for new bytes in the kubelet's file
IDLE_CHECK_S = 1.0  # how often an idle watch checks whether its client hung up


class LogSource(Protocol):
    """What the API server needs from the kubelet to serve pods/log (INTERFACE.md)."""

    def log_path(
        self, namespace: str, pod: str, container: str, *, previous: bool = False
    ) -> Path | None: ...

    def is_running(self, namespace: str, pod: str, container: str) -> bool: ...


class _Route:
    """A parsed resource URL: /api/v1/namespaces/{ns}/{plural}/{name}/{sub}."""

    def __init__(
        self, ri: ResourceInfo, namespace: str | None, name: str | None, sub: str | None
    ) -> None:
        self.ri = ri
        self.namespace = namespace
        self.name = name
        self.sub = sub


Resources = dict[str, ResourceInfo]


def _groups(resources: Resources) -> dict[str, str]:
    """group -> version for every API group we serve ("" is core), CRDs' included."""
    return {ri.group: ri.version for ri in resources.values()}


def _find(resources: Resources, group: str, plural: str) -> ResourceInfo | None:
    return next(
        (ri for ri in resources.values() if ri.plural == plural and ri.group == group), None
    )


def _parse_route(path: str, resources: Resources) -> _Route | None:
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api" and parts[1] == "v1":
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis" and _groups(resources).get(parts[1]) == parts[2]:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if not rest:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        maybe = _find(resources, group, rest[2])
        if maybe is not None and maybe.namespaced:
            namespace, rest = rest[1], rest[2:]
    ri = _find(resources, group, rest[0])
    if ri is None or len(rest) > 3:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    name = rest[1] if len(rest) >= 2 else None
    sub = rest[2] if len(rest) >= 3 else None
    if sub is not None and sub not in ri.subresources:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return _Route(ri, namespace, name, sub)


def _discovery(table: Resources, group: str, version: str) -> Obj:
    resources = []
    for ri in table.values():
        if ri.group != group or ri.version != version:
            continue
        entry: Obj = {
            "name": ri.plural,
            "singularName": ri.singular,
            "namespaced": ri.namespaced,
            "kind": ri.kind,
            "verbs": list(ri.verbs),
        }
        if ri.short_names:
            entry["shortNames"] = list(ri.short_names)
        if ri.plural in ("pods", "jobs", "statefulsets", "services"):
            entry["categories"] = ["all"]
        resources.append(entry)
        for sub in ri.subresources:
            sub_entry: Obj = {
                "name": f"{ri.plural}/{sub}",
                "singularName": "",
                "namespaced": ri.namespaced,
                "kind": "Pod" if sub == "log" else ri.kind,
                "verbs": ["get"] if sub == "log" else ["get", "patch", "update"],
            }
            if sub == "scale":
                sub_entry.update(group="autoscaling", version="v1", kind="Scale")
            resources.append(sub_entry)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _openapi_v3(path: str, resources: Resources) -> Obj | None:
    """Just enough OpenAPI v3 for kubectl to see that the server validates fields itself.

    kubectl (1.27+) asks whether each kind's PATCH takes `fieldValidation`; when it does, it
    sends fieldValidation=Strict and skips client-side schema validation, so a plain
    `kubectl apply -f` works without `--validate=false`. No schemas are served: kubectl then
    builds strategic merge patches from its compiled-in types, as it does for built-in kinds.
    """
    groups = _groups(resources)
    if path == "/openapi/v3":
        return {
            "paths": {
                _gv_path(g, v): {"serverRelativeURL": f"/openapi/v3/{_gv_path(g, v)}?hash=0"}
                for g, v in sorted(groups.items())
            }
        }
    for g, v in groups.items():
        if path != f"/openapi/v3/{_gv_path(g, v)}":
            continue
        paths: Obj = {}
        for ri in resources.values():
            if ri.group != g:
                continue
            prefix = f"/{_gv_path(g, v)}" + ("/namespaces/{namespace}" if ri.namespaced else "")
            gvk = {"group": g, "version": v, "kind": ri.kind}
            operation = {
                "x-kubernetes-group-version-kind": gvk,
                "parameters": [
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                    {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                    {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
                ],
                "responses": {"200": {"description": "OK"}},
            }
            paths[f"{prefix}/{ri.plural}/{{name}}"] = {"patch": operation, "put": operation}
            paths[f"{prefix}/{ri.plural}"] = {"post": operation}
        return {
            "openapi": "3.0.0",
            "info": {"title": "nccl-k8s test cluster", "version": KUBE_VERSION["gitVersion"]},
            "paths": paths,
            "components": {"schemas": {}},
        }
    return None


def _group_list(resources: Resources) -> Obj:
    groups = []
    for group, version in sorted(_groups(resources).items()):
        if not group:
            continue
        gv = {"groupVersion": f"{group}/{version}", "version": version}
        groups.append({"name": group, "versions": [gv], "preferredVersion": gv})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def _bool(q: dict[str, str], key: str) -> bool:
    return q.get(key, "").lower() in ("1", "true", "yes")


def _int(q: dict[str, str], key: str) -> int | None:
    raw = q.get(key)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise errors.bad_request(f"invalid {key}: {raw!r}") from None


class APIServer:
    """The HTTP API server. `start()` binds 127.0.0.1 on a free port; `url` is then valid."""

    def __init__(
        self,
        store: Store,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        logs: LogSource | None = None,
        faults: Faults | None = None,
    ) -> None:
        self.store = store
        self.logs = logs
        self.faults = faults or Faults()
        self._host = host
        self._port = port
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self._httpsd: _Server | None = None  # the pods' https port (start_tls)
        self._https_thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.requests = 0  # served request count, handy when a test wants to see traffic
        self.authenticator = rbac.Authenticator()
        self.authorizer = rbac.Authorizer(store)
        self.recorder = rbac.Recorder()

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("APIServer is not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        self._httpd = _Server((self._host, self._port), _Handler)
        self._httpd.api = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="apiserver",
            daemon=True,
        )
        self._thread.start()

    @property
    def https_address(self) -> tuple[str, int]:
        """(host, port) of the https listener pods use (start_tls)."""
        if self._httpsd is None:
            raise RuntimeError("APIServer serves no https (start_tls)")
        host, port = self._httpsd.server_address[:2]
        return str(host), int(port)

    def start_tls(self, cert: str, key: str) -> None:
        """Serve the same API over https on another free port of the same host: what pods
        reach as KUBERNETES_SERVICE_HOST/PORT (tests/cluster/incluster.py). Each connection's
        handshake happens in its own handler thread, so a client that never completes one
        holds up nobody."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self._httpsd = _TLSServer((self._host, 0), _Handler)
        self._httpsd.api = self
        self._httpsd.socket = ctx.wrap_socket(
            self._httpsd.socket, server_side=True, do_handshake_on_connect=False
        )
        self._https_thread = threading.Thread(
            target=self._httpsd.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="apiserver-https",
            daemon=True,
        )
        self._https_thread.start()

    def stop(self) -> None:
        """Stop accepting, end every watch and log stream, close idle keep-alive connections."""
        self._stopping.set()
        if self._httpsd is not None:
            self._httpsd.shutdown()
            self._httpsd.close_all()
            self._httpsd.server_close()
            if self._https_thread is not None:
                self._https_thread.join(timeout=5)
            self._httpsd = None
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.close_all()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None

    # ---- request handling (called from handler threads) ------------------------------------

    def handle(self, h: _Handler, method: str) -> None:
        url = urlsplit(h.path)
        path = "/" + url.path.strip("/")
        q = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        body = h.read_body()
        self.requests += 1
        try:
            if not path.startswith("/_test/"):
                self._authorize(h, method, path, q)
            # The control endpoint itself is never failed, so a broad rule can be cleared.
            fault = None if path.startswith("/_test/") else self.faults.take(method, path)
            if fault is not None:
                raise fault
            self._dispatch(h, method, path, q, body)
        except ApiError as e:
            after = e.details.get("retryAfterSeconds")
            h.send_json(e.code, e.status(), headers={"Retry-After": str(after)} if after else None)
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True
        except Exception as e:
            log.exception("apiserver: %s %s failed", method, h.path)
            h.send_json(500, ApiError(500, "InternalError", f"{type(e).__name__}: {e}").status())

    def _authorize(self, h: _Handler, method: str, path: str, q: dict[str, str]) -> None:
        """Who asks (401 for a token nobody issued), recorded, then RBAC (403) unless an admin."""
        h.user = self.authenticator.user(h.headers.get("Authorization"))
        attrs = rbac.request_attributes(h.user, method, path, q)
        self.recorder.add(attrs)
        if not self.authorizer.decide(attrs)[0]:
            raise rbac.forbidden(attrs)

    def _dispatch(
        self, h: _Handler, method: str, path: str, q: dict[str, str], body: bytes
    ) -> None:
        if method == "GET":
            static = self._static(path)
            if static is not None:
                h.send_json(200, static)
                return
        if path.startswith("/_test/faults/"):
            self._fault_endpoint(h, method, path, body)
            return
        if method == "GET" and path.startswith("/openapi/v3"):
            doc = _openapi_v3(path, self.store.resources)
            if doc is not None:
                h.send_json(200, doc)
                return
        if path.startswith("/openapi") or path.startswith("/swagger"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        route = _parse_route(path, self.store.resources)
        if route is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        ri = route.ri
        if ri.namespaced and route.name is not None and route.namespace is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if route.sub == "scale":
            self._scale(h, method, route, body)
            return
        if ri.plural == "selfsubjectaccessreviews":
            if method != "POST" or route.name is not None:
                raise errors.method_not_allowed(f"{method} is not supported on {path}")
            review = self._body(h, body)
            h.send_json(201, rbac.self_subject_access_review(self.authorizer, h.user, review))
            return
        if (route.sub == "log" and method != "GET") or (route.sub and method in ("POST", "DELETE")):
            raise errors.method_not_allowed(f"{method} is not supported on {path}")
        if method == "GET":
            if route.sub == "log":
                self._logs(h, route, q)
            elif route.name is None:
                if _bool(q, "watch"):
                    self._watch(h, route, q)
                else:
                    self._list(h, route, q)
            else:
                self._send_obj(h, 200, self.store.get(ri.key, route.namespace, route.name))
        elif method == "POST":
            if route.name is not None:
                raise errors.method_not_allowed(f"POST is not supported on {path}")
            self._create(h, route, q, body)
        elif method == "PUT":
            if route.name is None:
                raise errors.method_not_allowed("PUT needs an object name in the path")
            self._update(h, route, q, body)
        elif method == "PATCH":
            if route.name is None:
                raise errors.method_not_allowed("PATCH needs an object name in the path")
            self._patch(h, route, q, body)
        elif method == "DELETE":
            if route.name is None:
                self._delete_collection(h, route, q, body)
            else:
                self._delete(h, route, q, body)
        else:
            raise errors.method_not_allowed(f"method {method} not allowed")

    def _fault_endpoint(self, h: _Handler, method: str, path: str, body: bytes) -> None:
        """The control endpoint for a cluster run by hand (python -m tests.cluster):
        POST /_test/faults/requests {"pathRegex", "status", "count", "method",
        "retryAfterSeconds"} (or "delaySeconds" instead of "status": hold, then serve), DELETE to
        clear;
        POST /_test/faults/kill-pod {"namespace", "pod"}; POST /_test/faults/node-ready
        {"node", "ready"}; POST /_test/faults/scheduling-delay {"seconds"};
        POST /_test/faults/node-slow {"node", "factor"} (null or <= 1 ends it);
        POST /_test/faults/node-crash {"node", "crash": true|false};
        POST /_test/faults/node-link {"node", "bytesPerSecond"} (null ends it);
        POST /_test/faults/link-slow {"label", "a", "b", "factor", "bytesPerSecond"} (a slow
        link between the nodes labelled label=a and label=b: 1/factor of the sending node's
        node-link rate, or bytesPerSecond on a node without one; a null factor ends it)."""
        what = path.removeprefix("/_test/faults/")
        if what == "requests" and method == "DELETE":
            self.faults.clear()
            h.send_json(200, {"pending": 0})
            return
        if method != "POST":
            raise errors.method_not_allowed(f"{method} {path}: use POST")
        try:
            args = json.loads(body or b"{}")
            if what == "requests" and "delaySeconds" in args:
                self.faults.delay_requests(
                    args["pathRegex"],
                    float(args["delaySeconds"]),
                    int(args.get("count", 1)),
                    args.get("method"),
                )
            elif what == "requests":
                after = args.get("retryAfterSeconds")
                self.faults.fail_requests(
                    args["pathRegex"],
                    int(args["status"]),
                    int(args.get("count", 1)),
                    args.get("method"),
                    retry_after_s=int(after) if after is not None else None,
                )
            elif what == "kill-pod":
                self.faults.kill_pod(args.get("namespace", "default"), args["pod"])
            elif what == "node-ready":
                self.faults.set_node_ready(args["node"], bool(args["ready"]))
            elif what == "node-slow":
                self.store.get("nodes", None, args["node"])  # 404 for a node that is not there
                factor = args.get("factor")
                self.faults.node_slow(args["node"], float(factor) if factor is not None else None)
            elif what == "node-crash":
                self.store.get("nodes", None, args["node"])
                self.faults.node_crash(args["node"], bool(args.get("crash", True)))
            elif what == "node-link":
                self.store.get("nodes", None, args["node"])
                rate = args.get("bytesPerSecond")
                self.faults.node_link(args["node"], float(rate) if rate else None)
            elif what == "link-slow":
                factor, rate = args.get("factor"), args.get("bytesPerSecond")
                self.faults.link_slow(
                    str(args["label"]),
                    str(args["a"]),
                    str(args["b"]),
                    float(factor) if factor is not None else None,
                    float(rate) if rate else None,
                )
            elif what == "scheduling-delay":
                self.faults.delay_scheduling(float(args["seconds"]))
            else:
                raise ApiError(404, "NotFound", f"no fault endpoint {path}")
        except (ValueError, KeyError, TypeError, re.error) as e:
            raise errors.bad_request(f"{path}: {type(e).__name__}: {e}") from None
        except RuntimeError as e:
            raise ApiError(503, "ServiceUnavailable", str(e)) from None
        h.send_json(200, {"pending": self.faults.pending()})

    def _static(self, path: str) -> Obj | None:
        if path == "/version":
            return KUBE_VERSION
        if path == "/api":
            host, port = self.url.removeprefix("http://").split(":")
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{host}:{port}"}
                ],
            }
        if path == "/apis":
            return _group_list(self.store.resources)
        if path == "/api/v1":
            return _discovery(self.store.resources, "", "v1")
        m = re.fullmatch(r"/apis/([^/]+)(?:/([^/]+))?", path)
        if m:
            versions = _groups(self.store.resources)
            group, version = m.group(1), m.group(2)
            if group not in versions or not group:
                return None
            if version is None:
                gv = {"groupVersion": f"{group}/{versions[group]}", "version": versions[group]}
                return {
                    "kind": "APIGroup",
                    "apiVersion": "v1",
                    "name": group,
                    "versions": [gv],
                    "preferredVersion": gv,
                }
            if version == versions[group]:
                return _discovery(self.store.resources, group, version)
        if path in ("/healthz", "/livez", "/readyz"):
            return {"status": "ok"}
        return None

    # ---- verbs -----------------------------------------------------------------------------

    def _send_obj(self, h: _Handler, code: int, obj: Obj) -> None:
        accept = h.headers.get("Accept", "")
        if tables.wants_table(accept):
            h.send_json(code, tables.table([obj], obj.get("metadata", {}).get("resourceVersion")))
        elif tables.wants_metadata(accept) == "PartialObjectMetadata":
            h.send_json(code, tables.partial(obj))
        else:
            h.send_json(code, obj)

    def _list(self, h: _Handler, route: _Route, q: dict[str, str]) -> None:
        """A list, or one page of it (`limit`, `continue`), of whole objects, as a Table
        (`as=Table`, with `includeObject`) or of metadata alone (`as=PartialObjectMetadataList`).
        A page is read from the store alone, so it costs its own size (kube-apiserver serves
        pages from its watch cache; its tokens also hold the resourceVersion, checked here only
        for its form)."""
        ri = route.ri
        accept = h.headers.get("Accept", "")
        as_table = tables.wants_table(accept)
        as_meta = not as_table and tables.wants_metadata(accept) == "PartialObjectMetadataList"
        include = q.get("includeObject") or "Metadata"
        if include not in ("None", "Metadata", "Object"):
            raise errors.bad_request(f"invalid includeObject: {include!r}")
        shape: Callable[[Obj], Obj] = clone
        if as_table:
            shape = lambda o: tables.row(o, ri.kind, include)  # noqa: E731
        elif as_meta:
            shape = tables.partial
        limit = _int(q, "limit")
        token = q.get("continue")
        after = None
        if token:
            try:
                after = tuple(json.loads(base64.urlsafe_b64decode(token.encode()))["start"])
            except (ValueError, KeyError, TypeError):
                raise errors.bad_request("invalid continue token") from None
        labels, fields = q.get("labelSelector") or None, q.get("fieldSelector") or None
        # Each one with its sort key, so a page of rows without objects still ends somewhere.
        got, rv = self.store.list(
            ri.key, route.namespace, labels, fields,
            after=after,  # type: ignore[arg-type]
            limit=limit + 1 if limit else None,
            project=lambda o: (_sort_key(o), shape(o)),
        )  # fmt: skip
        keyed = cast("list[tuple[tuple[str, str], Obj]]", got)
        meta: Obj = {"resourceVersion": rv}
        if limit and len(keyed) > limit:
            keyed = keyed[:limit]
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps({"start": list(keyed[-1][0]), "rv": rv}).encode()
            ).decode()
        items = [item for _, item in keyed]
        if as_table:
            h.send_json(200, tables.rows_table(items, rv, meta.get("continue"), ri.kind))
            return
        kind = "PartialObjectMetadataList" if as_meta else f"{ri.kind}List"
        version = "meta.k8s.io/v1" if as_meta else ri.api_version
        h.send_json(200, {"kind": kind, "apiVersion": version, "metadata": meta, "items": items})

    def _watch(self, h: _Handler, route: _Route, q: dict[str, str]) -> None:
        ri = route.ri
        rv = q.get("resourceVersion", "")
        labels = q.get("labelSelector") or None
        fields = q.get("fieldSelector") or None
        timeout = _int(q, "timeoutSeconds")
        deadline = time.monotonic() + timeout if timeout else None
        initial: list[Obj] = []
        send_initial = _bool(q, "sendInitialEvents")
        try:
            if rv in ("", "0") or send_initial:
                # Unset or "0": the current state as ADDED events first, then changes.
                initial, list_rv = self.store.list(ri.key, route.namespace, labels, fields)
                w = self.store.watch(ri.key, route.namespace, list_rv, labels, fields)
            else:
                w = self.store.watch(ri.key, route.namespace, rv, labels, fields)
        except ApiError as e:
            if e.code != 410:
                raise
            h.start_stream("application/json")
            h.write_chunk(_event("ERROR", e.status()))
            h.end_stream()
            return
        table = tables.wants_table(h.headers.get("Accept", ""))
        try:
            h.start_stream("application/json")
            for obj in initial:
                h.write_chunk(
                    _event("ADDED", tables.table([obj], None, None, ri.kind) if table else obj)
                )
            if send_initial:
                mark = {
                    "kind": ri.kind,
                    "apiVersion": ri.api_version,
                    "metadata": {
                        "resourceVersion": self.store.resource_version,
                        "annotations": {"k8s.io/initial-events-end": "true"},
                    },
                }
                h.write_chunk(_event("BOOKMARK", mark))
            while not self._stopping.is_set():
                wait = IDLE_CHECK_S
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        break
                item = w.next(timeout=wait)
                if item is None:
                    if w.closed or h.client_gone():
                        break
                    continue
                etype, obj = item
                h.write_chunk(
                    _event(etype, tables.table([obj], None, None, ri.kind) if table else obj)
                )
            h.end_stream()
        finally:
            w.close()

    def _body(self, h: _Handler, body: bytes) -> Obj:
        if not body:
            raise errors.bad_request("the request body is empty")
        ctype = h.headers.get("Content-Type", "application/json").split(";")[0].strip()
        if "protobuf" in ctype:
            return protobuf.decode(body)
        if "cbor" in ctype:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json, application/yaml, application/vnd.kubernetes.protobuf",
            )
        try:
            obj = yaml.safe_load(body.decode()) if "yaml" in ctype else json.loads(body)
        except (ValueError, yaml.YAMLError) as e:
            raise errors.bad_request(f"the request body is not valid: {e}") from None
        return obj  # type: ignore[no-any-return]

    def _check_target(self, route: _Route, obj: Any) -> Obj:
        ri = route.ri
        if not isinstance(obj, dict):
            raise errors.bad_request("the request body must be an object")
        kind = obj.get("kind")
        if kind and kind != ri.kind:
            raise errors.bad_request(
                f"the kind {kind!r} of the body does not match the resource {ri.plural!r}"
            )
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if ri.namespaced:
            ns = meta.get("namespace")
            if ns and route.namespace and ns != route.namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            meta["namespace"] = route.namespace or ns or "default"
        if route.name is not None:
            name = meta.get("name")
            if name and name != route.name:
                raise errors.bad_request(
                    "the name of the object "
                    f"({name}) does not match the name on the URL ({route.name})"
                )
            meta["name"] = route.name
        return obj

    def _create(self, h: _Handler, route: _Route, q: dict[str, str], body: bytes) -> None:
        if route.ri.namespaced and route.namespace is None:
            raise errors.method_not_allowed(
                f"create {route.ri.plural} needs a namespace in the path"
            )
        obj = self._check_target(route, self._body(h, body))
        self._strict(q, route, obj)
        obj.get("metadata", {}).pop("managedFields", None)
        manager = q.get("fieldManager", "")
        patch.record_update(None, obj, manager=manager, api_version=route.ri.api_version)
        if q.get("dryRun"):
            self._send_obj(h, 201, obj)
            return
        self._send_obj(h, 201, self.store.create(route.ri.key, obj))

    def _update(self, h: _Handler, route: _Route, q: dict[str, str], body: bytes) -> None:
        ri = route.ri
        obj = self._check_target(route, self._body(h, body))
        self._strict(q, route, obj)
        manager = q.get("fieldManager", "")
        assert route.name is not None
        if route.sub == "status":

            def put_status(current: Obj) -> None:
                rv = obj["metadata"].get("resourceVersion")
                if rv and rv != current["metadata"]["resourceVersion"]:
                    raise errors.conflict(
                        ri.plural,
                        route.name or "",
                        "the object has been modified; please apply your changes to the "
                        "latest version and try again",
                        ri.group,
                    )
                current["status"] = obj.get("status", {})

            out = self._mutate(q, route, put_status, subresource="status")
        else:
            sub_status = "status" in ri.subresources

            def replace(current: Obj) -> None:
                rv = obj["metadata"].get("resourceVersion")
                if rv and rv != current["metadata"]["resourceVersion"]:
                    raise errors.conflict(
                        ri.plural,
                        route.name or "",
                        "the object has been modified; please apply your changes to the "
                        "latest version and try again",
                        ri.group,
                    )
                new = dict(obj)
                if sub_status:
                    new["status"] = current.get("status", {})
                if "managedFields" not in new["metadata"]:
                    mf = current["metadata"].get("managedFields")
                    if mf:
                        new["metadata"]["managedFields"] = mf
                patch.record_update(current, new, manager=manager, api_version=ri.api_version)
                current.clear()
                current.update(new)

            out = self._mutate(q, route, replace)
        self._send_obj(h, 200, out)

    def _patch(self, h: _Handler, route: _Route, q: dict[str, str], body: bytes) -> None:
        ri = route.ri
        assert route.name is not None
        ctype = h.headers.get("Content-Type", "").split(";")[0].strip()
        if not body:
            raise errors.bad_request("the patch body is empty")
        manager = q.get("fieldManager", "")
        if ctype == "application/apply-patch+yaml":
            self._apply(h, route, q, body)
            return
        try:
            doc = json.loads(body)
        except ValueError:
            try:
                doc = yaml.safe_load(body.decode())
            except yaml.YAMLError as e:
                raise errors.bad_request(f"the patch is not valid JSON: {e}") from None
        if ctype != "application/json-patch+json":
            self._strict(q, route, patch.strip_directives(doc))
        apply_fn: Callable[[Obj], Any]
        if ctype == "application/merge-patch+json":

            def apply_fn(cur: Obj) -> Any:
                return patch.merge_patch(cur, doc)

        elif ctype == "application/strategic-merge-patch+json":

            def apply_fn(cur: Obj) -> Any:
                return patch.strategic_merge(cur, doc)

        elif ctype == "application/json-patch+json":

            def apply_fn(cur: Obj) -> Any:
                return patch.json_patch(cur, doc)

        else:
            raise ApiError(
                415, "UnsupportedMediaType", f"the media type {ctype!r} is not supported for PATCH"
            )
        status_only = route.sub == "status"

        def mutate(current: Obj) -> None:
            new = apply_fn(current)
            if not isinstance(new, dict):
                raise errors.bad_request("the patch did not produce an object")
            rv = (new.get("metadata") or {}).get("resourceVersion")
            if rv and rv != current["metadata"]["resourceVersion"]:
                raise errors.conflict(
                    ri.plural,
                    route.name or "",
                    "the object has been modified; please apply your changes to the latest "
                    "version and try again",
                    ri.group,
                )
            if not status_only and "status" in ri.subresources:
                new["status"] = current.get("status", {})
            patch.record_update(current, new, manager=manager, api_version=ri.api_version)
            current.clear()
            current.update(new)

        out = self._mutate(q, route, mutate, subresource="status" if status_only else None)
        self._send_obj(h, 200, out)

    def _apply(self, h: _Handler, route: _Route, q: dict[str, str], body: bytes) -> None:
        ri = route.ri
        assert route.name is not None
        config = self._check_target(route, self._body_yaml(body))
        self._strict(q, route, config, apply=True)
        manager = q.get("fieldManager", "")
        force = _bool(q, "force")
        if not manager:
            raise errors.bad_request(
                "PATCH with application/apply-patch+yaml requires the fieldManager parameter"
            )
        for _attempt in range(3):
            try:
                self.store.get(ri.key, route.namespace, route.name)
            except ApiError as e:
                if e.code != 404:
                    raise
                new = patch.server_side_apply(
                    None, config, manager=manager, force=force, api_version=ri.api_version
                )
                new.setdefault("apiVersion", ri.api_version)
                new.setdefault("kind", ri.kind)
                if q.get("dryRun"):
                    self._send_obj(h, 201, new)
                    return
                try:
                    self._send_obj(h, 201, self.store.create(ri.key, new))
                    return
                except ApiError as again:
                    if again.reason != "AlreadyExists":
                        raise
                    continue

            def mutate(cur: Obj) -> None:
                new = patch.server_side_apply(
                    cur, config, manager=manager, force=force, api_version=ri.api_version
                )
                if route.sub != "status" and "status" in ri.subresources:
                    new["status"] = cur.get("status", {})
                cur.clear()
                cur.update(new)

            status_only = route.sub == "status"
            out = self._mutate(q, route, mutate, subresource="status" if status_only else None)
            self._send_obj(h, 200, out)
            return
        raise ApiError(409, "Conflict", "apply raced with concurrent creates; try again")

    @staticmethod
    def _strict(q: dict[str, str], route: _Route, obj: Any, *, apply: bool = False) -> None:
        """?fieldValidation=Strict (kubectl's default): unknown fields are a 400, as upstream."""
        if q.get("fieldValidation") == "Strict" and route.sub is None:
            if route.ri.schema is not None and isinstance(obj, dict):
                # A custom resource: its CRD's structural schema, not the upstream ones.
                schema.refuse_unknown(
                    crds.unknown_fields(obj, route.ri.schema),
                    kind=route.ri.kind,
                    api_version=route.ri.api_version,
                    apply=apply,
                )
                return
            schema.check_strict(
                obj, kind=route.ri.kind, api_version=route.ri.api_version, apply=apply
            )

    def _mutate(
        self,
        q: dict[str, str],
        route: _Route,
        fn: Callable[[Obj], Any],
        *,
        subresource: str | None = None,
    ) -> Obj:
        """store.mutate, or with ?dryRun=All the object the write would produce, unsaved."""
        assert route.name is not None
        if not q.get("dryRun"):
            return self.store.mutate(
                route.ri.key, route.namespace, route.name, fn, subresource=subresource
            )
        current = self.store.get(route.ri.key, route.namespace, route.name)
        new = clone(current)
        fn(new)
        if subresource == "status":
            current["status"] = new.get("status", {})
            return current
        return new

    @staticmethod
    def _body_yaml(body: bytes) -> Any:
        try:
            return yaml.safe_load(body.decode())
        except yaml.YAMLError as e:
            raise errors.bad_request(f"the apply configuration is not valid YAML: {e}") from None

    def _delete_options(
        self, h: _Handler, q: dict[str, str], body: bytes
    ) -> tuple[str, int | None, dict[str, str] | None]:
        opts: Obj = {}
        if body:
            try:
                opts = json.loads(body) or {}
            except ValueError:
                raise errors.bad_request("DeleteOptions body is not valid JSON") from None
        propagation = q.get("propagationPolicy") or opts.get("propagationPolicy") or "Background"
        if opts.get("orphanDependents") is True or q.get("orphanDependents") == "true":
            propagation = "Orphan"
        grace = _int(q, "gracePeriodSeconds")
        if grace is None and opts.get("gracePeriodSeconds") is not None:
            grace = int(opts["gracePeriodSeconds"])
        return propagation, grace, opts.get("preconditions") or None

    def _delete(self, h: _Handler, route: _Route, q: dict[str, str], body: bytes) -> None:
        ri = route.ri
        assert route.name is not None
        propagation, grace, preconditions = self._delete_options(h, q, body)
        if q.get("dryRun"):
            self._send_obj(h, 200, self.store.get(ri.key, route.namespace, route.name))
            return
        out = self.store.delete(
            ri.key,
            route.namespace,
            route.name,
            propagation=propagation,
            grace_period_s=grace,
            preconditions=preconditions,
        )
        if out["metadata"].get("deletionTimestamp") and ri.plural == "pods":
            self._send_obj(h, 200, out)
            return
        if ri.plural in ("pods", "namespaces"):
            self._send_obj(h, 200, out)
            return
        h.send_json(
            200,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {
                    "name": route.name,
                    "group": ri.group,
                    "kind": ri.plural,
                    "uid": out["metadata"].get("uid"),
                },
            },
        )

    def _delete_collection(
        self, h: _Handler, route: _Route, q: dict[str, str], body: bytes
    ) -> None:
        ri = route.ri
        propagation, grace, _ = self._delete_options(h, q, body)
        items, _rv = self.store.list(
            ri.key,
            route.namespace,
            label_selector=q.get("labelSelector") or None,
            field_selector=q.get("fieldSelector") or None,
        )
        out = []
        for item in [] if q.get("dryRun") else items:
            meta = item["metadata"]
            try:
                out.append(
                    self.store.delete(
                        ri.key,
                        meta.get("namespace"),
                        meta["name"],
                        propagation=propagation,
                        grace_period_s=grace,
                    )
                )
            except ApiError as e:
                if e.code != 404:
                    raise
        h.send_json(
            200,
            {
                "kind": f"{ri.kind}List",
                "apiVersion": ri.api_version,
                "metadata": {"resourceVersion": self.store.resource_version},
                "items": items if q.get("dryRun") else out,
            },
        )

    # ---- scale -----------------------------------------------------------------------------

    def _scale(self, h: _Handler, method: str, route: _Route, body: bytes) -> None:
        """statefulsets/scale, so `kubectl scale` works: an autoscaling/v1 Scale view."""
        ri = route.ri
        assert route.name is not None and route.namespace is not None

        def view(obj: Obj) -> Obj:
            meta = obj["metadata"]
            selector = (obj.get("spec") or {}).get("selector") or {}
            labels = ",".join(f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items())
            return {
                "kind": "Scale",
                "apiVersion": "autoscaling/v1",
                "metadata": {
                    k: meta[k]
                    for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                    if k in meta
                },
                "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 1)},
                "status": {
                    "replicas": (obj.get("status") or {}).get("replicas", 0),
                    "selector": labels,
                },
            }

        if method == "GET":
            h.send_json(200, view(self.store.get(ri.key, route.namespace, route.name)))
            return
        if method not in ("PUT", "PATCH"):
            raise errors.method_not_allowed(f"{method} is not supported on scale")
        doc = self._body(h, body) if method == "PUT" else None
        ctype = h.headers.get("Content-Type", "").split(";")[0].strip()
        patch_doc: Any = None
        if method == "PATCH":
            try:
                patch_doc = json.loads(body)
            except ValueError:
                raise errors.bad_request("the scale patch is not valid JSON") from None

        def edit(current: Obj) -> None:
            scale = view(current)
            if doc is not None:
                new = doc
            elif ctype == "application/json-patch+json":
                new = patch.json_patch(scale, patch_doc)
            else:
                new = patch.merge_patch(scale, patch_doc)
            replicas = (new.get("spec") or {}).get("replicas")
            if not isinstance(replicas, int) or replicas < 0:
                raise errors.invalid(
                    "Scale", route.name or "", [("spec.replicas", "Invalid value")], "autoscaling"
                )
            current.setdefault("spec", {})["replicas"] = replicas

        h.send_json(200, view(self._mutate({}, route, edit)))

    # ---- logs ------------------------------------------------------------------------------

    def _logs(self, h: _Handler, route: _Route, q: dict[str, str]) -> None:
        assert route.name is not None and route.namespace is not None
        ns, name = route.namespace, route.name
        pod = self.store.get("pods", ns, name)
        spec = pod.get("spec", {})
        names = [c["name"] for c in spec.get("containers", [])]
        all_names = names + [c["name"] for c in spec.get("initContainers", []) or []]
        container = q.get("container") or ""
        if not container:
            default = (pod["metadata"].get("annotations") or {}).get(
                "kubectl.kubernetes.io/default-container"
            )
            if default in names:
                container = str(default)
            elif len(names) == 1:
                container = names[0]
            else:
                raise errors.bad_request(
                    f"a container name must be specified for pod {name}, choose one of: "
                    f"[{' '.join(names)}]"
                )
        if container not in all_names:
            raise errors.bad_request(f"container {container} is not valid for pod {name}")
        previous = _bool(q, "previous")
        follow = _bool(q, "follow") and not previous
        timestamps = _bool(q, "timestamps")
        tail = _int(q, "tailLines")
        limit_bytes = _int(q, "limitBytes")
        path = self.logs.log_path(ns, name, container, previous=previous) if self.logs else None
        if path is None or not Path(path).exists():
            if previous:
                raise errors.bad_request(
                    f'previous terminated container "{container}" in pod "{name}" not found'
                )
            reason = "ContainerCreating"
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                if cs.get("name") == container:
                    reason = ((cs.get("state") or {}).get("waiting") or {}).get("reason", reason)
            raise errors.bad_request(
                f'container "{container}" in pod "{name}" is waiting to start: {reason}'
            )
        f = open(path, "rb")  # noqa: SIM115 - may be replaced when the log rotates
        try:
            data = f.read()
            if tail is not None:
                lines = data.splitlines(keepends=True)
                data = b"".join(lines[-tail:]) if tail > 0 else b""
            stamper = _Stamper(timestamps)
            first = stamper.feed(data)
            if limit_bytes is not None:
                first = first[:limit_bytes]
            if not follow:
                h.send_bytes(200, "text/plain", first + stamper.flush())
                return
            h.start_stream("text/plain")
            if first:
                h.write_chunk(first)
            while not self._stopping.is_set():
                running = self.logs.is_running(ns, name, container) if self.logs else False
                more = f.read()
                if more:
                    h.write_chunk(stamper.feed(more))
                    continue
                # Rotated: the kubelet writes a new current file; follow it, as kubelets do.
                now = self.logs.log_path(ns, name, container) if self.logs else None
                if now is not None and _inode(now) not in (None, os.fstat(f.fileno()).st_ino):
                    f.close()
                    f = open(now, "rb")  # noqa: SIM115 - closed in the finally below
                    continue
                if not running:
                    break
                if h.client_gone():
                    return
                self._stopping.wait(LOG_POLL_S)
            rest = stamper.flush()
            if rest:
                h.write_chunk(rest)
            h.end_stream()
        finally:
            f.close()


class _Stamper:
    """Prefixes complete lines with an RFC3339Nano time when `timestamps` is asked for.

    The kubelet's files hold raw output, so the time is when the API server read the line: close
    enough for following, and exact ordering is what users rely on.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._partial = b""

    def feed(self, data: bytes) -> bytes:
        if not self.enabled:
            return data
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        return b"".join(self._stamp(line) + b"\n" for line in lines)

    def flush(self) -> bytes:
        if not self.enabled or not self._partial:
            return b""
        out, self._partial = self._stamp(self._partial), b""
        return out

    @staticmethod
    def _stamp(line: bytes) -> bytes:
        t = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e9):09d}Z"
        return stamp.encode() + b" " + line


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def _sort_key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata", {})
    return (meta.get("namespace", ""), meta.get("name", ""))


def _event(etype: str, obj: Obj) -> bytes:
    return json.dumps({"type": etype, "object": obj}, separators=(",", ":")).encode() + b"\n"


class _Server(ThreadingHTTPServer):
    """Tracks open connections so stop() can end keep-alive and streaming ones at once."""

    daemon_threads = True
    allow_reuse_address = True
    # The default backlog (5) drops connections when a client opens ~100 log streams at once.
    request_queue_size = 256
    api: APIServer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conns_lock:
            self._conns.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._conns_lock:
            self._conns.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver prints every handler exception to sys.stderr, which is the CLI's own stderr
        # when a test runs the CLI in this process: a client that hung up (a watch or log stream
        # closed by the CLI, as kube-apiserver sees all day) then shows up in the CLI's output.
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            log.debug("client %s hung up: %s", client_address, exc)
            return
        log.exception("error while serving a request from %s", client_address)

    def close_all(self) -> None:
        with self._conns_lock:
            conns = list(self._conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)


class _TLSServer(_Server):
    """The https listener: the TLS handshake of each connection in its handler thread."""

    def finish_request(self, request: Any, client_address: Any) -> None:
        try:
            request.do_handshake()
        except (OSError, ssl.SSLError) as e:
            log.debug("TLS handshake with %s failed: %s", client_address, e)
            return
        super().finish_request(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    server_version = "nccl-k8s-test-apiserver"
    user: rbac.User = rbac.ADMIN  # who sent the request being served (APIServer._authorize)
    # Headers and body leave in separate sends; with Nagle on, every answer on a kept-alive
    # connection waited ~40 ms for the peer's delayed ACK (44 ms per request from httpx).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("apiserver: " + format, *args)

    def read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            return self.rfile.read(length)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return b""

    def send_json(self, code: int, obj: Any, *, headers: dict[str, str] | None = None) -> None:
        self.send_bytes(code, "application/json", json.dumps(obj).encode(), headers=headers)

    def send_bytes(
        self, code: int, ctype: str, data: bytes, *, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self, ctype: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.flush()

    def write_chunk(self, data: bytes) -> None:
        if not data:
            return
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_stream(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def client_gone(self) -> bool:
        """True when the peer closed its end (a readable socket with nothing to read)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return bool(self.connection.recv(1, socket.MSG_PEEK) == b"")
        except OSError:
            return True

    def _do(self, method: str) -> None:
        self.server.api.handle(self, method)

    def do_GET(self) -> None:
        self._do("GET")

    def do_POST(self) -> None:
        self._do("POST")

    def do_PUT(self) -> None:
        self._do("PUT")

    def do_PATCH(self) -> None:
        self._do("PATCH")

    def do_DELETE(self) -> None:
        self._do("DELETE")


__all__ = ["APIServer", "LogSource", "now_rfc3339"]
