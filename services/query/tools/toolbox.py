"""The tool table, and the listing and dispatch every surface uses.

Tools: ``memory`` (Nova 3.2: search, add, get, archive, list_themes),
``memory_facts`` (Navi: save, search, forget, list), ``remember`` and ``recall``
(Ash), ``context`` and ``episode_recall``. :data:`REGISTRY` maps each name to
its :class:`~services.query.tools.registry.Tool` (spec, request models,
handlers); a new tool is a row here. :func:`tool_schemas` gives them in OpenAI
and Anthropic formats; :func:`call_tool` runs one call for one user and returns
its JSON result, or raises :class:`ToolError` with a message written for the
model (bad arguments, unknown item, unknown tool). ``POST /v1/tools/call``,
``GET /v1/tools`` and the MCP server all go through this module.
"""

from __future__ import annotations

from typing import Any

from services.query.tools.context import CONTEXT_TOOL, EPISODE_RECALL_TOOL
from services.query.tools.memory import FACTS, FACTS_TOOL, MEMORY, MEMORY_TOOL
from services.query.tools.people import RECALL_TOOL, REMEMBER_TOOL
from services.query.tools.registry import Tool, ToolContext, ToolError, run
from services.query.tools.specs import anthropic, neutral, openai

__all__ = ["FACTS", "MEMORY", "REGISTRY", "TOOLS", "ToolContext", "ToolError", "call_tool"]

REGISTRY: dict[str, Tool] = {
    t.name: t
    for t in (
        MEMORY_TOOL,
        FACTS_TOOL,
        REMEMBER_TOOL,
        RECALL_TOOL,
        CONTEXT_TOOL,
        EPISODE_RECALL_TOOL,
    )
}
SPECS = [t.spec for t in REGISTRY.values()]
TOOLS = [neutral(s) for s in SPECS]


def tool_schemas(fmt: str = "all") -> dict[str, list[dict[str, Any]]]:
    """The tools in OpenAI and/or Anthropic format, built from the request models."""
    out: dict[str, list[dict[str, Any]]] = {}
    if fmt in ("all", "openai"):
        out["openai"] = [openai(t) for t in TOOLS]
    if fmt in ("all", "anthropic"):
        out["anthropic"] = [anthropic(t) for t in TOOLS]
    return out


async def call_tool(ctx: ToolContext, name: str, arguments: Any) -> Any:
    """Run one call of ``name`` for ``ctx.user_id``; ToolError for the model to read."""
    try:
        return await run(REGISTRY, ctx, name, arguments)
    finally:
        if ctx.after is not None:
            await ctx.after()
