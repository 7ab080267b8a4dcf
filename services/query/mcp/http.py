"""MCP over streamable HTTP at ``/mcp`` on the query service.

Every request is authenticated like the API's (:mod:`services.query.api.auth`): a
Bearer user key acts for its user; an admin key must name the user with
``X-Engram-User``. The tools run in process through the app's tool table
(``app.state.tools``), the dispatch ``POST /v1/tools/call`` uses. The server is
stateless (no MCP session to hijack: each POST carries its own key) and answers
with JSON. Having no session, it has no stream to offer either: ``GET /mcp`` (and
``DELETE``) answer 405, as the transport allows, instead of opening a stream that
never sends. A tool's bad arguments (a NUL,
a lone surrogate) come back as an ``isError`` result, as over stdio: the tool table
checks them, the request body is not refused before MCP reads it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, HTTPException
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Match, Route
from starlette.types import Receive, Scope, Send

from services.query.api.auth import acting_user, principal
from services.query.mcp.server import ToolFailed, build_server
from services.query.tools.registry import Toolbox, ToolContext, ToolError
from shared.runtime import Runtime

PATH = "/mcp"
_USER = "engram_user"

ContextOf = Callable[[Request, str], Awaitable[ToolContext]]
"""What a tool call for a user runs with, from the request (the one
``POST /v1/tools/call`` builds: ``services.query.api.routes.tool_calls.tool_context``)."""


class ToolboxBackend:
    """The tool table, for the user the request's key acts for."""

    def __init__(self, tools: Toolbox, context: ContextOf) -> None:
        self.toolbox = tools
        self.context = context

    async def tools(self, ctx: ServerRequestContext[Any]) -> list[dict[str, Any]]:
        return list(self.toolbox.tools)

    async def call(
        self, ctx: ServerRequestContext[Any], name: str, arguments: dict[str, Any]
    ) -> Any:
        request = ctx.request
        if not isinstance(request, Request) or not request.scope.get("state", {}).get(_USER):
            raise RuntimeError("MCP call without an authenticated HTTP request")
        tctx = await self.context(request, request.scope["state"][_USER])
        try:
            return await self.toolbox.call(tctx, name, arguments)
        except ToolError as exc:
            raise ToolFailed(str(exc)) from exc


class _Labelled(Route):
    """A route that puts itself in the scope, as FastAPI's do, when it matches (or
    answers 405): the request metrics label its requests ``/mcp``."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is not Match.NONE:
            child["route"] = self
        return match, child


class _KeyScoped:
    """ASGI: authenticate the API key, record the acting user, then serve MCP."""

    def __init__(self, manager: StreamableHTTPSessionManager) -> None:
        self.manager = manager
        self.route = _Labelled(PATH, self, methods=["POST"], include_in_schema=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            user_id = await acting_user(request, await principal(request))
        except HTTPException as exc:
            code = {401: "unauthorized", 403: "forbidden", 410: "gone"}.get(
                exc.status_code, "invalid_request"
            )
            response = JSONResponse(
                {"error": code, "detail": exc.detail},
                status_code=exc.status_code,
                headers=exc.headers,
            )
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})[_USER] = user_id
        await self.manager.handle_request(scope, receive, send)


class _ManagerTask:
    """Runs the session manager (an anyio task group) in a task of its own, so the
    service's start and stop may run in different tasks."""

    def __init__(self, manager: StreamableHTTPSessionManager) -> None:
        self.manager = manager
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _serve(self, started: asyncio.Event) -> None:
        async with self.manager.run():
            started.set()
            await self._stopping.wait()

    async def start(self, _rt: Runtime) -> None:
        started = asyncio.Event()
        self._task = asyncio.create_task(self._serve(started), name="mcp-session-manager")
        waiter = asyncio.create_task(started.wait())
        await asyncio.wait({self._task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if self._task.done():
            self._task.result()  # raise why it could not start

    async def stop(self, _rt: Runtime) -> None:
        self._stopping.set()
        if self._task is not None:
            await self._task


def mount(
    app: FastAPI, rt: Runtime, *, tools: Toolbox, context: ContextOf, max_body_bytes: int
) -> None:
    """Serve ``tools`` over MCP at ``/mcp``, each call run with ``context``'s tool
    context; the session manager runs while the service runs."""
    manager = StreamableHTTPSessionManager(
        app=build_server(ToolboxBackend(tools, context), version=app.version),
        json_response=True,
        stateless=True,
        # the API key, not the Host header, is what admits a caller; the service may
        # sit behind any host name
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=max_body_bytes,
    )
    runner = _ManagerTask(manager)
    rt.on_start.append(runner.start)
    rt.on_stop.insert(0, runner.stop)
    # a Route whose endpoint is not a function serves it as an ASGI app; POST only
    app.router.routes.append(_KeyScoped(manager).route)
