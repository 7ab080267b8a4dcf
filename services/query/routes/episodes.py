"""Episodes (Nous): recall by summary, key points and topics; list; read one."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from services.query import episodes_service as es
from services.query import responses as R
from services.query.auth import UserId
from services.query.deps import Pool, State
from shared.memory.episodes import recall_episodes

router = APIRouter(prefix="/v1/episodes", tags=["episodes (Nous)"])


class RecallIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(max_length=2000, description="words to find in summaries; '*' = newest")
    limit: int = Field(default=10, ge=1, le=50)


@router.post(
    "/search",
    summary="Recall episodes by summary, key points and topics",
    response_model=R.EpisodeRecallOut,
)
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


@router.get("", summary="The acting user's episodes, newest first", response_model=R.EpisodeListOut)
async def list_episodes(
    user_id: UserId,
    pool: Pool,
    status: Annotated[str | None, Query(pattern="^(open|closed)$")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> dict[str, Any]:
    return await es.list_episodes(pool, user_id=user_id, status=status, limit=limit, offset=offset)


@router.get(
    "/{episode_id}",
    summary="One episode: its structured summary and its turns",
    response_model=R.EpisodeOut,
)
async def get_episode(
    episode_id: uuid.UUID,
    user_id: UserId,
    pool: Pool,
    turns: Annotated[int, Query(ge=0, le=1000)] = 200,
) -> dict[str, Any]:
    return await es.get_episode(pool, user_id=user_id, episode_id=episode_id, turns=turns)
