"""Erasure that stays erased (issue 17.4): tombstones, the lock that orders erasure
with ingest, and removing a user's entries from the Redis streams.

- A tombstone (``erased_users``, a sha256 of the id) is written in the erasing
  transaction; writers of a user's data drop the events of tombstoned users
  until an admin re-enables the user.
- Erasing takes the user's advisory lock exclusively; a writer takes it shared
  for each user of its batch (:func:`hold_users`) *before* it reads tombstones.
  So a batch in flight when the erasure starts finishes first and is erased
  with the rest, and a batch that starts after reads the tombstone and drops
  those turns: nothing comes back.
- Nothing else is stored for a tombstoned user either, whatever the path: the
  database itself refuses a ``users`` row for a tombstoned id (migration 0095's
  trigger, fired by every statement that ensures the user: ``shared.users.ensure_user``,
  the memory writer, ingest). The trigger takes the same lock shared first, so a
  write in flight when the erasure starts finishes before it and is erased with
  the rest, and one that starts later waits for the erasure's commit and is
  refused (SQLSTATE :data:`ERASED_SQLSTATE`, raised as :class:`UserErased` by
  ``ensure_user`` and the writer; the query service answers 410). A write that
  only references the user (a foreign key) fails on the deleted row instead:
  :func:`erased_write` tells both apart from other errors. :func:`refuse_erased`
  is the explicit check (an admin key acting for an id, a new key);
  :func:`reenable_user` lifts the tombstone.
- After the commit every engram stream (every key under the stream prefix,
  the dead-letter stream included) is swept and the user's entries deleted,
  then Redis is asked to rewrite its append-only file (:func:`rewrite_persistence`),
  so the erased text leaves the disk too; a dead letter written later for an
  erased user keeps no payload (``shared.streams.dead_letter``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable
from typing import Any

import asyncpg
import redis.asyncio as aioredis

from shared.db import Executor, audit
from shared.errors import NotFound, UserErased
from shared.settings import CommonSettings

log = logging.getLogger(__name__)

# An event's JSON: ``event`` on every stream, ``payload`` on the dead-letter stream.
EVENT_FIELDS = (b"event", b"payload")

# Shared by writers, exclusive for the erasure; two 32-bit keys: (namespace, hash).
LOCK_NAMESPACE = 0x0E7A5E
HOLD_SHARED = """
SELECT count(pg_advisory_xact_lock_shared($1::int, hashtext(u)))
FROM (SELECT DISTINCT u FROM unnest($2::text[]) AS u ORDER BY u) AS s
"""
HOLD_EXCLUSIVE = "SELECT pg_advisory_xact_lock($1::int, hashtext($2))"
ERASED = "SELECT user_hash FROM erased_users WHERE user_hash = ANY($1::text[])"
TOMBSTONE = """
INSERT INTO erased_users (user_hash) VALUES ($1)
ON CONFLICT (user_hash) DO UPDATE SET erased_at = now()
"""
REENABLE = "DELETE FROM erased_users WHERE user_hash = $1 RETURNING erased_at"
ERASED_SQLSTATE = "EN410"
"""Raised by migration 0095's trigger when a statement would recreate an erased user."""
ERASED_MESSAGE = (
    "this user was erased; nothing is stored for it until an admin re-enables "
    "the id (POST /v1/users/{id}/reenable, or engram users reenable ID)"
)


def tombstone_hash(user_id: str) -> str:
    return hashlib.sha256(user_id.encode()).hexdigest()


async def hold_users(conn: Executor, user_ids: Iterable[str]) -> set[str]:
    """In a writer's transaction: hold each user's lock (shared) and return those erased.

    Call it first in the transaction, and drop the returned users' events."""
    ids = sorted(set(user_ids))
    if not ids:
        return set()
    await conn.fetchval(HOLD_SHARED, LOCK_NAMESPACE, ids)
    by_hash = {tombstone_hash(u): u for u in ids}
    return {by_hash[r["user_hash"]] for r in await conn.fetch(ERASED, list(by_hash))}


async def begin_erasure(conn: Executor, user_id: str) -> None:
    """In the erasing transaction: wait for writers in flight, then lay the tombstone."""
    await conn.fetchval(HOLD_EXCLUSIVE, LOCK_NAMESPACE, user_id)
    await conn.execute(TOMBSTONE, tombstone_hash(user_id))


async def is_erased(conn: Executor, user_id: str) -> bool:
    return bool(await conn.fetch(ERASED, [tombstone_hash(user_id)]))


async def refuse_erased(conn: Executor, user_id: str) -> None:
    """Raise :class:`UserErased` if ``user_id`` is tombstoned (the id is not repeated)."""
    if await is_erased(conn, user_id):
        raise UserErased(ERASED_MESSAGE)


def erased_write(exc: BaseException) -> bool:
    """Whether a database error says the write's user was erased: the trigger's
    refusal, or a foreign key to ``users`` whose row an erasure deleted."""
    if getattr(exc, "sqlstate", None) == ERASED_SQLSTATE:
        return True
    if isinstance(exc, asyncpg.ForeignKeyViolationError):
        return str(getattr(exc, "constraint_name", "") or "").endswith("_user_id_fkey")
    return False


def audit_hash(user_id: str) -> str:
    """What the audit log keeps of an erased or re-enabled user's id."""
    return hashlib.sha256(user_id.encode()).hexdigest()[:16]


async def reenable_user(conn: Executor, *, user_id: str, actor: str = "admin") -> None:
    """Remove the tombstone (audited): the user's new events are stored again.

    NotFound if the id was not erased."""
    if await conn.fetchval(REENABLE, tombstone_hash(user_id)) is None:
        raise NotFound("no erased user with this id")
    await audit(
        conn,
        user_id=None,
        actor=actor,
        action="reenable",
        entity="user",
        entity_id=None,
        details={"user_hash": audit_hash(user_id)},
    )


_OWNER = re.compile(rb'"user_id"\s*:\s*("(?:[^"\\]|\\.)*")')


def owner_of(raw: bytes | None) -> str | None:
    """The user an event's JSON (or a dead-lettered entry kept as text) belongs to."""
    if raw is None:
        return None
    try:
        data: Any = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        data = None
    if isinstance(data, dict):
        owner = data.get("user_id")
        if owner is not None:
            return owner if isinstance(owner, str) else None
    # not JSON, or JSON without its owner on top: the owner field, if it shows one
    found = _OWNER.search(raw)
    if found is None:
        return None
    try:
        text = json.loads(found.group(1))
    except (ValueError, UnicodeDecodeError):
        return None
    return text if isinstance(text, str) else None


def _owned_by(raw: bytes | None, user_id: str) -> bool:
    return owner_of(raw) == user_id


async def erased_among(conn: Executor, user_ids: Iterable[str]) -> set[str]:
    """Those of ``user_ids`` that are tombstoned (no lock taken)."""
    by_hash = {tombstone_hash(u): u for u in set(user_ids)}
    if not by_hash:
        return set()
    return {by_hash[r["user_hash"]] for r in await conn.fetch(ERASED, list(by_hash))}


async def purge_streams(
    redis: aioredis.Redis, settings: CommonSettings, user_id: str, *, page: int = 1000
) -> dict[str, int]:
    """Delete ``user_id``'s entries from every stream under the prefix; count per stream."""
    removed: dict[str, int] = {}
    async for key in redis.scan_iter(match=f"{settings.stream_prefix}*", _type="stream"):
        name = key.decode() if isinstance(key, bytes) else str(key)
        doomed: list[Any] = []
        start = "-"
        while True:
            got = await redis.xrange(name, min=start, max="+", count=page)
            entries: list[Any] = list(got or [])
            for entry_id, fields in entries:
                for field in EVENT_FIELDS:
                    raw = (fields or {}).get(field)
                    if isinstance(raw, bytes) and _owned_by(raw, user_id):
                        doomed.append(entry_id)
                        break
            if len(entries) < page:
                break
            last = entries[-1][0]
            start = "(" + (last.decode() if isinstance(last, bytes) else str(last))
        for i in range(0, len(doomed), page):
            await redis.xdel(name, *doomed[i : i + page])
        if doomed:
            removed[name.removeprefix(settings.stream_prefix)] = len(doomed)
            await compact_stream(redis, name)
    return removed


# XDEL only flags an entry deleted inside its node (up to 100 entries); the node, with
# the deleted entry's bytes, stays in memory and in every snapshot and AOF rewrite
# until all of its entries are gone. Rebuilding the stream (same ids, same groups,
# consumers and pending entries with their idle times and delivery counts) is the one
# way to drop them. One script: atomic, no reader sees the stream half built.
COMPACT = """
local key = KEYS[1]
local function fields(flat)
  local f = {}
  for i = 1, #flat, 2 do f[flat[i]] = flat[i + 1] end
  return f
end
local s = fields(redis.call('XINFO', 'STREAM', key))
local groups = {}
for _, g in ipairs(redis.call('XINFO', 'GROUPS', key)) do
  local f = fields(g)
  f.pel = redis.call('XPENDING', key, f['name'], '-', '+', 2147483647)
  f.members = redis.call('XINFO', 'CONSUMERS', key, f['name'])
  table.insert(groups, f)
end
local entries = redis.call('XRANGE', key, '-', '+')
redis.call('DEL', key)
for _, e in ipairs(entries) do
  redis.call('XADD', key, e[1], unpack(e[2]))
end
for _, g in ipairs(groups) do
  if g['entries-read'] then
    redis.call('XGROUP', 'CREATE', key, g['name'], g['last-delivered-id'], 'MKSTREAM',
               'ENTRIESREAD', g['entries-read'])
  else
    redis.call('XGROUP', 'CREATE', key, g['name'], g['last-delivered-id'], 'MKSTREAM')
  end
  for _, c in ipairs(g.members) do
    redis.call('XGROUP', 'CREATECONSUMER', key, g['name'], fields(c)['name'])
  end
  for _, p in ipairs(g.pel) do
    redis.call('XCLAIM', key, g['name'], p[2], 0, p[1], 'IDLE', p[3], 'RETRYCOUNT', p[4],
               'FORCE', 'JUSTID')
  end
end
if redis.call('EXISTS', key) == 1 then
  if s['entries-added'] then
    redis.call('XSETID', key, s['last-generated-id'], 'ENTRIESADDED', s['entries-added'],
               'MAXDELETEDID', s['max-deleted-entry-id'])
  else
    redis.call('XSETID', key, s['last-generated-id'])
  end
end
return #entries
"""
COMPACT_MAX_ENTRIES = 200_000
"""A longer stream is not rebuilt (the script would hold Redis for seconds); its
deleted entries' bytes leave when their nodes are trimmed, and a warning says so."""


async def compact_stream(redis: aioredis.Redis, key: str) -> bool:
    """Rebuild ``key`` so the bytes of its deleted entries leave memory (and, after
    :func:`rewrite_persistence`, the disk). False when it is too long to rebuild."""
    if int(await redis.xlen(key)) > COMPACT_MAX_ENTRIES:
        log.warning(
            "%s holds more than %d entries: not rebuilt after an erasure; the erased "
            "entries' bytes stay in Redis until their nodes are trimmed",
            key,
            COMPACT_MAX_ENTRIES,
        )
        return False
    await redis.eval(COMPACT, 1, key)
    return True


async def rewrite_persistence(redis: aioredis.Redis) -> list[str]:
    """Ask Redis to rewrite its files, so entries deleted from the streams leave the
    disk: the append-only file keeps every XADD until it is rewritten, and an RDB
    snapshot keeps what it held. Returns what was asked (``BGREWRITEAOF``,
    ``BGSAVE``); a Redis that refuses (commands renamed, a managed service) is logged."""
    asked: list[str] = []
    try:
        info = await redis.info("persistence")
        if int(info.get("aof_enabled", 0)):
            try:
                await redis.bgrewriteaof()
            except aioredis.ResponseError as exc:  # one already running: scheduled after it
                if "already in progress" not in str(exc):
                    raise
            asked.append("BGREWRITEAOF")
        config = await redis.config_get("save")
        if (config.get("save") or "").strip():
            await redis.bgsave(schedule=True)
            asked.append("BGSAVE")
    except (aioredis.RedisError, OSError) as exc:
        log.warning("could not ask Redis to rewrite its files after an erasure: %s", exc)
    return asked
