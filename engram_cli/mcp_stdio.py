"""MCP over stdio: ``engram mcp --key ... [--url ...]``.

A local process an MCP host (Claude Desktop, an IDE, an agent) starts. It holds
no database connection: it lists the tools from a query service's
``GET /v1/tools`` and sends each call to ``POST /v1/tools/call`` with the key,
so the service's auth scopes every call to the key's user and the tools are the
ones ``/mcp`` serves. Nothing but MCP messages goes to stdout.
"""

from __future__ import annotations

from typing import Any

import anyio
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server

from engram_client import AsyncEngram, EngramError
from services.query.mcp.server import ToolFailed, build_server


class ApiBackend:
    """The tools of a query service, through its HTTP API."""

    def __init__(self, client: AsyncEngram) -> None:
        self.client = client
        self._tools: list[dict[str, Any]] | None = None

    async def tools(self, ctx: ServerRequestContext[Any] | None = None) -> list[dict[str, Any]]:
        if self._tools is None:
            listed = await self.client.tools.list("anthropic")
            self._tools = [
                {
                    "name": t["name"],
                    "description": t.get("description"),
                    "parameters": t["input_schema"],
                }
                for t in listed.anthropic
            ]
        return self._tools

    async def call(
        self, ctx: ServerRequestContext[Any], name: str, arguments: dict[str, Any]
    ) -> Any:
        try:
            out = await self.client.tools.call(name, arguments)
        except EngramError as exc:
            raise ToolFailed(f"engram answered {exc}") from exc
        if out.is_error:
            raise ToolFailed(out.error or out.content)
        return out.result


async def serve(url: str, key: str, *, user: str | None = None) -> None:
    """Check the key, then serve MCP on stdin/stdout until stdin closes."""
    async with AsyncEngram(url, key, user=user) as client:
        await client.me()  # a wrong key or URL fails here, before the host connects
        backend = ApiBackend(client)
        await backend.tools()
        server = build_server(backend)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


def run(url: str, key: str, *, user: str | None = None) -> None:
    anyio.run(lambda: serve(url, key, user=user))
