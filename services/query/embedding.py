"""Which embedder serves a user's request, and a failure-tolerant query vector.

``create_app`` keeps one resolver ``(pool, user_id, settings) -> Embedder | None``
(default :func:`shared.embeddings.resolve_embedder`; None = the user runs
full-text-only). Search, tools, people and context all go through it.

A query embedding that fails is not an error for a read: Nova 3.2 says search
then runs full-text-only, so :func:`embed_query` returns None and logs, and
:func:`user_embedder` hands back an :class:`Unavailable` embedder whose calls
raise ``ProviderUnavailable`` so callers can degrade with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import asyncpg

from shared.embeddings import DimensionTooLarge, Embedder, fit_to_column, resolve_embedder
from shared.errors import EngramError, ProviderUnavailable
from shared.settings import CommonSettings

log = logging.getLogger(__name__)

Resolver = Callable[[asyncpg.Pool, str, CommonSettings], Awaitable[Embedder | None]]

default_resolver: Resolver = resolve_embedder


class Unavailable:
    """Stands in for a provider that could not even be resolved."""

    provider = "unavailable"
    model = "unavailable"
    dimensions = None

    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise ProviderUnavailable(self.reason)


async def user_embedder(
    resolver: Resolver, pool: asyncpg.Pool, *, user_id: str, settings: CommonSettings
) -> Embedder | Unavailable | None:
    """The user's embedder; :class:`Unavailable` when resolving it failed."""
    try:
        return await resolver(pool, user_id, settings)
    except EngramError as exc:
        log.warning("cannot resolve the embedder of a user: %s", exc)
        return Unavailable(f"{type(exc).__name__}: {exc}")


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
        if not vectors:
            return None
        return fit_to_column(vectors[0], settings.embedding_dim)
    except DimensionTooLarge as exc:
        log.warning("query vector cannot be compared: %s", exc)
        return None
    except (EngramError, OSError, ValueError) as exc:
        log.warning("query embedding failed, searching full-text only: %s", exc)
        return None
