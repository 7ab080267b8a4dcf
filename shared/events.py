"""Typed events that pass between engram's services over Redis Streams.

Every event is a frozen pydantic model with ``event_id`` (UUID, the idempotency
key), ``schema`` (the event type and version, e.g. ``turn.v1``) and
``occurred_at``. A stream entry has one field, ``event``, holding the JSON.
Events evolve additively: new optional fields, never renamed ones.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

Role = Literal["user", "assistant", "tool", "system"]
EmbedKind = Literal["message", "memory", "episode"]
EmbedReason = Literal["new", "rebuild", "backfill", "retry"]


def _now() -> datetime:
    return datetime.now(UTC)


class Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    event_id: uuid.UUID = Field(default_factory=uuid.uuid4)
    occurred_at: datetime = Field(default_factory=_now)

    @field_validator("occurred_at")
    @classmethod
    def _assume_utc(cls, v: datetime) -> datetime:
        # A time without a zone is read as UTC, so imported history keeps its date.
        return v if v.tzinfo is not None else v.replace(tzinfo=UTC)


MAX_TURN_CHARS = 100_000
"""The longest turn content ingest takes; a longer one is dead-lettered with the reason."""


class TurnReceived(Event):
    """One conversation turn, published by a chat platform on ``turns``."""

    schema_: Literal["turn.v1"] = Field(default="turn.v1", alias="schema")
    user_id: Annotated[str, Field(min_length=1, max_length=200)]
    display_name: str | None = None
    provider: Annotated[str, Field(min_length=1, max_length=100)]
    chat_id: Annotated[str, Field(min_length=1, max_length=200)]
    episode_id: uuid.UUID | None = None
    role: Role
    content: Annotated[str, Field(max_length=MAX_TURN_CHARS)] = ""
    tool_name: str | None = None
    tool_args: dict[str, Any] | list[Any] | None = None
    tool_result: Any = None
    external_message_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("content")
    @classmethod
    def _no_nul(cls, v: str) -> str:
        # PostgreSQL text cannot hold NUL; drop it rather than reject the turn.
        return v.replace("\x00", "")


class EpisodeStarted(Event):
    """A platform opened a session (optional: ingest also opens one on the first turn)."""

    schema_: Literal["episode.started.v1"] = Field(default="episode.started.v1", alias="schema")
    episode_id: uuid.UUID
    user_id: Annotated[str, Field(min_length=1, max_length=200)]
    display_name: str | None = None
    provider: Annotated[str, Field(min_length=1, max_length=100)]
    chat_id: Annotated[str, Field(min_length=1, max_length=200)]
    frame: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class EpisodeClosed(Event):
    """A platform closed a session; ingest marks it closed and asks for extraction."""

    schema_: Literal["episode.closed.v1"] = Field(default="episode.closed.v1", alias="schema")
    episode_id: uuid.UUID | None = None
    user_id: Annotated[str, Field(min_length=1, max_length=200)]
    provider: Annotated[str, Field(min_length=1, max_length=100)]
    chat_id: Annotated[str, Field(min_length=1, max_length=200)]
    frame: str | None = None


EpisodeEvent = Annotated[EpisodeStarted | EpisodeClosed, Field(discriminator="schema_")]


class EmbedTarget(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: EmbedKind
    id: str


class EmbedRequested(Event):
    """Rows whose embedding should be computed (their state is already ``pending``).

    ``user_id`` is set when every target belongs to that user; ingest sends one
    request per batch with ``user_id=None`` when a batch mixes users. The
    embedder takes each row's owner from the row itself.
    """

    schema_: Literal["embed.requested.v1"] = Field(default="embed.requested.v1", alias="schema")
    user_id: str | None = None
    targets: list[EmbedTarget]
    reason: EmbedReason = "new"


class ExtractRequested(Event):
    """An episode to summarise and learn facts from."""

    schema_: Literal["extract.requested.v1"] = Field(default="extract.requested.v1", alias="schema")
    episode_id: uuid.UUID
    user_id: str
    reason: Literal["closed", "stale", "manual"] = "closed"


class MemoryChanged(Event):
    """A memory was added, embedded, superseded, archived or expired."""

    schema_: Literal["memory.changed.v1"] = Field(default="memory.changed.v1", alias="schema")
    memory_id: uuid.UUID
    user_id: str
    change: Literal["added", "embedded", "superseded", "archived", "expired", "deleted"]


turn_adapter: TypeAdapter[TurnReceived] = TypeAdapter(TurnReceived)
episode_adapter: TypeAdapter[EpisodeStarted | EpisodeClosed] = TypeAdapter(EpisodeEvent)
embed_adapter: TypeAdapter[EmbedRequested] = TypeAdapter(EmbedRequested)
extract_adapter: TypeAdapter[ExtractRequested] = TypeAdapter(ExtractRequested)
memory_adapter: TypeAdapter[MemoryChanged] = TypeAdapter(MemoryChanged)


def encode(event: Event) -> bytes:
    """The JSON of an event as it goes on a stream (``schema`` under its public name)."""
    return event.model_dump_json(by_alias=True).encode()
