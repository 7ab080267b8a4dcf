"""``POST /v1/context``: the memory block for a message under one of four policies."""

from __future__ import annotations

from fastapi import APIRouter, Request

from services.query.auth import UserId
from services.query.context.auto import assemble_auto
from services.query.context.models import ContextIn, ContextOut
from services.query.context.sections import assemble_sections
from services.query.context.summary import assemble_summary
from services.query.context.tools import assemble_tools
from services.query.deps import Pool
from services.query.people_embedder import QueryEmbedder
from services.query.recall import embed_query

router = APIRouter(prefix="/v1", tags=["context"])


@router.post(
    "/context",
    response_model=ContextOut,
    summary="Context to inject for a message: auto, tools, summary or sections",
)
async def context(
    body: ContextIn,
    request: Request,
    user_id: UserId,
    pool: Pool,
    embedder: QueryEmbedder,
) -> ContextOut:
    if body.policy == "tools":
        return await assemble_tools(pool, user_id, body, request.app.state.hint_cache)
    if body.policy == "summary":
        return await assemble_summary(pool, user_id, body)
    qv = await embed_query(
        embedder, body.message, dim=int(request.app.state.settings.embedding_dim)
    )
    if body.policy == "sections":
        return await assemble_sections(pool, user_id, body, qv)
    return await assemble_auto(pool, user_id, body, qv)
