"""Typed events that pass between engram's services over Redis Streams.

Every event is a frozen pydantic model with ``event_id`` (UUID, the idempotency
key), ``schema`` (the event type and version, e.g. ``turn.v1``) and
``occurred_at``, and optionally ``trace`` (a W3C ``traceparent``: the span that
published it, when tracing is on; ``shared/tracing.py``). A stream entry has one
field, ``event``, holding the JSON.
Events evolve additively: new optional fields, never renamed ones. So consumers
ignore fields they do not know (an event from a newer producer is stored, not
dead-lettered); strictness lives at the platform boundary (``engram publish
--strict`` refuses unknown fields, see :func:`unknown_fields`).

What PostgreSQL would refuse is refused here, at parse time, so it is
dead-lettered at once with its reason instead of failing a whole batch: a NUL
byte or a lone surrogate in any text or JSON field (``content`` too, as the API
refuses it: nothing is changed silently), a time outside 1900-2199, a text or JSON
value over its size cap.
"""

from __future__ import annotations

import functools
import json
import math
import types
import typing
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    field_validator,
    model_validator,
)

from shared.dates import EARLIEST, LATEST

Role = Literal["user", "assistant", "tool", "system"]
EmbedKind = Literal["message", "memory", "episode"]
EmbedReason = Literal["new", "rebuild", "backfill", "retry"]


MAX_TURN_CHARS = 1_000_000
"""The longest turn content ingest takes; a longer one is dead-lettered with the reason.
A long turn is kept whole: its words are indexed from its first 200,000 characters
(migration 0160: a tsvector holds 1 MB), and all of it is embedded as passages
(``shared/embeddings/passages.py``). The API's body limit (1 MB by default) is the
lower bound over HTTP."""
MAX_JSON_CHARS = 256_000
"""``metadata``, ``tool_args``, ``tool_result`` are at most this long as JSON."""


def _now() -> datetime:
    return datetime.now(UTC)


def _trace_or_none(v: Any) -> Any:
    """A ``trace`` that is not text is dropped, not refused (a new trace starts)."""
    return v if v is None or isinstance(v, str) else None


def _bad_text(s: str) -> str | None:
    if "\x00" in s:
        return "contains a NUL byte (PostgreSQL cannot store it)"
    if s.isascii():  # no surrogate either: skip the encode
        return None
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (not valid UTF-8)"
    return None


def _check_value(name: str, value: Any) -> None:
    """Refuse what PostgreSQL would refuse in a text or JSON value, naming the field."""
    if type(value) is str and name != "tool_result":  # most fields: one text, no walk
        problem = _bad_text(value)
        if problem:
            raise ValueError(f"{name} {problem}")
        if len(value) > MAX_TURN_CHARS:
            raise ValueError(f"{name} is {len(value):,} characters; at most {MAX_TURN_CHARS:,}")
        return
    stack: list[tuple[str, Any]] = [(name, value)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, str):
            problem = _bad_text(v)
            if problem:
                raise ValueError(f"{where} {problem}")
        elif isinstance(v, dict):
            for k, item in v.items():
                key = str(k)
                problem = _bad_text(key)
                if problem:
                    raise ValueError(f"a key in {where} {problem}")
                stack.append((f"{where}.{key[:40]}", item))
        elif isinstance(v, list | tuple):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(v))
        elif isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{where} is {v} (JSON in PostgreSQL holds finite numbers only)")
    if isinstance(value, dict | list) or (name == "tool_result" and value is not None):
        size = len(json.dumps(value, default=str))
        if size > MAX_JSON_CHARS:
            raise ValueError(f"{name} is {size:,} characters as JSON; at most {MAX_JSON_CHARS:,}")
    elif isinstance(value, str) and len(value) > MAX_TURN_CHARS:
        raise ValueError(f"{name} is {len(value):,} characters; at most {MAX_TURN_CHARS:,}")


def _may_hold_raw(annotation: Any) -> bool:
    """Whether a field so annotated can hold a producer's text or JSON as it is (str,
    dict, list, Any); a nested model (``EmbedTarget``) or a list of them cannot."""
    if annotation is Any or annotation is str:
        return True
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Annotated:
        return _may_hold_raw(args[0])
    if origin is typing.Union or origin is types.UnionType:
        return any(_may_hold_raw(a) for a in args)
    if origin in (dict, list, tuple):
        return not any(isinstance(a, type) and issubclass(a, BaseModel) for a in args)
    return False


@functools.cache
def _raw_fields(model: type[BaseModel]) -> tuple[str, ...]:
    """The fields of ``model`` that ``Event._storable`` checks, found once per class."""
    return tuple(
        name
        for name, f in model.model_fields.items()
        if name != "trace" and (name == "tool_result" or _may_hold_raw(f.annotation))
    )


class Event(BaseModel):
    # extra="ignore": an event from a newer producer (one more optional field) is
    # read, not refused; `engram publish --strict` checks at the boundary.
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    event_id: uuid.UUID = Field(default_factory=uuid.uuid4)
    occurred_at: datetime = Field(default_factory=_now)
    # Written only when set: an event without it is the same JSON as before.
    trace: Annotated[str | None, BeforeValidator(_trace_or_none)] = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="W3C traceparent of the span that published the event (shared/tracing.py, "
        "docs/traces.md); absent when tracing is off. Never stored, never refused: a value "
        "that is not a traceparent starts a new trace",
    )

    @field_validator("occurred_at")
    @classmethod
    def _assume_utc(cls, v: datetime) -> datetime:
        # A time without a zone is read as UTC, so imported history keeps its date.
        v = v if v.tzinfo is not None else v.replace(tzinfo=UTC)
        if not EARLIEST <= v < LATEST:
            raise ValueError(
                f"{v.isoformat()} is outside {EARLIEST.year}-{LATEST.year - 1}; "
                "a time that far off is a mistake"
            )
        return v

    @model_validator(mode="after")
    def _storable(self) -> Event:
        # Every event parsed or made runs this: only the fields that can hold raw text
        # or JSON (a list of EmbedTargets is checked by its own model).
        for name in _raw_fields(type(self)):
            value = getattr(self, name)
            if isinstance(value, str | dict | list) or name == "tool_result":
                _check_value(name, value)
        return self


class TurnReceived(Event):
    """One conversation turn, published by a chat platform on ``turns``."""

    schema_: Literal["turn.v1"] = Field(default="turn.v1", alias="schema")
    user_id: Annotated[str, Field(min_length=1, max_length=200)]
    display_name: Annotated[str, Field(max_length=500)] | None = None
    provider: Annotated[str, Field(min_length=1, max_length=100)]
    chat_id: Annotated[str, Field(min_length=1, max_length=200)]
    episode_id: uuid.UUID | None = None
    role: Role
    content: Annotated[str, Field(max_length=MAX_TURN_CHARS)] = ""
    tool_name: Annotated[str, Field(max_length=200)] | None = None
    tool_args: dict[str, Any] | list[Any] | None = None
    tool_result: Any = None
    external_message_id: Annotated[str, Field(max_length=500)] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class EpisodeStarted(Event):
    """A platform opened a session (optional: ingest also opens one on the first turn)."""

    schema_: Literal["episode.started.v1"] = Field(default="episode.started.v1", alias="schema")
    episode_id: uuid.UUID
    user_id: Annotated[str, Field(min_length=1, max_length=200)]
    display_name: Annotated[str, Field(max_length=500)] | None = None
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
    model_config = ConfigDict(frozen=True, extra="ignore")

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


EVENT_TYPES: dict[str, type[Event]] = {
    "turn.v1": TurnReceived,
    "episode.started.v1": EpisodeStarted,
    "episode.closed.v1": EpisodeClosed,
    "embed.requested.v1": EmbedRequested,
    "extract.requested.v1": ExtractRequested,
    "memory.changed.v1": MemoryChanged,
}


@dataclass
class BatchResult:
    """What a consumer use case says about the events it was handed.

    Each event is named by its position (0-based) in the sequence the use case
    was given; an event not named here was handled. The use case knows nothing
    of streams: the stream adapter (``shared.streams.StreamConsumer``) maps the
    positions back to entry ids.

    - ``refused``: refused for good, with the reason (e.g. a turn naming another
      user's episode); the adapter dead-letters them at once;
    - ``dropped``: events of an erased user, not stored (``shared.erasure``); the
      adapter deletes them from the stream so their content does not linger.

    A failure that is not about one event is raised, not reported: the
    consumer's ``FailurePolicy`` decides what happens to the batch."""

    refused: dict[int, str] = field(default_factory=dict)
    dropped: set[int] = field(default_factory=set)


def unknown_fields(obj: dict[str, Any]) -> list[str]:
    """Top-level fields of an event's JSON that its model does not know (a turn when
    ``schema`` is missing). Consumers ignore them; ``engram publish --strict`` refuses."""
    model = EVENT_TYPES.get(str(obj.get("schema", "turn.v1")), TurnReceived)
    known = set()
    for name, f in model.model_fields.items():
        known.add(name)
        if f.alias:
            known.add(f.alias)
    return sorted(k for k in obj if k not in known)


def encode(event: Event) -> bytes:
    """The JSON of an event as it goes on a stream (``schema`` under its public name)."""
    return event.model_dump_json(by_alias=True).encode()
