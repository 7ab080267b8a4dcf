"""A few hot routes answered without FastAPI's router and dependency machinery.

LangGraph saves a checkpoint and reads one back at every step of a graph (issue 32:
engram's checkpointer beside LangGraph's own Postgres one). Most of the query
service's CPU for such a call was FastAPI's per-request path, not the call's work:
matching the path over every included router, solving the dependencies (the key,
the acting user, the pool), validating the body, then the answer (docs/benchmarks.md,
"Issue 32"). :class:`LeanRoutes`, the innermost middleware, answers the routes given
to it itself, doing what their FastAPI route does and nothing else:

- the same path, method and body model (the FastAPI route stays: the OpenAPI
  document, and every request this path does not take, are its);
- the same caller: :func:`~services.query.api.auth.principal` and
  :func:`~services.query.api.auth.acting_user` (every request authenticated and
  scoped to its user);
- the same write position kept for read-your-writes after a request other than a
  GET (``deps._pool``);
- the same answer: the route's ``response_model`` validates and serializes it, sent
  as FastAPI sends it (a use case's typed result, which the response model
  subclasses, is serialized as it is: the same JSON without a second model); an
  exception goes to the app's own handler for it (a 4xx body as before), or,
  unhandled, on to the server-error handler outside.

A request whose body is not JSON, or does not validate, or whose path parameters
are out of bounds, is handed on, its body replayed, to the FastAPI route, which
refuses it as it always did (the same 422, naming the field). The middlewares
outside (body limit, hostile input, metrics, traces) see every request as before;
``scope["route"]`` is the FastAPI route, so metrics and traces name it alike.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette._utils import get_route_path
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.query.api.auth import acting_user, principal
from services.query.api.faults import PARSED_BODY, parse_json
from services.query.api.replica import ReadRouting

Handler = Callable[[Request, str, dict[str, str], Any], Awaitable[Any]]
"""``(request, acting user, path parameters, validated body) -> the route's answer``"""


@dataclass(frozen=True)
class LeanRoute:
    """``handler`` answers ``route`` (an APIRoute with a JSON body model and a
    ``response_model``). Path parameters longer than ``max_param`` go to the route."""

    route: APIRoute
    body: type[BaseModel]
    handler: Handler
    max_param: int = 255


class _Compiled:
    def __init__(self, lean: LeanRoute) -> None:
        route = lean.route
        methods = sorted(route.methods or ())
        if route.response_model is None or len(methods) != 1:
            raise ValueError(f"{route.path}: one method and a response model")
        self.lean = lean
        self.method = methods[0]
        self.regex: re.Pattern[str] = compile_path(route.path)[0]
        self.answer: TypeAdapter[Any] = TypeAdapter(route.response_model)
        model = route.response_model
        self.described: frozenset[type[BaseModel]] = frozenset(
            m for m in getattr(model, "__mro__", ()) if issubclass(m, BaseModel)
        )
        self.write = self.method not in ("GET", "HEAD")

    def json(self, answer: Any) -> bytes:
        """The answer as the route's response model gives it. A use case's typed result
        that the response model subclasses under the API's name is that description
        already: it is serialized as it is (validating it a second time, as FastAPI
        does, would be a second model per call). Anything else the response model
        validates first."""
        cls = type(answer)
        if cls in self.described:
            return cls.__pydantic_serializer__.to_json(answer, by_alias=True)
        return self.answer.dump_json(self.answer.validate_python(answer), by_alias=True)


def _json_type(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            kind: bytes = value.split(b";")[0].strip().lower()
            return kind == b"application/json" or (
                kind.startswith(b"application/") and kind.endswith(b"+json")
            )
    return False


class LeanRoutes:
    """ASGI middleware: ``routes`` answered here, everything else passed to ``app``."""

    def __init__(self, app: ASGIApp, *, fastapi: FastAPI, routes: Sequence[LeanRoute]) -> None:
        self.app = app
        self.fastapi = fastapi
        self.routes = [_Compiled(r) for r in routes]

    def _match(self, scope: Scope) -> tuple[_Compiled, dict[str, str]] | None:
        method = scope["method"]
        path = get_route_path(scope)
        for c in self.routes:
            if c.method == method:
                found = c.regex.match(path)
                if found is not None:
                    return c, found.groupdict()
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        matched = self._match(scope)
        if matched is None:
            await self.app(scope, receive, send)
            return
        c, params = matched
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # disconnected: the route sees it
                await self.app(scope, _replay(b"".join(chunks), receive, message), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        raw = b"".join(chunks)
        body = _validated(c, scope, params, raw)
        if body is None:  # the route refuses it, as it always did
            await self.app(scope, _replay(raw, receive), send)
            return
        scope["route"] = c.lean.route
        scope["path_params"] = params
        scope["endpoint"] = c.lean.route.endpoint
        request = Request(scope, receive)
        try:
            user = await acting_user(request, await principal(request))
            try:
                answer = await c.lean.handler(request, user, params, body)
            finally:
                if c.write:
                    reads: ReadRouting = request.app.state.reads
                    if reads.enabled:
                        await reads.remember(user)
            response = Response(c.json(answer), media_type="application/json")
        except Exception as exc:
            handler = self._handler_for(exc)
            if handler is None:
                raise
            if inspect.iscoroutinefunction(handler):
                response = await handler(request, exc)
            else:
                response = await run_in_threadpool(handler, request, exc)
        await response(scope, receive, send)

    def _handler_for(self, exc: Exception) -> Callable[..., Any] | None:
        """The app's handler for ``exc`` as its ExceptionMiddleware picks it (a status's
        handler for an HTTPException, else the nearest class's); none for what only the
        server-error handler outside answers."""
        handlers = self.fastapi.exception_handlers
        if isinstance(exc, HTTPException) and exc.status_code in handlers:
            return handlers[exc.status_code]
        for cls in type(exc).__mro__:
            if cls is Exception:
                return None
            if cls in handlers:
                return handlers[cls]
        return None


def _validated(c: _Compiled, scope: Scope, params: dict[str, str], raw: bytes) -> Any | None:
    """The body as the route's model, parsed as FastAPI parses it (``json.loads``'s
    values, then the model in Python mode); None when the route should answer instead."""
    if not raw or not _json_type(scope):
        return None
    if any(len(v) > c.lean.max_param for v in params.values()):
        return None
    parsed = scope.get(PARSED_BODY)  # HostileInput's parse of this body
    try:
        data = parsed[1] if parsed is not None and parsed[0] == raw else parse_json(raw)
        return c.lean.body.model_validate(data)
    except (ValueError, ValidationError, RecursionError):
        return None


def _replay(body: bytes, receive: Receive, then: Message | None = None) -> Receive:
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            if then is not None and not body:
                return then
            return {"type": "http.request", "body": body, "more_body": then is not None}
        if then is not None:
            return then
        return await receive()

    return again
