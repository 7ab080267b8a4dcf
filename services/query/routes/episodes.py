"""Episodes (Nous): recall by summary, key points and topics; list; read one."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from services.query.auth import UserId
from services.query.deps import Pool, State
from shared.errors import NotFound
from shared.memory.episodes import recall_episodes

router = APIRouter(prefix="/v1/episodes", tags=["episodes (Nous)"])

EPISODE = """
SELECT e.id, e.user_id, coalesce(e.display_name, u.display_name, e.user_id) AS display_name,
       e.provider, e.chat_id, e.status, e.started_at, e.last_active_at, e.closed_at,
       e.turn_count, e.summary, e.extracted_at, e.extraction_error, e.embedding_state
FROM episodes e JOIN users u ON u.id = e.user_id
WHERE e.id = $1 AND e.user_id = $2
"""

EPISODE_TURNS = """
SELECT id, role, coalesce(display_name, role) AS speaker, content, tool_name, occurred_at
FROM messages WHERE episode_id = $1 AND user_id = $2
ORDER BY occurred_at, id
LIMIT $3
"""

RECENT = """
SELECT e.id, e.provider, e.chat_id, e.status, e.started_at, e.last_active_at, e.turn_count,
       e.summary ->> 'title' AS title
FROM episodes e
WHERE e.user_id = $1 AND ($2::text IS NULL OR e.status = $2)
ORDER BY e.last_active_at DESC, e.id
LIMIT $3 OFFSET $4
"""


class RecallIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(max_length=2000, description="words to find in summaries; '*' = newest")
    limit: int = Field(default=10, ge=1, le=50)


@router.post("/search", summary="Recall episodes by summary, key points and topics")
async def search(body: RecallIn, user_id: UserId, pool: Pool, state: State) -> dict[str, Any]:
    """The acting user's episodes, best first, each with its user tag line
    (``[Tim] Checked weather for Silver Spring, MD``)."""
    vector = None
    if body.query.strip() not in ("", "*"):
        vector = await state.query_vector(pool, user_id=user_id, text=body.query)
    hits = await recall_episodes(
        pool,
        query=body.query,
        current_user_id=user_id,
        visible_users=[user_id],
        query_vector=vector,
        limit=body.limit,
    )
    return {
        "episodes": [h.as_dict() for h in hits],
        "mode": "hybrid" if vector is not None else "full_text",
    }


@router.get("", summary="The acting user's episodes, newest first")
async def list_episodes(
    user_id: UserId,
    pool: Pool,
    status: Annotated[str | None, Query(pattern="^(open|closed)$")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> dict[str, Any]:
    rows = await pool.fetch(RECENT, user_id, status, limit, offset)
    return {"episodes": [dict(r) for r in rows], "limit": limit, "offset": offset}


@router.get("/{episode_id}", summary="One episode: its structured summary and its turns")
async def get_episode(
    episode_id: uuid.UUID,
    user_id: UserId,
    pool: Pool,
    turns: Annotated[int, Query(ge=0, le=1000)] = 200,
) -> dict[str, Any]:
    row = await pool.fetchrow(EPISODE, episode_id, user_id)
    if row is None:
        raise NotFound(f"no episode {episode_id}")
    out = dict(row)
    out["turns"] = [dict(r) for r in await pool.fetch(EPISODE_TURNS, episode_id, user_id, turns)]
    return out
