"""Nous F010.3: record a decision as one clean, factual sentence."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from services.query.auth import UserId
from services.query.deps import Pool, Pub, Rt
from shared.llm.client import OpenAIChatModel
from shared.llm.jobs import build_extractor
from shared.llm.settings import LLMSettings
from shared.memory.decisions import MAX_CHARS, TARGET_CHARS, DecisionMetrics, Rewrite
from shared.memory.decisions import record_decision as record
from shared.memory.membership import require_member, require_own_episode
from shared.memory.remember import Chat
from shared.runtime import Runtime

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


class DecisionOut(BaseModel):
    id: uuid.UUID
    description: str
    rewritten: bool = Field(description="true when the model rewrote the description")
    original: str | None = None
    warnings: list[str]


def _metrics(request: Request, rt: Rt) -> DecisionMetrics:
    state = request.app.state
    if getattr(state, "decision_metrics", None) is None:
        state.decision_metrics = DecisionMetrics(rt.metrics.registry)
    m: DecisionMetrics = state.decision_metrics
    return m


def _rewriter(request: Request, rt: Rt) -> Rewrite | None:
    """The model's rewriter when the service has a language model configured, else None."""
    settings = request.app.state.settings
    if not isinstance(settings, LLMSettings) or not settings.llm_configured:
        return None
    state = request.app.state
    if getattr(state, "decision_extractor", None) is None:
        extractor, client = build_extractor(settings)
        state.decision_extractor = extractor
        if isinstance(client, OpenAIChatModel):

            async def close(_: Runtime) -> None:
                await client.aclose()

            rt.on_stop.append(close)
    rewrite: Rewrite = state.decision_extractor.rewrite_decision
    return rewrite


@router.post(
    "/decisions",
    status_code=201,
    response_model=DecisionOut,
    summary="Record a decision (rewritten to one sentence, or refused with guidance)",
)
async def record_decision(
    body: DecisionIn,
    user_id: UserId,
    pool: Pool,
    publisher: Pub,
    metrics: Annotated[DecisionMetrics, Depends(_metrics)],
    rewrite: Annotated[Rewrite | None, Depends(_rewriter)],
) -> Any:
    # a reference to someone else's episode or a chat one is not in: 404 (issue 17.3/17.6)
    if body.episode_id is not None:
        await require_own_episode(pool, user_id, body.episode_id)
    if body.provider and body.chat_id:
        await require_member(pool, user_id, Chat(body.provider, body.chat_id))
    d = await record(
        pool,
        user_id=user_id,
        description=body.description,
        rationale=body.rationale,
        tags=body.tags,
        episode_id=body.episode_id,
        provider=body.provider,
        chat_id=body.chat_id,
        rewrite=rewrite,
        metrics=metrics,
        publisher=publisher,
    )
    return DecisionOut(
        id=d.id,
        description=d.description,
        rewritten=d.rewritten,
        original=d.original,
        warnings=d.warnings,
    )
