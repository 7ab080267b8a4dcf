"""What the memory browser reads: named SQL statements, each scoped to one user.

Read-only: nothing here writes. Every statement takes the user as ``$1`` and
filters on it (joined rows too), so a page can never show another user's data.
Lists are paged by keyset (newest first) or, for short lists, by a capped offset.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import asyncpg

PAGE_SIZE = 50
MAX_OFFSET = 10_000

State = Literal["current", "superseded", "expired"]
EmbeddingState = Literal["pending", "ready", "error"]

OVERVIEW = """
SELECT count(*) AS items,
       count(*) FILTER (WHERE status = 'active' AND superseded_at IS NULL
                        AND (expires_at IS NULL OR expires_at > now())) AS live,
       count(*) FILTER (WHERE status = 'archived') AS archived,
       count(*) FILTER (WHERE superseded_at IS NOT NULL) AS superseded,
       count(*) FILTER (WHERE embedding_state = 'pending') AS pending,
       count(*) FILTER (WHERE embedding_state = 'ready') AS ready,
       count(*) FILTER (WHERE embedding_state = 'error') AS errors,
       (SELECT count(*) FROM people WHERE user_id = $1) AS people,
       (SELECT count(*) FROM episodes WHERE user_id = $1) AS episodes,
       (SELECT count(*) FROM fact_reviews WHERE user_id = $1 AND status = 'pending')
           AS reviews
FROM memory_items WHERE user_id = $1
"""

# Active = status active and not expired (the count the prompt hints use).
THEMES = """
WITH counts AS (
    SELECT theme,
           count(*) FILTER (WHERE status = 'active'
                            AND (expires_at IS NULL OR expires_at > now())) AS active,
           count(*) AS total
    FROM memory_items WHERE user_id = $1 GROUP BY theme
)
SELECT coalesce(t.slug, c.theme) AS slug, t.display_name, t.description,
       coalesce(c.active, 0) AS active, coalesce(c.total, 0) AS total
FROM (SELECT slug, display_name, description FROM themes WHERE user_id = $1) AS t
FULL JOIN counts c ON c.theme = t.slug
ORDER BY active DESC, slug
"""

TYPES = "SELECT DISTINCT type FROM memory_items WHERE user_id = $1 ORDER BY type"

_ITEM_COLUMNS = """
m.id, m.scope, m.provider, m.chat_id, m.namespace, m.theme, m.type, m.category, m.key,
m.content, m.tags, m.subjects, m.source, m.confidence, m.importance, m.status,
m.expires_at, (m.expires_at IS NOT NULL AND m.expires_at <= now()) AS expired,
m.superseded_at, m.superseded_by, r.content AS replaced_by_content, m.created_at,
m.embedding_state, m.embedding_error
"""

# $2 theme, $3 type, $4 include archived, $5 state, $6 embedding state,
# $7 subject person, $8/$9 keyset (created_at, id) of the last row shown, $10 limit.
_ITEM_FILTERS = """
WHERE m.user_id = $1
  AND ($2::text IS NULL OR m.theme = $2)
  AND ($3::text IS NULL OR m.type = $3)
  AND ($4::boolean OR m.status = 'active')
  AND CASE $5::text
        WHEN 'current' THEN m.superseded_at IS NULL
                            AND (m.expires_at IS NULL OR m.expires_at > now())
        WHEN 'superseded' THEN m.superseded_at IS NOT NULL
        WHEN 'expired' THEN m.expires_at IS NOT NULL AND m.expires_at <= now()
        ELSE true END
  AND ($6::text IS NULL OR m.embedding_state = $6)
  AND ($7::uuid IS NULL OR m.subjects @> ARRAY[$7::uuid])
"""

LIST_ITEMS = f"""
SELECT {_ITEM_COLUMNS}
FROM memory_items m
LEFT JOIN memory_items r ON r.id = m.superseded_by AND r.user_id = $1
{_ITEM_FILTERS}
  AND ($8::timestamptz IS NULL OR (m.created_at, m.id) < ($8, $9::uuid))
ORDER BY m.created_at DESC, m.id DESC
LIMIT $10
"""

COUNT_ITEMS = f"""
SELECT count(*) FROM memory_items m
{_ITEM_FILTERS}
"""

ITEMS_BY_ID = f"""
SELECT {_ITEM_COLUMNS}
FROM memory_items m
LEFT JOIN memory_items r ON r.id = m.superseded_by AND r.user_id = $1
WHERE m.user_id = $1 AND m.id = ANY($2::uuid[])
"""

ITEM = """
SELECT m.*, (m.expires_at IS NOT NULL AND m.expires_at <= now()) AS expired,
       r.content AS replaced_by_content
FROM memory_items m
LEFT JOIN memory_items r ON r.id = m.superseded_by AND r.user_id = $1
WHERE m.user_id = $1 AND m.id = $2
"""

REPLACES = """
SELECT id, content, superseded_at FROM memory_items
WHERE user_id = $1 AND superseded_by = $2
ORDER BY superseded_at DESC
"""

SOURCE_MESSAGE = """
SELECT id, role, content, occurred_at FROM messages WHERE user_id = $1 AND id = $2
"""

# One pass over the user's memories with subjects counts everyone's (not a probe per person).
# first mentioned: the earliest turn a memory about them was learned from (the
# conversation's time, not the day it was imported), else when the person was made
PEOPLE = """
WITH mentions AS (
    SELECT s.person, count(*) AS memories, min(t.occurred_at) AS first_turn
    FROM memory_items m CROSS JOIN unnest(m.subjects) AS s(person)
    LEFT JOIN messages t ON t.id = m.source_message_id AND t.user_id = m.user_id
    WHERE m.user_id = $1 AND m.subjects <> '{}'
    GROUP BY s.person
)
SELECT p.id, p.name, p.relation, p.aliases, p.created_at, p.updated_at,
       coalesce(c.memories, 0) AS memories,
       least(c.first_turn, p.created_at) AS first_mentioned
FROM people p
LEFT JOIN mentions c ON c.person = p.id
WHERE p.user_id = $1
ORDER BY lower(coalesce(p.name, p.relation)), p.id
LIMIT $2 OFFSET $3
"""

PERSON = """
SELECT id, name, relation, aliases, metadata, created_at, updated_at
FROM people WHERE user_id = $1 AND id = $2
"""

PEOPLE_NAMES = """
SELECT id, coalesce(name, 'their ' || relation) AS label
FROM people WHERE user_id = $1 AND id = ANY($2::uuid[])
"""

_EPISODE_COLUMNS = """
e.id, coalesce(e.display_name, u.display_name, e.user_id) AS user_tag, e.provider,
e.chat_id, e.status, e.started_at, e.last_active_at, e.closed_at, e.turn_count,
e.summary, e.extraction_error, e.embedding_state, e.embedding_error
"""

# $2/$3 keyset (last_active_at, id) of the last row shown, $4 limit.
EPISODES = f"""
SELECT {_EPISODE_COLUMNS}
FROM episodes e JOIN users u ON u.id = e.user_id
WHERE e.user_id = $1
  AND ($2::timestamptz IS NULL OR (e.last_active_at, e.id) < ($2, $3::uuid))
ORDER BY e.last_active_at DESC, e.id DESC
LIMIT $4
"""

EPISODE = f"""
SELECT {_EPISODE_COLUMNS}
FROM episodes e JOIN users u ON u.id = e.user_id
WHERE e.user_id = $1 AND e.id = $2
"""

EPISODE_ITEMS = """
SELECT id, type, content, created_at FROM memory_items
WHERE user_id = $1 AND episode_id = $2
ORDER BY created_at DESC LIMIT 100
"""

REVIEWS = """
SELECT id, episode_id, subject, content, category, confidence, source, source_context,
       reason, status, created_at, reviewed_at
FROM fact_reviews
WHERE user_id = $1 AND ($2::text IS NULL OR status = $2)
ORDER BY created_at DESC, id
LIMIT $3 OFFSET $4
"""

SUMMARY = "SELECT summary, fact_count, updated_at FROM user_summaries WHERE user_id = $1"

USER = "SELECT id, display_name FROM users WHERE id = $1"

# For admin keys only: the users to choose from (never their data).
USERS = """
SELECT id, display_name, created_at FROM users
WHERE $1::text IS NULL OR starts_with(lower(id), lower($1))
   OR starts_with(lower(coalesce(display_name, '')), lower($1))
ORDER BY id
LIMIT $2
"""


@dataclass(frozen=True)
class ItemFilter:
    """The items table's filters; ``None`` means "any"."""

    theme: str | None = None
    type: str | None = None
    include_archived: bool = False
    state: State | None = None
    embedding: EmbeddingState | None = None
    subject: uuid.UUID | None = None

    def args(self) -> list[Any]:
        return [
            self.theme,
            self.type,
            self.include_archived,
            self.state,
            self.embedding,
            self.subject,
        ]


@dataclass(frozen=True)
class Cursor:
    """Keyset position: the (time, id) of the last row on the previous page."""

    at: datetime
    id: uuid.UUID

    def token(self) -> str:
        return f"{self.at.isoformat()}_{self.id}"

    @classmethod
    def parse(cls, token: str) -> Cursor:
        """Raises ``ValueError`` on a malformed token."""
        at, _, ident = token.rpartition("_")
        return cls(datetime.fromisoformat(at), uuid.UUID(ident))


@dataclass(frozen=True)
class Page:
    rows: list[asyncpg.Record]
    next: Cursor | None


async def overview(pool: asyncpg.Pool, user_id: str) -> asyncpg.Record:
    row = await pool.fetchrow(OVERVIEW, user_id)
    assert row is not None
    return row


async def themes(pool: asyncpg.Pool, user_id: str) -> list[asyncpg.Record]:
    return list(await pool.fetch(THEMES, user_id))


async def types(pool: asyncpg.Pool, user_id: str) -> list[str]:
    return [r["type"] for r in await pool.fetch(TYPES, user_id)]


async def items(
    pool: asyncpg.Pool,
    user_id: str,
    where: ItemFilter,
    *,
    after: Cursor | None,
    limit: int = PAGE_SIZE,
) -> Page:
    rows = await pool.fetch(
        LIST_ITEMS,
        user_id,
        *where.args(),
        after.at if after else None,
        after.id if after else None,
        limit + 1,
    )
    more = len(rows) > limit
    rows = rows[:limit]
    nxt = Cursor(rows[-1]["created_at"], rows[-1]["id"]) if more else None
    return Page(list(rows), nxt)


async def count_items(pool: asyncpg.Pool, user_id: str, where: ItemFilter) -> int:
    return int(await pool.fetchval(COUNT_ITEMS, user_id, *where.args()))


async def items_by_id(
    pool: asyncpg.Pool, user_id: str, ids: list[uuid.UUID]
) -> list[asyncpg.Record]:
    """The rows of ``ids`` (the user's only), in the order given."""
    found = {r["id"]: r for r in await pool.fetch(ITEMS_BY_ID, user_id, ids)}
    return [found[i] for i in ids if i in found]


async def item(pool: asyncpg.Pool, user_id: str, item_id: uuid.UUID) -> asyncpg.Record | None:
    return await pool.fetchrow(ITEM, user_id, item_id)


async def replaces(pool: asyncpg.Pool, user_id: str, item_id: uuid.UUID) -> list[asyncpg.Record]:
    return list(await pool.fetch(REPLACES, user_id, item_id))


async def source_message(
    pool: asyncpg.Pool, user_id: str, message_id: int | None
) -> asyncpg.Record | None:
    if message_id is None:
        return None
    return await pool.fetchrow(SOURCE_MESSAGE, user_id, message_id)


async def people_names(
    pool: asyncpg.Pool, user_id: str, ids: set[uuid.UUID]
) -> dict[uuid.UUID, str]:
    if not ids:
        return {}
    return {r["id"]: r["label"] for r in await pool.fetch(PEOPLE_NAMES, user_id, list(ids))}


async def people(pool: asyncpg.Pool, user_id: str, *, offset: int) -> list[asyncpg.Record]:
    return list(await pool.fetch(PEOPLE, user_id, PAGE_SIZE + 1, offset))


async def person(pool: asyncpg.Pool, user_id: str, person_id: uuid.UUID) -> asyncpg.Record | None:
    return await pool.fetchrow(PERSON, user_id, person_id)


async def episodes(
    pool: asyncpg.Pool, user_id: str, *, after: Cursor | None, limit: int = 20
) -> Page:
    rows = await pool.fetch(
        EPISODES, user_id, after.at if after else None, after.id if after else None, limit + 1
    )
    more = len(rows) > limit
    rows = rows[:limit]
    nxt = Cursor(rows[-1]["last_active_at"], rows[-1]["id"]) if more else None
    return Page(list(rows), nxt)


async def episode(pool: asyncpg.Pool, user_id: str, episode_id: uuid.UUID) -> asyncpg.Record | None:
    return await pool.fetchrow(EPISODE, user_id, episode_id)


async def episode_items(
    pool: asyncpg.Pool, user_id: str, episode_id: uuid.UUID
) -> list[asyncpg.Record]:
    return list(await pool.fetch(EPISODE_ITEMS, user_id, episode_id))


async def reviews(
    pool: asyncpg.Pool, user_id: str, *, status: str | None, offset: int
) -> list[asyncpg.Record]:
    return list(await pool.fetch(REVIEWS, user_id, status, PAGE_SIZE + 1, offset))


async def summary(pool: asyncpg.Pool, user_id: str) -> asyncpg.Record | None:
    return await pool.fetchrow(SUMMARY, user_id)


async def user(pool: asyncpg.Pool, user_id: str) -> asyncpg.Record | None:
    return await pool.fetchrow(USER, user_id)


async def users(
    pool: asyncpg.Pool, prefix: str | None, *, limit: int = 200
) -> list[asyncpg.Record]:
    return list(await pool.fetch(USERS, prefix or None, limit))
