"""Nova's memory search as every surface runs it: embed the query, search, count the mode.

``POST /v1/memory/search`` and the admin's, the ``memory`` tool, the Redis
request/reply search, the browser, Jarvus's typed retrieval and LangGraph's store
all call :func:`memory_search` with the process's
:class:`~services.query.memory.state.QueryState`, so they behave (and are
counted) the same. The ranking itself is ``services.query.ranking.memories``.
"""

from __future__ import annotations

import asyncpg

from services.query.memory.state import QueryState
from services.query.ranking.memories import SearchParams, SearchResult, search
from shared.embeddings.user_settings import Stored


async def memory_search(
    state: QueryState,
    pool: asyncpg.Pool,
    params: SearchParams,
    *,
    user_id: str | None,
    all_users: bool = False,
    stored: Stored | None = None,
) -> SearchResult:
    """Embed the query (unless match-all or cross-user), search, count the mode.

    A cross-user (admin) search is full-text only: users may embed with
    different models, so one query vector cannot rank them all. ``stored``: the
    user's embedding settings if the request read them with its API key."""
    vector = None
    if not params.match_all and user_id is not None and not all_users:
        vector = await state.query_vector(pool, user_id=user_id, text=params.query, stored=stored)
    result = await search(pool, params, user_id=user_id, vector=vector, all_users=all_users)
    state.searches.labels(result.mode).inc()
    return result
