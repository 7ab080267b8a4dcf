"""Navi's per-user narrative summary (the standing profile), rebuilt from what is known.

Its lines are the user's observations (consolidation's, most evidence first),
then their current facts that no active observation holds (most confident,
most recently verified first), at most :data:`MAX_FACTS` in all; ``fact_count``
counts every live fact (``shared.memory.known``). A rebuild that changes the
text writes an audit line ``update`` (entity ``profile``) holding the text it
replaced.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import asyncpg

from shared.db import audit
from shared.memory.known import LIVE_FACT
from shared.memory.secrets import redact

MAX_FACTS = 80
AUDIT_ENTITY = "profile"

HELD = """EXISTS (SELECT 1 FROM observation_evidence e JOIN memory_items o
                  ON o.id = e.observation_id AND o.status = 'active' AND o.superseded_at IS NULL
                  WHERE e.memory_id = m.id)"""

CURRENT_FACTS = f"""
SELECT content FROM (
    SELECT content, 0 AS tier, coalesce((data->'evidence'->>'count')::int, 0) AS weight,
           confidence, coalesce(last_verified_at, created_at) AS at
    FROM memory_items
    WHERE user_id = $1 AND type = 'observation' AND status = 'active' AND superseded_at IS NULL
      AND (expires_at IS NULL OR expires_at > now())
    UNION ALL
    SELECT content, 1, 0, confidence, coalesce(last_verified_at, created_at)
    FROM memory_items m
    WHERE user_id = $1 AND {LIVE_FACT} AND NOT {HELD}
) lines
ORDER BY tier, weight DESC, confidence DESC NULLS LAST, at DESC
LIMIT $2
"""

FACT_COUNT = f"SELECT count(*) FROM memory_items WHERE user_id = $1 AND {LIVE_FACT}"

USER_NAME = "SELECT coalesce(display_name, id) FROM users WHERE id = $1"

UPSERT_SUMMARY = """
WITH old AS (SELECT summary FROM user_summaries WHERE user_id = $1)
INSERT INTO user_summaries (user_id, summary, fact_count, updated_at)
VALUES ($1, $2, $3, now())
ON CONFLICT (user_id) DO UPDATE
SET summary = EXCLUDED.summary, fact_count = EXCLUDED.fact_count, updated_at = now()
RETURNING (SELECT summary FROM old) AS previous
"""

Writer = Callable[[str, Sequence[str]], Awaitable[str]]


async def regenerate_user_summary(
    pool: asyncpg.Pool, user_id: str, write: Writer, *, actor: str = "extractor"
) -> str:
    """Rebuild and store the user's narrative (the module doc's lines); return it.

    ``write(user_name, lines)`` turns the lines into prose (a model, or the
    offline template). The model call happens outside any transaction."""
    async with pool.acquire() as conn:
        name = await conn.fetchval(USER_NAME, user_id) or user_id
        rows = await conn.fetch(CURRENT_FACTS, user_id, MAX_FACTS)
        count = await conn.fetchval(FACT_COUNT, user_id)
    lines = [r["content"] for r in rows]
    text = redact(await write(name, lines))
    async with pool.acquire() as conn, conn.transaction():
        previous = await conn.fetchval(UPSERT_SUMMARY, user_id, text, count)
        if previous != text:
            await audit(
                conn,
                user_id=user_id,
                actor=actor,
                action="create" if previous is None else "update",
                entity=AUDIT_ENTITY,
                entity_id=user_id,
                details={"previous": previous, "lines": len(lines)},
            )
    return text
