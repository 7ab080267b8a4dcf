"""Consumer plumbing on real Redis and PostgreSQL: poison isolation by bisection,
trimming only what every group acknowledged, batched reclaim, forgetting dead
consumers, a lag gauge that is right after a Redis restart."""

from __future__ import annotations

import asyncio
import math
import uuid
from typing import Any

import asyncpg
import redis.asyncio as aioredis

from engram_cli.embedded import EmbeddedRedis, free_port
from services.ingest.app import create_app as ingest_app
from services.ingest.settings import IngestSettings
from shared.events import TurnReceived, encode, turn_adapter
from shared.runtime import Runtime
from shared.streams import EVENT_FIELD, FORGET_IF_IDLE, Publisher, stream_state
from tests.ingest.helpers import dead_entries, message_count, turn
from tests.support import running, wait_for


def _turn(i: int, content: str | None = None) -> TurnReceived:
    return TurnReceived(
        user_id="u", provider="p", chat_id="c", role="user", content=content or str(i)
    )


async def test_a_data_error_is_bisected_out_in_log_n_transactions_and_dead_lettered_once(
    settings, pool: asyncpg.Pool, redis
):
    """The use case stores a batch in one transaction; PostgreSQL refuses one entry
    (not an integer): that entry alone is dead-lettered at once, the rest stored."""
    table = f"poison_{uuid.uuid4().hex[:8]}"
    await pool.execute(f"CREATE TABLE {table} (v integer)")
    calls: list[int] = []

    async def handle(batch):
        calls.append(len(batch))
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute(
                f"INSERT INTO {table} SELECT unnest($1::text[])::integer",
                [e.content for e in batch],
            )

    n = 64
    contents = [str(i) for i in range(n)]
    contents[37] = "thirty-seven"
    rt = Runtime("test", settings)
    rt.consume(stream="turns", group="g", adapter=turn_adapter, handle=handle, batch=n)
    pub = Publisher(redis, settings)
    await pub.publish("turns", [_turn(i, c) for i, c in enumerate(contents)])
    await rt.start()
    try:
        stored = await wait_for(
            lambda: _count_rows(pool, table, n - 1), timeout=30, message="63 rows"
        )
        dead = await wait_for(lambda: dead_entries(redis, settings), message="dead letter")
    finally:
        await rt.stop()
    assert stored
    assert len(calls) <= 2 * math.ceil(math.log2(n)) + 1, calls  # not n
    [entry] = dead
    assert "data refused" in entry["error"] and "thirty-seven" in entry["error"]
    assert entry["attempts"] == "1"
    assert (await redis.xpending(settings.stream("turns"), "g"))["pending"] == 0


async def _count_rows(pool, table, n):
    return await pool.fetchval(f"SELECT count(*) FROM {table}") == n


async def test_an_unparseable_entry_in_a_slow_batch_is_dead_lettered_once(settings, redis):
    async def handle(batch):
        await asyncio.sleep(2.5)  # longer than claim_idle_ms (1 s in tests)

    rt = Runtime("test", settings)
    rt.consume(stream="turns", group="g", adapter=turn_adapter, handle=handle, batch=10)
    key = settings.stream("turns")
    await redis.xadd(key, {EVENT_FIELD: encode(_turn(0))})
    await redis.xadd(key, {EVENT_FIELD: b"{not json"})
    await redis.xadd(key, {EVENT_FIELD: encode(_turn(1))})
    await rt.start()
    try:
        await wait_for(lambda: _settled(redis, settings), timeout=30, message="all acked")
        await asyncio.sleep(1.5)
    finally:
        await rt.stop()
    assert len(await dead_entries(redis, settings)) == 1


async def _settled(redis, settings) -> bool:
    key = settings.stream("turns")
    info = await redis.xinfo_groups(key)
    return all(not g["pending"] and g["last-delivered-id"] for g in info) and bool(info)


async def test_a_stopped_consumers_backlog_longer_than_the_cap_is_all_stored(
    make_settings, pool, redis, user_id
):
    """ENGRAM_STREAM_MAXLEN=50. Another group reads and acknowledges everything and
    trims; ingest's group is stopped with 200 unread entries: none is trimmed, all
    200 are stored once ingest starts, then the stream is trimmed."""
    settings = make_settings(IngestSettings, stream_maxlen=50)
    key = settings.stream("turns")
    await redis.xgroup_create(key, "ingest", id="0", mkstream=True)  # ingest, stopped

    async def audit(batch):
        return None

    rt = Runtime("audit", settings)
    auditor = rt.consume(stream="turns", group="audit", adapter=turn_adapter, handle=audit)
    await rt.start()
    try:
        await Publisher(redis, settings).publish(
            "turns", [turn(user_id, i, content=f"backlog {i}") for i in range(200)]
        )
        await wait_for(lambda: _group_done(redis, key, "audit"), message="audit read all")
        await auditor.observe()  # trims what every group acknowledged: nothing of ingest's
        assert await redis.xlen(key) == 200
        assert rt.metrics.over_cap.labels("turns")._value.get() == 1
        async with running(ingest_app(settings)):
            await wait_for(lambda: _count_is(pool, user_id, 200), timeout=30, message="200 turns")
            await wait_for(lambda: _group_done(redis, key, "ingest"), message="ingest acked")
        await auditor.observe()
    finally:
        await rt.stop()
    assert await message_count(pool, user_id) == 200
    assert await redis.xlen(key) == 0  # everything acknowledged by both groups is trimmed
    assert rt.metrics.over_cap.labels("turns")._value.get() == 0


async def _group_done(redis, key, group) -> bool:
    for g in await redis.xinfo_groups(key):
        name = g["name"].decode() if isinstance(g["name"], bytes) else g["name"]
        if name == group:
            last = g["last-delivered-id"]
            last = last.decode() if isinstance(last, bytes) else last
            info = await redis.xinfo_stream(key)
            top = info["last-generated-id"]
            top = top.decode() if isinstance(top, bytes) else top
            return g["pending"] == 0 and last == top
    return False


async def _count_is(pool, user_id, n) -> bool:
    return await message_count(pool, user_id) == n


async def test_a_dead_consumers_entries_are_reclaimed_in_batches_and_it_is_forgotten(
    make_settings, redis
):
    settings = make_settings(reclaim_batch=200, consumer_forget_ms=1500)
    key = settings.stream("turns")
    await redis.xgroup_create(key, "g", id="0", mkstream=True)
    await Publisher(redis, settings).publish("turns", [_turn(i) for i in range(500)])
    # a consumer that read everything and died
    await redis.xreadgroup("g", "dead-1", {key: ">"}, count=500)
    batches: list[int] = []

    async def handle(batch):
        batches.append(len(batch))

    rt = Runtime("test", settings)
    rt.consume(stream="turns", group="g", adapter=turn_adapter, handle=handle)
    started = asyncio.get_running_loop().time()
    await rt.start()
    try:
        await wait_for(lambda: _total(batches, 500), timeout=30, message="500 reclaimed")
        took = asyncio.get_running_loop().time() - started
        # Gone from the group and counted (the count follows the removal: stopping
        # the runtime between the two would read 0).
        await wait_for(
            lambda: _forgotten(redis, key, "dead-1", rt), timeout=15, message="forgotten"
        )
    finally:
        await rt.stop()
    assert sum(batches) == 500
    assert max(batches) == 200 and len(batches) <= 4, batches
    assert took < 15, took  # was one entry per transaction: ~25 entries/s, 20 s for 500
    assert rt.metrics.reclaimed.labels("turns")._value.get() == 500
    assert rt.metrics.consumers_removed.labels("turns")._value.get() >= 1


async def test_an_idle_consumer_is_removed_only_while_it_has_nothing_pending(make_settings, redis):
    """The check and the removal are one step in Redis: a consumer that read entries
    after it was seen idle keeps them (DELCONSUMER would drop them from the group's
    pending list, delivered and never delivered again)."""
    settings = make_settings()
    key = settings.stream("turns")
    await redis.xgroup_create(key, "g", id="0", mkstream=True)
    await Publisher(redis, settings).publish("turns", [_turn(i) for i in range(3)])
    await redis.xreadgroup("g", "idle-empty", {key: "0"}, count=1)  # created, reads nothing
    await redis.xreadgroup("g", "holds-two", {key: ">"}, count=2)
    await asyncio.sleep(0.05)

    async def forget(name: str, idle_ms: int) -> int:
        return int(await redis.eval(FORGET_IF_IDLE, 1, key, "g", name, idle_ms))

    assert await forget("holds-two", 0) == 0  # idle enough, but two entries pending
    assert await forget("idle-empty", 60_000) == 0  # nothing pending, not idle long enough
    assert await forget("no-such-consumer", 0) == 0
    assert await forget("idle-empty", 10) == 1
    names = {
        (c["name"].decode() if isinstance(c["name"], bytes) else c["name"]): c["pending"]
        for c in await redis.xinfo_consumers(key, "g")
    }
    assert names == {"holds-two": 2}
    assert (await redis.xpending(key, "g"))["pending"] == 2


async def _total(batches, n) -> bool:
    return sum(batches) >= n


async def _forgotten(redis, key, name, rt) -> bool:
    counted = rt.metrics.consumers_removed.labels("turns")._value.get() >= 1
    return counted and await _gone(redis, key, name)


async def _gone(redis, key, name) -> bool:
    names = [c["name"] for c in await redis.xinfo_consumers(key, "g")]
    return all((n.decode() if isinstance(n, bytes) else n) != name for n in names)


async def test_the_lag_gauge_is_right_after_a_redis_restart(make_settings, tmp_path):
    server = EmbeddedRedis(tmp_path / "redis", port=free_port())
    url = server.start(persistent=True)
    try:
        settings = make_settings(redis_url=url)
        seen: list[int] = []

        async def handle(batch):
            seen.extend(1 for _ in batch)

        async def consume_all() -> Any:
            rt = Runtime("test", settings)
            c = rt.consume(stream="turns", group="g", adapter=turn_adapter, handle=handle)
            await rt.start()
            try:
                await Publisher(rt.redis, settings).publish("turns", [_turn(i) for i in range(300)])
                await wait_for(lambda: _total(seen, 300), message="300 handled")
                await c.observe()
                return rt.metrics.lag.labels("turns")._value.get()
            finally:
                await rt.stop()

        assert await consume_all() == 0
        r = aioredis.from_url(url)
        await r.save()
        await r.aclose()
        server.stop()
        server.start(persistent=True)
        r = aioredis.from_url(url)
        try:
            state = await stream_state(r, settings.stream("turns"))
        finally:
            await r.aclose()
        assert state is not None and state.length == 300
        assert state.groups["g"].lag == 0
        assert state.groups["g"].pending == 0
    finally:
        server.stop()
