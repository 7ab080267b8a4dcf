"""Search over the user's conversation turns (the stored messages, not memories)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from services.query.api import responses as R
from services.query.api.auth import UserId
from services.query.api.deps import ReadPool, State
from services.query.embeddings.query import SearchText, lists_newest
from services.query.ranking import turns as ms
from shared.dates import AS_OF_TEXT, AsOf

router = APIRouter(prefix="/v1/messages", tags=["messages"])


class MessageSearchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: SearchText
    limit: Annotated[int, Field(ge=1, le=ms.MAX_LIMIT, description="results, 1-50")] = 10
    mode: ms.Mode = Field(
        default=ms.DEFAULT_MODE,
        description="fused (default: 0.6 BM25 with speaker names + 0.4 semantic, min-max), "
        "hybrid (Nova's 0.7 semantic + 0.3 ts_rank, min-max), rrf (reciprocal rank "
        "fusion), fts (ts_rank), bm25, semantic",
    )
    chat_id: str | None = Field(default=None, description="only turns of this chat")
    episode_id: uuid.UUID | None = Field(default=None, description="only turns of this episode")
    since: datetime | None = Field(default=None, description="only turns at or after this time")
    until: datetime | None = Field(default=None, description="only turns before this time")
    as_of: AsOf | None = Field(default=None, description=AS_OF_TEXT)

    def query_(self) -> ms.MessageQuery:
        return ms.MessageQuery(
            query=self.query,
            limit=self.limit,
            mode=self.mode,
            chat_id=self.chat_id,
            episode_id=str(self.episode_id) if self.episode_id else None,
            since=self.since,
            until=self.until,
            as_of=self.as_of,
        )


@router.post(
    "/search",
    summary="Find conversation turns: full-text, semantic or both fused",
    response_model=R.MessageSearchOut,
)
async def search(
    body: MessageSearchIn, user_id: UserId, pool: ReadPool, state: State
) -> R.MessageSearchOut:
    q = body.query_()
    vector = None
    if ms.FUSIONS[q.mode].w_sem > 0 and not lists_newest(q.query):
        vector = await state.query_vector(pool, user_id=user_id, text=q.query)
    result = await ms.search_messages(pool, q, user_id=user_id, vector=vector)
    state.message_searches.labels(result.mode).inc()
    return R.MessageSearchOut.of(result)  # the response model itself: checked once
