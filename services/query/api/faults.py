"""No 5xx for any input (issue 17.6): hostile text refused, one error schema,
503 while a backing store is unreachable.

- :class:`HostileInput` (ASGI middleware) refuses, with 422 naming the field,
  any NUL byte or lone surrogate in the path, the query string or a JSON / form
  (urlencoded or multipart) body, any JSON integer beyond 64 bits, and JSON nested
  deeper than ``shared.storable.MAX_JSON_DEPTH`` (64) levels: PostgreSQL stores
  none of the first ones, a row nested too deep could not be read back, and the
  answer would otherwise be a 500 from deep inside a statement or an encoder. The
  check is ``shared.storable.find_problem``, the one the toolbox runs on a tool
  call's arguments (also when they come as a JSON string, and over MCP).
- Every ``/v1`` error has the one error body, ``edges.ErrorOut`` (``error``,
  ``detail``, for 422 ``errors`` naming each field), declared in the OpenAPI for
  each operation (400, 404, 410 and 503 here; ``edges`` adds 401/403/413/422).
- PostgreSQL or Redis unreachable (refused, reset, pool closing, timeouts) is
  ``503`` with ``Retry-After``, never a 500 or a dropped connection.
- Anything else a request raises is a bug: answered 500 with the same error body
  and counted on ``engram_http_server_errors_total`` (alerted on in
  ``deploy/prometheus/alerts.yml``).

``install(app)`` wires all three; the query service's ``create_app`` calls it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterator, MutableMapping, Sequence
from typing import Any
from urllib.parse import parse_qsl

import asyncpg
import redis.exceptions as redis_errors
from fastapi import FastAPI, Request
from fastapi.dependencies.models import Dependant
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from prometheus_client import CollectorRegistry, Counter
from pydantic_core import from_json
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute

from services.query.api.auth import acting_user
from services.query.api.edges import ErrorOut
from shared.erasure import ERASED_MESSAGE, erased_write
from shared.errors import InfrastructureError, UserErased
from shared.storable import MAX_JSON_DEPTH, Loc, find_problem

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

RETRY_AFTER_S = 5

ERROR_NAMES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    410: "gone",
    413: "too_large",
    415: "unsupported_media_type",
    500: "internal_error",
    422: "invalid_request",
    429: "too_many_requests",
    503: "unavailable",
}

DOCUMENTED = {
    "400": "The request cannot be served as asked (detail says why)",
    "401": "No valid API key",
    "403": "The key may not do this",
    "404": "No such thing for this user (the same whether or not it exists for another)",
    "409": "The write lost a race with another (a deadlock or serialization failure, "
    "e.g. with an erasure); nothing was changed: send it again",
    "410": "The user this call acts for was erased (an admin key naming it, or a write "
    "racing the erasure); re-enable it first",
    "413": "The request body is too large",
    "422": "A field is invalid (each entry of errors names its field)",
    "503": "PostgreSQL or Redis is unreachable; retry after Retry-After seconds",
}


# What "the database or Redis is unreachable" looks like from inside a request.
UNREACHABLE: tuple[type[Exception], ...] = (
    OSError,  # refused, reset, unreachable, TimeoutError
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,  # e.g. the pool is closing, the connection was lost
    # a connection cut mid-query as the server restarts can surface as a protocol
    # state error ("another operation is in progress") rather than a connection error
    asyncpg.exceptions.InternalClientError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.TooManyConnectionsError,
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.BusyLoadingError,
    InfrastructureError,
)


def _refusal(loc: Loc, msg: str) -> JSONResponse:
    where = ".".join(str(p) for p in loc[1:]) or loc[0]
    return JSONResponse(
        {
            "error": "invalid_request",
            "detail": f"{where}: {msg}",
            "errors": [{"field": str(where), "message": msg, "type": "hostile_text"}],
        },
        status_code=422,
    )


class HostileInput:
    """Refuse what PostgreSQL cannot store before any handler sees it (see module doc)."""

    # MCP's body is JSON-RPC: a tool call's bad arguments are the tool's error
    # (``isError``), checked by the toolbox with the same ``find_problem``.
    OWN_BODY_CHECK = ("/mcp",)

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        found = find_problem(str(scope.get("path", "")), ("path",))
        if found is None:
            query = bytes(scope.get("query_string", b"")).decode("utf-8", "surrogateescape")
            for key, value in parse_qsl(query, keep_blank_values=True, errors="surrogateescape"):
                found = find_problem(key, ("query",)) or find_problem(value, ("query", key))
                if found:
                    break
        body: bytes | None = None
        if (
            found is None
            and scope.get("method") in ("POST", "PUT", "PATCH", "DELETE")
            and scope.get("path") not in self.OWN_BODY_CHECK
        ):
            try:
                body, more = await _read_body(receive)
            except Exception:  # e.g. over the body limit: the outer middleware answers 413
                await _error(400, "the request body could not be read")(scope, receive, send)
                return
            if not more:
                found = _body_problem(scope, body)
        if found is not None:
            await _refusal(*found)(scope, receive, send)
            return
        if body is None:
            await self.app(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), True  # disconnected: let the app see it
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), False


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


PARSED_BODY = "engram.parsed_body"
"""``(body, its JSON)`` once checked here: read, not changed, by what parses it again
(``lean.LeanRoutes``: the body is not decoded twice)."""


def parse_json(raw: bytes) -> Any:
    """``raw`` read as ``json.loads`` reads it, ~7x faster on a large body (a 62 kB
    checkpoint: 7 us against 50): pydantic-core's parser gives the same values (the
    last of two equal keys, integers past 64 bits, NaN and Infinity alike), and what
    it refuses (a lone surrogate, nesting past 200 levels, UTF-16, bad JSON) is read
    by ``json.loads``, so its values and its errors are ``json.loads``'s as before."""
    try:
        return from_json(raw)
    except ValueError:
        return json.loads(raw)


def _body_problem(scope: Scope, body: bytes) -> tuple[Loc, str] | None:
    if not body:
        return None
    headers = {k.lower(): v for k, v in scope.get("headers", [])}
    ctype = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    if ctype == b"application/json" or ctype.endswith(b"+json"):
        try:
            data = parse_json(body)
        except RecursionError:
            return ("body",), f"is nested deeper than {MAX_JSON_DEPTH} levels"
        except (ValueError, UnicodeDecodeError):
            return None  # not JSON: the route's validation says so
        found = find_problem(data, ("body",))
        if found is None:
            scope[PARSED_BODY] = (body, data)
        return found
    if ctype == b"multipart/form-data":
        return _multipart_problem(body)
    if ctype == b"application/x-www-form-urlencoded":
        text = body.decode("utf-8", "surrogateescape")
        for key, value in parse_qsl(text, keep_blank_values=True, errors="surrogateescape"):
            found = find_problem(key, ("body",)) or find_problem(value, ("body", key))
            if found:
                return found
    return None


_PART_NAME = re.compile(rb'name="([^"]{1,100})"')


def _multipart_problem(body: bytes) -> tuple[Loc, str] | None:
    """A multipart form's fields hold text here (nothing takes a file upload): each
    part's value is checked as UTF-8 text, named by its part's field name."""
    for part in re.split(rb"\r?\n--", body):
        head, sep, value = part.partition(b"\r\n\r\n")
        if not sep:
            continue
        found = _PART_NAME.search(head)
        name = found.group(1).decode("utf-8", "replace") if found else "body"
        text = value.decode("utf-8", "surrogateescape")
        problem = find_problem(text, ("body", name))
        if problem:
            return problem
    return None


def _error(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": ERROR_NAMES.get(status, "error"), "detail": detail},
        status_code=status,
        headers=headers,
    )


def _acting_for_a_user(app: FastAPI) -> set[str]:
    """The operation ids of the routes that depend on ``auth.acting_user``."""

    def uses(dependant: Dependant) -> bool:
        return any(d.call is acting_user or uses(d) for d in dependant.dependencies)

    def walk(routes: Sequence[BaseRoute]) -> Iterator[str]:
        for route in routes:
            if isinstance(route, APIRoute) and uses(route.dependant):
                yield route.unique_id
            inner = getattr(route, "original_router", None)  # an included router
            if inner is not None:
                yield from walk(inner.routes)

    return set(walk(app.routes))


def install(
    app: FastAPI, *, registry: CollectorRegistry, route_label: Callable[[Scope], str]
) -> None:
    """The middleware, the error handlers and the documented error schema; every
    unhandled exception is answered 500 with the error body and counted on
    ``engram_http_server_errors_total`` (``registry``), by route."""
    app.add_middleware(HostileInput)
    server_errors = Counter(
        "engram_http_server_errors_total",
        "Requests answered 500 because the service raised (a bug: none is expected)",
        ["route"],
        registry=registry,
    )
    server_errors.labels("unmatched")  # the series exists at 0 from the start

    async def crashed(request: Request, exc: Exception) -> Response:
        # Starlette's outermost middleware calls this, sends the answer, then re-raises
        # (the traceback is logged by the server).
        route = route_label(request.scope)
        server_errors.labels(route).inc()
        log.error("%s %s answered 500", request.method, route, exc_info=exc)
        return _error(500, "internal error: the service failed on this request")

    app.add_exception_handler(Exception, crashed)

    async def erased(request: Request, exc: Exception) -> Response:
        return _error(410, ERASED_MESSAGE)

    async def database_refused(request: Request, exc: Exception) -> Response:
        # a write racing the erasure of its user: the row it references is gone
        if erased_write(exc):
            return await erased(request, exc)
        if isinstance(exc, asyncpg.TransactionRollbackError):
            # PostgreSQL rolled the write back (a deadlock with another writer or with an
            # erasure of the user, a serialization failure): nothing of it was stored
            return _error(
                409,
                "this write raced another write (or an erasure of this user) and was rolled "
                "back; nothing of it was stored: send it again",
                {"Retry-After": "1"},
            )
        return await crashed(request, exc)

    app.add_exception_handler(UserErased, erased)
    app.add_exception_handler(asyncpg.PostgresError, database_refused)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if not request.url.path.startswith("/v1/"):
            return await http_exception_handler(request, exc)  # the browser's own pages
        return _error(exc.status_code, str(exc.detail), dict(exc.headers or {}) or None)

    async def unreachable(request: Request, exc: Exception) -> Response:
        what = "the database or Redis is unreachable"
        if isinstance(exc, InfrastructureError):
            what = str(exc)
        return _error(503, what, {"Retry-After": str(RETRY_AFTER_S)})

    for kind in UNREACHABLE:
        app.add_exception_handler(kind, unreachable)

    plain = app.openapi
    done = False

    def openapi() -> dict[str, Any]:
        nonlocal done
        schema = plain()
        if done:
            return schema
        done = True
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        defs = ErrorOut.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(defs.pop("$defs", {}))
        components["ErrorOut"] = defs
        ref = {"$ref": "#/components/schemas/ErrorOut"}
        acting = _acting_for_a_user(app)
        for path, operations in schema.get("paths", {}).items():
            if not path.startswith("/v1/"):
                continue
            for method, op in operations.items():
                wanted = {
                    # edges documents 401/403/413/422; these are the ones added here
                    "400": "requestBody" in op,
                    "404": "{" in path,
                    # a write PostgreSQL rolled back (a deadlock with an erasure, say)
                    "409": method != "get" and bool(op.get("security")),
                    "410": op.get("operationId") in acting,  # an admin naming an erased user
                    "503": bool(op.get("security")),  # the key is looked up in PostgreSQL
                }
                responses = op.setdefault("responses", {})
                for code, description in DOCUMENTED.items():
                    if not wanted.get(code) or (code == "409" and code in responses):
                        continue  # a route's own 409 (a conflict it names) keeps its words
                    responses[code] = {
                        "description": description,
                        "content": {"application/json": {"schema": ref}},
                    }
                    if code == "503":
                        responses[code]["headers"] = {
                            "Retry-After": {"schema": {"type": "integer"}}
                        }
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
