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
- Nothing else is stored for a tombstoned user either: the query service
  refuses an admin key acting for one (410), and a key is not created for one
  (:func:`refuse_erased`, the one check); :func:`reenable_user` lifts it.
- After the commit every engram stream (every key under the stream prefix,
  the dead-letter stream included) is swept and the user's entries deleted.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

import redis.asyncio as aioredis

from shared.db import Executor, audit
from shared.errors import NotFound, UserErased
from shared.settings import CommonSettings
from shared.streams import Publisher

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
        raise UserErased(
            "this user was erased; nothing is stored for it until an admin re-enables "
            "the id (POST /v1/users/{id}/reenable, or engram users reenable ID)"
        )


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


def _owned_by(raw: bytes | None, user_id: str) -> bool:
    if raw is None:
        return False
    try:
        data: Any = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        data = None
    if isinstance(data, dict):
        if data.get("user_id") == user_id:
            return True
        if data.get("user_id") is not None:
            return False
    # not JSON (a dead-lettered entry kept as text): its owner field, if it shows one
    owner = re.escape(json.dumps(user_id).encode())
    return re.search(rb'"user_id"\s*:\s*' + owner, raw) is not None


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
    return removed


async def forget_entries(publisher: Publisher, stream: str, entry_ids: Sequence[str]) -> None:
    """Delete entries a writer dropped for an erased user, so their content does not
    linger in the stream until it is trimmed."""
    await publisher.delete(stream, entry_ids)
