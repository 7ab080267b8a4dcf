"""``POST /v1/context``: the memory block for a message under one of four policies."""

from __future__ import annotations

from fastapi import APIRouter, Request

from services.query.api.auth import UserId
from services.query.api.deps import ReadPool, Settings
from services.query.api.embedder import QueryEmbedder
from services.query.context.build import build_context
from services.query.context.models import ContextIn, ContextOut

router = APIRouter(prefix="/v1", tags=["context"])


@router.post(
    "/context",
    response_model=ContextOut,
    summary="Context to inject for a message: auto, tools, summary or sections",
)
async def context(
    body: ContextIn,
    request: Request,
    settings: Settings,
    user_id: UserId,
    pool: ReadPool,
    embedder: QueryEmbedder,
) -> ContextOut:
    return await build_context(
        pool,
        user_id,
        body.command(),
        embedder=embedder,
        embedding_dim=settings.embedding_dim,
        hint_cache=request.app.state.hint_cache,
    )
