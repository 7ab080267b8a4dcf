"""The extractor's failure policy against a scripted model server over real HTTP, on
real Redis and PostgreSQL: a refusal (HTTP 401) is dead-lettered after exactly
max_attempts deliveries with the real reason; an outage (HTTP 503) never is: the
episode is summarised offline at once and asked of the model again later."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import asyncpg

from services.extractor.app import create_app
from services.extractor.settings import ExtractorSettings
from shared.events import ExtractRequested
from shared.streams import Publisher
from tests.extractor.helpers import NEVER_STALE, T0
from tests.extractor.scripted_llm import Reply, ScriptedLLM
from tests.ingest.helpers import dead_entries
from tests.support import running, wait_for


async def _closed_episode(pool: asyncpg.Pool, user_id: str) -> uuid.UUID:
    episode_id = uuid.uuid4()
    await pool.execute("INSERT INTO users (id, display_name) VALUES ($1, 'Tim')", user_id)
    await pool.execute(
        """INSERT INTO episodes (id, user_id, provider, chat_id, status, started_at,
                                 last_active_at, closed_at, closed_by, turn_count, extract_due)
           VALUES ($1, $2, 'test', 'c1', 'closed', $3, $3, $3, 'event', 4, true)""",
        episode_id,
        user_id,
        T0,
    )
    for i in range(4):
        await pool.execute(
            """INSERT INTO messages (event_id, user_id, episode_id, provider, chat_id, role,
                                     content, occurred_at)
               VALUES ($1, $2, $3, 'test', 'c1', $4, $5, $6)""",
            uuid.uuid4(),
            user_id,
            episode_id,
            "user" if i % 2 == 0 else "assistant",
            f"line {i} about the garden",
            T0,
        )
    return episode_id


def _settings(make_settings: Callable[..., Any], llm: ScriptedLLM) -> ExtractorSettings:
    return make_settings(
        ExtractorSettings,
        llm_base_url=llm.base_url,
        llm_model="scripted-1",
        llm_max_retries=0,
        max_attempts=2,
        sweep_interval_s=3600,
        # the sweep runs once at start over the whole (shared) database: other tests'
        # idle episodes must not reach this test's model and counts
        stale_window_minutes=NEVER_STALE,
    )


async def _no_embedder(_: str) -> None:
    return None


async def test_a_refused_request_is_dead_lettered_after_exactly_max_attempts(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, redis: Any, user_id: str
) -> None:
    with ScriptedLLM(lambda body: Reply(status=401, raw='{"error": "invalid api key"}')) as llm:
        settings = _settings(make_settings, llm)
        episode_id = await _closed_episode(pool, user_id)
        async with running(create_app(settings, embedder_for=_no_embedder)):
            await Publisher(redis, settings).publish(
                "extract", [ExtractRequested(episode_id=episode_id, user_id=user_id)]
            )
            dead = await wait_for(
                lambda: dead_entries(redis, settings), timeout=30, message="dead letter"
            )
            # two more reclaim windows: nothing is delivered again
            await wait_for(lambda: _idle(redis, settings), message="acknowledged")
            await asyncio.sleep(2.5)
        deliveries = len(llm.requests)
    assert deliveries == 2  # one model call per delivery (a 401 is not retried)
    [entry] = dead
    assert entry["attempts"] == "2"
    assert "401" in entry["error"] and "invalid api key" in entry["error"]


async def test_a_model_outage_is_never_dead_lettered_the_episode_is_summarised_offline(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, redis: Any, user_id: str
) -> None:
    with ScriptedLLM(lambda body: Reply(status=503, raw='{"error": "overloaded"}')) as llm:
        settings = _settings(make_settings, llm)
        episode_id = await _closed_episode(pool, user_id)
        async with running(create_app(settings, embedder_for=_no_embedder)):
            await Publisher(redis, settings).publish(
                "extract", [ExtractRequested(episode_id=episode_id, user_id=user_id)]
            )

            async def summarised() -> bool:
                return await pool.fetchval(
                    "SELECT summary IS NOT NULL FROM episodes WHERE id = $1", episode_id
                )

            await wait_for(summarised, timeout=40, message="summarised offline")
            await wait_for(lambda: _idle(redis, settings), timeout=20, message="acknowledged")
        row = await pool.fetchrow(
            "SELECT summary, extract_due FROM episodes WHERE id = $1", episode_id
        )
    assert await dead_entries(redis, settings) == []
    assert row["summary"]["method"] == "heuristic" and "503" in row["summary"]["fallback"]
    assert row["extract_due"] is True  # the model is asked again later


async def _idle(redis: Any, settings: ExtractorSettings) -> bool:
    info = await redis.xpending(settings.stream("extract"), "extractor")
    return info["pending"] == 0
