"""The one module that talks to the Kubernetes API server (over lightkube's connection).

Everything above it gets plain dicts (the objects as the API shapes them) and our own errors:
every HTTP failure is translated here, once, into the `ClusterError` tree of nccl_k8s.errors
with a message a user can act on (`forbidden: user X may not create jobs in namespace Y`,
`cannot reach the API server at URL`), always `raise ... from` the original.

lightkube provides, through its public API, the connection's arguments (kubeconfig auth, TLS;
api._transport, whose `transport=` is the seam tests inject through) and each resource's API
info (api._kinds' `path`); requests are sent and decoded here, so that every read path shares
one retry policy and streams never go through a decoder that reads an async body synchronously
(lightkube's `log(follow=True)` and `watch` do, which turned a 400 for a Pending pod into
"Attempted to call a sync iterator on an async stream").

Retries (`RetrySettings`): reads (get, list, opening a watch or a log), deletes and patches
(idempotent as this package sends them) are retried on 429 (after Retry-After), 500, 502, 503,
504 and dropped connections, with a doubling back-off and a bound on attempts. Creates are
retried only where the server cannot have acted: 429 and a connection that never opened. A
connection refused before the server ever answered this client is not retried at all: the
kubeconfig points nowhere, and the user hears it at once (exit 2).

Configuration (settings, the kubeconfig) is api._config's; which kinds it handles, api._kinds'.
Lists go in pages; tables and metadata-only lists (less to send and decode) are api._lists'.

Writes carry the field manager `nccl-k8s` (managedFields shows which objects this tool wrote;
cleanup relies on it). The connection pool's bound, and `widen_pool`, are api._transport's.
`log_chunks` (many pods' logs at once, `results`) goes over connections of its own (_rawlogs).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal, NoReturn

import httpx2 as httpx
import msgspec
from lightkube import ConfigError
from lightkube.config.kubeconfig import SingleConfig
from lightkube.resources.core_v1 import PodLog

from nccl_k8s.errors import ClusterError, NotFound, UsageError
from nccl_k8s.k8s.api._config import ClientSettings, RetrySettings, load_config
from nccl_k8s.k8s.api._kinds import ALL_NS, CLUSTER_SCOPED, CUSTOM, GLOBAL, path, resource
from nccl_k8s.k8s.api._lists import pages
from nccl_k8s.k8s.api._rawlogs import RawLogs, Unsupported
from nccl_k8s.k8s.api._translate import (
    Ask,
    decode,
    event_status,
    not_an_object,
    not_served,
    retry_after,
    selector,
    status_error,
    status_parts,
    transport_error,
)
from nccl_k8s.k8s.api._transport import POOL_CONNECTIONS, Call, Connection
from nccl_k8s.k8s.api._types import Kind, Obj

Propagation = Literal["Background", "Foreground", "Orphan"]

#: The field manager of every write: kubectl shows it in managedFields, and cleanup takes it as
#: proof that this tool created an object.
FIELD_MANAGER = "nccl-k8s"

#: Which failures a request may be sent again after: "reads" for requests that change nothing
#: or change it the same way twice (get, list, watch, logs, delete, patch), "creates" for
#: requests the server must not see twice (only when it cannot have acted on the first).
Retry = Literal["reads", "creates"]


class KubeClient:
    """An API connection: the kubeconfig context's server, user and default namespace.

    Use as an async context manager (`async with KubeClient.connect(settings) as kc:`), or call
    `aclose()`. Every method returns plain objects and raises only nccl_k8s.errors types.
    `transport`: an httpx transport to send through instead of a pool of real connections
    (lightkube's and httpx's public seam; tests record or answer requests with it).
    """

    def __init__(
        self,
        config: SingleConfig,
        *,
        timeout_s: float = 10.0,
        retry: RetrySettings | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if config.cluster.server.startswith("http://") and not config.cluster.insecure:
            # Plain HTTP has no TLS to verify; without this lightkube loads the system CA
            # bundle anyway, 80 ms of the second `status` may take.
            config = config._replace(cluster=msgspec.structs.replace(config.cluster, insecure=True))
        self.config = config
        self.server: str = config.cluster.server
        self.namespace: str = config.namespace
        self.retry = retry or RetrySettings()
        self._reached = False
        try:
            self._conn = Connection(config, timeout_s=timeout_s, transport=transport)
        except (ConfigError, OSError, ValueError) as e:
            raise UsageError(f"kubeconfig context {config.context_name!r}: {e}") from e
        # Many pods' logs at once (`results`) go over connections of their own (_rawlogs).
        self._raw = RawLogs(config, self._conn.auth, timeout_s, usable=transport is None)

    @classmethod
    def connect(cls, settings: ClientSettings) -> KubeClient:
        """A client for the settings' context. Reads the kubeconfig; sends nothing yet."""
        return cls(load_config(settings), timeout_s=settings.timeout_s, retry=settings.retry)

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._raw.aclose()
        await self._conn.aclose()

    def widen_pool(self, connections: int) -> int:
        """Let the pool hold up to `connections` at once (never fewer than it does now): for a
        caller that knows how many streams it holds together. The number it now holds; where
        the transport is an injected one, POOL_CONNECTIONS, as httpx's."""
        return self._conn.widen(connections)

    # ---- sending -----------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        kind: str,
        *,
        namespace: str | None = None,
        name: str | None = None,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        watch: bool = False,
        api_version: str | None = None,
    ) -> Call:
        """The request for a kind's URL (the path from its lightkube resource class)."""
        res = PodLog if kind == "PodLog" else resource(kind, api_version)
        query = {k: v for k, v in (params or {}).items() if v is not None}
        if watch:
            query["watch"] = "true"
        if method in ("POST", "PATCH", "PUT"):
            query.setdefault("fieldManager", FIELD_MANAGER)
        headers = {"Content-Type": content_type} if content_type is not None else None
        url = path(res, namespace=namespace, name=name)
        return Call(method, url, query, body, headers)

    async def _send(
        self, call: Call, ask: Ask, *, retry: Retry, stream: bool = False
    ) -> httpx.Response:
        """Send, retrying what the policy allows; the response (status < 400) or our error."""
        attempt = 0
        while True:
            attempt += 1
            last = attempt >= self.retry.attempts
            try:
                resp = await self._conn.send(call, stream=stream)
            except ConfigError as e:  # an auth plugin of the kubeconfig failed
                raise UsageError(f"kubeconfig context {self.config.context_name!r}: {e}") from e
            except httpx.TransportError as e:
                opening = isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout))
                if opening and not self._reached:
                    self._raise_transport(e, ask)  # the kubeconfig points nowhere: say so now
                dropped = isinstance(
                    e, (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)
                )
                if not last and (opening or (retry == "reads" and dropped)):
                    await asyncio.sleep(self._backoff(attempt))
                    continue
                self._raise_transport(e, ask)
            self._reached = True
            if resp.status_code < 400:
                return resp
            if stream:
                await resp.aread()
                await resp.aclose()
            wait = None if last else self._retry_wait(resp, attempt, retry)
            if wait is None:
                self._raise_status(resp, ask)
            await asyncio.sleep(wait)

    def _backoff(self, attempt: int) -> float:
        return float(min(self.retry.max_wait_s, self.retry.backoff_s * 2 ** (attempt - 1)))

    def _retry_wait(self, resp: httpx.Response, attempt: int, retry: Retry) -> float | None:
        """Seconds to pause before sending again, or None when this answer is final."""
        code = resp.status_code
        if code == 429:
            after = retry_after(resp)
            if after is not None:
                return after if after <= self.retry.max_wait_s else None
            return self._backoff(attempt)
        if retry == "reads" and code in (500, 502, 503, 504):
            return self._backoff(attempt)
        return None

    # ---- error translation -------------------------------------------------------------------

    def _raise_status(self, resp: httpx.Response, ask: Ask) -> NoReturn:
        message, reason = status_parts(resp)
        e = httpx.HTTPStatusError(message, request=resp.request, response=resp)
        raise self._status_error(resp.status_code, reason, message, ask) from e

    def _status_error(
        self, status: int, reason: str | None, message: str, ask: Ask
    ) -> ClusterError:
        """Our error for an HTTP status (or a watch's ERROR event carrying a Status)."""
        return status_error(
            status,
            reason,
            message,
            ask,
            server=self.server,
            user=self._user(),
            context=self.config.context_name,
            attempts=self.retry.attempts,
        )

    def _raise_transport(self, e: BaseException, ask: Ask) -> NoReturn:
        raise transport_error(
            e, ask, server=self.server, reached=self._reached, attempts=self.retry.attempts
        ) from e

    def _object(self, resp: httpx.Response, ask: Ask) -> Obj:
        """The response body as a JSON object, or the ClusterError saying it is not one."""
        try:
            out = decode(resp)
        except msgspec.DecodeError as e:
            raise not_an_object(e, ask, self.server) from e
        if not isinstance(out, dict):
            wrong = TypeError(f"got {type(out).__name__}")
            raise not_an_object(wrong, ask, self.server) from wrong
        return out

    def _user(self) -> str:
        user = self.config.context.user
        return f"user {user!r}" if user else "this user"

    def namespace_for(self, kind: str, namespace: str | None) -> str | None:
        """The namespace a request about `kind` goes to: None for a cluster-scoped kind, else
        `namespace` or the context's."""
        if kind in CLUSTER_SCOPED or kind in GLOBAL:
            return None
        return namespace or self.namespace

    async def version(self) -> Obj:
        """The server's /version (gitVersion, platform ...): the cheapest proof it answers."""
        ask = Ask("get", "version", None)
        return self._object(await self._send(Call("GET", "version"), ask, retry="reads"), ask)

    async def review_access(self, attributes: Obj) -> bool:
        """May this user do it? A SelfSubjectAccessReview of `attributes` (verb, group,
        resource, subresource, namespace): nothing is written, so it is retried as a read."""
        ask = Ask("create", "SelfSubjectAccessReview", None)
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                  "spec": {"resourceAttributes": attributes}}  # fmt: skip
        url = "apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
        got = self._object(
            await self._send(Call("POST", url, body=review), ask, retry="reads"), ask
        )
        return bool((got.get("status") or {}).get("allowed"))

    # ---- reads -------------------------------------------------------------------------------

    async def get(
        self, kind: Kind, name: str, *, namespace: str | None = None, api_version: str | None = None
    ) -> Obj | None:
        """The object, or None when it does not exist (for a custom kind, also when the cluster
        does not serve that resource at all: creating it then says so)."""
        ns = self.namespace_for(kind, namespace)
        ask = Ask("get", kind, ns, name)
        call = self._request("GET", kind, namespace=ns, name=name, api_version=api_version)
        try:
            resp = await self._send(call, ask, retry="reads")
        except NotFound:
            return None
        return self._object(resp, ask)

    async def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
        api_version: str | None = None,
        all_namespaces: bool = False,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[Obj], str]:
        """(objects, the list's resourceVersion) matching the selectors; of every namespace
        with `all_namespaces`. `label_selector` and `field_selector` are selectors in kubectl's
        syntax (`a in (x,y)`, `!b`, `status.phase!=Running`), ANDed with `labels` and
        `fields`. Read in pages (api._lists). A custom kind the cluster does not serve is
        NotFound."""
        ns = (
            ALL_NS
            if all_namespaces and kind not in CLUSTER_SCOPED and kind not in GLOBAL
            else self.namespace_for(kind, namespace)
        )
        params = {
            "labelSelector": ",".join(s for s in (selector(labels), label_selector) if s) or None,
            "fieldSelector": ",".join(s for s in (selector(fields), field_selector) if s) or None,
        }
        items: list[Obj] = []
        bodies = await pages(self, kind, params, namespace=ns, api_version=api_version)
        for body in bodies:
            version = body.get("apiVersion")
            for item in body.get("items") or []:
                # List items come without kind and apiVersion; callers read both.
                item.setdefault("kind", kind)
                if version:
                    item.setdefault("apiVersion", version)
                items.append(item)
        return items, str((bodies[-1].get("metadata") or {}).get("resourceVersion") or "")

    async def list_page(
        self,
        kind: Kind,
        params: Mapping[str, Any],
        *,
        namespace: str | None,
        api_version: str | None = None,
        accept: str | None = None,
    ) -> Obj:
        """One GET of a kind's collection as the server answers it: a List, or with `accept` a
        Table or a PartialObjectMetadataList; retried as a read. A page of a list (api._lists:
        `params` are its selectors, limit and continue); `namespace` as `namespace_for` gives
        it, or ALL_NS."""
        ask = Ask("list", kind, None if namespace == ALL_NS else namespace)
        call = self._request(
            "GET", kind, namespace=namespace, params=params, api_version=api_version
        )
        if accept is not None:
            call.headers = {**(call.headers or {}), "Accept": accept}
        return self._object(await self._send(call, ask, retry="reads"), ask)

    async def watch(
        self,
        kind: Kind,
        *,
        resource_version: str,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
        server_timeout_s: int | None = None,
    ) -> AsyncIterator[tuple[str, Obj]]:
        """(event type, object) from `resource_version` on, until the server closes the stream.

        Opening the stream is retried like any read. Raises Expired on 410 Gone (relist),
        Unreachable when the connection drops mid-stream.
        """
        ns = self.namespace_for(kind, namespace)
        ask = Ask("watch", kind, ns)
        call = self._request(
            "GET",
            kind,
            namespace=ns,
            watch=True,
            params={
                "labelSelector": selector(labels),
                "fieldSelector": selector(fields),
                "resourceVersion": resource_version,
                "timeoutSeconds": server_timeout_s,
                "allowWatchBookmarks": "true",
            },
        )
        call.timeout = self._conn.watch_timeout  # no read timeout: a watch may be quiet
        resp = await self._send(call, ask, retry="reads", stream=True)
        try:
            async for line in resp.aiter_lines():
                if not line.strip():
                    continue
                event = msgspec.json.decode(line)
                etype = str(event.get("type"))
                obj = event.get("object") or {}
                if etype == "ERROR":
                    raise self._status_error(*event_status(obj), ask)
                obj.setdefault("kind", kind)
                yield etype, obj
        except (httpx.TransportError, httpx.StreamError) as e:
            self._raise_transport(e, ask)
        except (msgspec.DecodeError, AttributeError) as e:
            raise not_an_object(e, ask, self.server) from e
        finally:
            await resp.aclose()

    async def logs(
        self,
        pod: str,
        *,
        namespace: str | None = None,
        container: str | None = None,
        tail_lines: int | None = None,
        previous: bool = False,
    ) -> str:
        """The container's log so far (its last `tail_lines` lines when given); with
        `previous`, the log of its run before the last restart (400 when there was none)."""
        resp = await self._log(pod, namespace, container, tail_lines, previous)
        return str(resp.text)

    async def log_chunks(
        self, pod: str, *, namespace: str | None = None, container: str | None = None
    ) -> AsyncIterator[bytes]:
        """The container's log so far, as the bytes arrive (never held whole): over the raw
        path (`_rawlogs`, ~10x less client CPU per pod), else, and for any answer but 200
        (a pod not started: 400, raised as `logs` raises it), the ordinary one."""
        ns = self.namespace_for("Pod", namespace)
        sent = 0
        if self._raw.usable:
            try:
                params = {"container": container}
                async for data in self._raw.get(f"api/v1/namespaces/{ns}/pods/{pod}/log", params):
                    sent += len(data)
                    yield data
                return
            except Unsupported:
                pass  # from the start; what was sent is the start of what the log holds
        resp = await self._log(pod, ns, container, None, False)
        yield resp.content[sent:]

    async def _log(
        self, pod: str, namespace: str | None, container: str | None, tail: int | None, prev: bool
    ) -> httpx.Response:
        ns = self.namespace_for("Pod", namespace)
        ask = Ask("get logs of", "Pod", ns, pod)
        # One body, not a line iterator: an async step per line cost 4 of the 5 s that
        # collecting 1,024 pods took.
        call = self._request(
            "GET",
            "PodLog",
            namespace=ns,
            name=pod,
            params={
                "container": container,
                "tailLines": tail,
                "previous": "true" if prev else None,
            },
        )
        return await self._send(call, ask, retry="reads")

    async def follow_logs(
        self,
        pod: str,
        *,
        namespace: str | None = None,
        container: str | None = None,
        tail_lines: int | None = None,
    ) -> AsyncIterator[str]:
        """The container's log lines as they are written, until it ends. A pod whose container
        has not started answers 400 (BadRequest), raised as ClusterError(status=400)."""
        ns = self.namespace_for("Pod", namespace)
        ask = Ask("follow logs of", "Pod", ns, pod)
        call = self._request(
            "GET",
            "PodLog",
            namespace=ns,
            name=pod,
            params={"container": container, "tailLines": tail_lines, "follow": "true"},
        )
        call.timeout = self._conn.watch_timeout
        resp = await self._send(call, ask, retry="reads", stream=True)
        try:
            async for line in resp.aiter_lines():
                yield line
        except (httpx.TransportError, httpx.StreamError) as e:
            self._raise_transport(e, ask)
        finally:
            await resp.aclose()

    # ---- writes ------------------------------------------------------------------------------

    async def create(self, obj: Obj) -> Obj:
        """Create `obj` (POST, field manager nccl-k8s): the object as the server has it, with
        its uid. An object of that name already there is Conflict(reason="AlreadyExists"): a
        create never changes what exists, so two deploys of one run cannot both succeed."""
        meta = obj.get("metadata", {})
        kind = str(obj.get("kind"))
        name = meta.get("name")
        ns = self.namespace_for(kind, meta.get("namespace"))
        ask = Ask("create", kind, ns, name)
        api_version = str(obj.get("apiVersion"))
        call = self._request("POST", kind, namespace=ns, body=obj, api_version=api_version)
        try:
            return self._object(await self._send(call, ask, retry="creates"), ask)
        except NotFound as e:
            if (api_version, kind) not in CUSTOM:
                raise
            raise not_served(self.server, kind, api_version, ns, name) from e

    async def apply(self, obj: Obj, *, force: bool = False) -> Obj:
        """Server-side apply `obj` as field manager nccl-k8s; the object as the server has it.

        `force=False` for a first apply, so fields another manager owns are a Conflict rather
        than silently taken; `force=True` for re-applying what this tool created.
        """
        meta = obj.get("metadata", {})
        kind = str(obj.get("kind"))
        name = str(meta.get("name"))
        ns = self.namespace_for(kind, meta.get("namespace"))
        ask = Ask("apply", kind, ns, name)
        call = self._request(
            "PATCH",
            kind,
            namespace=ns,
            name=name,
            body=obj,
            content_type="application/apply-patch+yaml",
            params={"force": "true" if force else None},
            api_version=str(obj.get("apiVersion")),
        )
        return self._object(await self._send(call, ask, retry="reads"), ask)

    async def patch(
        self,
        kind: Kind,
        name: str,
        patch: Obj,
        *,
        namespace: str | None = None,
        api_version: str | None = None,
    ) -> Obj | None:
        """JSON merge patch (RFC 7386) of one object; None when it does not exist. Retried like
        a read, so send only patches that mean the same the second time (set, not add)."""
        ns = self.namespace_for(kind, namespace)
        ask = Ask("patch", kind, ns, name)
        call = self._request(
            "PATCH",
            kind,
            namespace=ns,
            name=name,
            body=patch,
            content_type="application/merge-patch+json",
            api_version=api_version,
        )
        try:
            resp = await self._send(call, ask, retry="reads")
        except NotFound:
            return None
        return self._object(resp, ask)

    async def create_namespace(self, name: str, *, labels: Mapping[str, str] | None = None) -> Obj:
        body: Obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        if labels:
            body["metadata"]["labels"] = dict(labels)
        return await self.create(body)

    async def delete(
        self,
        kind: Kind,
        name: str,
        *,
        namespace: str | None = None,
        propagation: Propagation = "Background",
        grace_period_s: int | None = None,
        uid: str | None = None,
        api_version: str | None = None,
    ) -> bool:
        """Delete one object; False when it was already gone. With `uid`, only that object: when
        the object of that name is another one (ours was deleted and a new one made meanwhile,
        which is not ours to delete), Conflict (reason "Conflict", "Precondition failed")."""
        ns = self.namespace_for(kind, namespace)
        ask = Ask("delete", kind, ns, name)
        options: Obj = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": propagation,
        }
        if grace_period_s is not None:
            options["gracePeriodSeconds"] = grace_period_s
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        call = self._request(
            "DELETE", kind, namespace=ns, name=name, body=options, api_version=api_version
        )
        try:
            resp = await self._send(call, ask, retry="reads")
        except NotFound:
            return False
        await resp.aclose()
        return True


__all__ = [
    "FIELD_MANAGER",
    "POOL_CONNECTIONS",
    "ClientSettings",
    "Kind",
    "KubeClient",
    "Propagation",
    "RetrySettings",
    "load_config",
]
