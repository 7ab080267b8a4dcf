from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import asyncpg
import pytest
from pydantic import SecretStr

from services.embedder.settings import EmbedderSettings
from shared.memory.writer import NewItem, insert_items
from tests.embedder.scripted import ScriptedServer


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    s = ScriptedServer().start()
    yield s
    s.stop()


@pytest.fixture
def esettings(make_settings: Callable[..., Any]) -> EmbedderSettings:
    """No system provider (users' endpoints apply), quick retries and timeouts."""
    s: EmbedderSettings = make_settings(
        EmbedderSettings,
        embedding_provider="none",
        secret_key=SecretStr("test-secret"),
        embedding_retries=2,
        embedding_backoff_s=0.01,
        embedding_timeout_s=1.0,
        embed_retry_backoff_s=0.2,
        embed_batch_size=4,
    )
    return s


async def add_user(pool: asyncpg.Pool, user_id: str) -> None:
    await pool.execute("INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING", user_id)


async def add_episode(pool: asyncpg.Pool, user_id: str, summary: str | None = None) -> uuid.UUID:
    await add_user(pool, user_id)
    eid = uuid.uuid4()
    await pool.execute(
        """
        INSERT INTO episodes (id, user_id, provider, chat_id, started_at, last_active_at,
                              summary_text, embedding_state)
        VALUES ($1, $2, 'test', 'chat', now(), now(), $3,
                CASE WHEN $3::text IS NULL THEN NULL ELSE 'pending' END)
        """,
        eid,
        user_id,
        summary,
    )
    return eid


async def add_messages(
    pool: asyncpg.Pool,
    user_id: str,
    texts: list[str],
    *,
    role: str = "user",
    episode_id: uuid.UUID | None = None,
) -> list[int]:
    episode = episode_id or await add_episode(pool, user_id)
    rows = await pool.fetch(
        """
        INSERT INTO messages (event_id, user_id, episode_id, provider, chat_id, role, content,
                              occurred_at)
        SELECT gen_random_uuid(), $1, $2, 'test', 'chat', $3, c, now()
        FROM unnest($4::text[]) WITH ORDINALITY AS t(c, n) ORDER BY n
        RETURNING id
        """,
        user_id,
        episode,
        role,
        texts,
    )
    return [r["id"] for r in rows]


async def add_memories(
    pool: asyncpg.Pool, user_id: str, texts: list[str], *, status: str = "active"
) -> list[uuid.UUID]:
    await add_user(pool, user_id)
    async with pool.acquire() as conn:
        items = [NewItem(type="fact", content=c) for c in texts]
        written = await insert_items(conn, user_id, items, actor="test")
    ids = [w.id for w in written.items]
    if status != "active":
        await pool.execute(
            "UPDATE memory_items SET status = $2 WHERE id = ANY($1::uuid[])", ids, status
        )
    return ids
