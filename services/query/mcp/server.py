"""The MCP server: tools listed from a :class:`Backend`, calls answered by it.

A tool's result is its JSON as text content and as structured content; a
:class:`ToolFailed` (bad arguments, unknown item) becomes a result with
``isError`` set and the message written for the model, as the MCP spec asks
for tool errors.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

SERVER_NAME = "engram"
INSTRUCTIONS = (
    "Long-term memory about the user. Call context (policy auto) before answering to "
    "see what is known; search with memory (operation=search) or recall; store new "
    "facts with remember, memory (operation=add) or memory_facts (action=save)."
)


class ToolFailed(Exception):
    """A tool call the model can read and correct (message written for the model)."""


class Backend(Protocol):
    async def tools(self, ctx: ServerRequestContext[Any]) -> list[dict[str, Any]]:
        """The tools as ``{name, description, parameters}``."""
        ...

    async def call(
        self, ctx: ServerRequestContext[Any], name: str, arguments: dict[str, Any]
    ) -> Any:
        """Run one call; raise :class:`ToolFailed` with a readable message."""
        ...


def as_mcp_tool(tool: dict[str, Any]) -> types.Tool:
    return types.Tool(
        name=tool["name"], description=tool.get("description"), input_schema=tool["parameters"]
    )


def build_server(backend: Backend, *, version: str = "1") -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[as_mcp_tool(t) for t in await backend.tools(ctx)])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            result = await backend.call(ctx, params.name, dict(params.arguments or {}))
        except ToolFailed as exc:
            return types.CallToolResult(
                content=[types.TextContent(text=f"error: {exc}")], is_error=True
            )
        text = json.dumps(result, default=str)
        structured = json.loads(text) if isinstance(result, dict) else None
        return types.CallToolResult(
            content=[types.TextContent(text=text)], structured_content=structured
        )

    return Server(
        SERVER_NAME,
        version=version,
        title="engram memory",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
