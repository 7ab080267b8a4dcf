"""Consolidation's per-user state: ask for a run, read how the last one went.

The run itself is the extractor's (``services/extractor/consolidation.py``); the
query service's ``POST /v1/memory/consolidate`` only asks for one here, and the
extractor's next tick serves asked-for users first.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

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


class Consolidation(BaseModel):
    """A user's consolidation state: asked for, last started, last finished, its stats."""

    user_id: str
    requested_at: str | None = Field(description="a run asked for and not yet started")
    started_at: str | None
    finished_at: str | None
    stats: dict[str, Any] = Field(
        description="the last run's: memories, clusters, created, refined, archived, "
        "over_cap, model_fallbacks, profile, seconds"
    )

    @classmethod
    def of(cls, user_id: str, row: dict[str, Any] | None) -> Consolidation:
        """The state of a row of :func:`request` or :func:`state` (None: never asked)."""
        row = row or {}
        return cls(
            user_id=user_id,
            requested_at=_iso(row.get("requested_at")),
            started_at=_iso(row.get("started_at")),
            finished_at=_iso(row.get("finished_at")),
            stats=dict(row.get("stats") or {}),
        )


def _iso(at: Any) -> str | None:
    return at.isoformat() if at is not None else None


async def request(conn: Executor, user_id: str) -> dict[str, Any] | None:
    """Ask for a consolidation run of ``user_id``; its state, or None for a user
    engram does not know (nothing to consolidate)."""
    row = await conn.fetchrow(ENSURE_STATE, user_id)
    return dict(row) if row is not None else None


async def state(conn: Executor, user_id: str) -> dict[str, Any] | None:
    """How the user's last consolidation run went (None: never asked, never run)."""
    row = await conn.fetchrow(STATE, user_id)
    return dict(row) if row is not None else None
