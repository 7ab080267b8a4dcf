"""Turns published on ``turns`` → ingest → ``embed`` → embedder → rows ready, over real
Redis and PostgreSQL, both services running in-process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr

from services.embedder.app import create_app as embedder_app
from services.embedder.settings import EmbedderSettings
from services.ingest.app import create_app as ingest_app
from services.ingest.settings import IngestSettings
from shared.embeddings import ProviderSettingsIn, put_provider_settings
from shared.events import TurnReceived
from shared.streams import Publisher
from tests.embedder.scripted import ScriptedServer
from tests.support import running, wait_for


async def ready_count(pool: asyncpg.Pool, user_id: str) -> int:
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM messages WHERE user_id = $1 AND embedding_state = 'ready'",
            user_id,
        )
    )


async def test_turns_flow_through_ingest_and_the_embedder_to_ready_rows(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    make_settings: Callable[..., Any],
    server: ScriptedServer,
    user_id: str,
) -> None:
    es: EmbedderSettings = make_settings(
        EmbedderSettings,
        embedding_provider="none",
        secret_key=SecretStr("k"),
    )
    ingest_settings: IngestSettings = make_settings(IngestSettings, stream_prefix=es.stream_prefix)
    await put_provider_settings(
        pool,
        user_id,
        ProviderSettingsIn(
            provider="ollama",
            endpoint_url=server.base_url("ollama"),
            model="nomic-embed-text",
        ),
        es,
    )
    turns = [
        TurnReceived(
            user_id=user_id, provider="test", chat_id="c1", role="user", content=f"turn {i}"
        )
        for i in range(20)
    ] + [
        TurnReceived(
            user_id=user_id,
            provider="test",
            chat_id="c1",
            role="tool",
            tool_name="weather",
            tool_args={"city": "Oslo"},
            tool_result={"temp_c": -3},
        )
    ]
    async with running(ingest_app(ingest_settings)), running(embedder_app(es)) as client:
        await Publisher(redis, es).publish("turns", turns)
        await wait_for(
            lambda: _all_ready(pool, user_id, 21), timeout=30, message="21 ready messages"
        )
        metrics = (await client.get("/metrics")).text
    assert 'engram_embed_texts_total{outcome="ready",provider="ollama"} 21.0' in metrics
    sent = [t for _, body, _ in server.requests for t in body["input"]]
    assert 'tool weather: args: {"city": "Oslo"} | result: {"temp_c": -3}' in sent


async def test_one_batch_mixing_users_embeds_each_row_with_its_owners_provider(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    make_settings: Callable[..., Any],
    server: ScriptedServer,
    user_id: str,
) -> None:
    """Ingest asks for a mixed batch's embeddings in one request with no user; the
    embedder takes each row's owner from the row and uses that owner's provider."""
    es: EmbedderSettings = make_settings(
        EmbedderSettings,
        embedding_provider="none",
        secret_key=SecretStr("k"),
    )
    ingest_settings: IngestSettings = make_settings(IngestSettings, stream_prefix=es.stream_prefix)
    other = f"{user_id}-b"
    for uid, model in ((user_id, "model-a"), (other, "model-b")):
        await pool.execute("INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING", uid)
        await put_provider_settings(
            pool,
            uid,
            ProviderSettingsIn(
                provider="ollama",
                endpoint_url=server.base_url("ollama"),
                model=model,
            ),
            es,
        )
    turns = [
        TurnReceived(
            user_id=uid, provider="test", chat_id="c1", role="user", content=f"{uid} says {i}"
        )
        for i in range(5)
        for uid in (user_id, other)
    ]
    async with running(ingest_app(ingest_settings)), running(embedder_app(es)):
        await Publisher(redis, es).publish("turns", turns)
        for uid in (user_id, other):
            await wait_for(lambda uid=uid: _all_ready(pool, uid, 5), message=f"{uid} ready")
    models = {
        r["user_id"]: r["models"]
        for r in await pool.fetch(
            """SELECT user_id, array_agg(DISTINCT embedding_model) AS models FROM messages
           WHERE user_id = ANY($1::text[]) GROUP BY user_id""",
            [user_id, other],
        )
    }
    assert models == {user_id: ["model-a"], other: ["model-b"]}


async def _all_ready(pool: asyncpg.Pool, user_id: str, n: int) -> bool:
    return await ready_count(pool, user_id) == n


@pytest.mark.slow
async def test_end_to_end_with_the_local_model_and_search_through_pgvector(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    make_settings: Callable[..., Any],
    user_id: str,
) -> None:
    es: EmbedderSettings = make_settings(EmbedderSettings)  # system provider: local
    ingest_settings: IngestSettings = make_settings(IngestSettings, stream_prefix=es.stream_prefix)
    texts = [
        "My daughter's birthday party is on Saturday.",
        "The quarterly tax filing deadline moved to April.",
        "I replaced the brake pads on my bicycle.",
    ]
    async with running(ingest_app(ingest_settings)), running(embedder_app(es)):
        await Publisher(redis, es).publish(
            "turns",
            [
                TurnReceived(user_id=user_id, provider="test", chat_id="c", role="user", content=t)
                for t in texts
            ],
        )
        await wait_for(
            lambda: _all_ready(pool, user_id, 3), timeout=120, message="3 ready messages"
        )
    from shared.embeddings import fit_to_column, resolve_embedder

    embedder = await resolve_embedder(pool, user_id, es)
    assert embedder is not None
    [q] = await embedder.embed(["We are celebrating my girl's birthday this weekend."])
    rows = await pool.fetch(
        """
        SELECT content, embedding <=> $2 AS distance, embedding_provider, embedding_model,
               embedding_dims
        FROM messages WHERE user_id = $1 AND embedding_state = 'ready'
        ORDER BY embedding <=> $2
        """,
        user_id,
        fit_to_column(q, es.embedding_dim),
    )
    assert rows[0]["content"] == texts[0]
    assert rows[0]["distance"] + 0.2 < rows[1]["distance"]
    assert (
        rows[0]["embedding_provider"],
        rows[0]["embedding_model"],
        rows[0]["embedding_dims"],
    ) == ("local", "all-MiniLM-L6-v2-int8", 384)
