"""Read replicas: what a write leaves for the reads after it, and the replicas' lag.

Read-your-writes across processes: after a write by a user commits on the primary,
the writer stores the primary's WAL position (``pg_current_wal_lsn()``, at or past the
commit record once the commit returned) under one Redis key per user,
``{prefix}lsn:{user}``, keeping the largest value (a Lua script over that one key, so
it works on a Redis Cluster) for :data:`LSN_TTL_S`. A reader of that user sends the
read to a replica only once the replica has replayed that far
(``pg_last_wal_replay_lsn()``). The key is shared, so every query instance honours
every instance's writes.

LSNs are handled as integers (bytes since ``0/0``); a Lua number holds them exactly
up to 2**53 bytes of WAL (8 PiB).
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.db import Executor
from shared.redis_client import RedisClient
from shared.settings import CommonSettings

LSN_TTL_S = 600
"""how long a user's last write position is kept: reads within this long after a write
wait for the replica to replay it; a replica further behind than this (the lag alert
fires at 30 s) could serve an older write's reader stale rows"""

_KEEP_MAX = """
local cur = tonumber(redis.call('GET', KEYS[1]))
if cur == nil or cur < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
else
  redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return 1
"""


def lsn_key(settings: CommonSettings, user_id: str) -> str:
    return f"{settings.stream_prefix}lsn:{user_id}"


async def current_lsn(db: Executor) -> int:
    """The primary's WAL write position now: past every commit that has returned."""
    return int(await db.fetchval("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"))


async def replay_lsn(db: Executor) -> int | None:
    """How far a replica has replayed (None: not a replica, or nothing replayed yet)."""
    value = await db.fetchval("SELECT pg_last_wal_replay_lsn() - '0/0'::pg_lsn")
    return None if value is None else int(value)


async def remember_write(
    redis: RedisClient, settings: CommonSettings, user_id: str, lsn: int
) -> None:
    """Keep ``lsn`` as ``user_id``'s last write position unless a later one is kept."""
    await redis.eval(_KEEP_MAX, 1, lsn_key(settings, user_id), str(lsn), str(LSN_TTL_S))


async def last_write(redis: RedisClient, settings: CommonSettings, user_id: str) -> int | None:
    """``user_id``'s last write position kept by :func:`remember_write`, or None."""
    value = await redis.get(lsn_key(settings, user_id))
    return None if value is None else int(value)


@dataclass(frozen=True)
class Lag:
    replica: str
    """its ``application_name`` (``primary_conninfo``)"""
    bytes: int
    """WAL the primary has written that the replica has not replayed"""
    seconds: float
    """PostgreSQL's ``replay_lag``: how long the newest replayed commit took to be
    replayed (0 once the replica has caught up and the primary is idle)"""


async def replication_lag(primary: Executor) -> list[Lag]:
    """Each streaming replica's lag, as the primary sees it (``pg_stat_replication``;
    the columns need a superuser or ``pg_monitor``, else the replica is left out)."""
    rows = await primary.fetch(
        """
        SELECT application_name,
               pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) AS behind,
               COALESCE(EXTRACT(EPOCH FROM replay_lag), 0) AS seconds
        FROM pg_stat_replication
        WHERE replay_lsn IS NOT NULL
        """
    )
    return [
        Lag(
            replica=r["application_name"] or "replica",
            bytes=max(int(r["behind"]), 0),
            seconds=float(r["seconds"]),
        )
        for r in rows
    ]
