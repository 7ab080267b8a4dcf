"""The context use case: the memory block for one message under its policy.

``POST /v1/context`` and the ``context`` tool (``/v1/tools/call``, MCP) both
call :func:`build_context`.
"""

from __future__ import annotations

import asyncpg

from services.query.context.auto import assemble_auto
from services.query.context.command import ContextQuery
from services.query.context.models import ContextOut
from services.query.context.sections import assemble_sections
from services.query.context.summary import assemble_summary
from services.query.context.theme_hints import HintCache, assemble_tools
from services.query.embeddings.query import embed_query
from shared.memory.vectors import ModelEmbedder


async def build_context(
    pool: asyncpg.Pool,
    user_id: str,
    query: ContextQuery,
    *,
    embedder: ModelEmbedder | None,
    embedding_dim: int,
    hint_cache: HintCache,
) -> ContextOut:
    if query.policy == "tools":
        return await assemble_tools(pool, user_id, query, hint_cache)
    if query.policy == "summary":
        return await assemble_summary(pool, user_id, query)
    qv = await embed_query(embedder, query.message, dim=embedding_dim)
    if query.policy == "sections":
        return await assemble_sections(pool, user_id, query, qv)
    return await assemble_auto(pool, user_id, query, qv)
