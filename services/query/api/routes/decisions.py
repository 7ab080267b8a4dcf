"""Nous F010.3: record a decision as one clean, factual sentence."""

from __future__ import annotations

import uuid

from fastapi import APIRouter
from pydantic import BaseModel, Field

from services.query.api.auth import UserId
from services.query.api.deps import Pool, Pub, State
from services.query.api.edges import NAMED_IN_BODY
from services.query.memory.decisions import MAX_CHARS, TARGET_CHARS, RecordedDecision
from services.query.memory.decisions import record_decision as record
from shared.memory.membership import require_member, require_own_episode
from shared.memory.writer import Chat

router = APIRouter(prefix="/v1", tags=["decisions"])


class DecisionIn(BaseModel):
    description: str = Field(
        description=f"one factual, present-tense sentence of what was decided; at most "
        f"{TARGET_CHARS} characters is the target, over {MAX_CHARS} is rejected",
        examples=["Use direct Anthropic API calls instead of Claude Agent SDK"],
    )
    rationale: str | None = Field(default=None, max_length=2000, description="why, optional")
    tags: list[str] = Field(default_factory=list, max_length=20)
    episode_id: uuid.UUID | None = None
    provider: str | None = Field(default=None, description="with chat_id: a chat's decision")
    chat_id: str | None = None


# the use case's result under the API's name (a docstring would become its description)
class DecisionOut(RecordedDecision):
    pass


@router.post(
    "/decisions",
    status_code=201,
    response_model=DecisionOut,
    responses=NAMED_IN_BODY,  # an episode that is not the caller's, a chat they are not in
    summary="Record a decision (rewritten to one sentence, or refused with guidance)",
)
async def record_decision(
    body: DecisionIn,
    user_id: UserId,
    pool: Pool,
    publisher: Pub,
    state: State,
) -> RecordedDecision:
    # a reference to someone else's episode or a chat one is not in: 404 (issue 17.3/17.6)
    if body.episode_id is not None:
        await require_own_episode(pool, user_id, body.episode_id)
    if body.provider and body.chat_id:
        await require_member(pool, user_id, Chat(body.provider, body.chat_id))
    return await record(
        pool,
        user_id=user_id,
        description=body.description,
        rationale=body.rationale,
        tags=body.tags,
        episode_id=body.episode_id,
        provider=body.provider,
        chat_id=body.chat_id,
        rewrite=state.rewrite,
        metrics=state.decision_metrics,
        publisher=publisher,
    )
