"""Episodes (Nous): recall by summary, key points and topics; list; read one."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query

from services.query.api import responses as R
from services.query.api.auth import UserId
from services.query.api.deps import ReadPool, State
from services.query.episodes import listing as es
from services.query.episodes.recall import RecallIn, recall

router = APIRouter(prefix="/v1/episodes", tags=["episodes (Nous)"])


@router.post(
    "/search",
    summary="Recall episodes by summary, key points and topics",
    response_model=R.EpisodeRecallOut,
)
async def search(body: RecallIn, user_id: UserId, pool: ReadPool, state: State) -> dict[str, Any]:
    """The acting user's episodes, best first, each with its user tag line
    (``[Tim] Checked weather for Silver Spring, MD``)."""
    return await recall(state, pool, user_id=user_id, query=body.query, limit=body.limit)


@router.get("", summary="The acting user's episodes, newest first", response_model=R.EpisodeListOut)
async def list_episodes(
    user_id: UserId,
    pool: ReadPool,
    status: Annotated[str | None, Query(pattern="^(open|closed)$")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> es.EpisodePage:
    return await es.list_episodes(pool, user_id=user_id, status=status, limit=limit, offset=offset)


@router.get(
    "/{episode_id}",
    summary="One episode: its structured summary and its turns",
    response_model=R.EpisodeOut,
)
async def get_episode(
    episode_id: uuid.UUID,
    user_id: UserId,
    pool: ReadPool,
    turns: Annotated[int, Query(ge=0, le=1000)] = 200,
) -> es.Episode:
    return await es.get_episode(pool, user_id=user_id, episode_id=episode_id, turns=turns)
