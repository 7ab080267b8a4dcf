"""Which embedder a people/context request uses: the user's provider, resolved per call.

``create_app`` stores a resolver ``(pool, user_id, settings) -> Embedder | None``
on ``app.state.people_resolver`` (None = full-text-only); the default is
``shared.embeddings.resolve_embedder``. A resolver that fails gives an embedder
that reports itself unavailable, so callers degrade to full-text search with a
warning instead of failing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated

import asyncpg
from fastapi import Depends, Request

from services.query.auth import UserId
from shared.errors import EngramError, ProviderUnavailable
from shared.memory.vectors import ModelEmbedder
from shared.settings import CommonSettings

log = logging.getLogger(__name__)

Resolver = Callable[[asyncpg.Pool, str, CommonSettings], Awaitable[ModelEmbedder | None]]


async def full_text_only(
    pool: asyncpg.Pool, user_id: str, settings: CommonSettings
) -> ModelEmbedder | None:
    return None


def default_resolver() -> Resolver:
    """``shared.embeddings.resolve_embedder`` when the embeddings package is present."""
    try:
        from shared.embeddings import resolve_embedder  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        log.warning("shared.embeddings is not available: people/context run full-text-only")
        return full_text_only
    resolver: Resolver = resolve_embedder
    return resolver


class Unavailable:
    """Stands in for a provider that could not even be resolved."""

    provider = "unavailable"
    model = "unavailable"

    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise ProviderUnavailable(self.reason)


async def embedder(request: Request, user_id: UserId) -> ModelEmbedder | None:
    resolve: Resolver = request.app.state.people_resolver
    try:
        return await resolve(request.app.state.runtime.pool, user_id, request.app.state.settings)
    except EngramError as exc:
        log.warning("cannot resolve the embedder of a user: %s", exc)
        return Unavailable(f"{type(exc).__name__}: {exc}")


QueryEmbedder = Annotated[ModelEmbedder | None, Depends(embedder)]
