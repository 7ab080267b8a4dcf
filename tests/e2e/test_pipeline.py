"""The whole pipeline, as a user would drive it: publish a conversation, close it,
then read what engram learned through the query API.

ingest → embedder (real local model) → extractor (offline) → query, all on real
PostgreSQL and Redis, each service with its own consumers and lifespan.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg
import pytest

from services.embedder.app import create_app as embedder_app
from services.embedder.settings import EmbedderSettings
from services.extractor.app import create_app as extractor_app
from services.extractor.settings import ExtractorSettings
from services.ingest.app import create_app as ingest_app
from services.ingest.settings import IngestSettings
from services.query.app import create_app as query_app
from services.query.settings import QuerySettings
from shared.apikeys import create_key
from shared.events import EpisodeClosed
from shared.streams import Publisher
from tests.extractor.helpers import turns
from tests.support import running, wait_for

CONVERSATION = [
    ("user", "Hi! What's the weather in Silver Spring, MD today?"),
    ("assistant", "It is 22 degrees and sunny in Silver Spring."),
    ("user", "Great. I prefer Celsius, by the way. My wife Sarah loves Italian food."),
    ("assistant", "Noted! Anything else?"),
    ("user", "Remember that I have a dentist appointment tomorrow."),
    ("assistant", "Got it, I will remind you."),
]


async def _all_ready(pool: asyncpg.Pool, user_id: str) -> bool:
    row = await pool.fetchrow(
        """
        SELECT (SELECT count(*) FROM messages WHERE user_id = $1) AS messages,
               (SELECT count(*) FROM messages
                 WHERE user_id = $1 AND embedding_state = 'ready') AS messages_ready,
               (SELECT count(*) FROM episodes
                 WHERE user_id = $1 AND embedding_state = 'ready') AS episodes_ready,
               (SELECT count(*) FROM memory_items WHERE user_id = $1) AS memories,
               (SELECT count(*) FROM memory_items
                 WHERE user_id = $1 AND embedding_state = 'ready') AS memories_ready
        """,
        user_id,
    )
    assert row is not None
    return (
        row["messages"] == len(CONVERSATION) == row["messages_ready"]
        and row["episodes_ready"] == 1
        and row["memories"] > 0
        and row["memories"] == row["memories_ready"]
    )


@pytest.mark.slow
async def test_a_conversation_becomes_searchable_memory_through_the_api(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, redis: Any, user_id: str
) -> None:
    ingest = make_settings(IngestSettings)
    prefix = {"stream_prefix": ingest.stream_prefix}
    embedder = make_settings(EmbedderSettings, **prefix)
    extractor = make_settings(ExtractorSettings, **prefix, sweep_interval_s=3600)
    query = make_settings(QuerySettings, **prefix)
    publisher = Publisher(redis, ingest)
    _, secret = await create_key(pool, user_id=user_id)
    _, other_secret = await create_key(pool, user_id=f"{user_id}-other")
    me = {"Authorization": f"Bearer {secret}"}
    other = {"Authorization": f"Bearer {other_secret}"}

    async with (
        running(ingest_app(ingest)),
        running(embedder_app(embedder)),
        running(extractor_app(extractor)),
        running(query_app(query)) as api,
    ):
        await publisher.publish("turns", turns(user_id, CONVERSATION))
        await wait_for(
            lambda: _count(
                pool, "SELECT count(*) FROM messages WHERE user_id = $1", user_id, len(CONVERSATION)
            ),
            message="turns stored",
        )
        await publisher.publish(
            "episodes", [EpisodeClosed(user_id=user_id, provider="test", chat_id="c1")]
        )
        await wait_for(
            lambda: _all_ready(pool, user_id),
            timeout=120,
            interval=0.2,
            message="messages, summary and facts embedded",
        )

        found = (
            await api.post("/v1/episodes/search", headers=me, json={"query": "weather forecast"})
        ).json()
        assert found["mode"] == "hybrid"
        first = found["episodes"][0]
        assert first["line"].startswith("[Tim] ") and "Silver Spring" in first["line"]

        episode = (await api.get(f"/v1/episodes/{first['episode_id']}", headers=me)).json()
        assert [t["content"] for t in episode["turns"]] == [c for _, c in CONVERSATION]
        assert set(episode["summary"]) >= {"title", "summary", "key_points", "outcome", "topics"}

        hits = (
            await api.post(
                "/v1/memory/search",
                headers=me,
                json={
                    "query": "which temperature unit should I use?",
                    "types": ["preference", "fact"],
                },
            )
        ).json()
        assert any("Celsius" in r["content_snippet"] for r in hits["results"][:3]), hits

        people = (await api.get("/v1/people", headers=me)).json()
        assert any(p["name"] == "Sarah" and p["relation"] == "wife" for p in people["people"]), (
            people
        )

        # Another user's key finds none of it.
        assert (
            await api.post("/v1/episodes/search", headers=other, json={"query": "weather"})
        ).json()["episodes"] == []
        assert (
            await api.post("/v1/memory/search", headers=other, json={"query": "Celsius"})
        ).json()["results"] == []
        assert (
            await api.get(f"/v1/episodes/{first['episode_id']}", headers=other)
        ).status_code == 404


async def _count(pool: asyncpg.Pool, sql: str, user_id: str, n: int) -> bool:
    return await pool.fetchval(sql, user_id) == n
