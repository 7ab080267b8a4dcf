"""Reads on a streaming replica, with read-your-writes (``ENGRAM_DATABASE_READ_URL``).

Which database a request reads (:meth:`ReadRouting.pool_for`, the ``ReadPool``
dependency of the read routes):

- no replica configured: the primary (the default; nothing below runs);
- the user has no write kept in Redis (none in the last ``LSN_TTL_S``): the replica;
- the replica has replayed the user's last write (``shared.replicas``): the replica;
- else wait, polling the replica, up to ``ENGRAM_READ_YOUR_WRITES_WAIT_MS``: the
  replica once it has replayed it, the primary when the bound passes;
- the replica failed a moment ago (:data:`DOWN_S`): the primary.

Writes: every request that is not a GET and took the primary pool (the ``Pool``
dependency) stores the primary's WAL position for its acting user before its response
is sent (:meth:`ReadRouting.remember`), so a later read by that user on any query
instance waits for it.

A read the replica failed (it stopped, restarted, a connection was cut: any 5xx of a
request that read the replica, before anything of the response was sent) is run once
more on the primary (:class:`ReplicaFallback`), and the replica is left alone for
:data:`DOWN_S`: reads do not fail because a replica did.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import asyncpg
from prometheus_client import Counter, Gauge, Histogram
from redis import exceptions as redis_errors
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.query.settings import QuerySettings
from shared.db import create_pool
from shared.replicas import current_lsn, last_write, remember_write, replay_lsn, replication_lag
from shared.runtime import Runtime

log = logging.getLogger(__name__)

DOWN_S = 1.0
"""after the replica failed a read, reads go to the primary this long"""
FRESH_S = 0.2
"""a replay position read this recently is trusted without asking the replica again (a
replica cannot restart, and so come back further behind, within this long)"""
USED = "engram.replica_read"
PRIMARY_ONLY = "engram.primary_only"
REPLAY_LIMIT = 1_000_000
"""request bytes kept for a retry on the primary; a larger body is not retried"""


class ReadRouting:
    """The replica's pool, what is known of its replay position, and the metrics."""

    def __init__(self, rt: Runtime, settings: QuerySettings) -> None:
        self.rt = rt
        self.settings = settings
        self.wait_s = settings.read_your_writes_wait_ms / 1000
        self.replica: asyncpg.Pool | None = None
        self.replayed = 0
        self.replayed_at = 0.0
        self.down_until = 0.0
        r = rt.metrics.registry
        self.reads = Counter(
            "engram_db_reads_total",
            "API reads by the database that served them and why (replica: no_write, "
            "replayed, waited; primary: no_replica, behind, replica_down, no_lsn, retried)",
            ["db", "why"],
            registry=r,
        )
        self.waits = Histogram(
            "engram_db_read_wait_seconds",
            "Time a read waited for the replica to replay the user's last write",
            registry=r,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
        )
        self.lag_bytes = Gauge(
            "engram_db_replica_lag_bytes",
            "WAL the primary has written that a streaming replica has not replayed",
            ["replica"],
            registry=r,
        )
        self.lag_seconds = Gauge(
            "engram_db_replica_lag_seconds",
            "PostgreSQL's replay_lag of a streaming replica (0 when caught up and idle)",
            ["replica"],
            registry=r,
        )
        self.up = Gauge(
            "engram_db_read_replica_up",
            "1 when ENGRAM_DATABASE_READ_URL answers, 0 when reads fall back to the primary",
            registry=r,
        )

    @property
    def enabled(self) -> bool:
        return self.settings.database_read_url is not None

    async def start(self, rt: Runtime) -> None:
        url = self.settings.database_read_url
        if url is None:
            return
        # min_size 0: the service starts (and reads the primary) while the replica is down
        self.replica = await create_pool(
            url.get_secret_value(), min_size=0, max_size=self.settings.db_pool_max
        )
        self.up.set(1)

    async def stop(self, rt: Runtime) -> None:
        if self.replica is not None:
            await self.replica.close()
            self.replica = None

    def _count(self, db: str, why: str) -> None:
        self.reads.labels(db, why).inc()

    async def pool_for(self, user_id: str, scope: dict[str, Any]) -> asyncpg.Pool:
        """The pool ``user_id``'s read should use now (see the module's doc)."""
        replica = self.replica
        if replica is None:
            self._count("primary", "no_replica")
            return self.rt.pool
        if scope.get(PRIMARY_ONLY):
            self._count("primary", "retried")
            return self.rt.pool
        now = time.monotonic()
        if now < self.down_until:
            self._count("primary", "replica_down")
            return self.rt.pool
        try:
            need = await last_write(self.rt.redis, self.settings, user_id)
        except (redis_errors.RedisError, OSError):
            self._count("primary", "no_lsn")  # the user's last write is unknown
            return self.rt.pool
        if need is None:
            scope[USED] = True
            self._count("replica", "no_write")
            return replica
        if need <= self.replayed and now - self.replayed_at < FRESH_S:
            scope[USED] = True
            self._count("replica", "replayed")
            return replica
        deadline = now + self.wait_s
        pause = 0.0005
        while True:
            try:
                replayed = await self._replay_position(replica, deadline)
            except TimeoutError:  # slow (a loaded machine), not down: this read only
                self._count("primary", "behind")
                return self.rt.pool
            except Exception:  # noqa: BLE001 - whatever the replica did, the primary answers
                # (a connection cut as the replica stops can also surface as asyncpg's
                # InternalClientError, not only as a connection error)
                self.failed()
                self._count("primary", "replica_down")
                return self.rt.pool
            if replayed >= need:
                waited = time.monotonic() - now
                scope[USED] = True
                if waited > 0.0005 or need > self.replayed:
                    self.waits.observe(waited)
                self._count("replica", "waited" if waited > 0.0005 else "replayed")
                return replica
            if time.monotonic() + pause > deadline:
                self._count("primary", "behind")
                return self.rt.pool
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.01)

    async def _replay_position(self, replica: asyncpg.Pool, deadline: float) -> int:
        timeout = max(deadline - time.monotonic(), 0.01)
        async with replica.acquire(timeout=timeout) as conn:
            value = await replay_lsn(conn)
        replayed = value or 0
        self.replayed, self.replayed_at = replayed, time.monotonic()
        return replayed

    def failed(self) -> None:
        """The replica failed a read or a check: the primary serves reads for a moment, and
        what was known of its replay position is forgotten (a restarted replica may
        resume further back)."""
        self.down_until = time.monotonic() + DOWN_S
        self.replayed = 0
        self.up.set(0)

    async def remember(self, user_id: str) -> None:
        """After a write by ``user_id`` committed: keep the primary's WAL position for the
        user's next reads. A failure is logged, not raised (the write is done); the
        reads then wait for nothing newer than the user's previous write."""
        try:
            lsn = await current_lsn(self.rt.pool)
            await remember_write(self.rt.redis, self.settings, user_id, lsn)
        except Exception:  # noqa: BLE001 - the write is done; its answer stands
            log.warning(
                "could not keep the write position of %s for read-your-writes",
                user_id,
                exc_info=True,
            )

    async def observe(self) -> None:
        """The lag gauges from the primary's ``pg_stat_replication``; the replica's up."""
        lags = await replication_lag(self.rt.pool)
        self.lag_bytes.clear()
        self.lag_seconds.clear()
        for lag in lags:
            self.lag_bytes.labels(lag.replica).set(lag.bytes)
            self.lag_seconds.labels(lag.replica).set(lag.seconds)
        if self.replica is not None:
            try:
                await self._replay_position(self.replica, time.monotonic() + 2.0)
                if time.monotonic() >= self.down_until:
                    self.up.set(1)
            except Exception:  # noqa: BLE001 - as in pool_for
                self.failed()


def install(rt: Runtime, settings: QuerySettings) -> ReadRouting:
    """The process's read routing: its pool opens and closes with the runtime, and the
    lag is read every 5 s (whether or not this process reads a replica: the lag of
    every replica of the primary is a metric)."""
    routing = ReadRouting(rt, settings)
    rt.on_start.append(routing.start)
    rt.on_stop.append(routing.stop)
    rt.every(5.0, routing.observe)
    return routing


class ReplicaFallback:
    """ASGI middleware: a request that read the replica and failed with a 5xx before
    any of its response was sent runs once more on the primary (reads are safe to
    repeat); the replica is marked down for :data:`DOWN_S`."""

    def __init__(self, app: ASGIApp, *, routing: ReadRouting) -> None:
        self.app = app
        self.routing = routing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.routing.enabled:
            await self.app(scope, receive, send)
            return
        state: dict[str, Any] = scope.setdefault("state", {})
        kept: list[Message] = []
        size = 0

        async def keep() -> Message:
            nonlocal size
            message = await receive()
            if message["type"] == "http.request" and size <= REPLAY_LIMIT:
                size += len(message.get("body", b""))
                kept.append(message)
            return message

        held = sent = False
        failure: list[bytes] = []

        async def hold_failure(message: Message) -> None:
            nonlocal held, sent
            if message["type"] == "http.response.start" and (
                message["status"] >= 500 and state.get(USED) and size <= REPLAY_LIMIT
            ):
                held = True
            if not held:
                sent = True
                await send(message)
            elif message["type"] == "http.response.body":
                failure.append(message.get("body", b""))

        try:
            await self.app(scope, keep, hold_failure)
        except Exception as exc:
            if sent or not (state.get(USED) and size <= REPLAY_LIMIT):
                raise
            held = True
            failure.append(repr(exc).encode())
        if not held:
            return
        log.warning(
            "a read on the replica failed (%s); answering it from the primary",
            b"".join(failure)[:300].decode(errors="replace"),
        )
        self.routing.failed()
        state.pop(USED, None)
        state[PRIMARY_ONLY] = True
        await self.app(scope, _replay(kept, receive), send)


def _replay(kept: list[Message], receive: Receive) -> Receive:
    queue = list(kept)

    async def again() -> Message:
        if queue:
            return queue.pop(0)
        return await receive()

    return again
