"""The stream registry and sharded streams on one real Redis: every service wires the
streams and groups the registry names; with N shards a chat's turns and episode events
share one shard k, every shard is read and the turns stored once, metrics carry the
shard; with N = 1 the keys are today's; a producer asked to wait for a replica that
does not exist is told so."""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import Any

import asyncpg
import pytest
from prometheus_client import generate_latest

from services.embedder.app import create_app as embedder_app
from services.embedder.settings import EmbedderSettings
from services.extractor.app import create_app as extractor_app
from services.extractor.settings import ExtractorSettings
from services.ingest.app import create_app as ingest_app
from services.ingest.settings import IngestSettings
from services.query.app import create_app as query_app
from services.query.settings import QuerySettings
from shared.errors import InfrastructureError
from shared.events import EpisodeClosed, ExtractRequested, TurnReceived
from shared.stream_registry import DEAD, EPISODES, STREAMS, TURNS, spec
from shared.streams import EVENT_FIELD, Publisher
from tests.ingest.helpers import message_count, turn
from tests.support import running, wait_for


def test_every_consumer_a_service_wires_is_in_the_registry_and_every_group_is_wired(
    make_settings: Any,
) -> None:
    apps = [
        ingest_app(make_settings(IngestSettings)),
        embedder_app(make_settings(EmbedderSettings)),
        extractor_app(make_settings(ExtractorSettings)),
        query_app(make_settings(QuerySettings, secret_key="k")),
    ]
    wired = {(c.stream_name, c.group) for app in apps for c in app.state.runtime.consumers}
    registered = {(s.name, g) for s in STREAMS.values() for g in s.groups}
    assert wired == registered
    with pytest.raises(ValueError, match="unknown stream 'turn'"):
        spec("turn")


def test_one_shard_keeps_todays_keys_and_n_shards_are_hash_tagged(make_settings: Any) -> None:
    one = make_settings()
    assert TURNS.keys(one) == [one.stream("turns")]
    four = make_settings(stream_shards=4)
    assert TURNS.keys(four) == [f"{four.stream('turns')}:{{{k}}}" for k in range(4)]
    assert DEAD.keys(four) == [four.stream("dead")]  # one dead-letter stream


def test_a_chats_turns_and_episode_events_pick_the_same_shard() -> None:
    for i in range(200):
        user, chat = f"u{i % 7}", f"chat-{i}"
        t = TurnReceived(user_id=user, provider="p", chat_id=chat, role="user", content="x")
        c = EpisodeClosed(user_id=user, provider="p", chat_id=chat)
        assert TURNS.shard_of(t, 8) == EPISODES.shard_of(c, 8)
        assert TURNS.shard_of(t, 8) == TURNS.shard_of_payload(t.model_dump_json().encode(), 8)
    spread = {TURNS.shard_of(turn("u", 0, chat_id=f"c{i}"), 8) for i in range(200)}
    assert spread == set(range(8))


async def test_sharded_turns_are_read_from_every_shard_and_stored_once(
    make_settings: Any, pool: asyncpg.Pool, redis: Any, user_id: str
) -> None:
    settings = make_settings(IngestSettings, stream_shards=4)
    chats = [f"chat-{i}" for i in range(24)]
    turns = [turn(user_id, i, chat_id=chats[i % 24]) for i in range(240)]
    closes = [EpisodeClosed(user_id=user_id, provider="test", chat_id=c) for c in chats[:3]]
    publisher = Publisher(redis, settings)
    await publisher.publish_many([(TURNS, turns), (EPISODES, closes)])
    # each chat's turns are in one shard, in the order published
    where: dict[str, set[int]] = defaultdict(set)
    order: dict[str, list[int]] = defaultdict(list)
    for k, key in enumerate(TURNS.keys(settings)):
        for _, fields in await redis.xrange(key):
            t = TurnReceived.model_validate_json(fields[EVENT_FIELD])
            where[t.chat_id].add(k)
            order[t.chat_id].append(int(t.content.rsplit(" ", 1)[1]))
    assert all(len(ks) == 1 for ks in where.values())
    assert len(set().union(*where.values())) == 4  # every shard carries some
    assert all(o == sorted(o) for o in order.values())
    for c in closes:  # a close is on the shard of its chat's turns
        k = EPISODES.shard_of(c, 4)
        assert await redis.xlen(EPISODES.key(settings, k)) >= 1
        assert where[c.chat_id] == {k}

    app = ingest_app(settings)
    async with running(app):
        await wait_for(
            lambda: _count_is(pool, user_id, 240), timeout=60, message="240 turns stored"
        )
        for consumer in app.state.runtime.consumers:
            await consumer.observe()
        text = generate_latest(app.state.runtime.metrics.registry).decode()
    assert await message_count(pool, user_id) == 240
    for k in range(4):  # the per-stream metrics carry a bounded shard label
        assert f'engram_consumer_lag{{shard="{k}",stream="turns"}} 0.0' in text
    closed = await pool.fetchval(
        "SELECT count(*) FROM episodes WHERE user_id = $1 AND closed_by = 'event'", user_id
    )
    assert closed == 3


async def test_a_producer_waiting_for_a_replica_that_is_not_there_is_told(
    make_settings: Any, redis: Any
) -> None:
    settings = make_settings(stream_wait_replicas=1, stream_wait_timeout_ms=50)
    event = ExtractRequested(episode_id=uuid.uuid4(), user_id="u")
    with pytest.raises(InfrastructureError, match="0 of 1 replica"):
        await Publisher(redis, settings).publish("extract", [event])
    # the entry is in the stream all the same: a retry publishes it again, consumers
    # drop the repeat by its event id
    assert await redis.xlen(settings.stream("extract")) == 1


async def _count_is(pool: asyncpg.Pool, user_id: str, n: int) -> bool:
    return await message_count(pool, user_id) == n
