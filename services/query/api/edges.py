"""The API's edges: a request body limit, validation errors that name the field and
never echo its value, and the error answers documented in the OpenAPI.

- :class:`BodyLimit` answers 413 before a body over ``max_request_bytes`` is read
  whole: at once from ``Content-Length``, or as soon as a chunked body passes it.
- :func:`validation_error` turns a 422 into ``{"error", "detail", "errors"}``
  where each error names its field (``content``, ``facts.0.subjects``) and says
  what is wrong, without the value (a 50 MB field is not sent back).
- :func:`document_errors` adds the Bearer scheme's 401/403 and the 413 and 422
  answers, with :class:`ErrorOut` as their body, to the operations they can come from.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_ERRORS = 10


class FieldError(BaseModel):
    field: str = Field(description="where the problem is: 'content', 'facts.0.subjects'")
    message: str = Field(description="what is wrong with it (the value is not repeated)")
    type: str = Field(description="pydantic's error type, e.g. string_too_long, missing")


class ErrorOut(BaseModel):
    """The body of every error answer."""

    error: str = Field(description="a stable code: unauthorized, forbidden, invalid_request, ...")
    detail: str = Field(description="what went wrong, for a person or a model to read")
    errors: list[FieldError] | None = Field(
        default=None, description="422 only: one entry per invalid field (at most 10)"
    )


class _TooLarge(Exception):
    pass


def _too_large(limit: int, setting: str = "ENGRAM_MAX_REQUEST_BYTES") -> JSONResponse:
    return JSONResponse(
        {
            "error": "payload_too_large",
            "detail": f"request body is over the limit of {limit} bytes ({setting})",
        },
        status_code=413,
    )


class BodyLimit:
    """ASGI middleware: 413 for a request body over ``max_bytes`` (or over the limit
    ``per_path`` gives the exact path: an archive import is larger than a request)."""

    def __init__(
        self, app: ASGIApp, max_bytes: int, per_path: dict[str, tuple[int, str]] | None = None
    ) -> None:
        self.app = app
        self.default_bytes = max_bytes
        self.per_path = per_path or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit, setting = self.per_path.get(
            scope.get("path", ""), (self.default_bytes, "ENGRAM_MAX_REQUEST_BYTES")
        )
        await self._limited(scope, receive, send, limit, setting)

    async def _limited(
        self, scope: Scope, receive: Receive, send: Send, limit: int, setting: str
    ) -> None:
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > limit:
                    await _too_large(limit, setting)(scope, receive, send)
                    return
        received = 0
        exceeded = False
        replaced = False

        async def counted_receive() -> Message:
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    exceeded = True
                    raise _TooLarge
            return message

        async def checked_send(message: Message) -> None:
            # whatever the app made of the interrupted body (FastAPI: a 400), the
            # answer is the 413
            nonlocal replaced
            if exceeded and message["type"] == "http.response.start" and not replaced:
                replaced = True
                await _too_large(limit, setting)(scope, receive, send)
            if not replaced:
                await send(message)

        try:
            await self.app(scope, counted_receive, checked_send)
        except _TooLarge:
            if not replaced:
                await _too_large(limit, setting)(scope, receive, send)


def field_errors(errors: list[Any]) -> list[FieldError]:
    out = []
    for err in errors[:MAX_ERRORS]:
        loc = [str(x) for x in err.get("loc", ()) if x != "body"]
        # a query or path parameter's location starts with where it came from
        if loc and loc[0] in ("query", "path", "header", "cookie") and len(loc) > 1:
            loc = loc[1:]
        message = str(err.get("msg", "invalid"))
        if err.get("type") == "json_invalid":
            # FastAPI's loc is ("body", <byte offset>): the field is the body
            at = loc[0] if loc else "?"
            loc, message = [], f"is not valid JSON ({message} at byte {at})"
        out.append(
            FieldError(
                field=".".join(loc) or "body",
                message=message,
                type=str(err.get("type", "value_error")),
            )
        )
    return out


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = field_errors(list(exc.errors()))
    body = ErrorOut(
        error="invalid_request",
        detail="; ".join(f"{e.field}: {e.message}" for e in errors),
        errors=errors,
    )
    return JSONResponse(body.model_dump(), status_code=422)


ERROR_RESPONSES: dict[int, str] = {
    401: "no API key, or an unknown or revoked one (send 'Authorization: Bearer <key>')",
    403: "the key may not do this: another user's data, or an admin-only call",
    413: "the request body is over the limit (ENGRAM_MAX_REQUEST_BYTES, default 1 MB)",
    422: "a field is missing or invalid; each error names its field, not its value",
}
_ERROR_REF = {"$ref": "#/components/schemas/ErrorOut"}

NAMED_IN_BODY: dict[int | str, dict[str, Any]] = {
    404: {
        "model": ErrorOut,
        "description": "an id, key or chat in the body names nothing of this user's "
        "(the same whether or not it exists for another user)",
    }
}
"""``responses=`` of an operation that can answer 404 for what its body names (one
with the id in its path has its 404 documented by ``faults``)."""


def document_errors(app: FastAPI) -> None:
    """Document the error answers with :class:`ErrorOut` as their body: 401 and 403
    where an operation takes the key, 413 where it takes a body, 422 where it takes
    any input. The OpenAPI is built as usual first."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = build()
        defs = ErrorOut.model_json_schema(ref_template="#/components/schemas/{model}")
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update(defs.pop("$defs", {}))
        components["ErrorOut"] = defs
        for operations in schema.get("paths", {}).values():
            for op in operations.values():
                wanted = {
                    401: bool(op.get("security")),
                    403: bool(op.get("security")),
                    413: "requestBody" in op,
                    422: bool(op.get("parameters") or op.get("requestBody")),
                }
                responses = op.setdefault("responses", {})
                for status, description in ERROR_RESPONSES.items():
                    if wanted[status]:
                        responses[str(status)] = {
                            "description": description,
                            "content": {"application/json": {"schema": _ERROR_REF}},
                        }
        if "/HTTPValidationError" not in json.dumps(schema["paths"]):
            components.pop("HTTPValidationError", None)
            components.pop("ValidationError", None)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def install(
    app: FastAPI,
    *,
    max_request_bytes: int,
    per_path: dict[str, tuple[int, str]] | None = None,
) -> None:
    """Register the edges on ``app`` (after its routes are included)."""
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_middleware(BodyLimit, max_bytes=max_request_bytes, per_path=per_path)
    document_errors(app)
