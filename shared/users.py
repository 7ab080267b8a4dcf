"""The one writer of ``users`` rows: ensure a user exists, or record display names.

Every path that stores something for a user first makes sure the user's row
exists (API keys, memory items, facts, checkpoints, people, embedding settings,
ingested turns). They all call :func:`ensure_user`, or embed :data:`ENSURE_USER`
in one statement (the memory writer's CTE); ingest records the display names
chat platforms send with :func:`upsert_users`. Erasure (``shared/erasure.py``)
is the one path that removes a user.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from shared.db import Executor
from shared.erasure import ERASED_MESSAGE, erased_write
from shared.errors import UserErased

ENSURE_USER = "INSERT INTO users (id) VALUES ($1) ON CONFLICT (id) DO NOTHING"

UPSERT_USERS = """
INSERT INTO users (id, display_name)
SELECT * FROM unnest($1::text[], $2::text[])
ON CONFLICT (id) DO UPDATE SET display_name = EXCLUDED.display_name, updated_at = now()
WHERE EXCLUDED.display_name IS NOT NULL
  AND users.display_name IS DISTINCT FROM EXCLUDED.display_name
"""


async def ensure_user(conn: Executor, user_id: str) -> None:
    """The user's row exists after this (created if missing; nothing else changes).

    Raises :class:`UserErased` for an erased id: the database refuses its row (the
    erasure's trigger, which also orders this write with an erasure in flight)."""
    try:
        await conn.execute(ENSURE_USER, user_id)
    except asyncpg.PostgresError as exc:
        if erased_write(exc):
            raise UserErased(ERASED_MESSAGE) from exc
        raise


async def upsert_users(
    conn: Executor, user_ids: Sequence[str], display_names: Sequence[str | None]
) -> None:
    """Each user's row exists; a given display name replaces a different one (None keeps it)."""
    await conn.execute(UPSERT_USERS, list(user_ids), list(display_names))
