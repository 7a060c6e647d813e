"""The one module that talks to the Kubernetes API server (over lightkube's connection).

Everything above it gets plain dicts (the objects as the API shapes them) and our own errors:
every HTTP failure is translated here, once, into the `ClusterError` tree of nccl_k8s.errors
with a message a user can act on (`forbidden: user X may not create jobs in namespace Y`,
`cannot reach the API server at URL`), always `raise ... from` the original.

lightkube provides the connection (kubeconfig auth, TLS, the httpx client) and the URL of each
resource; requests are sent and decoded here, so that every read path shares one retry policy
and streams never go through a decoder that reads an async body synchronously (lightkube's
`log(follow=True)` and `watch` do, which turned a 400 for a Pending pod into "Attempted to call
a sync iterator on an async stream").

Retries (`RetrySettings`): reads (get, list, opening a watch or a log), deletes and patches
(idempotent as this package sends them) are retried on 429 (after Retry-After), 500, 502, 503,
504 and dropped connections, with a doubling back-off and a bound on attempts. Creates are
retried only where the server cannot have acted: 429 and a connection that never opened. A
connection refused before the server ever answered this client is not retried at all: the
kubeconfig points nowhere, and the user hears it at once (exit 2).

Configuration follows kubectl's precedence: `--kubeconfig`, else `$KUBECONFIG` (the first file of
the list that exists), else `~/.kube/config`, else the in-cluster service account; `--context`
picks the context; the context's namespace is the default namespace. A file that is not a
kubeconfig (binary, broken YAML, a list) is one line naming the file and what is wrong.

Writes carry the field manager `nccl-k8s` (managedFields shows which objects this tool wrote;
cleanup relies on it). One client holds one connection pool of at most 100 connections
(httpx's default), which bounds how many log streams run at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Literal, NoReturn

import httpx2 as httpx
import msgspec
import yaml
from lightkube import AsyncClient, ConfigError
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.core import resource as lk_resource
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apps_v1 import StatefulSet
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import (
    ConfigMap,
    Event,
    Namespace,
    Node,
    Pod,
    PodLog,
    Service,
)

from nccl_k8s.errors import (
    ClusterError,
    Conflict,
    Expired,
    Forbidden,
    NotFound,
    Unreachable,
    UsageError,
)
from nccl_k8s.k8s._types import Kind, Obj

Propagation = Literal["Background", "Foreground", "Orphan"]

#: The field manager of every write: kubectl shows it in managedFields, and cleanup takes it as
#: proof that this tool created an object.
FIELD_MANAGER = "nccl-k8s"

_RESOURCES: dict[str, Any] = {
    "ConfigMap": ConfigMap,
    "Service": Service,
    "Pod": Pod,
    "Namespace": Namespace,
    "Node": Node,
    "Event": Event,
    "Job": Job,
    "StatefulSet": StatefulSet,
}
#: Custom resources we render, by apiVersion (two groups both call theirs PodGroup). Made once
#: with lightkube's public generic-resource API.
_CUSTOM: dict[tuple[str, str], Any] = {
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): create_namespaced_resource(
        "scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups"
    ),
    ("scheduling.x-k8s.io/v1alpha1", "PodGroup"): create_namespaced_resource(
        "scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups"
    ),
}
_SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")

#: Which failures a request may be sent again after: "reads" for requests that change nothing
#: or change it the same way twice (get, list, watch, logs, delete, patch), "creates" for
#: requests the server must not see twice (only when it cannot have acted on the first).
Retry = Literal["reads", "creates"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RetrySettings:
    """How a request rides out a busy or briefly failing API server."""

    attempts: int = 5
    """Tries per request, the first included. Five spans about 4 s of back-off: an API server
    restarting behind its load balancer, or etcd's leader election, is over by then."""
    backoff_s: float = 0.25
    """First pause; doubles per attempt (0.25, 0.5, 1, 2 s)."""
    max_wait_s: float = 10.0
    """Longest single pause, Retry-After included (a server asking for more is not waited for:
    the request fails and says so)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClientSettings:
    """Where the API server is and how long to wait for it."""

    kubeconfig: str | None = None
    """--kubeconfig: a kubeconfig file; None follows kubectl ($KUBECONFIG, ~/.kube/config,
    in-cluster)."""
    context: str | None = None
    """--context: the kubeconfig context; None uses the file's current-context."""
    timeout_s: float = 10.0
    """Seconds a single request (not a watch or a followed log) may take: long enough for a
    loaded API server listing a thousand pods, short enough that a dead one is named quickly."""
    retry: RetrySettings = dataclasses.field(default_factory=RetrySettings)
    """How transient failures are retried."""


def _first_existing(paths: str) -> str | None:
    for p in paths.split(os.pathsep):
        if p and Path(p).expanduser().is_file():
            return p
    return None


def load_config(settings: ClientSettings) -> SingleConfig:
    """The kubeconfig context to use, by kubectl's precedence; UsageError when there is none or
    the file is not a kubeconfig."""
    if settings.kubeconfig is not None:
        if not Path(settings.kubeconfig).expanduser().is_file():
            raise UsageError(
                f'--kubeconfig "{settings.kubeconfig}": no such file', key="--kubeconfig"
            )
        return _get_context(_read_kubeconfig(settings.kubeconfig), settings.context)
    env = os.environ.get("KUBECONFIG")
    path = _first_existing(env) if env else None
    if path is None and Path("~/.kube/config").expanduser().is_file():
        path = "~/.kube/config"
    if path is not None:
        return _get_context(_read_kubeconfig(path), settings.context)
    if (_SERVICE_ACCOUNT / "token").is_file() and "KUBERNETES_SERVICE_HOST" in os.environ:
        if settings.context is not None:
            raise UsageError(
                f'--context "{settings.context}": there is no kubeconfig, only the '
                "in-cluster service account",
                key="--context",
            )
        try:
            config = KubeConfig.from_service_account().get()
        except (ConfigError, OSError, ValueError) as e:
            raise UsageError(f"in-cluster service account: {e}", key="--kubeconfig") from e
        assert config is not None  # from_one always sets the current context
        return config
    raise UsageError(
        "no cluster configured: expected --kubeconfig FILE, $KUBECONFIG, ~/.kube/config or an "
        "in-cluster service account",
        key="--kubeconfig",
    )


def _read_kubeconfig(path: str) -> KubeConfig:
    """The file as a KubeConfig, or a UsageError naming the file and what is wrong with it."""
    where = f"kubeconfig {path}"
    file = Path(path).expanduser()
    try:
        raw = file.read_bytes()
    except OSError as e:
        raise UsageError(f"{where}: cannot read it: {e.strerror or e}", key="--kubeconfig") from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(
            f"{where}: not a kubeconfig (not UTF-8 text: a binary file?)", key="--kubeconfig"
        ) from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UsageError(f"{where}: not valid YAML ({at}{problem})", key="--kubeconfig") from e
    if not isinstance(data, dict) or not isinstance(data.get("clusters"), list):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        if isinstance(data, dict):
            got = "a mapping without a `clusters` list"
        raise UsageError(
            f"{where}: expected a kubeconfig (a mapping with clusters, contexts and users "
            f"lists), got {got}",
            key="--kubeconfig",
        )
    try:
        return KubeConfig.from_dict(data, fname=file)
    except (ConfigError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise UsageError(f"{where}: not a valid kubeconfig: {_config_problem(e)}") from e
    except msgspec.ValidationError as e:
        raise UsageError(f"{where}: not a valid kubeconfig: {e}", key="--kubeconfig") from e


def _config_problem(e: BaseException) -> str:
    if isinstance(e, KeyError):
        return f"missing {e.args[0]!r}"
    return str(e) or type(e).__name__


def _get_context(kc: KubeConfig, context: str | None) -> SingleConfig:
    try:
        config = kc.get(context)
    except ConfigError as e:
        names = ", ".join(sorted(kc.contexts)) or "none"
        raise UsageError(f"--context: {e} (contexts: {names})", key="--context") from e
    except (msgspec.ValidationError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise UsageError(
            f"kubeconfig: context {context or kc.current_context!r} is not valid: "
            f"{_config_problem(e)}",
            key="--kubeconfig",
        ) from e
    if config is None:  # only when no default was given and no context set, which raises above
        raise UsageError("kubeconfig has no current-context: pass --context", key="--context")
    server = config.cluster.server or ""
    if not server.startswith(("http://", "https://")):
        raise UsageError(
            f"kubeconfig context {config.context_name!r}: server {server!r} is not an http:// "
            "or https:// URL",
            key="--kubeconfig",
        )
    return config


@dataclasses.dataclass(frozen=True)
class _Ask:
    """What a request asked, for the error message."""

    verb: str
    kind: str
    namespace: str | None = None
    name: str | None = None


def _selector(pairs: Mapping[str, str] | None) -> str | None:
    return ",".join(f"{k}={v}" for k, v in pairs.items()) if pairs else None


def _decode(resp: httpx.Response) -> Any:
    return msgspec.json.decode(resp.content)


def _resource(kind: str, api_version: str | None = None) -> Any:
    """The lightkube class of a kind; custom kinds need their apiVersion to tell groups apart."""
    if kind in _RESOURCES:
        return _RESOURCES[kind]
    try:
        return _CUSTOM[(api_version or "", kind)]
    except KeyError:
        known = ", ".join(sorted(f"{k} {v}" for v, k in _CUSTOM))
        raise ClusterError(
            f"cannot handle a {kind} {api_version}: expected one of {known}"
        ) from None


def _plural(kind: str) -> str:
    if kind == "PodGroup":
        return "podgroups"
    res = _RESOURCES.get(kind)
    return str(lk_resource.api_info(res).plural) if res is not None else kind.lower()


class KubeClient:
    """An API connection: the kubeconfig context's server, user and default namespace.

    Use as an async context manager (`async with KubeClient.connect(settings) as kc:`), or call
    `aclose()`. Every method returns plain objects and raises only nccl_k8s.errors types.
    """

    def __init__(
        self,
        config: SingleConfig,
        *,
        timeout_s: float = 10.0,
        retry: RetrySettings | None = None,
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
            self._client = AsyncClient(
                config,
                timeout=httpx.Timeout(timeout_s),
                field_manager=FIELD_MANAGER,
            )
        except (ConfigError, OSError, ValueError) as e:
            raise UsageError(f"kubeconfig context {config.context_name!r}: {e}") from e
        self._gc = self._client._client

    @classmethod
    def connect(cls, settings: ClientSettings) -> KubeClient:
        """A client for the settings' context. Reads the kubeconfig; sends nothing yet."""
        return cls(load_config(settings), timeout_s=settings.timeout_s, retry=settings.retry)

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.close()

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
    ) -> Any:
        """lightkube's request for the resource's URL (auth, TLS and paths are lightkube's)."""
        res = PodLog if kind == "PodLog" else _resource(kind, api_version)
        verb = "get" if name is not None else "list"
        br = self._gc.prepare_request(
            verb,
            res,
            name=name,
            namespace=namespace,
            watch=watch,
            params={k: v for k, v in (params or {}).items() if v is not None},
        )
        br.method = method
        br.data = body
        if content_type is not None:
            br.headers = {"Content-Type": content_type}
        if method in ("POST", "PATCH", "PUT"):
            br.params.setdefault("fieldManager", FIELD_MANAGER)
        return br

    async def _send(
        self, br: Any, ask: _Ask, *, retry: Retry, stream: bool = False
    ) -> httpx.Response:
        """Send, retrying what the policy allows; the response (status < 400) or our error."""
        attempt = 0
        while True:
            attempt += 1
            last = attempt >= self.retry.attempts
            try:
                req = self._gc.build_adapter_request(br)
                resp: httpx.Response = await self._gc.send(req, stream=stream)  # type: ignore[no-untyped-call]  # lightkube's generic client is untyped
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
            after = _retry_after(resp)
            if after is not None:
                return after if after <= self.retry.max_wait_s else None
            return self._backoff(attempt)
        if retry == "reads" and code in (500, 502, 503, 504):
            return self._backoff(attempt)
        return None

    # ---- error translation -------------------------------------------------------------------

    def _fields(self, ask: _Ask) -> dict[str, Any]:
        return {
            "verb": ask.verb,
            "resource": _plural(ask.kind),
            "namespace": ask.namespace,
            "name": ask.name,
            "server": self.server,
        }

    def _raise_status(self, resp: httpx.Response, ask: _Ask) -> NoReturn:
        status = resp.status_code
        try:
            body = _decode(resp)
        except (msgspec.DecodeError, httpx.ResponseNotRead):
            body = None
        body = body if isinstance(body, dict) else {}
        message = str(body.get("message") or resp.reason_phrase or "")
        reason = body.get("reason")
        e = httpx.HTTPStatusError(message, request=resp.request, response=resp)
        raise self._status_error(status, reason, message, ask) from e

    def _status_error(
        self, status: int, reason: str | None, message: str, ask: _Ask
    ) -> ClusterError:
        """Our error for an HTTP status (or a watch's ERROR event carrying a Status)."""
        resource = _plural(ask.kind)
        what = f"{resource} {ask.name!r}" if ask.name else resource
        where = f" in namespace {ask.namespace}" if ask.namespace else ""
        fields = dict(self._fields(ask), status=status, reason=reason)
        detail = f": {message}" if message else ""
        if status == 404:
            return NotFound(f"{what} not found{where}{detail}", **fields)
        if status == 409:
            if reason == "AlreadyExists":
                return Conflict(f"{ask.kind} {ask.name} already exists{where}", **fields)
            return Conflict(f"conflict on {ask.verb} {what}{where}{detail}", **fields)
        if status == 403:
            return Forbidden(
                f"forbidden: {self._user()} may not {ask.verb} {resource}{where} on "
                f"{self.server}{detail}; ask a cluster admin for that permission (RBAC)",
                **fields,
            )
        if status == 401:
            return ClusterError(
                f"unauthorized: {self.server} rejected the credentials of context "
                f"{self.config.context_name!r}{detail}; refresh them (kubectl config view)",
                **fields,
            )
        if status == 410:
            return Expired(f"watch of {resource}{where} expired{detail}", **fields)
        tried = f" (asked {self.retry.attempts} times)" if status in (500, 502, 503, 504) else ""
        return ClusterError(
            f"{self.server} answered {status} to {ask.verb} {what}{where}{detail}{tried}",
            **fields,
        )

    def _raise_transport(self, e: BaseException, ask: _Ask) -> NoReturn:
        fields = self._fields(ask)
        resource = _plural(ask.kind)
        what = f"{resource} {ask.name!r}" if ask.name else resource
        where = f" in namespace {ask.namespace}" if ask.namespace else ""
        if not self._reached and isinstance(
            e, (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol)
        ):
            raise Unreachable(
                f"cannot reach the API server at {self.server} ({_reason(e)}): check --context, "
                "--kubeconfig and that the cluster is up",
                reached=False,
                **fields,
            ) from e
        if isinstance(e, httpx.ConnectError):
            raise Unreachable(
                f"lost the API server at {self.server} during {ask.verb} {what}{where} "
                f"({_reason(e)}; asked {self.retry.attempts} times)",
                **fields,
            ) from e
        if isinstance(e, httpx.TimeoutException):
            raise Unreachable(
                f"the API server at {self.server} did not answer {ask.verb} {what}{where} in "
                f"time ({type(e).__name__})",
                **fields,
            ) from e
        raise Unreachable(
            f"lost the connection to {self.server} during {ask.verb} {what}{where} ({_reason(e)})",
            **fields,
        ) from e

    def _object(self, resp: httpx.Response, ask: _Ask) -> Obj:
        """The response body as a JSON object, or the ClusterError saying it is not one."""
        try:
            out = _decode(resp)
        except msgspec.DecodeError as e:
            self._not_an_object(e, ask)
        if not isinstance(out, dict):
            self._not_an_object(TypeError(f"got {type(out).__name__}"), ask)
        return out

    def _not_an_object(self, e: BaseException, ask: _Ask) -> NoReturn:
        raise ClusterError(
            f"{self.server} sent something that is not a Kubernetes object for {ask.verb} "
            f"{_plural(ask.kind)}: {e}",
            **self._fields(ask),
        ) from e

    def _user(self) -> str:
        user = self.config.context.user
        return f"user {user!r}" if user else "this user"

    def _ns(self, kind: str, namespace: str | None) -> str | None:
        if kind in ("Namespace", "Node"):
            return None
        return namespace or self.namespace

    # ---- reads -------------------------------------------------------------------------------

    async def get(
        self, kind: Kind, name: str, *, namespace: str | None = None, api_version: str | None = None
    ) -> Obj | None:
        """The object, or None when it does not exist (for a custom kind, also when the cluster
        does not serve that resource at all: creating it then says so)."""
        ns = self._ns(kind, namespace)
        ask = _Ask("get", kind, ns, name)
        br = self._request("GET", kind, namespace=ns, name=name, api_version=api_version)
        try:
            resp = await self._send(br, ask, retry="reads")
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
    ) -> tuple[list[Obj], str]:
        """(objects, the list's resourceVersion) matching the selectors."""
        ns = self._ns(kind, namespace)
        ask = _Ask("list", kind, ns)
        params: dict[str, Any] = {
            "labelSelector": _selector(labels),
            "fieldSelector": _selector(fields),
        }
        items: list[Obj] = []
        while True:
            br = self._request("GET", kind, namespace=ns, params=params)
            body = self._object(await self._send(br, ask, retry="reads"), ask)
            api_version = body.get("apiVersion")
            for item in body.get("items") or []:
                # List items come without kind and apiVersion; callers read both.
                item.setdefault("kind", kind)
                if api_version:
                    item.setdefault("apiVersion", api_version)
                items.append(item)
            meta = body.get("metadata") or {}
            rv = str(meta.get("resourceVersion") or "")
            if not meta.get("continue"):
                return items, rv
            params["continue"] = meta["continue"]

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
        ns = self._ns(kind, namespace)
        ask = _Ask("watch", kind, ns)
        br = self._request(
            "GET",
            kind,
            namespace=ns,
            watch=True,
            params={
                "labelSelector": _selector(labels),
                "fieldSelector": _selector(fields),
                "resourceVersion": resource_version,
                "timeoutSeconds": server_timeout_s,
                "allowWatchBookmarks": "true",
            },
        )
        br.timeout = self._gc._watch_timeout  # no read timeout: a watch may be quiet
        resp = await self._send(br, ask, retry="reads", stream=True)
        try:
            async for line in resp.aiter_lines():
                if not line.strip():
                    continue
                event = msgspec.json.decode(line)
                etype = str(event.get("type"))
                obj = event.get("object") or {}
                if etype == "ERROR":
                    raise self._status_error(
                        int(obj.get("code") or 500),
                        obj.get("reason"),
                        str(obj.get("message") or ""),
                        ask,
                    )
                obj.setdefault("kind", kind)
                yield etype, obj
        except (httpx.TransportError, httpx.StreamError) as e:
            self._raise_transport(e, ask)
        except (msgspec.DecodeError, AttributeError) as e:
            self._not_an_object(e, ask)
        finally:
            await resp.aclose()

    async def logs(
        self,
        pod: str,
        *,
        namespace: str | None = None,
        container: str | None = None,
        tail_lines: int | None = None,
    ) -> str:
        """The container's log so far (its last `tail_lines` lines when given)."""
        ns = self._ns("Pod", namespace)
        ask = _Ask("get logs of", "Pod", ns, pod)
        # One body, not a line iterator: an async step per line cost 4 of the 5 s that
        # collecting 1,024 pods took.
        br = self._request(
            "GET",
            "PodLog",
            namespace=ns,
            name=pod,
            params={"container": container, "tailLines": tail_lines},
        )
        resp = await self._send(br, ask, retry="reads")
        return str(resp.text)

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
        ns = self._ns("Pod", namespace)
        ask = _Ask("follow logs of", "Pod", ns, pod)
        br = self._request(
            "GET",
            "PodLog",
            namespace=ns,
            name=pod,
            params={"container": container, "tailLines": tail_lines, "follow": "true"},
        )
        br.timeout = self._gc._watch_timeout
        resp = await self._send(br, ask, retry="reads", stream=True)
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
        ns = self._ns(kind, meta.get("namespace"))
        ask = _Ask("create", kind, ns, name)
        api_version = str(obj.get("apiVersion"))
        br = self._request("POST", kind, namespace=ns, body=obj, api_version=api_version)
        try:
            return self._object(await self._send(br, ask, retry="creates"), ask)
        except NotFound as e:
            if (api_version, kind) not in _CUSTOM:
                raise
            raise NotFound(
                f"{self.server} does not serve {kind} {api_version} (its "
                "CustomResourceDefinition is not installed): install the scheduler that defines "
                "it, or deploy without that --gang",
                status=404,
                verb="create",
                resource=_plural(kind),
                namespace=ns,
                name=name,
                server=self.server,
            ) from e

    async def apply(self, obj: Obj, *, force: bool = False) -> Obj:
        """Server-side apply `obj` as field manager nccl-k8s; the object as the server has it.

        `force=False` for a first apply, so fields another manager owns are a Conflict rather
        than silently taken; `force=True` for re-applying what this tool created.
        """
        meta = obj.get("metadata", {})
        kind = str(obj.get("kind"))
        name = str(meta.get("name"))
        ns = self._ns(kind, meta.get("namespace"))
        ask = _Ask("apply", kind, ns, name)
        br = self._request(
            "PATCH",
            kind,
            namespace=ns,
            name=name,
            body=obj,
            content_type="application/apply-patch+yaml",
            params={"force": "true" if force else None},
            api_version=str(obj.get("apiVersion")),
        )
        return self._object(await self._send(br, ask, retry="reads"), ask)

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
        ns = self._ns(kind, namespace)
        ask = _Ask("patch", kind, ns, name)
        br = self._request(
            "PATCH",
            kind,
            namespace=ns,
            name=name,
            body=patch,
            content_type="application/merge-patch+json",
            api_version=api_version,
        )
        try:
            resp = await self._send(br, ask, retry="reads")
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
        ns = self._ns(kind, namespace)
        ask = _Ask("delete", kind, ns, name)
        options: Obj = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": propagation,
        }
        if grace_period_s is not None:
            options["gracePeriodSeconds"] = grace_period_s
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        br = self._request(
            "DELETE", kind, namespace=ns, name=name, body=options, api_version=api_version
        )
        try:
            resp = await self._send(br, ask, retry="reads")
        except NotFound:
            return False
        await resp.aclose()
        return True


def _retry_after(resp: httpx.Response) -> float | None:
    """Seconds the server asked to wait: the Retry-After header (kube-apiserver sends seconds),
    else the Status' details.retryAfterSeconds."""
    header = resp.headers.get("Retry-After")
    if header is not None and header.strip().isdigit():
        return float(header.strip())
    try:
        body = _decode(resp)
    except msgspec.DecodeError:
        return None
    if isinstance(body, dict):
        seconds = (body.get("details") or {}).get("retryAfterSeconds")
        if isinstance(seconds, int) and seconds >= 0:
            return float(seconds)
    return None


def _reason(e: BaseException) -> str:
    """The innermost cause's words, e.g. 'Connection refused' rather than httpx's wrapper."""
    seen = e
    while seen.__cause__ is not None or seen.__context__ is not None:
        seen = seen.__cause__ or seen.__context__  # type: ignore[assignment]  # loop guard above
    text = getattr(seen, "strerror", None) or str(seen) or type(seen).__name__
    return str(text)


__all__ = [
    "FIELD_MANAGER",
    "ClientSettings",
    "Kind",
    "KubeClient",
    "Propagation",
    "RetrySettings",
    "load_config",
]
