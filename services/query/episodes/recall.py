"""Episode recall (Nous): one user's episodes by summary, key points, topics and turns.

``POST /v1/episodes/search`` and the ``episode_recall`` tool both call :func:`recall`.
"""

from __future__ import annotations

from typing import Annotated, Any

import asyncpg
from pydantic import BaseModel, ConfigDict, Field

from services.query.memory.state import QueryState
from services.query.ranking.episodes import recall_episodes
from services.query.ranking.search_text import SearchText, described, lists_newest


class RecallIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: Annotated[
        SearchText,
        Field(description=described("what to find in the episodes' summaries and turns")),
    ]
    limit: int = Field(default=10, ge=1, le=50, description="results, 1-50")


async def recall(
    state: QueryState, pool: asyncpg.Pool, *, user_id: str, query: str, limit: int = 10
) -> dict[str, Any]:
    """The user's episodes, best first, each with its user tag line
    (``[Tim] Checked weather for Silver Spring, MD``)."""
    vector = None
    if not lists_newest(query):
        vector = await state.query_vector(pool, user_id=user_id, text=query)
    hits = await recall_episodes(
        pool,
        query=query,
        current_user_id=user_id,
        visible_users=[user_id],
        query_vector=vector,
        limit=limit,
    )
    return {
        "episodes": [h.as_dict() for h in hits],
        "mode": "hybrid" if vector is not None else "full_text",
    }
