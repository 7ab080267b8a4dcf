"""The query vector: which embedder serves a user, and a failure-tolerant ``embed_query``.

The embedder issue owns providers (``shared.embeddings``); this module only needs
``resolve_embedder(pool, user_id, settings) -> Embedder | None`` (None = the user
runs full-text-only) and ``await embedder.embed([text]) -> [[float, ...]]``.
A query embedding that fails is not an error for search: Nova 3.2 says the
search then runs full-text-only, so :func:`embed_query` returns None and logs.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import asyncpg

from shared.errors import EngramError
from shared.settings import CommonSettings

log = logging.getLogger(__name__)


class Embedder(Protocol):
    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


Resolver = Callable[[asyncpg.Pool, str, CommonSettings], Awaitable[Embedder | None]]


async def _no_embedder(pool: asyncpg.Pool, user_id: str, settings: CommonSettings) -> None:
    return None


def default_resolver() -> Resolver:
    """``shared.embeddings.resolve_embedder`` when the embedder package is present."""
    try:
        from shared.embeddings import resolve_embedder  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        log.warning("shared.embeddings is not installed: search runs full-text-only")
        return _no_embedder
    resolver: Resolver = resolve_embedder
    return resolver


def fit_dimension(vector: Sequence[float], dim: int) -> list[float] | None:
    """Zero-pad a shorter vector to the column size; a longer one cannot be compared."""
    if len(vector) > dim:
        return None
    return list(vector) + [0.0] * (dim - len(vector))


async def embed_query(
    resolver: Resolver,
    pool: asyncpg.Pool,
    *,
    user_id: str,
    settings: CommonSettings,
    text: str,
) -> list[float] | None:
    """The user's query vector, or None when they have no embedder or embedding failed."""
    try:
        embedder = await resolver(pool, user_id, settings)
        if embedder is None:
            return None
        vectors = await embedder.embed([text])
    except (EngramError, OSError, ValueError) as exc:
        log.warning("query embedding failed, searching full-text only: %s", exc)
        return None
    if not vectors:
        return None
    fitted = fit_dimension(vectors[0], settings.embedding_dim)
    if fitted is None:
        log.warning(
            "query vector has %d dimensions, more than the column's %d",
            len(vectors[0]),
            settings.embedding_dim,
        )
    return fitted
