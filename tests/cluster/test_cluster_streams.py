"""The stream plumbing unchanged on a real Redis Cluster (redis-py ``RedisCluster``,
FastStream's ``RedisClusterBroker``): turns published by ``engram publish`` over six
shards spread across three masters are stored once by ingest, a chat's turns and
episode close on one shard; a bad line and a bad entry are dead-lettered and replayed;
the one-key Lua script that forgets idle consumers, the trim and the gauges run per
shard; a producer's WAIT is answered by the replica."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from typing import Any

import asyncpg
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from engram_cli.inspect import show_dead
from engram_cli.publish import publish_stream
from services.ingest.app import create_app as ingest_app
from services.ingest.settings import IngestSettings
from shared.events import ExtractRequested, TurnReceived
from shared.redis_client import connect_redis
from shared.stream_registry import EXTRACT, TURNS
from shared.streams import EVENT_FIELD, Publisher
from tests.cluster.conftest import SHARDS
from tests.ingest.helpers import T0, message_count
from tests.support import running, wait_for


def _lines(user_id: str, chats: int, per_chat: int) -> list[str]:
    lines = []
    for i in range(chats * per_chat):
        lines.append(
            json.dumps(
                {
                    "user_id": user_id,
                    "provider": "cluster",
                    "chat_id": f"chat-{i % chats}",
                    "role": "user" if i % 2 == 0 else "assistant",
                    "content": f"turn {i}",
                    "occurred_at": (T0.timestamp() + i),
                }
            )
        )
    for c in range(3):  # three chats are closed after their turns
        lines.append(
            json.dumps(
                {
                    "schema": "episode.closed.v1",
                    "user_id": user_id,
                    "provider": "cluster",
                    "chat_id": f"chat-{c}",
                    "occurred_at": T0.timestamp() + chats * per_chat + 10,
                }
            )
        )
    return lines


async def test_turns_published_over_shards_on_three_masters_are_stored_once(
    cluster_settings: Any, redis_cluster: Any, pool: asyncpg.Pool, user_id: str
) -> None:
    settings = cluster_settings(IngestSettings)
    keys = TURNS.keys(settings)
    assert len({redis_cluster.master_of(k).port for k in keys}) == 3  # all masters carry shards
    assert len({key_slot(k.encode()) for k in keys}) == SHARDS
    lines = _lines(user_id, chats=30, per_chat=10)
    lines.insert(5, '{"user_id": "x", "role": "wizard"}')  # skipped, dead-lettered
    assert await publish_stream(settings, io.StringIO("\n".join(lines)), strict=False) == 1

    r = connect_redis(settings)
    assert isinstance(r, RedisCluster)
    try:
        # a chat's turns sit on one shard, in the order published, and its close too
        shard_of_chat: dict[str, set[int]] = {}
        for k, key in enumerate(keys):
            seen: dict[str, list[int]] = {}
            for _, fields in await r.xrange(key):
                t = TurnReceived.model_validate_json(fields[EVENT_FIELD])
                shard_of_chat.setdefault(t.chat_id, set()).add(k)
                seen.setdefault(t.chat_id, []).append(int(t.content.split()[1]))
            assert all(v == sorted(v) for v in seen.values())
        assert all(len(s) == 1 for s in shard_of_chat.values())
        app = ingest_app(settings)
        async with running(app):
            await wait_for(lambda: _stored(pool, user_id, 300), timeout=60, message="300 turns")
            await wait_for(
                lambda: _closed(pool, user_id, 3), timeout=30, message="3 closed by event"
            )
            rt = app.state.runtime
            for c in rt.consumers:
                await c.observe()
                assert rt.metrics.lag.labels(c.stream_name, str(c.shard))._value.get() == 0
            # a consumer that left (idle, nothing pending) is forgotten by the one-key
            # script on each shard
            consumer = rt.consumers[0]
            await r.xgroup_createconsumer(consumer.stream, consumer.group, "gone-for-good")
            await asyncio.sleep(0.01)
            settings_forget = consumer.settings.model_copy(update={"consumer_forget_ms": 1})
            consumer.settings = settings_forget
            assert await consumer.forget_idle_consumers() == ["gone-for-good"]
        assert await message_count(pool, user_id) == 300
        dead = await r.xrange(settings.stream("dead"))
        assert len(dead) == 1 and dead[0][1][b"group"] == b"engram publish"
    finally:
        await r.aclose()


async def test_a_dead_letter_on_a_shard_is_replayed_onto_that_shard(
    cluster_settings: Any, capsys: Any
) -> None:
    settings = cluster_settings()
    r = connect_redis(settings)
    try:
        event = ExtractRequested(episode_id=uuid.uuid4(), user_id="someone")
        shard = EXTRACT.shard_of(event, SHARDS)
        key = EXTRACT.key(settings, shard)
        await r.xadd(
            settings.stream("dead"),
            {
                b"stream": key.encode(),
                b"group": b"extractor",
                b"entry_id": b"1-0",
                b"payload": event.model_dump_json(by_alias=True).encode(),
                b"error": b"test",
                b"attempts": b"5",
            },
        )
        await show_dead(settings, 10, replay=True)
        assert "1 dead-lettered entry; 1 replayed" in capsys.readouterr().out
        assert await r.xlen(key) == 1
        assert await r.xlen(settings.stream("dead")) == 0
    finally:
        await r.aclose()


async def test_a_producer_waiting_for_the_replica_is_answered_by_it(
    cluster_settings: Any,
) -> None:
    settings = cluster_settings(stream_wait_replicas=1, stream_wait_timeout_ms=2000)
    r = connect_redis(settings)
    try:
        events = [ExtractRequested(episode_id=uuid.uuid4(), user_id=f"u{i}") for i in range(60)]
        ids = await Publisher(r, settings).publish(EXTRACT, events)
        assert len(ids) == 60
        lengths = [await r.xlen(k) for k in EXTRACT.keys(settings)]
        assert sum(lengths) == 60 and all(lengths)
    finally:
        await r.aclose()


async def _stored(pool: asyncpg.Pool, user_id: str, n: int) -> bool:
    return await message_count(pool, user_id) == n


async def _closed(pool: asyncpg.Pool, user_id: str, n: int) -> bool:
    got = await pool.fetchval(
        "SELECT count(*) FROM episodes WHERE user_id = $1 AND closed_by = 'event'", user_id
    )
    return int(got) == n
