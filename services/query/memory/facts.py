"""Navi's facts: one value per (user, category, key), searched vector-first.

Facts are ``memory_items`` rows of type ``fact`` with ``category`` and ``key``
(theme = the category). The list (and the summary's count) also holds the
facts the extractor learned, which have no key (``shared.memory.known``).
Guarantees: ``save`` is an upsert on (user, namespace, category, key) and
re-embeds only when the value changed; ``search`` takes vector matches within
cosine distance 0.3 first, then trigram similarity (pg_trgm) or ILIKE; expired
facts are never returned; every write is audited.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
from pydantic import BaseModel, Field
from pydantic.json_schema import SkipJsonSchema

from services.query.embeddings.query import lists_newest
from services.query.memory.items import announce
from shared.db import audit
from shared.errors import InvalidRequest, NotFound
from shared.memory.confidence import by_source
from shared.memory.known import LIVE_FACT
from shared.memory.writer import AUDIT_ENTITY, NewItem, insert_items, publish_written, theme_slug
from shared.streams import Publisher
from shared.users import ensure_user

MAX_DISTANCE = 0.3
NAMESPACE = "default"

_LIVE = """category IS NOT NULL AND key IS NOT NULL AND status = 'active'
    AND superseded_at IS NULL AND (expires_at IS NULL OR expires_at > now())"""
_FACT_COLUMNS = """id, user_id, category, key, content AS value, source, confidence,
    expires_at, source_context, created_at, updated_at, last_verified_at"""

SEARCH_VECTOR = f"""
SELECT {_FACT_COLUMNS}, (embedding <=> $2::vector)::float8 AS distance
FROM memory_items
WHERE user_id = $1 AND {_LIVE} AND embedding_state = 'ready'
  AND (embedding <=> $2::vector) < $3
ORDER BY embedding <=> $2::vector
LIMIT $4
"""

# ($1 NULL = every user: admin only). $2 query, $3 limit, $4 ids already found.
SEARCH_TRIGRAM = f"""
SELECT {_FACT_COLUMNS},
       greatest(similarity(category || ' ' || key || ' ' || content, $2),
                word_similarity($2, category || ' ' || key || ' ' || content))::float8 AS similarity
FROM memory_items
WHERE ($1::text IS NULL OR user_id = $1) AND {_LIVE} AND NOT (id = ANY($4::uuid[]))
  AND (category || ' ' || key || ' ' || content ILIKE '%' || $5 || '%'
       OR word_similarity($2, category || ' ' || key || ' ' || content) >= 0.4)
ORDER BY similarity DESC, updated_at DESC, id
LIMIT $3
"""

SEARCH_ILIKE = f"""
SELECT {_FACT_COLUMNS}
FROM memory_items
WHERE ($1::text IS NULL OR user_id = $1) AND {_LIVE} AND NOT (id = ANY($4::uuid[]))
  AND (category ILIKE '%' || $2 || '%' OR key ILIKE '%' || $2 || '%'
       OR content ILIKE '%' || $2 || '%')
ORDER BY updated_at DESC, id
LIMIT $3
"""

FORGET = """
DELETE FROM memory_items
WHERE user_id = $1 AND key = $2 AND ($3::text IS NULL OR category = $3)
  AND category IS NOT NULL
RETURNING id, category
"""

# ORDER BY column picked from a fixed whitelist (never from the caller's text).
LIST = """
SELECT {columns}, count(*) OVER () AS total
FROM memory_items
WHERE ($1::text IS NULL OR user_id = $1) AND {listed}
  AND ($2::text IS NULL OR category ILIKE '%' || $2 || '%' OR key ILIKE '%' || $2 || '%'
       OR content ILIKE '%' || $2 || '%')
ORDER BY {order} NULLS LAST, category, key, id
LIMIT $3 OFFSET $4
"""
LIST_STATEMENTS = {
    (col, direction): LIST.format(
        columns=_FACT_COLUMNS, listed=LIVE_FACT, order=f"{col} {direction}"
    )
    for col in ("category", "key", "created_at", "updated_at", "confidence")
    for direction in ("asc", "desc")
}

GET_SUMMARY = "SELECT summary, fact_count, updated_at FROM user_summaries WHERE user_id = $1"
SET_SUMMARY = f"""
INSERT INTO user_summaries (user_id, summary, fact_count)
VALUES ($1, $2, (SELECT count(*) FROM memory_items WHERE user_id = $1 AND {LIVE_FACT}))
ON CONFLICT (user_id) DO UPDATE
SET summary = EXCLUDED.summary, fact_count = EXCLUDED.fact_count, updated_at = now()
RETURNING summary, fact_count, updated_at
"""

HAS_TRGM = "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm')"


def _is_none(value: object) -> bool:
    return value is None


class SavedFact(BaseModel):
    """What ``save`` did: the fact's id, whether it is new, the confidence it got."""

    id: str
    category: str
    key: str
    created: bool = Field(description="false when an existing key got a new value")
    confidence: float
    expires_at: str | None
    """ISO 8601; None for a fact that never expires."""
    embedding: str
    """The embedding state: ``pending`` when the value is new or changed."""


class Fact(BaseModel):
    """One live fact. A search's hit also says how it matched (``match``, and the
    ``distance`` or ``similarity``); the three are left out of its JSON when None."""

    id: str
    user_id: str
    category: str | None = Field(description="None only for a fact stored without one")
    key: str | None = Field(description="None for a fact the extractor learned (no key)")
    value: str
    source: str | None
    confidence: float | None
    source_context: str | None
    expires_at: str | None
    created_at: str
    """ISO 8601, as stored (so are ``expires_at`` and ``updated_at``)."""
    updated_at: str
    match: str | None = Field(default=None, exclude_if=_is_none)
    """Search only: semantic, trigram, substring or newest."""
    # never in the API's schema (its FactOut is open: further keys may follow)
    distance: SkipJsonSchema[float | None] = Field(default=None, exclude_if=_is_none)
    """A semantic match's cosine distance."""
    similarity: SkipJsonSchema[float | None] = Field(default=None, exclude_if=_is_none)
    """A trigram match's similarity."""

    @classmethod
    def of(
        cls,
        r: asyncpg.Record,
        *,
        match: str | None = None,
        distance: float | None = None,
        similarity: float | None = None,
    ) -> Fact:
        """The fact of a row of ``_FACT_COLUMNS``; a search says how it matched."""
        return cls(
            id=str(r["id"]),
            user_id=r["user_id"],
            category=r["category"],
            key=r["key"],
            value=r["value"],
            source=r["source"],
            confidence=r["confidence"],
            source_context=r["source_context"],
            expires_at=r["expires_at"].isoformat() if r["expires_at"] else None,
            created_at=r["created_at"].isoformat(),
            updated_at=r["updated_at"].isoformat(),
            match=match,
            distance=distance,
            similarity=similarity,
        )


class Facts(BaseModel):
    """A search's facts, best match first."""

    facts: list[Fact]


class FactPage(BaseModel):
    """One page of facts and how many there are in all."""

    facts: list[Fact]
    total: int
    limit: int
    offset: int


class Forgotten(BaseModel):
    deleted: int
    key: str
    categories: list[str]
    """The categories the key was deleted from, sorted."""


class Summary(BaseModel):
    """The user's narrative summary (None before one is written)."""

    summary: str | None
    fact_count: int
    updated_at: str | None

    @classmethod
    def of(cls, r: asyncpg.Record) -> Summary:
        return cls(
            summary=r["summary"], fact_count=r["fact_count"], updated_at=r["updated_at"].isoformat()
        )


def escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


async def save_fact(
    pool: asyncpg.Pool,
    publisher: Publisher,
    *,
    user_id: str,
    category: str,
    key: str,
    value: str,
    source: str = "conversation",
    confidence: float | None = None,
    expires_days: int | None = None,
    source_context: str | None = None,
    actor: str = "api",
) -> SavedFact:
    """Upsert the value of (category, key); a changed value is re-embedded.

    Without a ``confidence`` the source's default applies (``shared.memory.confidence``)."""
    if confidence is None:
        confidence = by_source(source)
    expires_at = datetime.now(UTC) + timedelta(days=expires_days) if expires_days else None
    item = NewItem(
        type="fact",
        content=value,
        theme=theme_slug(category),
        theme_name=category,
        namespace=NAMESPACE,
        category=category,
        key=key,
        source=source,
        confidence=confidence,
        expires_at=expires_at,
        source_context=source_context,
        verified=True,
        audit={"category": category, "key": key},
    )
    async with pool.acquire() as conn:
        written = await insert_items(conn, user_id, [item], actor=actor)
    await publish_written(publisher, written)
    row = written.items[0]
    return SavedFact(
        id=str(row.id),
        category=category,
        key=key,
        created=row.inserted,
        confidence=confidence,
        expires_at=expires_at.isoformat() if expires_at else None,
        embedding=row.embedding_state,
    )


async def search_facts(
    pool: asyncpg.Pool,
    *,
    user_id: str | None,
    query: str,
    limit: int,
    vector: list[float] | None,
    trigram: bool,
) -> Facts:
    """Vector matches (distance < 0.3) first, then trigram or ILIKE matches; a blank
    or ``*`` query gives the newest facts (``match`` ``newest``), as every search does."""
    if lists_newest(query):
        page = await list_facts(
            pool, user_id=user_id, limit=limit, sort_by="updated_at", sort_order="desc"
        )
        return Facts(facts=[f.model_copy(update={"match": "newest"}) for f in page.facts])
    found: list[Fact] = []
    if vector is not None and user_id is not None:
        for r in await pool.fetch(SEARCH_VECTOR, user_id, vector, MAX_DISTANCE, limit):
            found.append(Fact.of(r, match="semantic", distance=r["distance"]))
    if len(found) < limit:
        seen = [uuid.UUID(f.id) for f in found]
        if trigram:
            rows = await pool.fetch(
                SEARCH_TRIGRAM, user_id, query, limit - len(found), seen, escape_like(query)
            )
            found += [Fact.of(r, match="trigram", similarity=r["similarity"]) for r in rows]
        else:
            rows = await pool.fetch(
                SEARCH_ILIKE, user_id, escape_like(query), limit - len(found), seen
            )
            found += [Fact.of(r, match="substring") for r in rows]
    return Facts(facts=found)


async def forget_fact(
    pool: asyncpg.Pool,
    publisher: Publisher,
    *,
    user_id: str,
    key: str,
    category: str | None,
    actor: str = "api",
) -> Forgotten:
    async with pool.acquire() as conn, conn.transaction():
        rows = await conn.fetch(FORGET, user_id, key, category)
        if not rows:
            where = f" in category {category[:60]!r}" if category else ""
            raise NotFound(f"no fact with key {key[:60]!r}{where}")
        for r in rows:
            await audit(
                conn,
                user_id=user_id,
                actor=actor,
                action="delete",
                entity=AUDIT_ENTITY,
                entity_id=str(r["id"]),
                details={"category": r["category"], "key": key},
            )
    await announce(
        publisher, user_id=user_id, ids=[r["id"] for r in rows], change="deleted", embed=False
    )
    return Forgotten(deleted=len(rows), key=key, categories=sorted(r["category"] for r in rows))


async def list_facts(
    pool: asyncpg.Pool,
    *,
    user_id: str | None,
    limit: int = 100,
    offset: int = 0,
    sort_by: str = "category",
    sort_order: str = "desc",
    search: str | None = None,
) -> FactPage:
    """One page of facts (``user_id`` None = every user's: admin only).

    ``sort_by`` is one of category, key, created_at, updated_at, confidence."""
    statement = LIST_STATEMENTS.get((sort_by, sort_order))
    if statement is None:
        raise InvalidRequest(f"cannot sort facts by {sort_by!r} {sort_order!r}")
    rows = await pool.fetch(
        statement,
        user_id,
        None if search is None or lists_newest(search) else escape_like(search),
        limit,
        offset,
    )
    total = rows[0]["total"] if rows else 0
    return FactPage(facts=[Fact.of(r) for r in rows], total=total, limit=limit, offset=offset)


async def get_summary(pool: asyncpg.Pool, *, user_id: str) -> Summary:
    row = await pool.fetchrow(GET_SUMMARY, user_id)
    if row is None:
        return Summary(summary=None, fact_count=0, updated_at=None)
    return Summary.of(row)


async def set_summary(
    pool: asyncpg.Pool, *, user_id: str, summary: str, actor: str = "api"
) -> Summary:
    async with pool.acquire() as conn, conn.transaction():
        await ensure_user(conn, user_id)
        row = await conn.fetchrow(SET_SUMMARY, user_id, summary)
        assert row is not None
        await audit(
            conn, user_id=user_id, actor=actor, action="update", entity="summary", entity_id=user_id
        )
    return Summary.of(row)


async def has_trigram(pool: asyncpg.Pool) -> bool:
    return bool(await pool.fetchval(HAS_TRGM))
