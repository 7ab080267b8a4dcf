"""Right to erasure: delete a user and everything stored for them.

``users`` cascades to every table with a foreign key to it (episodes, messages,
memories and their vectors, themes, people, summaries, checkpoints, embedding
settings, API keys). Tables that keep a ``user_id`` without a foreign key (the
audit log, and any later table that forgets the cascade) are swept by name from
the catalog, in the same transaction. The erasure itself is audited without
the user's id: only a truncated hash, so the log can prove it happened.
"""

from __future__ import annotations

import hashlib
from typing import Any

import asyncpg

from shared.db import audit
from shared.errors import NotFound

USER_TABLES = """
SELECT format('DELETE FROM %I.%I WHERE user_id = $1', c.table_schema, c.table_name) AS stmt,
       c.table_name
FROM information_schema.columns c
JOIN information_schema.tables t
  ON t.table_schema = c.table_schema AND t.table_name = c.table_name
WHERE c.column_name = 'user_id' AND t.table_type = 'BASE TABLE'
  AND c.table_schema = current_schema() AND c.table_name <> 'users'
ORDER BY c.table_name
"""

DELETE_USER = "DELETE FROM users WHERE id = $1 RETURNING id"


def user_hash(user_id: str) -> str:
    return hashlib.sha256(user_id.encode()).hexdigest()[:16]


async def erase_user(pool: asyncpg.Pool, *, user_id: str, actor: str) -> dict[str, Any]:
    """Delete the user and every row of theirs; NotFound if there is no such user."""
    counts: dict[str, int] = {}
    async with pool.acquire() as conn, conn.transaction():
        exists = await conn.fetchval("SELECT 1 FROM users WHERE id = $1 FOR UPDATE", user_id)
        if exists is None:
            raise NotFound(f"no user {user_id!r}")
        for r in await conn.fetch(USER_TABLES):
            status = await conn.execute(r["stmt"], user_id)
            n = int(status.split()[-1])
            if n:
                counts[r["table_name"]] = n
        await conn.fetchrow(DELETE_USER, user_id)
        await audit(
            conn,
            user_id=None,
            actor=actor,
            action="delete",
            entity="user",
            entity_id=None,
            details={"user_hash": user_hash(user_id), "rows": counts},
        )
    return {"erased": True, "rows": counts}
