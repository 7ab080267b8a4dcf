"""Shared pieces of the extractor tests."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from shared.events import TurnReceived

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
NEVER_STALE = 60.0 * 24 * 365 * 100
"""A stale window (minutes) no test's episode reaches: the extractor's sweep runs once
at start over the whole test database, and must leave other tests' episodes alone."""


def turns(
    user_id: str,
    lines: list[tuple[str, str]],
    *,
    chat_id: str = "c1",
    start: datetime = T0,
    episode_id: uuid.UUID | None = None,
    name: str = "Tim",
    **extra: Any,
) -> list[TurnReceived]:
    out = []
    for i, (role, content) in enumerate(lines):
        out.append(
            TurnReceived(
                user_id=user_id,
                display_name=name if role == "user" else None,
                provider="test",
                chat_id=chat_id,
                episode_id=episode_id,
                role=role,  # type: ignore[arg-type]
                content=content,
                occurred_at=start + timedelta(seconds=30 * i),
                **extra,
            )
        )
    return out


async def facts_of(pool: asyncpg.Pool, user_id: str) -> list[asyncpg.Record]:
    return await pool.fetch(
        """SELECT id, type, category, content, subjects, source, source_context, confidence,
                  episode_id, superseded_at, superseded_by, last_verified_at, embedding_state,
                  data
           FROM memory_items WHERE user_id = $1 AND type IN ('fact', 'preference')
           ORDER BY created_at""",
        user_id,
    )


async def episodes_of(pool: asyncpg.Pool, user_id: str) -> list[asyncpg.Record]:
    return await pool.fetch(
        """SELECT id, status, summary, summary_text, extracted_at, extraction_error,
                  embedding_state, turn_count, extracted_turn_count, last_active_at
           FROM episodes WHERE user_id = $1 ORDER BY started_at""",
        user_id,
    )


async def stream_events(redis: Any, key: str) -> list[dict[str, Any]]:
    import json

    return [json.loads(fields[b"event"]) for _, fields in await redis.xrange(key)]
