"""The one writer of ``memory_items``: every surface that stores a memory calls it.

:func:`insert_items` stores new memories (or, for an item with a ``category``
and ``key``, upserts Navi's one value per key) inside the caller's connection.
For each item it ensures the user (refused, :class:`~shared.errors.UserErased`,
for an erased one: the statement fires migration 0095's trigger, which waits for an
erasure in progress and checks the tombstone, see ``shared.erasure``) and the theme,
sets the embedding state
(``ready`` with the vector when one is given, else ``pending``), writes one
audit line under the entity :data:`AUDIT_ENTITY`, and, when the item was stored
with its vector, runs the duplicate check (:mod:`shared.memory.dedupe`) and Ash's
supersession check. An item with the text of a live memory of the same owner,
scope, namespace and subjects confirms that memory instead of storing another
(``INSERT ... ON CONFLICT`` on the live-content key: racing adds store one row).
It returns what was written and the events to publish *after the commit* (:meth:`Written.events`):
``EmbedRequested`` for rows left pending and ``MemoryChanged`` for every
addition, inline embedding and supersession.

:data:`MemoryType` is the one list of memory types; a test checks it against
the migration's CHECK constraint.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, get_args

import asyncpg

from shared.db import Conn
from shared.erasure import ERASED_MESSAGE, erased_write
from shared.errors import InvalidRequest, UserErased
from shared.events import EmbedRequested, EmbedTarget, Event, MemoryChanged
from shared.memory.dedupe import APPEND_SOURCE, SOURCE_ENTRY, SameFact, merge_duplicate
from shared.memory.supersession import AUDIT_ENTITY, Contradicts, check_supersession
from shared.stream_registry import EMBED, MEMORIES
from shared.streams import Publisher
from shared.users import ENSURE_USER

__all__ = [
    "AUDIT_ENTITY",
    "MEMORY_TYPES",
    "Chat",
    "MemoryType",
    "NewItem",
    "Written",
    "insert_items",
]

MemoryType = Literal[
    "preference",
    "fact",
    "instruction",
    "summary",
    "procedure",
    "episode",
    "decision",
    "workflow",
    "other",
    "observation",
]
MEMORY_TYPES: tuple[str, ...] = get_args(MemoryType)

DEFAULT_THEME = "general"

# One statement per item: user and theme ensured, the item inserted (or, with a
# category and key, upserted), the audit line written. The foreign key to users
# is checked at the end of the statement, after the user's insert.
_WRITE = (
    """
WITH u AS (
    """
    + ENSURE_USER
    + """
),
t AS (
    INSERT INTO themes (user_id, slug, display_name) VALUES ($1, $2, $3)
    ON CONFLICT (user_id, slug) DO NOTHING
),
e AS (
    -- the new row's id, given: the row returned is this one only if it was inserted
    -- (a conflict returns the row it updated); ``xmax = 0`` says the same but cannot be
    -- read from a partitioned table (migration 0170)
    SELECT gen_random_uuid() AS new_id,
           coalesce($21::timestamptz, CASE WHEN $22::int IS NULL THEN NULL
                                           ELSE now() + make_interval(days => $22::int) END)
           AS expires_at,
           -- the event time: given, else the turn it was learned from, else now
           coalesce($30::timestamptz,
                    (SELECT s.occurred_at FROM messages s WHERE s.id = $29 AND s.user_id = $1),
                    clock_timestamp()) AS valid_from
),
i AS (
    INSERT INTO memory_items AS m (
        id, user_id, theme, scope, provider, chat_id, namespace, type, category, key, content,
        data, tags, subjects, source, source_context, episode_id, confidence, importance,
        expires_at, last_verified_at, created_at, updated_at,
        embedding, embedding_state, embedding_provider, embedding_model, embedding_dims,
        embedded_at, source_message_id, valid_from, valid_to)
    VALUES ((SELECT new_id FROM e),
            $1, $2, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20,
            (SELECT expires_at FROM e),
            CASE WHEN $23::bool THEN now() END,
            clock_timestamp(), clock_timestamp(),
            $24, CASE WHEN $24::vector IS NULL THEN 'pending' ELSE 'ready' END,
            $25, $26, $27, CASE WHEN $24::vector IS NULL THEN NULL ELSE clock_timestamp() END,
            $29, (SELECT valid_from FROM e), (SELECT expires_at FROM e))
    {conflict}
    RETURNING m.id, m.created_at, m.expires_at, m.embedding_state,
              (m.id = (SELECT new_id FROM e)) AS inserted
),
a AS (
    INSERT INTO audit_log (user_id, actor, action, entity, entity_id, details)
    SELECT $1, $4, CASE WHEN i.inserted THEN 'create' ELSE '{again}' END, '{entity}',
           i.id::text, $28::jsonb
    FROM i
)
SELECT id, created_at, expires_at, embedding_state, inserted FROM i
"""
)

_UPSERT = """
    ON CONFLICT (user_id, namespace, category, key) WHERE category IS NOT NULL AND key IS NOT NULL
    DO UPDATE SET
        content = EXCLUDED.content, source = EXCLUDED.source,
        confidence = EXCLUDED.confidence,
        expires_at = EXCLUDED.expires_at, source_context = EXCLUDED.source_context,
        theme = EXCLUDED.theme, status = 'active', superseded_at = NULL, superseded_by = NULL,
        -- a new value for the key: valid from now, the old one kept in data.replaced;
        -- the data is the new write's (a LangGraph store item's value lives there)
        valid_from = CASE WHEN m.content = EXCLUDED.content
                          THEN m.valid_from ELSE EXCLUDED.valid_from END,
        valid_to = EXCLUDED.valid_to,
        data = CASE WHEN m.content = EXCLUDED.content THEN EXCLUDED.data
                    ELSE EXCLUDED.data || jsonb_build_object('replaced', jsonb_build_object(
                        'content', m.content, 'valid_from', m.valid_from,
                        'valid_to', EXCLUDED.valid_from)) END,
        last_verified_at = now(), updated_at = now(),
        confirmations = m.confirmations + (m.content = EXCLUDED.content)::int,
        last_confirmed_at = CASE WHEN m.content = EXCLUDED.content THEN clock_timestamp()
                                 ELSE m.last_confirmed_at END,
        embedding_state = CASE WHEN m.content = EXCLUDED.content
                               THEN m.embedding_state ELSE EXCLUDED.embedding_state END,
        embedding = CASE WHEN m.content = EXCLUDED.content
                         THEN m.embedding ELSE EXCLUDED.embedding END,
        embedding_provider = CASE WHEN m.content = EXCLUDED.content
                                  THEN m.embedding_provider ELSE EXCLUDED.embedding_provider END,
        embedding_model = CASE WHEN m.content = EXCLUDED.content
                               THEN m.embedding_model ELSE EXCLUDED.embedding_model END,
        embedding_dims = CASE WHEN m.content = EXCLUDED.content
                              THEN m.embedding_dims ELSE EXCLUDED.embedding_dims END,
        embedded_at = CASE WHEN m.content = EXCLUDED.content
                           THEN m.embedded_at ELSE EXCLUDED.embedded_at END
"""

# The same text as a live memory of the same owner, scope, namespace and subjects (the
# live-content key of migration 0110): a confirmation of that memory, not a new row.
_CONFIRM = f"""
    ON CONFLICT (user_id, dedupe_key)
        WHERE dedupe_key IS NOT NULL AND status = 'active' AND superseded_at IS NULL
    DO UPDATE SET
        confirmations = m.confirmations + 1, last_confirmed_at = clock_timestamp(),
        sources = {
    APPEND_SOURCE.format(
        sources="m.sources", entry=SOURCE_ENTRY.format("$16", "$4", "$18", "$29", "NULL")
    )
},
        confidence = greatest(m.confidence, EXCLUDED.confidence),
        importance = greatest(m.importance, EXCLUDED.importance),
        tags = ARRAY(SELECT DISTINCT unnest(m.tags || EXCLUDED.tags)),
        expires_at = CASE WHEN m.expires_at IS NULL OR EXCLUDED.expires_at IS NULL THEN NULL
                          ELSE greatest(m.expires_at, EXCLUDED.expires_at) END,
        last_verified_at = coalesce(EXCLUDED.last_verified_at, m.last_verified_at),
        updated_at = now()
"""

INSERT_ITEM = _WRITE.format(conflict=_CONFIRM, entity=AUDIT_ENTITY, again="confirm")
UPSERT_ITEM = _WRITE.format(conflict=_UPSERT, entity=AUDIT_ENTITY, again="update")


@dataclass(frozen=True)
class Chat:
    """The chat a call happens in (``provider`` + ``chat_id``): a chat-scoped memory's scope."""

    provider: str
    chat_id: str


@dataclass(frozen=True)
class NewItem:
    """One memory to store. ``theme`` is a slug (see :func:`theme_slug`).

    ``category`` with ``key`` makes the write an upsert on (user, namespace,
    category, key). ``vector`` with ``embedded_by`` (provider, model) stores the
    embedding inline; otherwise the row is left ``pending`` for the embedder.
    """

    type: MemoryType
    content: str
    theme: str = DEFAULT_THEME
    theme_name: str | None = None
    scope: Literal["personal", "chat"] = "personal"
    provider: str | None = None
    chat_id: str | None = None
    namespace: str = "default"
    category: str | None = None
    key: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    tags: Sequence[str] = ()
    subjects: Sequence[uuid.UUID] = ()
    source: str | None = None
    source_context: str | None = None
    episode_id: uuid.UUID | None = None
    confidence: float | None = None
    importance: float = 0.5
    expires_at: datetime | None = None
    expires_in_days: int | None = None
    verified: bool = False
    vector: Sequence[float] | None = None
    embedded_by: tuple[str, str] | None = None
    source_message_id: int | None = None
    """The ``messages`` row it was learned from (the extractor's facts)."""
    valid_from: datetime | None = None
    """When it became true (None: the time of ``source_message_id``, else now)."""
    audit: dict[str, Any] = field(default_factory=dict)
    """Extra details for the audit line (type, theme and source are always there)."""


@dataclass(frozen=True)
class WrittenItem:
    id: uuid.UUID
    created_at: datetime
    expires_at: datetime | None
    embedding_state: str
    inserted: bool
    """False when an upsert updated an existing row, or the item confirmed one."""
    superseded: tuple[uuid.UUID, ...] = ()
    confirmed: bool = False
    """The item said what a live memory says: ``id`` is that memory's, now confirmed
    (the same text; or, stored with its vector, a duplicate merged into it at once)."""


@dataclass(frozen=True)
class Written:
    """What :func:`insert_items` wrote, in the order of the items given."""

    user_id: str
    items: list[WrittenItem]

    @property
    def pending(self) -> list[uuid.UUID]:
        return [i.id for i in self.items if i.embedding_state == "pending" and not i.confirmed]

    @property
    def confirmed(self) -> list[uuid.UUID]:
        return [i.id for i in self.items if i.confirmed]

    @property
    def superseded(self) -> list[uuid.UUID]:
        return [s for i in self.items for s in i.superseded]

    def events(self) -> list[tuple[str, list[Event]]]:
        """The batches to publish after the commit, as ``Publisher.publish_many`` takes."""
        batches: list[tuple[str, list[Event]]] = []
        pending = self.pending
        if pending:
            targets = [EmbedTarget(kind="memory", id=str(i)) for i in pending]
            batches.append((EMBED, [EmbedRequested(user_id=self.user_id, targets=targets)]))
        changes: list[Event] = []
        for item in self.items:
            if item.confirmed:
                continue
            if item.inserted:
                changes.append(self._changed(item.id, "added"))
            elif item.embedding_state == "pending":
                changes.append(self._changed(item.id, "superseded"))  # a new value for a key
            if item.embedding_state == "ready" and item.inserted:
                changes.append(self._changed(item.id, "embedded"))
        changes += [self._changed(s, "superseded") for s in self.superseded]
        if changes:
            batches.append((MEMORIES, changes))
        return batches

    def _changed(self, memory_id: uuid.UUID, change: str) -> MemoryChanged:
        return MemoryChanged.model_validate(
            {"memory_id": memory_id, "user_id": self.user_id, "change": change}
        )


def theme_slug(theme: str | None) -> str:
    """``"  Work Projects "`` → ``work-projects``; blank → ``general``."""
    if theme is None or not theme.strip():
        return DEFAULT_THEME
    slug = re.sub(r"[^a-z0-9]+", "-", theme.strip().lower()).strip("-")
    if not slug:
        raise InvalidRequest(f"theme {theme!r} has no letters or digits")
    return slug[:100]


def check_type(type_: str) -> MemoryType:
    """``type_`` as a :data:`MemoryType`, or InvalidRequest naming the choices."""
    if type_ not in MEMORY_TYPES:
        raise InvalidRequest(f"unknown type {type_!r}; use one of {', '.join(MEMORY_TYPES)}")
    return type_  # type: ignore[return-value]


async def insert_items(
    conn: Conn,
    user_id: str,
    items: Sequence[NewItem],
    *,
    actor: str,
    contradicts: Contradicts | None = None,
    same: SameFact | None = None,
) -> Written:
    """Store ``items`` for ``user_id`` in order; publish :meth:`Written.events` after commit.

    One item without a vector is one statement (atomic by itself); otherwise the
    writes run in a transaction (a savepoint inside the caller's). ``contradicts``
    (a model's check) is handed to the supersession check, ``same`` (a model's check)
    to the duplicate check of Nous's 0.80-0.90 band (:mod:`shared.memory.dedupe`).

    An item with the text of a live memory of the same owner, scope, namespace and
    subjects confirms it (``confirmed``, that memory's id) instead of storing another;
    one stored with its vector is also merged into a live memory it is a near-duplicate of.
    """
    if len(items) == 1 and items[0].vector is None:
        return Written(user_id, [await _write(conn, user_id, items[0], actor, contradicts, same)])
    written: list[WrittenItem] = []
    async with conn.transaction():
        for item in items:
            written.append(await _write(conn, user_id, item, actor, contradicts, same))
    return Written(user_id, written)


async def _write(
    conn: Conn,
    user_id: str,
    item: NewItem,
    actor: str,
    contradicts: Contradicts | None,
    same: SameFact | None,
) -> WrittenItem:
    check_type(item.type)
    inline = item.vector is not None and item.embedded_by is not None
    vector = list(item.vector) if inline and item.vector is not None else None
    by = item.embedded_by if inline else None
    details = {"type": item.type, "theme": item.theme, "source": item.source, **item.audit}
    keyed = item.category is not None and item.key is not None
    try:
        row = await _store(conn, user_id, item, actor, vector, by, details, keyed)
    except asyncpg.PostgresError as exc:
        if erased_write(exc):
            raise UserErased(ERASED_MESSAGE) from exc
        raise
    memory_id: uuid.UUID = row["id"]
    confirmed = not keyed and not row["inserted"]
    superseded: tuple[uuid.UUID, ...] = ()
    if vector is not None and not confirmed:
        # The checks the query service runs when a vector arrives: Nous's bands, then Ash's.
        merged = await merge_duplicate(conn, memory_id, actor=actor, same=same)
        if merged is not None and merged.merged == memory_id:
            memory_id, confirmed = merged.survivor, True
        else:
            superseded = tuple(
                await check_supersession(conn, memory_id, actor=actor, contradicts=contradicts)
            )
    return WrittenItem(
        id=memory_id,
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        embedding_state=row["embedding_state"],
        inserted=row["inserted"],
        superseded=superseded,
        confirmed=confirmed,
    )


async def _store(
    conn: Conn,
    user_id: str,
    item: NewItem,
    actor: str,
    vector: list[float] | None,
    by: tuple[str, str] | None,
    details: dict[str, Any],
    keyed: bool,
) -> Any:
    row = await conn.fetchrow(
        UPSERT_ITEM if keyed else INSERT_ITEM,
        user_id,
        item.theme,
        item.theme_name or item.theme.replace("-", " ").title(),
        actor,
        item.scope,
        item.provider,
        item.chat_id,
        item.namespace,
        item.type,
        item.category,
        item.key,
        item.content,
        item.data,
        list(item.tags),
        list(item.subjects),
        item.source,
        item.source_context,
        item.episode_id,
        item.confidence,
        item.importance,
        item.expires_at,
        item.expires_in_days,
        item.verified,
        vector,
        by[0] if by else None,
        by[1] if by else None,
        len(vector) if vector is not None else None,
        details,
        item.source_message_id,
        item.valid_from,
    )
    assert row is not None
    return row


async def publish_written(publisher: Publisher, written: Written) -> None:
    """After the commit: publish what :func:`insert_items` wrote (both streams, one trip)."""
    batches = written.events()
    if batches:
        await publisher.publish_many(batches)
