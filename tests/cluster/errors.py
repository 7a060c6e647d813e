"""The one error type of the test cluster, shaped so the API server can send it as a `Status`.

Store, controllers and API server all raise `ApiError`; only the API server turns it into HTTP.
Keeping code, reason and message together means a controller bug and a client mistake read the
same way on the wire as they would from a real kube-apiserver (`Error from server (NotFound)`).
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A Kubernetes API failure: HTTP `code`, `reason` (NotFound, Conflict...), `message`."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}

    def status(self) -> dict[str, Any]:
        """The `Status` object kubectl and client libraries parse for this error."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def _details(resource: str, name: str, group: str = "") -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": resource}
    if group:
        details["group"] = group
    return details


def _qualified(resource: str, group: str) -> str:
    # kube-apiserver names the resource with its group: `jobs.batch "x" not found`.
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{_qualified(resource, group)} "{name}" not found',
        details=_details(resource, name, group),
    )


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{_qualified(resource, group)} "{name}" already exists',
        details=_details(resource, name, group),
    )


def conflict(resource: str, name: str, why: str, group: str = "") -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {why}',
        details=_details(resource, name, group),
    )


def invalid(kind: str, name: str, causes: list[tuple[str, str]], group: str = "") -> ApiError:
    """422 Invalid; `causes` are (field path, message) pairs as kube-apiserver reports them."""
    text = "; ".join(f"{field}: {msg}" for field, msg in causes)
    details: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "causes": [
            {"reason": _cause_reason(msg), "message": msg, "field": path} for path, msg in causes
        ],
    }
    if group:
        details["group"] = group
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {text}', details=details)


def _cause_reason(message: str) -> str:
    for prefix, reason in (
        ("Required value", "FieldValueRequired"),
        ("Too long", "FieldValueTooLong"),
        ("Invalid value", "FieldValueInvalid"),
    ):
        if message.startswith(prefix):
            return reason
    return "FieldValueInvalid"


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def method_not_allowed(message: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


# Reasons kube-apiserver uses for each code, for injected faults that only name a code.
REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
