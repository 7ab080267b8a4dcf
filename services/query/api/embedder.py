"""The ``QueryEmbedder`` dependency: the acting user's embedder for people/context routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from services.query.api.auth import UserId
from services.query.embeddings.query import Unavailable, user_embedder
from shared.embeddings import Embedder


async def embedder(request: Request, user_id: UserId) -> Embedder | Unavailable | None:
    return await user_embedder(
        request.app.state.query.resolver,
        request.app.state.runtime.pool,
        user_id=user_id,
        settings=request.app.state.query.settings,
    )


QueryEmbedder = Annotated[Embedder | Unavailable | None, Depends(embedder)]
