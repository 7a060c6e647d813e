"""The one module that talks to the Kubernetes API server (lightkube's AsyncClient over httpx).

Everything above it gets plain dicts (the objects as the API shapes them) and our own errors:
every lightkube/httpx exception is translated here, once, into the `ClusterError` tree of
nccl_k8s.errors with a message a user can act on (`run X already exists in namespace Y: use
--run-id or cleanup`, `forbidden: cannot create jobs in namespace Y`, `cannot reach the API
server at URL`), always `raise ... from` the original.

Configuration follows kubectl's precedence: `--kubeconfig`, else `$KUBECONFIG` (the first file of
the list that exists), else `~/.kube/config`, else the in-cluster service account; `--context`
picks the context; the context's namespace is the default namespace.

Writes are server-side apply with the field manager `nccl-k8s`; reads are list (with label and
field selectors) and watch from a resourceVersion; pod logs whole, tailed or followed; deletes
with an explicit propagation policy. One client holds one connection pool of at most 100
connections (httpx's default), which bounds how many log streams run at once.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Literal, NoReturn

import httpx2 as httpx
import msgspec
from lightkube import ApiError, AsyncClient, ConfigError
from lightkube.codecs import from_dict
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.core.exceptions import LoadResourceError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apps_v1 import StatefulSet
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import ConfigMap, Event, Namespace, Pod, PodLog, Service
from lightkube.types import CascadeType, PatchType

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
from nccl_k8s.spec import LABEL_INSTANCE

Propagation = Literal["Background", "Foreground", "Orphan"]

#: The field manager of every write: kubectl shows it in managedFields, and a second apply by
#: the same manager updates rather than conflicts.
FIELD_MANAGER = "nccl-k8s"

_RESOURCES: dict[str, Any] = {
    "ConfigMap": ConfigMap,
    "Service": Service,
    "Pod": Pod,
    "Namespace": Namespace,
    "Event": Event,
    "Job": Job,
    "StatefulSet": StatefulSet,
}
#: Custom resources we render, by apiVersion (two groups both call theirs PodGroup). Created
#: once with lightkube's public generic-resource API, which also lets `from_dict` load them.
_CUSTOM: dict[tuple[str, str], Any] = {
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): create_namespaced_resource(
        "scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups"
    ),
    ("scheduling.x-k8s.io/v1alpha1", "PodGroup"): create_namespaced_resource(
        "scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups"
    ),
}
_PLURALS: dict[str, str] = {
    "PodGroup": "podgroups",
    "ConfigMap": "configmaps",
    "Service": "services",
    "Pod": "pods",
    "Namespace": "namespaces",
    "Event": "events",
    "Job": "jobs",
    "StatefulSet": "statefulsets",
}
_CASCADE = {
    "Background": CascadeType.BACKGROUND,
    "Foreground": CascadeType.FOREGROUND,
    "Orphan": CascadeType.ORPHAN,
}
_SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


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


def _resource(kind: str, api_version: str | None) -> Any:
    """The lightkube class of a kind; custom kinds need their apiVersion to tell groups apart."""
    if kind in _RESOURCES:
        return _RESOURCES[kind]
    try:
        return _CUSTOM[(api_version or "", kind)]
    except KeyError:
        known = ", ".join(sorted(f"{k} {v}" for v, k in _CUSTOM))
        raise ValueError(f"kind {kind} {api_version}: expected one of {known}") from None


def _first_existing(paths: str) -> str | None:
    for p in paths.split(os.pathsep):
        if p and Path(p).expanduser().is_file():
            return p
    return None


def load_config(settings: ClientSettings) -> SingleConfig:
    """The kubeconfig context to use, by kubectl's precedence; UsageError when there is none."""
    try:
        if settings.kubeconfig is not None:
            if not Path(settings.kubeconfig).expanduser().is_file():
                raise UsageError(
                    f'--kubeconfig "{settings.kubeconfig}": no such file', key="--kubeconfig"
                )
            return _get_context(KubeConfig.from_file(settings.kubeconfig), settings.context)
        env = os.environ.get("KUBECONFIG")
        path = _first_existing(env) if env else None
        if path is None and Path("~/.kube/config").expanduser().is_file():
            path = "~/.kube/config"
        if path is not None:
            return _get_context(KubeConfig.from_file(path), settings.context)
        if (_SERVICE_ACCOUNT / "token").is_file() and "KUBERNETES_SERVICE_HOST" in os.environ:
            if settings.context is not None:
                raise UsageError(
                    f'--context "{settings.context}": there is no kubeconfig, only the '
                    "in-cluster service account",
                    key="--context",
                )
            config = KubeConfig.from_service_account().get()
            assert config is not None  # from_one always sets the current context
            return config
    except ConfigError as e:
        raise UsageError(f"kubeconfig: {e}", key="--kubeconfig") from e
    except (OSError, ValueError, KeyError, msgspec.ValidationError) as e:
        raise UsageError(f"kubeconfig: cannot read it: {e}", key="--kubeconfig") from e
    raise UsageError(
        "no cluster configured: expected --kubeconfig FILE, $KUBECONFIG, ~/.kube/config or an "
        "in-cluster service account",
        key="--kubeconfig",
    )


def _get_context(kc: KubeConfig, context: str | None) -> SingleConfig:
    try:
        config = kc.get(context)
    except ConfigError as e:
        names = ", ".join(sorted(kc.contexts)) or "none"
        raise UsageError(f"--context: {e} (contexts: {names})", key="--context") from e
    if config is None:  # only when no default was given and no context set, which raises above
        raise UsageError("kubeconfig has no current-context: pass --context", key="--context")
    return config


def to_plain(obj: Any) -> Obj:
    """A lightkube model as the plain dict the API server sent."""
    out = msgspec.to_builtins(obj)
    if not isinstance(out, dict):
        raise TypeError(f"expected an object, got {type(out).__name__}")
    return out


class KubeClient:
    """An API connection: the kubeconfig context's server, user and default namespace.

    Use as an async context manager (`async with KubeClient.connect(settings) as kc:`), or call
    `aclose()`. Every method returns plain objects and raises only nccl_k8s.errors types.
    """

    def __init__(self, config: SingleConfig, *, timeout_s: float = 10.0) -> None:
        if config.cluster.server.startswith("http://") and not config.cluster.insecure:
            # Plain HTTP has no TLS to verify; without this lightkube loads the system CA
            # bundle anyway, 80 ms of the second `status` may take.
            config = config._replace(cluster=msgspec.structs.replace(config.cluster, insecure=True))
        self.config = config
        self.server: str = config.cluster.server
        self.namespace: str = config.namespace
        try:
            self._client = AsyncClient(
                config,
                timeout=httpx.Timeout(timeout_s),
                field_manager=FIELD_MANAGER,
            )
        except (ConfigError, OSError, ValueError) as e:
            raise UsageError(f"kubeconfig context {config.context_name!r}: {e}") from e

    @classmethod
    def connect(cls, settings: ClientSettings) -> KubeClient:
        """A client for the settings' context. Reads the kubeconfig; sends nothing yet."""
        return cls(load_config(settings), timeout_s=settings.timeout_s)

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.close()

    # ---- error translation -------------------------------------------------------------------

    def _raise(
        self,
        e: BaseException,
        *,
        verb: str,
        kind: str,
        namespace: str | None = None,
        name: str | None = None,
        run_id: str | None = None,
    ) -> NoReturn:
        """Translate a lightkube/httpx exception into our error tree (the only place it happens)."""
        resource = _PLURALS.get(kind, kind.lower())
        what = f"{resource} {name!r}" if name else resource
        where = f" in namespace {namespace}" if namespace else ""
        fields: dict[str, Any] = {
            "verb": verb,
            "resource": resource,
            "namespace": namespace,
            "name": name,
            "server": self.server,
        }
        status: int | None = None
        message = ""
        if isinstance(e, ApiError):
            status = e.status.code
            message = e.status.message or ""
        elif isinstance(e, httpx.HTTPStatusError):
            status = e.response.status_code
            try:
                body = e.response.json()
                message = str(body.get("message", "")) if isinstance(body, dict) else ""
            except (ValueError, httpx.ResponseNotRead):
                message = e.response.reason_phrase
        if status is not None:
            detail = f": {message}" if message else ""
            if status == 404:
                raise NotFound(f"{what} not found{where}{detail}", status=status, **fields) from e
            if status == 409:
                if run_id is not None and verb in ("apply", "create"):
                    raise Conflict(
                        f"run {run_id} already exists in namespace {namespace}: use --run-id "
                        f"or cleanup ({kind} {name}{detail})",
                        status=status,
                        **fields,
                    ) from e
                raise Conflict(
                    f"conflict on {verb} {what}{where}{detail}", status=status, **fields
                ) from e
            if status == 403:
                raise Forbidden(
                    f"forbidden: {self._user()} may not {verb} {resource}{where} on "
                    f"{self.server}{detail}; ask a cluster admin for that permission (RBAC)",
                    status=status,
                    **fields,
                ) from e
            if status == 401:
                raise ClusterError(
                    f"unauthorized: {self.server} rejected the credentials of context "
                    f"{self.config.context_name!r}{detail}; refresh them (kubectl config view)",
                    status=status,
                    **fields,
                ) from e
            if status == 410:
                raise Expired(
                    f"watch of {resource}{where} expired{detail}", status=status, **fields
                ) from e
            raise ClusterError(
                f"{self.server} answered {status} to {verb} {what}{where}{detail}",
                status=status,
                **fields,
            ) from e
        if isinstance(e, httpx.ConnectError):
            raise Unreachable(
                f"cannot reach the API server at {self.server} ({_reason(e)}): check --context, "
                "--kubeconfig and that the cluster is up",
                **fields,
            ) from e
        if isinstance(e, httpx.TimeoutException):
            raise Unreachable(
                f"the API server at {self.server} did not answer {verb} {what}{where} in time "
                f"({type(e).__name__})",
                **fields,
            ) from e
        if isinstance(e, (httpx.TransportError, httpx.StreamError)):
            raise Unreachable(
                f"lost the connection to {self.server} during {verb} {what}{where} ({_reason(e)})",
                **fields,
            ) from e
        if isinstance(e, (msgspec.DecodeError, msgspec.ValidationError, LoadResourceError)):
            raise ClusterError(
                f"{self.server} sent something that is not a Kubernetes object for {verb} "
                f"{what}{where}: {e}",
                **fields,
            ) from e
        raise e

    def _user(self) -> str:
        user = self.config.context.user
        return f"user {user!r}" if user else "this user"

    # ---- reads -------------------------------------------------------------------------------

    async def get(
        self, kind: Kind, name: str, *, namespace: str | None = None, api_version: str | None = None
    ) -> Obj | None:
        """The object, or None when it does not exist (or, for a custom kind, when the cluster
        does not serve that resource at all: the apply then says so)."""
        res = _resource(kind, api_version)
        try:
            if kind == "Namespace":
                obj = await self._client.get(res, name)
            else:
                obj = await self._client.get(res, name, namespace=namespace or self.namespace)
        except ApiError as e:
            if e.status.code == 404:
                return None
            self._raise(e, verb="get", kind=kind, namespace=namespace, name=name)
        except (httpx.HTTPError, msgspec.MsgspecError) as e:
            self._raise(e, verb="get", kind=kind, namespace=namespace, name=name)
        return to_plain(obj)

    async def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> tuple[list[Obj], str]:
        """(objects, the list's resourceVersion) matching the selectors."""
        ns = namespace or self.namespace
        it = self._client.list(
            _RESOURCES[kind],
            namespace=ns,
            labels=dict(labels) if labels else None,
            fields=dict(fields) if fields else None,
        )
        items: list[Obj] = []
        try:
            async for obj in it:
                items.append(to_plain(obj))
            rv = it.resourceVersion
        except (ApiError, httpx.HTTPError, msgspec.MsgspecError) as e:
            self._raise(e, verb="list", kind=kind, namespace=ns)
        return items, rv

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

        Raises Expired on 410 Gone (relist), Unreachable when the connection drops.
        """
        ns = namespace or self.namespace
        stream = self._client.watch(
            _RESOURCES[kind],
            namespace=ns,
            labels=dict(labels) if labels else None,
            fields=dict(fields) if fields else None,
            resource_version=resource_version,
            server_timeout=server_timeout_s,
        )
        try:
            async for etype, obj in stream:
                yield etype, to_plain(obj)
        except (ApiError, httpx.HTTPError, msgspec.MsgspecError) as e:
            self._raise(e, verb="watch", kind=kind, namespace=ns)
        finally:
            await _aclose(stream)

    async def logs(
        self,
        pod: str,
        *,
        namespace: str | None = None,
        container: str | None = None,
        tail_lines: int | None = None,
    ) -> str:
        """The container's log so far (its last `tail_lines` lines when given)."""
        ns = namespace or self.namespace
        # One body, not lightkube's line iterator: an async step per line cost 4 of the 5 s
        # that collecting 1,024 pods took. The request is still lightkube's (auth, TLS, URL).
        gc = self._client._client
        br = gc.prepare_request(
            "get",
            PodLog,
            name=pod,
            namespace=ns,
            params={"container": container, "tailLines": tail_lines},
        )
        try:
            resp = await gc.send(gc.build_adapter_request(br))  # type: ignore[no-untyped-call]  # lightkube's generic client is untyped
            gc.raise_for_status(resp)  # type: ignore[no-untyped-call]  # as above
            return str(resp.text)
        except (ApiError, httpx.HTTPError) as e:
            self._raise(e, verb="get logs of", kind="Pod", namespace=ns, name=pod)

    async def follow_logs(
        self,
        pod: str,
        *,
        namespace: str | None = None,
        container: str | None = None,
        tail_lines: int | None = None,
    ) -> AsyncIterator[str]:
        """The container's log lines (with their newline) as they are written, until it ends."""
        ns = namespace or self.namespace
        stream = self._client.log(
            pod, namespace=ns, container=container, tail_lines=tail_lines, follow=True
        )
        try:
            async for line in stream:
                yield line
        except (ApiError, httpx.HTTPError) as e:
            self._raise(e, verb="follow logs of", kind="Pod", namespace=ns, name=pod)
        finally:
            await _aclose(stream)

    # ---- writes ------------------------------------------------------------------------------

    async def apply(self, obj: Obj, *, force: bool = False) -> Obj:
        """Server-side apply `obj` as field manager nccl-k8s; the object as the server has it.

        `force=False` for a first apply, so fields another manager owns are a Conflict rather
        than silently taken; `force=True` for re-applying what this tool created.
        """
        meta = obj.get("metadata", {})
        kind = str(obj.get("kind"))
        name = meta.get("name")
        ns = meta.get("namespace") or (None if kind == "Namespace" else self.namespace)
        run_id = (meta.get("labels") or {}).get(LABEL_INSTANCE)
        try:
            model = from_dict(obj)
            if kind == "Namespace":
                out = await self._client.apply(model, force=force, field_manager=FIELD_MANAGER)
            else:
                out = await self._client.patch(
                    type(model),  # type: ignore[type-var]  # from_dict's union: a namespaced kind here
                    name,
                    model,
                    namespace=ns,
                    patch_type=PatchType.APPLY,
                    field_manager=FIELD_MANAGER,
                    force=force,
                )
        except (ApiError, httpx.HTTPError, msgspec.MsgspecError, LoadResourceError) as e:
            api_version = str(obj.get("apiVersion"))
            if (api_version, kind) in _CUSTOM and isinstance(e, ApiError) and e.status.code == 404:
                raise NotFound(
                    f"{self.server} does not serve {kind} {api_version} (its "
                    "CustomResourceDefinition is not installed): install the scheduler that "
                    "defines it, or deploy without that --gang",
                    status=404,
                    verb="apply",
                    resource=_PLURALS.get(kind, kind.lower()),
                    namespace=ns,
                    name=name,
                    server=self.server,
                ) from e
            self._raise(e, verb="apply", kind=kind, namespace=ns, name=name, run_id=run_id)
        return to_plain(out)

    async def create_namespace(self, name: str, *, labels: Mapping[str, str] | None = None) -> Obj:
        body: Obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        if labels:
            body["metadata"]["labels"] = dict(labels)
        try:
            out = await self._client.create(from_dict(body), field_manager=FIELD_MANAGER)
        except (ApiError, httpx.HTTPError, msgspec.MsgspecError) as e:
            self._raise(e, verb="create", kind="Namespace", name=name)
        return to_plain(out)

    async def delete(
        self,
        kind: Kind,
        name: str,
        *,
        namespace: str | None = None,
        propagation: Propagation = "Background",
        grace_period_s: int | None = None,
        api_version: str | None = None,
    ) -> bool:
        """Delete one object; False when it was already gone."""
        ns = None if kind == "Namespace" else (namespace or self.namespace)
        try:
            if kind == "Namespace":
                await self._client.delete(_RESOURCES[kind], name, cascade=_CASCADE[propagation])
            else:
                await self._client.delete(
                    _resource(kind, api_version),
                    name,
                    namespace=ns,
                    cascade=_CASCADE[propagation],
                    grace_period=grace_period_s,
                )
        except ApiError as e:
            if e.status.code == 404:
                return False
            self._raise(e, verb="delete", kind=kind, namespace=ns, name=name)
        except httpx.HTTPError as e:
            self._raise(e, verb="delete", kind=kind, namespace=ns, name=name)
        return True


async def _aclose(stream: object) -> None:
    """Close lightkube's stream (an async generator, typed as a plain AsyncIterable) now, so its
    HTTP response is released before the client goes."""
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


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
    "load_config",
    "to_plain",
]
