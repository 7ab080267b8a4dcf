"""Conversation turns over HTTP: publish one to the ``turns`` stream (as a chat platform
does, for the acting user), list a chat's stored turns, delete them.

The chats are the user's own: their provider is :func:`provider_for` the user, never a
platform's. A user is a member of every chat they have turns in (and so reads its
shared memories: shared/memory/membership.py), so a turn published over HTTP into
another user's chat would make its author a member of it.

A published turn goes through the pipeline like any other (ingest stores it in its
episode, the embedder embeds it, the extractor learns from the closed episode), so it
is listed once ingest has stored it, not at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Self, TypeVar

import asyncpg
from pydantic import BaseModel, Field, ValidationError

from shared.db import audit
from shared.errors import InvalidRequest
from shared.events import TurnReceived
from shared.stream_registry import TURNS
from shared.streams import Publisher

PROVIDER_PREFIX = "api-"


def provider_for(user_id: str) -> str:
    """The provider of a user's HTTP chats: theirs alone (a hash of the user id)."""
    return PROVIDER_PREFIX + hashlib.sha256(user_id.encode()).hexdigest()[:24]


LAST = """
SELECT id, role, content, display_name, external_id, metadata, occurred_at, episode_id
FROM messages WHERE user_id = $1 AND provider = $2 AND chat_id = $3
ORDER BY occurred_at DESC, id DESC LIMIT $4
"""

DELETE = "DELETE FROM messages WHERE user_id = $1 AND provider = $2 AND chat_id = $3"


class Published(BaseModel):
    """A turn on the ``turns`` stream: its event id, its stream entry, the user's provider."""

    event_id: str
    stream_id: str
    provider: str = Field(description="the provider of the user's HTTP chats")


class Turn(BaseModel):
    """One stored turn of a chat."""

    id: int
    role: str
    content: str
    display_name: str | None
    external_message_id: str | None
    metadata: dict[str, Any]
    occurred_at: str
    """ISO 8601."""
    episode_id: str


class Turns(BaseModel):
    """A chat's stored turns, oldest first."""

    turns: list[Turn]

    @classmethod
    def of(cls, rows: Sequence[asyncpg.Record]) -> Self:
        """The turns of ``rows`` (newest first, as :data:`LAST` reads them), oldest
        first, checked once as they are built. Called on a subclass (the API's response
        model) it builds that, which the API then passes as it is: no second check per
        turn (a list costs what its dict did)."""
        return cls.model_validate(
            {
                "turns": [
                    {
                        "id": r["id"],
                        "role": r["role"],
                        "content": r["content"],
                        "display_name": r["display_name"],
                        "external_message_id": r["external_id"],
                        "metadata": r["metadata"],
                        "occurred_at": r["occurred_at"].isoformat(),
                        "episode_id": str(r["episode_id"]),
                    }
                    for r in reversed(rows)
                ]
            }
        )


TurnsT = TypeVar("TurnsT", bound=Turns)


class TurnsDeleted(BaseModel):
    """How many of a chat's stored turns were deleted."""

    deleted: int


async def publish(publisher: Publisher, *, user_id: str, turn: dict[str, Any]) -> Published:
    """Publish the turn to ``turns`` for ``user_id``; its event id is what ingest dedupes on."""
    provider = provider_for(user_id)
    try:
        event = TurnReceived.model_validate({**turn, "user_id": user_id, "provider": provider})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "turn"
        raise InvalidRequest(f"{field}: {first['msg']}") from None
    [entry] = await publisher.publish(TURNS, [event])
    return Published(event_id=str(event.event_id), stream_id=entry, provider=provider)


async def last_turns(
    pool: asyncpg.Pool, *, user_id: str, chat_id: str, limit: int, answer: type[TurnsT]
) -> TurnsT:
    """The chat's last ``limit`` stored turns, oldest first, as ``answer`` (:class:`Turns`
    or the API's response model, built once)."""
    rows = await pool.fetch(LAST, user_id, provider_for(user_id), chat_id, limit)
    return answer.of(rows)


async def delete_turns(pool: asyncpg.Pool, *, user_id: str, chat_id: str) -> TurnsDeleted:
    provider = provider_for(user_id)
    async with pool.acquire() as conn, conn.transaction():
        deleted = int((await conn.execute(DELETE, user_id, provider, chat_id)).split()[-1])
        if deleted:
            await audit(
                conn,
                user_id=user_id,
                action="delete",
                entity="message",
                entity_id=f"{provider}/{chat_id}",
                actor="api",
                details={"deleted": deleted},
            )
    return TurnsDeleted(deleted=deleted)
