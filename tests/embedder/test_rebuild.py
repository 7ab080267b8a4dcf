"""Rebuild-total (counts, every row incl. archived, no mixing of models) and backfill."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis

from services.embedder import service
from services.embedder.settings import EmbedderSettings
from shared.embeddings import ProviderSettingsIn, put_provider_settings
from shared.embeddings.guard import default_guards
from shared.embeddings.providers import ProviderRegistry
from shared.embeddings.rebuild import (
    count_missing,
    embed_missing,
    rebuild_count,
    rebuild_progress,
    start_rebuild,
)
from shared.errors import InvalidRequest
from shared.events import embed_adapter
from shared.streams import Publisher
from tests.embedder.conftest import add_episode, add_memories, add_messages
from tests.embedder.scripted import ScriptedServer, vector_for


@pytest.fixture
async def registry(esettings: EmbedderSettings) -> Any:
    reg = ProviderRegistry.from_settings(esettings)
    yield reg
    await reg.aclose()


async def use_model(
    pool: asyncpg.Pool,
    user_id: str,
    settings: EmbedderSettings,
    server: ScriptedServer,
    model: str,
) -> None:
    await put_provider_settings(
        pool,
        user_id,
        ProviderSettingsIn(
            provider="openai",
            endpoint_url=server.base_url("openai"),
            model=model,
        ),
        settings,
    )


async def all_rows(pool: asyncpg.Pool, user_id: str) -> list[asyncpg.Record]:
    return await pool.fetch(
        """
        SELECT 'message' AS kind, id::text, embedding_state, embedding_model, embedding
          FROM messages WHERE user_id = $1
        UNION ALL
        SELECT 'memory', id::text, embedding_state, embedding_model, embedding
          FROM memory_items WHERE user_id = $1
        UNION ALL
        SELECT 'episode', id::text, embedding_state, embedding_model, embedding
          FROM episodes WHERE user_id = $1 AND summary_text IS NOT NULL
        """,
        user_id,
    )


async def drain_stream(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    settings: EmbedderSettings,
    registry: ProviderRegistry,
) -> int:
    """Hand every EmbedRequested on the test's ``embed`` stream to the use case."""
    entries = await redis.xrange(settings.stream("embed"))
    requests = [embed_adapter.validate_json(fields[b"event"]) for _, fields in entries]
    await redis.delete(settings.stream("embed"))
    if requests:
        await service.handle_requests(
            pool, Publisher(redis, settings), requests, settings=settings, registry=registry
        )
        await default_guards().settle()  # calls out of line ended
    return sum(len(r.targets) for r in requests)


async def seed(pool: asyncpg.Pool, user_id: str) -> None:
    episode = await add_episode(pool, user_id, summary="we planned the garden")
    await add_messages(
        pool, user_id, ["plant tomatoes", "water daily", "buy a hose"], episode_id=episode
    )
    await add_memories(pool, user_id, ["likes tomatoes"])
    await add_memories(pool, user_id, ["used to live in Lyon"], status="archived")
    await add_episode(pool, user_id)  # no summary: nothing to embed


async def test_rebuild_counts_marks_and_reembeds_every_row_including_archived(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    esettings: EmbedderSettings,
    server: ScriptedServer,
    registry: ProviderRegistry,
    user_id: str,
) -> None:
    await seed(pool, user_id)
    await use_model(pool, user_id, esettings, server, "model-a")
    first = await embed_missing(pool, esettings, user_id=user_id, registry=registry)
    assert (first.total, first.ready) == (6, 6)

    count = await rebuild_count(pool, user_id)
    assert (count.messages, count.memories, count.episodes, count.total) == (3, 2, 1, 6)

    await use_model(pool, user_id, esettings, server, "model-b")
    status = await start_rebuild(pool, user_id, esettings, publisher=Publisher(redis, esettings))
    assert (status.total, status.done, status.pending, status.running) == (6, 0, 6, True)
    rows = await all_rows(pool, user_id)
    # old vectors are gone at once and the rows wait for the new model: a search,
    # which reads only ready rows, can never meet a model-a vector again
    assert {(r["embedding_state"], r["embedding_model"]) for r in rows} == {("pending", "model-b")}
    assert all(r["embedding"] is None for r in rows)

    assert await drain_stream(pool, redis, esettings, registry) == 6
    rows = await all_rows(pool, user_id)
    assert {(r["embedding_state"], r["embedding_model"]) for r in rows} == {("ready", "model-b")}
    assert {r["kind"] for r in rows} == {"message", "memory", "episode"}
    done = await rebuild_progress(pool, user_id)
    assert done is not None
    assert (done.total, done.done, done.pending, done.running) == (6, 6, 0, False)
    assert done.finished_at is not None


async def test_a_vector_from_the_old_model_cannot_land_after_a_rebuild_started(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    esettings: EmbedderSettings,
    server: ScriptedServer,
    registry: ProviderRegistry,
    user_id: str,
) -> None:
    from shared.embeddings import store

    await use_model(pool, user_id, esettings, server, "model-b")
    [mid] = await add_messages(pool, user_id, ["in flight"])
    await start_rebuild(pool, user_id, esettings, publisher=None)
    # an embedder that resolved model-a just before the rebuild tries to write now
    written = await store.write_vectors(
        pool,
        user_id,
        "message",
        provider="openai",
        model="model-a",
        ids=[mid],
        vectors=[vector_for("in flight", 384)],
        native_dims=[384],
    )
    assert written == []
    state = await pool.fetchval("SELECT embedding_state FROM messages WHERE id = $1", mid)
    assert state == "pending"


async def test_rebuild_refuses_when_the_user_has_no_provider(
    pool: asyncpg.Pool,
    esettings: EmbedderSettings,
    user_id: str,
) -> None:
    await add_messages(pool, user_id, ["x"])
    with pytest.raises(InvalidRequest, match="full-text-only"):
        await start_rebuild(pool, user_id, esettings, publisher=None)


async def test_backfill_embeds_rows_without_vectors_and_is_safe_to_run_twice(
    pool: asyncpg.Pool,
    esettings: EmbedderSettings,
    server: ScriptedServer,
    registry: ProviderRegistry,
    user_id: str,
) -> None:
    await seed(pool, user_id)
    await use_model(pool, user_id, esettings, server, "model-a")
    # one row already done, one in error: backfill does the rest and retries the error
    ids = await add_messages(pool, user_id, ["already embedded", "failed before"])
    await pool.execute(
        "UPDATE messages SET embedding_state = 'ready', embedding = $2, embedded_at = now() "
        "WHERE id = $1",
        ids[0],
        [0.5] * 384,
    )
    await pool.execute(
        "UPDATE messages SET embedding_state = 'error', embedding_error = 'boom' WHERE id = $1",
        ids[1],
    )
    assert await count_missing(pool, user_id=user_id) == 7
    seen: list[int] = []
    first = await embed_missing(
        pool, esettings, user_id=user_id, batch=2, registry=registry, on_progress=seen.append
    )
    assert (first.total, first.ready, first.errors) == (7, 7, 0)
    assert sum(seen) == 7 and max(seen) <= 2
    before = {r["id"]: r["embedding"].to_list() for r in await all_rows(pool, user_id)}
    calls = len(server.requests)

    second = await embed_missing(pool, esettings, user_id=user_id, batch=2, registry=registry)
    assert (second.total, second.ready) == (0, 0)
    assert len(server.requests) == calls
    after = {r["id"]: r["embedding"].to_list() for r in await all_rows(pool, user_id)}
    assert before == after
    kept = await pool.fetchval("SELECT embedding FROM messages WHERE id = $1", ids[0])
    assert kept.to_list() == [0.5] * 384


async def test_memory_items_that_become_ready_are_announced(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    esettings: EmbedderSettings,
    server: ScriptedServer,
    registry: ProviderRegistry,
    user_id: str,
) -> None:
    from shared.events import EmbedRequested, EmbedTarget, memory_adapter

    await use_model(pool, user_id, esettings, server, "model-a")
    [mid] = await add_memories(pool, user_id, ["prefers tea"])
    event = EmbedRequested(user_id=user_id, targets=[EmbedTarget(kind="memory", id=str(mid))])
    publisher = Publisher(redis, esettings)
    for _ in range(2):  # a redelivery announces nothing new
        await service.handle_requests(
            pool, publisher, [event], settings=esettings, registry=registry
        )
        await default_guards().settle()  # calls out of line ended
    entries = await redis.xrange(esettings.stream("memories"))
    changes = [memory_adapter.validate_json(f[b"event"]) for _, f in entries]
    assert [(c.memory_id, c.user_id, c.change) for c in changes] == [(mid, user_id, "embedded")]
