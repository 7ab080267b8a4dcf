"""Memory items: add, get, archive, delete, themes. Plain async use cases.

Guarantees: every statement is scoped by ``user_id``; every create, update,
archive and delete writes an audit line in the same transaction; a new or
changed item is left ``embedding_state = 'pending'`` and, after the commit,
named in an ``EmbedRequested`` on ``embed`` and a ``MemoryChanged`` on
``memories``. Expired items are invisible to ``get`` as to search.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
from pydantic import BaseModel, Field

from shared.db import Executor, audit
from shared.errors import InvalidRequest, NotFound
from shared.events import EmbedRequested, EmbedTarget, Event, MemoryChanged
from shared.memory.writer import (
    AUDIT_ENTITY,
    NewItem,
    check_type,
    insert_items,
    theme_slug,
)
from shared.stream_registry import EMBED, MEMORIES
from shared.streams import Publisher

MAX_CONTENT_CHARS = 20_000


GET_ITEM = """
SELECT id, user_id, scope, provider, chat_id, namespace, theme, type, category, key,
       content, data, tags, subjects, source, source_context, source_message_id,
       episode_id, confidence, importance, status, expires_at, superseded_at,
       superseded_by, last_verified_at, last_accessed_at, access_count, created_at,
       updated_at, embedding_state, embedding_error, embedding_provider,
       embedding_model, embedding_dims, embedded_at, confirmations, last_confirmed_at, sources
FROM memory_items
WHERE id = $1 AND user_id = $2 AND (expires_at IS NULL OR expires_at > now())
"""

ARCHIVE_ITEM = """
UPDATE memory_items SET status = 'archived', updated_at = now()
WHERE id = $1 AND user_id = $2 AND (expires_at IS NULL OR expires_at > now())
RETURNING id, status
"""

DELETE_ITEM = "DELETE FROM memory_items WHERE id = $1 AND user_id = $2 RETURNING id"

LIST_THEMES = """
SELECT t.slug, t.display_name, t.description,
       count(m.id) FILTER (WHERE m.status = 'active'
                           AND (m.expires_at IS NULL OR m.expires_at > now())) AS active_items
FROM themes t
LEFT JOIN memory_items m ON m.user_id = t.user_id AND m.theme = t.slug
WHERE t.user_id = $1
GROUP BY t.slug, t.display_name, t.description
ORDER BY active_items DESC, t.slug
"""

TOUCH_ITEMS = """
UPDATE memory_items SET last_accessed_at = now(), access_count = access_count + 1
WHERE user_id = $1 AND id = ANY($2::uuid[])
"""


@dataclass(frozen=True)
class NewMemory:
    """What ``add`` stores; ``theme`` None or blank means ``general``."""

    type: str
    content: str
    theme: str | None = None
    tags: tuple[str, ...] = ()
    namespace: str = "default"
    data: dict[str, Any] | None = None
    importance: float = 0.5
    source: str | None = None
    source_context: str | None = None
    confidence: float | None = None
    expires_at: datetime | None = None


class Added(BaseModel):
    """What ``add`` stored: the item's id, theme and embedding state."""

    id: str
    status: str
    theme: str
    embedding: str = Field(description="embedding state: pending until the embedder runs")
    created_at: str
    """ISO 8601."""
    confirmed: bool = Field(
        default=False,
        description="it said what a live memory says: the id is that memory's, now confirmed",
    )


@dataclass(frozen=True)
class Archived:
    id: str
    status: str = "archived"


@dataclass(frozen=True)
class Deleted:
    id: str
    deleted: bool = True


@dataclass(frozen=True)
class Theme:
    slug: str
    display_name: str | None
    description: str | None
    active_items: int


@dataclass(frozen=True)
class Themes:
    themes: list[Theme]


def check_content(content: str) -> str:
    content = content.replace("\x00", "").strip()
    if not content:
        raise InvalidRequest("content must not be empty")
    if len(content) > MAX_CONTENT_CHARS:
        raise InvalidRequest(f"content is longer than {MAX_CONTENT_CHARS} characters")
    return content


async def add_memories(
    pool: asyncpg.Pool,
    publisher: Publisher,
    *,
    user_id: str,
    items: list[NewMemory],
    actor: str = "api",
) -> list[Added]:
    """Store items (one transaction); their embeddings are asked for once the answer
    is on its way (:meth:`Publisher.publish_soon`: the rows are committed and
    ``pending`` already, and the embedder's sweep takes any whose request is lost)."""
    rows = [_row(m) for m in items]
    async with pool.acquire() as conn:
        written = await insert_items(conn, user_id, rows, actor=actor)
    publisher.publish_soon(written.events())
    return [
        Added(
            id=str(w.id),
            status="active",
            theme=row.theme,
            embedding=w.embedding_state,
            created_at=w.created_at.isoformat(),
            confirmed=w.confirmed,
        )
        for w, row in zip(written.items, rows, strict=True)
    ]


def _row(m: NewMemory) -> NewItem:
    return NewItem(
        type=check_type(m.type),
        content=check_content(m.content),
        theme=theme_slug(m.theme),
        namespace=m.namespace,
        data=m.data or {},
        tags=m.tags,
        importance=m.importance,
        source=m.source,
        source_context=m.source_context,
        confidence=m.confidence,
        expires_at=m.expires_at,
    )


async def add_memory(
    pool: asyncpg.Pool,
    publisher: Publisher,
    *,
    user_id: str,
    item: NewMemory,
    actor: str = "api",
) -> Added:
    return (await add_memories(pool, publisher, user_id=user_id, items=[item], actor=actor))[0]


async def announce(
    publisher: Publisher,
    *,
    user_id: str,
    ids: list[uuid.UUID],
    change: str,
    embed: bool = True,
) -> None:
    """After the commit: ask the embedder for vectors and tell listeners what changed."""
    if not ids:
        return
    batches: list[tuple[str, Sequence[Event]]] = []
    if embed:
        batches.append(
            (
                EMBED,
                [
                    EmbedRequested(
                        user_id=user_id,
                        targets=[EmbedTarget(kind="memory", id=str(i)) for i in ids],
                    )
                ],
            )
        )
    batches.append(
        (MEMORIES, [MemoryChanged(memory_id=i, user_id=user_id, change=change) for i in ids])
    )
    await publisher.publish_many(batches)  # both streams, one round trip


def parse_id(item_id: str | uuid.UUID) -> uuid.UUID:
    if isinstance(item_id, uuid.UUID):
        return item_id
    try:
        return uuid.UUID(str(item_id))
    except ValueError as exc:
        raise InvalidRequest(f"item_id {item_id!r} is not a memory id (a UUID)") from exc


async def get_memory(conn: Executor, *, user_id: str, item_id: str | uuid.UUID) -> dict[str, Any]:
    """Every field of one item, with its embedding state (Nova 3.2.3)."""
    row = await conn.fetchrow(GET_ITEM, parse_id(item_id), user_id)
    if row is None:
        raise NotFound(f"no memory {item_id}")
    return record_to_dict(row)


async def _change_one(
    pool: asyncpg.Pool,
    publisher: Publisher,
    *,
    sql: str,
    action: str,
    change: str,
    user_id: str,
    item_id: str | uuid.UUID,
    actor: str,
) -> str:
    """Archive or delete one of the user's memories (audited, announced); its id."""
    key = parse_id(item_id)
    async with pool.acquire() as conn, conn.transaction():
        if await conn.fetchrow(sql, key, user_id) is None:
            raise NotFound(f"no memory {item_id}")
        await audit(
            conn,
            user_id=user_id,
            actor=actor,
            action=action,
            entity=AUDIT_ENTITY,
            entity_id=str(key),
        )
    await announce(publisher, user_id=user_id, ids=[key], change=change, embed=False)
    return str(key)


async def archive_memory(
    pool: asyncpg.Pool,
    publisher: Publisher,
    *,
    user_id: str,
    item_id: str | uuid.UUID,
    actor: str = "api",
) -> Archived:
    done = await _change_one(
        pool, publisher, sql=ARCHIVE_ITEM, action="archive", change="archived",
        user_id=user_id, item_id=item_id, actor=actor,
    )  # fmt: skip
    return Archived(id=done)


async def delete_memory(
    pool: asyncpg.Pool,
    publisher: Publisher,
    *,
    user_id: str,
    item_id: str | uuid.UUID,
    actor: str = "api",
) -> Deleted:
    """Hard delete (Jarvus 4.4); the vector lives in the row, so it goes with it."""
    done = await _change_one(
        pool, publisher, sql=DELETE_ITEM, action="delete", change="deleted",
        user_id=user_id, item_id=item_id, actor=actor,
    )  # fmt: skip
    return Deleted(id=done)


async def list_themes(conn: Executor, *, user_id: str) -> Themes:
    rows = await conn.fetch(LIST_THEMES, user_id)
    return Themes(
        [
            Theme(
                slug=r["slug"],
                display_name=r["display_name"],
                description=r["description"],
                active_items=r["active_items"],
            )
            for r in rows
        ]
    )


async def touch(conn: Executor, *, user_id: str, ids: list[uuid.UUID]) -> None:
    """Record an access (Jarvus 4.2: each retrieval updates last accessed)."""
    if ids:
        await conn.execute(TOUCH_ITEMS, user_id, ids)


def record_to_dict(row: asyncpg.Record) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, uuid.UUID):
            value = str(value)
        elif isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, list):
            value = [str(v) if isinstance(v, uuid.UUID) else v for v in value]
        out[key] = value
    return out
