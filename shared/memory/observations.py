"""Consolidation's per-user state: ask for a run, read how the last one went.

The run itself is the extractor's (``services/extractor/consolidation.py``); the
query service's ``POST /v1/memory/consolidate`` only asks for one here, and the
extractor's next tick serves asked-for users first.
"""

from __future__ import annotations

from typing import Any

from shared.db import Executor

ENSURE_STATE = """
INSERT INTO consolidation_state (user_id, requested_at)
SELECT id, now() FROM users WHERE id = $1
ON CONFLICT (user_id) DO UPDATE SET requested_at = now()
RETURNING user_id, requested_at, started_at, finished_at, stats
"""

STATE = """
SELECT user_id, requested_at, started_at, finished_at, stats
FROM consolidation_state WHERE user_id = $1
"""


async def request(conn: Executor, user_id: str) -> dict[str, Any] | None:
    """Ask for a consolidation run of ``user_id``; its state, or None for a user
    engram does not know (nothing to consolidate)."""
    row = await conn.fetchrow(ENSURE_STATE, user_id)
    return dict(row) if row is not None else None


async def state(conn: Executor, user_id: str) -> dict[str, Any] | None:
    """How the user's last consolidation run went (None: never asked, never run)."""
    row = await conn.fetchrow(STATE, user_id)
    return dict(row) if row is not None else None
