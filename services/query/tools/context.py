"""``context`` and ``episode_recall`` as LLM tools: schemas from the routes' models, one executor.

The argument schemas are generated (``services.query.tools.specs``) from
:class:`ContextIn` and :class:`RecallIn`,
the request models of ``POST /v1/context`` and ``POST /v1/episodes/search``,
and :func:`call_context_tool` runs the same use cases as those routes. The chat
a context call is for is not the model's to choose, so ``chat`` is left out.
"""

from __future__ import annotations

from typing import Any

import asyncpg
from pydantic import BaseModel, ValidationError

from services.query.context.build import build_context
from services.query.context.models import ContextIn
from services.query.context.theme_hints import HintCache
from services.query.episodes.recall import RecallIn, recall
from services.query.memory.state import QueryState
from services.query.tools.specs import ToolSpec, neutral
from shared.errors import InvalidRequest
from shared.memory.vectors import ModelEmbedder

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

CONTEXT_SPECS = [CONTEXT, EPISODE_RECALL]
CONTEXT_TOOLS = [neutral(s) for s in CONTEXT_SPECS]
NAMES = frozenset(s.name for s in CONTEXT_SPECS)


def _validate(model: type[BaseModel], args: dict[str, Any], tool: str) -> Any:
    try:
        return model.model_validate({k: v for k, v in args.items() if v is not None})
    except ValidationError as exc:
        problems = []
        for err in exc.errors()[:10]:
            loc = ".".join(str(x) for x in err.get("loc", ())) or "arguments"
            msg = "unknown argument" if err["type"] == "extra_forbidden" else err["msg"]
            problems.append(f"{loc}: {msg}")
        raise InvalidRequest(f"invalid arguments for {tool}: " + "; ".join(problems)) from exc


async def call_context_tool(
    name: str,
    args: dict[str, Any],
    *,
    pool: asyncpg.Pool,
    state: QueryState,
    user_id: str,
    embedder: ModelEmbedder | None,
    hint_cache: HintCache,
) -> dict[str, Any]:
    """Run ``context`` or ``episode_recall`` for ``user_id``; InvalidRequest for bad arguments."""
    if name == "context":
        if "chat" in args:
            raise InvalidRequest("context: unknown argument chat (the chat comes from the session)")
        body: ContextIn = _validate(ContextIn, args, name)
        out = await build_context(
            pool,
            user_id,
            body.command(),
            embedder=embedder,
            embedding_dim=int(state.settings.embedding_dim),
            hint_cache=hint_cache,
        )
        return out.model_dump(mode="json")
    if name == "episode_recall":
        asked: RecallIn = _validate(RecallIn, args, name)
        return await recall(state, pool, user_id=user_id, query=asked.query, limit=asked.limit)
    raise InvalidRequest(f"unknown tool {name!r}; context tools: {', '.join(sorted(NAMES))}")
