"""Episodes (Nous): the acting user's list, and one episode with its turns. Plain use cases.

Every statement is scoped by ``user_id``: another user's episode is ``NotFound``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from shared.errors import NotFound

EPISODE = """
SELECT e.id, e.user_id, coalesce(e.display_name, u.display_name, e.user_id) AS display_name,
       e.provider, e.chat_id, e.status, e.started_at, e.last_active_at, e.closed_at,
       e.turn_count, e.summary, e.extracted_at, e.extraction_error, e.embedding_state
FROM episodes e JOIN users u ON u.id = e.user_id
WHERE e.id = $1 AND e.user_id = $2
"""

EPISODE_TURNS = """
SELECT id, role, coalesce(display_name, role) AS speaker, content, tool_name, occurred_at
FROM messages WHERE episode_id = $1 AND user_id = $2
ORDER BY occurred_at, id
LIMIT $3
"""

RECENT = """
SELECT e.id, e.provider, e.chat_id, e.status, e.started_at, e.last_active_at, e.turn_count,
       e.summary ->> 'title' AS title
FROM episodes e
WHERE e.user_id = $1 AND ($2::text IS NULL OR e.status = $2)
ORDER BY e.last_active_at DESC, e.id
LIMIT $3 OFFSET $4
"""


@dataclass(frozen=True)
class EpisodeRow:
    id: uuid.UUID
    provider: str
    chat_id: str
    status: str
    started_at: datetime
    last_active_at: datetime
    turn_count: int
    title: str | None


@dataclass(frozen=True)
class EpisodePage:
    episodes: list[EpisodeRow]
    limit: int
    offset: int


@dataclass(frozen=True)
class Turn:
    id: int
    role: str
    speaker: str
    content: str
    tool_name: str | None
    occurred_at: datetime


@dataclass(frozen=True)
class Episode:
    id: uuid.UUID
    user_id: str
    display_name: str
    provider: str
    chat_id: str
    status: str
    started_at: datetime
    last_active_at: datetime
    closed_at: datetime | None
    turn_count: int
    summary: Any
    """The structured summary (Nous), as the extractor stored it; None before."""
    extracted_at: datetime | None
    extraction_error: str | None
    embedding_state: str | None
    turns: list[Turn]


async def list_episodes(
    pool: asyncpg.Pool, *, user_id: str, status: str | None, limit: int, offset: int
) -> EpisodePage:
    """The user's episodes (only ``open`` or ``closed`` ones if asked), newest first."""
    rows = await pool.fetch(RECENT, user_id, status, limit, offset)
    return EpisodePage([EpisodeRow(**r) for r in rows], limit=limit, offset=offset)


async def get_episode(
    pool: asyncpg.Pool, *, user_id: str, episode_id: uuid.UUID, turns: int
) -> Episode:
    """One episode: its structured summary and its first ``turns`` turns in order."""
    row = await pool.fetchrow(EPISODE, episode_id, user_id)
    if row is None:
        raise NotFound(f"no episode {episode_id}")
    rows = await pool.fetch(EPISODE_TURNS, episode_id, user_id, turns)
    return Episode(**row, turns=[Turn(**r) for r in rows])
