"""Which embedder a request uses: the user's provider, resolved on each call.

``create_app`` stores a resolver ``(pool, user_id) -> embedder | None`` on the
app (None = full-text-only). Tests pass their own to simulate a provider that
is down; everything else uses the default.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

import asyncpg
from fastapi import Depends, Request

from services.query.auth import UserId
from shared.memory.vectors import TextEmbedder

EmbedderFor = Callable[[asyncpg.Pool, str], Awaitable[TextEmbedder | None]]


async def full_text_only(pool: asyncpg.Pool, user_id: str) -> TextEmbedder | None:
    return None


async def embedder(request: Request, user_id: UserId) -> TextEmbedder | None:
    resolve: EmbedderFor = request.app.state.embedder_for
    return await resolve(request.app.state.runtime.pool, user_id)


QueryEmbedder = Annotated[TextEmbedder | None, Depends(embedder)]
