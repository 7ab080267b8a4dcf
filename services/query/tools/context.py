"""``context`` and ``episode_recall`` as LLM tools: schemas from the routes' models, handlers.

The argument schemas are generated (``services.query.tools.specs``) from
:class:`ContextIn` and :class:`RecallIn`,
the request models of ``POST /v1/context`` and ``POST /v1/episodes/search``,
and the handlers run the same use cases as those routes. The chat
a context call is for is not the model's to choose, so ``chat`` is left out.
"""

from __future__ import annotations

from typing import Any

from services.query.context.build import build_context
from services.query.context.models import ContextIn
from services.query.episodes.recall import RecallIn, recall
from services.query.tools.registry import Tool, ToolContext
from services.query.tools.specs import ToolSpec

CONTEXT = ToolSpec(
    name="context",
    description=(
        "The memory block to read before answering a message. policy=auto: relevant "
        "past messages, memories and known people; tools: how to use the memory tools "
        "and the themes in use; summary: the narrative summary of the user; sections: "
        "facts, recent episodes and procedures. token_budget caps its length."
    ),
    model=ContextIn,
    only=[f for f in ContextIn.model_fields if f != "chat"],
)

EPISODE_RECALL = ToolSpec(
    name="episode_recall",
    description=(
        "Find past conversations (episodes) by their summary, key points and topics; "
        "query '*' returns the newest."
    ),
    model=RecallIn,
)


async def _context(ctx: ToolContext, body: ContextIn) -> dict[str, Any]:
    out = await build_context(
        ctx.pool,
        ctx.user_id,
        body.command(),
        embedder=await ctx.embedder(),
        embedding_dim=int(ctx.state.settings.embedding_dim),
        hint_cache=ctx.hint_cache,
    )
    return out.model_dump(mode="json")


async def _episode_recall(ctx: ToolContext, asked: RecallIn) -> dict[str, Any]:
    return await recall(
        ctx.state, ctx.pool, user_id=ctx.user_id, query=asked.query, limit=asked.limit
    )


CONTEXT_TOOL = Tool(CONTEXT, {None: _context})
EPISODE_RECALL_TOOL = Tool(EPISODE_RECALL, {None: _episode_recall})
