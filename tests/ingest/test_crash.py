"""A consumer killed with SIGKILL mid-stream leaves every event stored exactly once."""

from __future__ import annotations

import os
import signal

from services.ingest.settings import IngestSettings
from shared.events import encode
from shared.streams import EVENT_FIELD
from tests.ingest.helpers import message_count, turn
from tests.support import start_service, wait_for, wait_healthy

N = 20_000


async def test_sigkill_in_the_middle_then_restart_stores_every_event_exactly_once(
    make_settings, pool, redis, user_id
):
    settings = make_settings(IngestSettings, consumer_batch=1000)
    key = settings.stream("turns")
    pipe = redis.pipeline(transaction=False)
    for i in range(N):
        pipe.xadd(key, {EVENT_FIELD: encode(turn(user_id, i, chat_id=f"chat-{i % 50}"))})
    await pipe.execute()

    first = start_service("ingest", settings)
    try:
        await wait_healthy(settings.ingest_port, first)
        await wait_for(
            lambda: _some(pool, user_id), timeout=60, interval=0.01, message="first rows stored"
        )
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    stored_at_kill = await message_count(pool, user_id)
    pending = (await redis.xpending(key, "ingest"))["pending"]
    print(f"killed with {stored_at_kill} stored and {pending} pending")
    assert stored_at_kill < N, "the consumer finished before it was killed; raise N"
    assert pending > 0, "nothing was in flight when the consumer died"

    second = start_service("ingest", settings)
    try:
        await wait_healthy(settings.ingest_port, second)
        await wait_for(
            lambda: _count_is(pool, user_id, N),
            timeout=120,
            interval=0.2,
            message=f"all {N} turns stored (had {stored_at_kill}, {pending} pending)",
        )
        await wait_for(lambda: _none_pending(redis, key), timeout=30, message="nothing pending")
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(20)

    assert (
        await pool.fetchval(
            "SELECT count(DISTINCT event_id) FROM messages WHERE user_id = $1", user_id
        )
        == N
    )
    turns = await pool.fetchval("SELECT sum(turn_count) FROM episodes WHERE user_id = $1", user_id)
    assert turns == N
    assert await redis.xlen(settings.stream("dead")) == 0


async def _some(pool, user_id):
    return await message_count(pool, user_id) > 0


async def _count_is(pool, user_id, n):
    return await message_count(pool, user_id) == n


async def _none_pending(redis, key):
    return (await redis.xpending(key, "ingest"))["pending"] == 0
