"""Every Redis stream engram uses, in one place: logical stream -> event types ->
producers -> consumer groups, and how an event picks its shard.

Producers name a stream by its :class:`StreamSpec` (``publisher.publish(TURNS, ...)``),
consumers wire a group with it (``rt.consume(stream=TURNS, group=INGEST, ...)``); a
spec is also the plain string of its logical name (``TURNS == "turns"``), so a key
is still ``settings.stream("turns")``.

**Shards.** With ``ENGRAM_STREAM_SHARDS`` = N > 1 each logical stream but ``dead``
is N streams ``{prefix}{name}:{k}`` (``engram:turns:{3}``: the braces are a Redis
Cluster hash tag, so shard k of every stream lives in one slot). An event's shard
is chosen from its chat (turns and episode events: user and chat, so one chat's
turns and its closes land on shards with the same k and keep their order) or its
user (embed, extract, memories requests); with N = 1 the key is ``{prefix}{name}``,
as it always was.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from shared.events import (
    EmbedRequested,
    EpisodeClosed,
    EpisodeStarted,
    Event,
    ExtractRequested,
    MemoryChanged,
    TurnReceived,
)
from shared.settings import CommonSettings

# Consumer groups (one per consuming service; the query service's is supersession)
INGEST = "ingest"
EMBEDDER = "embedder"
EXTRACTOR = "extractor"
SUPERSESSION = "supersession"

ShardKey = Callable[[Mapping[str, Any]], str]
"""The text an event's shard is hashed from, given the event's fields."""


def _by_chat(fields: Mapping[str, Any]) -> str:
    return f"{fields.get('user_id')}\x00{fields.get('chat_id')}"


def _by_user(fields: Mapping[str, Any]) -> str:
    # an embed request mixing users has none: its own id spreads such requests
    user = fields.get("user_id")
    return str(user) if user is not None else str(fields.get("event_id"))


class StreamSpec(str):
    """A logical stream: its name (the spec *is* that string), the events it carries,
    who produces them, the consumer groups that read it, and its shard key (None: one
    key whatever the shard count)."""

    events: tuple[type[Event], ...]
    producers: tuple[str, ...]
    groups: tuple[str, ...]
    shard_key: ShardKey | None

    def __new__(
        cls,
        name: str,
        *,
        events: tuple[type[Event], ...],
        producers: tuple[str, ...],
        groups: tuple[str, ...],
        shard_key: ShardKey | None,
    ) -> StreamSpec:
        spec = super().__new__(cls, name)
        spec.events = events
        spec.producers = producers
        spec.groups = groups
        spec.shard_key = shard_key
        return spec

    @property
    def name(self) -> str:
        return str.__str__(self)

    def shards(self, n: int) -> int:
        """How many keys this stream has when the setting says ``n``."""
        return 1 if self.shard_key is None else max(1, n)

    def key(self, settings: CommonSettings, shard: int = 0) -> str:
        """The Redis key of shard ``shard``: ``{prefix}{name}`` when the stream has one
        key, else ``{prefix}{name}:{k}`` (k in braces: a Redis Cluster hash tag)."""
        if self.shards(settings.stream_shards) == 1:
            return settings.stream(self.name)
        return f"{settings.stream(self.name)}:{{{shard}}}"

    def keys(self, settings: CommonSettings) -> list[str]:
        """Every shard's key, shard 0 first."""
        return [self.key(settings, k) for k in range(self.shards(settings.stream_shards))]

    def shard_of(self, event: Event | Mapping[str, Any], n: int) -> int:
        """The shard (0..n-1) ``event`` (a model or its decoded JSON) goes to."""
        if n <= 1 or self.shard_key is None:
            return 0
        fields = event if isinstance(event, Mapping) else _FieldView(event)
        return zlib.crc32(self.shard_key(fields).encode()) % n

    def shard_of_payload(self, payload: bytes, n: int) -> int:
        """:meth:`shard_of` for an encoded event (``engram publish``, replay); a payload
        that is not a JSON object goes to shard 0 (its consumer dead-letters it)."""
        if n <= 1 or self.shard_key is None:
            return 0
        try:
            obj = json.loads(payload)
        except ValueError:
            return 0
        return self.shard_of(obj, n) if isinstance(obj, dict) else 0


class _FieldView(Mapping[str, Any]):
    """An event's fields read as a mapping, without dumping the model."""

    def __init__(self, event: Event) -> None:
        self._event = event

    def __getitem__(self, key: str) -> Any:
        try:
            return getattr(self._event, key)
        except AttributeError:
            raise KeyError(key) from None

    def __iter__(self) -> Any:
        return iter(type(self._event).model_fields)

    def __len__(self) -> int:
        return len(type(self._event).model_fields)


TURNS = StreamSpec(
    "turns",
    events=(TurnReceived,),
    producers=("chat platforms (engram publish, XADD)",),
    groups=(INGEST,),
    shard_key=_by_chat,
)
EPISODES = StreamSpec(
    "episodes",
    events=(EpisodeStarted, EpisodeClosed),
    producers=("chat platforms (engram publish, XADD)",),
    groups=(INGEST,),
    shard_key=_by_chat,
)
EMBED = StreamSpec(
    "embed",
    events=(EmbedRequested,),
    producers=("ingest", "query", "extractor", "embedder (rebuild, backfill)"),
    groups=(EMBEDDER,),
    shard_key=_by_user,
)
EXTRACT = StreamSpec(
    "extract",
    events=(ExtractRequested,),
    producers=("ingest", "extractor (stale sweep, later)"),
    groups=(EXTRACTOR,),
    shard_key=_by_user,
)
MEMORIES = StreamSpec(
    "memories",
    events=(MemoryChanged,),
    producers=("query", "extractor", "embedder"),
    groups=(SUPERSESSION,),
    shard_key=_by_user,
)
DEAD = StreamSpec(
    "dead",
    events=(),
    producers=("every consumer", "engram publish (skipped lines)"),
    groups=(),  # read by operators (engram dead)
    shard_key=None,
)

STREAMS: dict[str, StreamSpec] = {
    s.name: s for s in (TURNS, EPISODES, EMBED, EXTRACT, MEMORIES, DEAD)
}


def spec(stream: str) -> StreamSpec:
    """The registered stream named ``stream`` (a :class:`StreamSpec` or its name)."""
    if isinstance(stream, StreamSpec):
        return stream
    try:
        return STREAMS[stream]
    except KeyError:
        raise ValueError(
            f"unknown stream {stream!r}; streams are registered in shared/stream_registry.py"
        ) from None


def stream_of_payload(payload: Mapping[str, Any]) -> StreamSpec:
    """The platform stream an event published from outside belongs to (by ``schema``):
    ``episode.*`` to :data:`EPISODES`, anything else to :data:`TURNS`."""
    return EPISODES if str(payload.get("schema", "")).startswith("episode.") else TURNS
