"""Ash's ``remember`` and ``recall`` as LLM tools: schemas and handlers.

The schemas are built from the same request models as the HTTP routes (the
seed's argument names; the chat comes from the call's context), in the neutral
``{name, description, parameters}`` form rendered as OpenAI or Anthropic tools.
The handlers get arguments validated with the same models as the HTTP routes and
run the same use cases. The chat a tool call happens in comes from the call's
context (the agent's session), not from the model.
"""

from __future__ import annotations

from typing import Any

from services.query.people.calls import do_recall, do_remember
from services.query.people.models import RecallIn, RememberIn
from services.query.people.results import RememberedMemories
from services.query.tools.registry import Tool, ToolContext
from services.query.tools.specs import ToolSpec

_REMEMBER_ARGS = {"content", "facts", "subjects", "expires_in_days", "shared"}
_RECALL_ARGS = {"query", "about", "as_of"}

REMEMBER = ToolSpec(
    name="remember",
    description="Store a fact or preference in long-term memory",
    model=RememberIn,
    only=_REMEMBER_ARGS,
)
RECALL = ToolSpec(
    name="recall",
    description="Search memory for relevant information",
    model=RecallIn,
    only=_RECALL_ARGS,
)


def _chat(ctx: ToolContext) -> dict[str, Any]:
    chat = ctx.chat
    return {"chat": {"provider": chat.provider, "chat_id": chat.chat_id} if chat else None}


async def _remember(ctx: ToolContext, body: RememberIn) -> RememberedMemories:
    return await do_remember(
        ctx.pool,
        ctx.publisher,
        ctx.user_id,
        body,
        embedder=await ctx.embedder(),
        embedding_dim=ctx.state.settings.embedding_dim,
        actor="tool",
    )


async def _recall(ctx: ToolContext, query: RecallIn) -> dict[str, Any]:
    return await do_recall(
        ctx.pool,
        ctx.user_id,
        query,
        embedder=await ctx.embedder(),
        embedding_dim=ctx.state.settings.embedding_dim,
    )


REMEMBER_TOOL = Tool(REMEMBER, {None: _remember}, context_args=_chat)
RECALL_TOOL = Tool(RECALL, {None: _recall}, context_args=_chat)
