"""API errors, shaped like the Kubernetes ``Status`` objects a real server returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ApiError(Exception):
    """An error the API answers with: HTTP code, ``Status.reason`` and message."""

    code: int
    reason: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.code} {self.reason}: {self.message}"

    def to_status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            status["details"] = self.details
        return status


def _details(resource: str, name: str, group: str = "") -> dict[str, Any]:
    # metav1.StatusDetails: name, group, kind are omitempty.
    details: dict[str, Any] = {"name": name, "kind": resource} if name else {"kind": resource}
    if group:
        details["group"] = group
    return details


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(404, "NotFound", f'{qualified} "{name}" not found', _details(resource, name, group))


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(409, "AlreadyExists", f'{qualified} "{name}" already exists', _details(resource, name, group))


def conflict(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        _details(resource, name, group),
    )


def invalid(kind: str, name: str, causes: list[dict[str, str]], group: str = "") -> ApiError:
    """422 with one cause per field: ``{"reason": "FieldValueInvalid", "field": ..., "message": ...}``.

    Each cause's message is a ``field.Error``'s body (``Required value``, ``Invalid value: "x": ...``,
    ``Unsupported value: ...``); the Status message is apierrors.NewInvalid's ``<Kind>.<group> "<name>" is
    invalid: <field>: <body>``, the errors in brackets when there are several (utilerrors aggregate).
    """
    qualified = f"{kind}.{group}" if group else kind
    summary = ", ".join(f"{c.get('field', '')}: {c.get('message', '')}" for c in causes)
    if len(causes) > 1:
        summary = f"[{summary}]"
    details = _details(kind, name, group)
    details["causes"] = causes
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {summary}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def forbidden(message: str) -> ApiError:
    return ApiError(403, "Forbidden", message)


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    """405, worded as kube-apiserver words it for a verb the resource does not serve."""
    return ApiError(405, "MethodNotAllowed", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, "
        f"application/strategic-merge-patch+json; got {content_type}",
    )


def too_many_requests(message: str, retry_after_seconds: int = 1) -> ApiError:
    return ApiError(
        429,
        "TooManyRequests",
        message,
        {"retryAfterSeconds": retry_after_seconds},
        {"Retry-After": str(retry_after_seconds)},
    )


def internal_error(message: str) -> ApiError:
    return ApiError(500, "InternalError", message)
