from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import redis.asyncio as aioredis

from shared.events import TurnReceived
from shared.settings import CommonSettings

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def turn(user_id: str, i: int, **kw: Any) -> TurnReceived:
    values: dict[str, Any] = {
        "user_id": user_id,
        "display_name": "Tester",
        "provider": "test",
        "chat_id": "chat-1",
        "role": "user" if i % 2 == 0 else "assistant",
        "content": f"turn number {i}",
        "occurred_at": T0 + timedelta(seconds=i),
    }
    values.update(kw)
    return TurnReceived(**values)


async def message_count(pool: asyncpg.Pool, user_id: str) -> int:
    return int(await pool.fetchval("SELECT count(*) FROM messages WHERE user_id = $1", user_id))


async def dead_entries(redis: aioredis.Redis, settings: CommonSettings) -> list[dict[str, str]]:
    rows = await redis.xrange(settings.stream("dead"))
    return [{k.decode(): v.decode(errors="replace") for k, v in f.items()} for _, f in rows]
