"""Right to erasure: delete a user and everything stored for them.

``users`` cascades to every table with a foreign key to it (episodes, messages,
memories and their vectors, themes, people, summaries, checkpoints, embedding
settings, API keys). Tables that keep a ``user_id`` without a foreign key (the
audit log, and any later table that forgets the cascade) are swept by name from
the catalog, in the same transaction. The erasure itself is audited without
the user's id: only a truncated hash, so the log can prove it happened.

It stays erased (``shared.erasure``): a tombstone laid in the same transaction,
after turns in flight for the user are stored, makes ingest drop the user's later
events; after the commit the user's entries are deleted from every stream
(dead-letter included), and Redis rewrites its files so the erased text leaves
its disk too. The answer lists the rows deleted per table (counted before the
delete, so rows that went by cascade are listed too) and the stream entries
deleted per stream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import asyncpg
import redis.asyncio as aioredis

from shared.apikeys import announce_gone
from shared.db import audit
from shared.erasure import (
    audit_hash,
    begin_erasure,
    purge_streams,
    reenable_user,
    rewrite_persistence,
)
from shared.errors import NotFound
from shared.settings import CommonSettings

USER_TABLES = """
SELECT format('DELETE FROM %I.%I WHERE user_id = $1', c.table_schema, c.table_name) AS stmt,
       format('SELECT count(*) FROM %I.%I WHERE user_id = $1', c.table_schema, c.table_name)
           AS count,
       c.table_name
FROM information_schema.columns c
JOIN information_schema.tables t
  ON t.table_schema = c.table_schema AND t.table_name = c.table_name
WHERE c.column_name = 'user_id' AND t.table_type = 'BASE TABLE'
  AND c.table_schema = current_schema() AND c.table_name <> 'users'
  -- a partition's rows are its partitioned table's (migration 0170): counted there
  AND NOT (SELECT r.relispartition FROM pg_class r
           WHERE r.oid = format('%I.%I', c.table_schema, c.table_name)::regclass)
-- what the turns' triggers keep per turn goes first, in one range of each table's key:
-- deleted with the turns instead, each turn's postings are found and deleted one by
-- one (a 10,000-turn chat's erasure 11.1-11.6 s that way, 1.4-1.5 s this way)
ORDER BY c.table_name NOT IN ('message_postings', 'message_word_counts', 'message_shapes'),
         c.table_name
"""

DELETE_USER = "DELETE FROM users WHERE id = $1 RETURNING id"

log = logging.getLogger(__name__)


ATTEMPTS = 5
"""Tries of the erasing transaction: a writer that locks the user's rows in another
order (the embedder storing a batch of vectors) can deadlock with it, and PostgreSQL
then rolls one back; the erasure is tried again, never answered 500."""


@dataclass(frozen=True)
class Erased:
    rows: dict[str, int]
    """Rows deleted per table (cascaded ones too)."""
    stream_entries: dict[str, int] = field(default_factory=dict)
    """The user's stream entries deleted per stream."""
    erased: bool = True


@dataclass(frozen=True)
class Reenabled:
    reenabled: bool = True


async def erase_user(
    pool: asyncpg.Pool,
    *,
    user_id: str,
    actor: str,
    redis: aioredis.Redis | None = None,
    settings: CommonSettings | None = None,
) -> Erased:
    """Delete the user and every row and stream entry of theirs, and keep them erased;
    NotFound if there is no such user."""
    started = time.perf_counter()
    for attempt in range(1, ATTEMPTS + 1):
        try:
            counts = await _erase_rows(pool, user_id=user_id, actor=actor)
            break
        except asyncpg.TransactionRollbackError as exc:  # deadlock, serialization
            if attempt == ATTEMPTS:
                raise
            log.info("erasure rolled back (%s); trying again", type(exc).__name__)
            await asyncio.sleep(0.05 * attempt)
    rows_s = time.perf_counter() - started
    streams: dict[str, int] = {}
    if redis is not None and settings is not None:
        streams = await purge_streams(redis, settings, user_id)
        await rewrite_persistence(redis)
    log.info(
        "erasure: rows %.2f s (attempt %d), streams %.2f s",
        rows_s,
        attempt,
        time.perf_counter() - started - rows_s,
    )
    return Erased(rows=counts, stream_entries=streams)


async def _erase_rows(pool: asyncpg.Pool, *, user_id: str, actor: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    async with pool.acquire() as conn, conn.transaction():
        waited = time.perf_counter()
        await begin_erasure(conn, user_id)
        log.info("erasure: waited %.2f s for the user's writers", time.perf_counter() - waited)
        exists = await conn.fetchval("SELECT 1 FROM users WHERE id = $1 FOR UPDATE", user_id)
        if exists is None:
            raise NotFound(f"no user {user_id!r}")
        tables = await conn.fetch(USER_TABLES)
        for r in tables:
            n = int(await conn.fetchval(r["count"], user_id))
            if n:
                counts[r["table_name"]] = n
        counts["users"] = 1
        for r in tables:
            await conn.execute(r["stmt"], user_id)
        await conn.fetchrow(DELETE_USER, user_id)
        await announce_gone(conn, "an erased user's keys")  # their keys went with the rows
        await audit(
            conn,
            user_id=None,
            actor=actor,
            action="delete",
            entity="user",
            entity_id=None,
            details={"user_hash": audit_hash(user_id), "rows": counts},
        )
    return counts


async def reenable(pool: asyncpg.Pool, *, user_id: str) -> Reenabled:
    """Lift an erased user's tombstone; NotFound if the id was not erased."""
    async with pool.acquire() as conn, conn.transaction():
        await reenable_user(conn, user_id=user_id)
    return Reenabled()
