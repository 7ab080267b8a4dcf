"""Conversation turns over HTTP: publish to the pipeline, list a chat's, delete them.
The chats are the user's own (services/query/chat_turns: their provider is the user's)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from services.query import chat_turns as ct
from services.query.api import responses as R
from services.query.api.auth import UserId
from services.query.api.deps import Pool, Pub
from shared.events import MAX_TURN_CHARS

router = APIRouter(prefix="/v1/turns", tags=["turns"])

ChatId = Annotated[str, Field(min_length=1, max_length=200)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TurnIn(_Body):
    chat_id: ChatId
    role: Literal["user", "assistant", "tool", "system"]
    content: Annotated[str, Field(max_length=MAX_TURN_CHARS)] = ""
    display_name: Annotated[str | None, Field(max_length=500)] = None
    external_message_id: Annotated[str | None, Field(max_length=500)] = None
    occurred_at: datetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class ChatIn(_Body):
    chat_id: ChatId


class LastTurnsIn(ChatIn):
    limit: Annotated[int, Field(ge=1, le=500)] = 100


class PublishedOut(ct.Published, R.Out):
    pass


class TurnOut(ct.Turn, R.Out):
    pass


class TurnsOut(ct.Turns, R.Out):
    turns: list[TurnOut]  # type: ignore[assignment]


class TurnsDeletedOut(ct.TurnsDeleted, R.Out):
    pass


@router.post(
    "",
    summary="Publish a conversation turn to the pipeline (stored once ingest has it)",
    response_model=PublishedOut,
)
async def publish(body: TurnIn, user_id: UserId, pub: Pub) -> ct.Published:
    return await ct.publish(pub, user_id=user_id, turn=body.model_dump(exclude_none=True))


@router.post("/list", summary="A chat's last stored turns, oldest first", response_model=TurnsOut)
async def list_(body: LastTurnsIn, user_id: UserId, pool: Pool) -> TurnsOut:
    return await ct.last_turns(  # the response model itself: checked once
        pool, user_id=user_id, chat_id=body.chat_id, limit=body.limit, answer=TurnsOut
    )


@router.post("/delete", summary="Delete a chat's stored turns", response_model=TurnsDeletedOut)
async def delete(body: ChatIn, user_id: UserId, pool: Pool) -> ct.TurnsDeleted:
    return await ct.delete_turns(pool, user_id=user_id, chat_id=body.chat_id)
