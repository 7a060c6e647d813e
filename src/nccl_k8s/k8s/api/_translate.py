"""HTTP failures in the words of the ClusterError tree: what was asked (`Ask`), what the server
or the connection said, and what the user can do about it. Pure: the client raises what these
return, always `from` the original."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import httpx2 as httpx
import msgspec

from nccl_k8s.errors import (
    ClusterError,
    Conflict,
    Expired,
    Forbidden,
    NotFound,
    Unreachable,
)
from nccl_k8s.k8s.api._kinds import plural
from nccl_k8s.spec import custom_kind


@dataclasses.dataclass(frozen=True)
class Ask:
    """What a request asked, for the error message."""

    verb: str
    kind: str
    namespace: str | None = None
    name: str | None = None


def fields_of(ask: Ask, server: str) -> dict[str, Any]:
    return {
        "verb": ask.verb,
        "resource": plural(ask.kind),
        "namespace": ask.namespace,
        "name": ask.name,
        "server": server,
    }


def _what_where(ask: Ask) -> tuple[str, str, str]:
    resource = plural(ask.kind)
    what = f"{resource} {ask.name!r}" if ask.name else resource
    where = f" in namespace {ask.namespace}" if ask.namespace else ""
    return resource, what, where


def selector(pairs: Mapping[str, str] | None) -> str | None:
    """`k=v,k2=v2`: a label or field selector as the API takes it (None: none)."""
    return ",".join(f"{k}={v}" for k, v in pairs.items()) if pairs else None


def decode(resp: httpx.Response) -> Any:
    return msgspec.json.decode(resp.content)


def status_parts(resp: httpx.Response) -> tuple[str, str | None]:
    """(message, reason) of an error response: its Status body's, else the reason phrase."""
    try:
        body = decode(resp)
    except (msgspec.DecodeError, httpx.ResponseNotRead):
        body = None
    body = body if isinstance(body, dict) else {}
    return str(body.get("message") or resp.reason_phrase or ""), body.get("reason")


def event_status(obj: Mapping[str, Any]) -> tuple[int, str | None, str]:
    """(code, reason, message) of the Status a watch's ERROR event carries."""
    return int(obj.get("code") or 500), obj.get("reason"), str(obj.get("message") or "")


def not_an_object(e: BaseException, ask: Ask, server: str) -> ClusterError:
    """The error for a response whose body is not the Kubernetes object asked for."""
    return ClusterError(
        f"{server} sent something that is not a Kubernetes object for {ask.verb} "
        f"{plural(ask.kind)}: {e}",
        **fields_of(ask, server),
    )


def not_served(
    server: str, kind: str, api_version: str, namespace: str | None, name: str | None
) -> NotFound:
    """The 404 of creating a custom object whose CRD the cluster lacks, saying what to do."""
    entry = custom_kind(kind, api_version)
    needs = entry.hint if entry is not None else f"install what defines {kind} {api_version}"
    return NotFound(
        f"{server} does not serve {kind} {api_version} (its CustomResourceDefinition is not "
        f"installed): {needs}",
        status=404,
        verb="create",
        resource=plural(kind),
        namespace=namespace,
        name=name,
        server=server,
    )


def status_error(
    status: int,
    reason: str | None,
    message: str,
    ask: Ask,
    *,
    server: str,
    user: str,
    context: str,
    attempts: int,
) -> ClusterError:
    """Our error for an HTTP status (or a watch's ERROR event carrying a Status)."""
    resource, what, where = _what_where(ask)
    fields = dict(fields_of(ask, server), status=status, reason=reason)
    detail = f": {message}" if message else ""
    if status == 404:
        return NotFound(f"{what} not found{where}{detail}", **fields)
    if status == 409:
        if reason == "AlreadyExists":
            return Conflict(f"{ask.kind} {ask.name} already exists{where}", **fields)
        return Conflict(f"conflict on {ask.verb} {what}{where}{detail}", **fields)
    if status == 403:
        return Forbidden(
            f"forbidden: {user} may not {ask.verb} {resource}{where} on "
            f"{server}{detail}; ask a cluster admin for that permission (RBAC)",
            **fields,
        )
    if status == 401:
        return ClusterError(
            f"unauthorized: {server} rejected the credentials of context "
            f"{context!r}{detail}; refresh them (kubectl config view)",
            **fields,
        )
    if status == 410:
        return Expired(f"watch of {resource}{where} expired{detail}", **fields)
    tried = f" (asked {attempts} times)" if status in (500, 502, 503, 504) else ""
    return ClusterError(
        f"{server} answered {status} to {ask.verb} {what}{where}{detail}{tried}", **fields
    )


def transport_error(
    e: BaseException, ask: Ask, *, server: str, reached: bool, attempts: int
) -> Unreachable:
    """Our error for a connection that failed: `reached=False` (the server never answered this
    client) makes it configuration, exit 2."""
    fields = fields_of(ask, server)
    _, what, where = _what_where(ask)
    if not reached and isinstance(
        e, (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol)
    ):
        return Unreachable(
            f"cannot reach the API server at {server} ({innermost_reason(e)}): check --context, "
            "--kubeconfig and that the cluster is up",
            reached=False,
            **fields,
        )
    if isinstance(e, httpx.ConnectError):
        return Unreachable(
            f"lost the API server at {server} during {ask.verb} {what}{where} "
            f"({innermost_reason(e)}; asked {attempts} times)",
            **fields,
        )
    if isinstance(e, httpx.TimeoutException):
        return Unreachable(
            f"the API server at {server} did not answer {ask.verb} {what}{where} in "
            f"time ({type(e).__name__})",
            **fields,
        )
    return Unreachable(
        f"lost the connection to {server} during {ask.verb} {what}{where} ({innermost_reason(e)})",
        **fields,
    )


def retry_after(resp: httpx.Response) -> float | None:
    """Seconds the server asked to wait: the Retry-After header (kube-apiserver sends seconds),
    else the Status' details.retryAfterSeconds."""
    header = resp.headers.get("Retry-After")
    if header is not None and header.strip().isdigit():
        return float(header.strip())
    try:
        body = msgspec.json.decode(resp.content)
    except msgspec.DecodeError:
        return None
    if isinstance(body, dict):
        seconds = (body.get("details") or {}).get("retryAfterSeconds")
        if isinstance(seconds, int) and seconds >= 0:
            return float(seconds)
    return None


def innermost_reason(e: BaseException) -> str:
    """The innermost cause's words, e.g. 'Connection refused' rather than httpx's wrapper."""
    seen = e
    while seen.__cause__ is not None or seen.__context__ is not None:
        seen = seen.__cause__ or seen.__context__  # type: ignore[assignment]  # loop guard above
    text = getattr(seen, "strerror", None) or str(seen) or type(seen).__name__
    return str(text)


__all__ = [
    "Ask",
    "fields_of",
    "innermost_reason",
    "retry_after",
    "status_error",
    "transport_error",
]
