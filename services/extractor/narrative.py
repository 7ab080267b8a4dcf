"""Navi's per-user narrative summary, rebuilt from the user's current facts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import asyncpg

from shared.memory.known import LIVE_FACT
from shared.memory.secrets import redact

MAX_FACTS = 80

CURRENT_FACTS = f"""
SELECT content, count(*) OVER () AS total FROM memory_items
WHERE user_id = $1 AND {LIVE_FACT}
ORDER BY confidence DESC NULLS LAST, coalesce(last_verified_at, created_at) DESC
LIMIT $2
"""

USER_NAME = "SELECT coalesce(display_name, id) FROM users WHERE id = $1"

UPSERT_SUMMARY = """
INSERT INTO user_summaries (user_id, summary, fact_count, updated_at)
VALUES ($1, $2, $3, now())
ON CONFLICT (user_id) DO UPDATE
SET summary = EXCLUDED.summary, fact_count = EXCLUDED.fact_count, updated_at = now()
"""

Writer = Callable[[str, Sequence[str]], Awaitable[str]]


async def regenerate_user_summary(pool: asyncpg.Pool, user_id: str, write: Writer) -> str:
    """Rebuild and store the user's narrative from their current facts; return it.

    ``write(user_name, facts)`` turns the fact lines into prose (a model, or the
    offline template). The model call happens outside any transaction."""
    async with pool.acquire() as conn:
        name = await conn.fetchval(USER_NAME, user_id) or user_id
        rows = await conn.fetch(CURRENT_FACTS, user_id, MAX_FACTS)
    facts = [r["content"] for r in rows]
    text = redact(await write(name, facts))
    async with pool.acquire() as conn:
        # every fact counts, not only the MAX_FACTS the narrative is written from
        await conn.execute(UPSERT_SUMMARY, user_id, text, rows[0]["total"] if rows else 0)
    return text
