"""What a failed call raises: one exception per kind of failure, all :class:`EngramError`."""

from __future__ import annotations

from typing import Any


class EngramError(Exception):
    """A call that did not succeed. ``status`` is the HTTP status (0: no answer),
    ``code`` the service's error code, ``detail`` its message."""

    status: int = 0

    def __init__(
        self, detail: str, *, status: int | None = None, code: str = "", body: Any = None
    ) -> None:
        super().__init__(f"{status or self.status or 'error'}: {detail}" if detail else code)
        if status is not None:
            self.status = status
        self.code = code
        self.detail = detail
        self.body = body


class ConnectionFailed(EngramError):
    """The service could not be reached (or did not answer in time)."""


class BadRequest(EngramError):
    """400: the request was understood but not accepted (the detail says why)."""

    status = 400


class AuthenticationError(EngramError):
    """401: no API key, or an unknown or revoked one."""

    status = 401


class PermissionDenied(EngramError):
    """403: the key may not do this (another user's data, an admin-only call)."""

    status = 403


class NotFound(EngramError):
    """404: no such item for this user."""

    status = 404


class PayloadTooLarge(EngramError):
    """413: the request body is over the service's limit."""

    status = 413


class ValidationFailed(EngramError):
    """422: a field is missing or invalid; ``detail`` names it."""

    status = 422


class RateLimited(EngramError):
    """429: too many requests (retried with backoff before this is raised)."""

    status = 429


class Unavailable(EngramError):
    """503: a dependency is down (retried with backoff before this is raised)."""

    status = 503


class ServerError(EngramError):
    """Any other 5xx."""

    status = 500


BY_STATUS: dict[int, type[EngramError]] = {
    400: BadRequest,
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFound,
    413: PayloadTooLarge,
    422: ValidationFailed,
    429: RateLimited,
    503: Unavailable,
}


def error_for(status: int, body: Any) -> EngramError:
    """The exception for an error answer (``{"error": code, "detail": message}``)."""
    code, detail = "", ""
    if isinstance(body, dict):
        code = str(body.get("error") or "")
        raw = body.get("detail")
        detail = raw if isinstance(raw, str) else str(raw or "")
    elif body:
        detail = str(body)[:500]
    cls = BY_STATUS.get(status) or (ServerError if status >= 500 else EngramError)
    return cls(detail, status=status, code=code, body=body)
