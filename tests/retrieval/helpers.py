"""Rows as ingest and the embedder leave them: a user, an episode, turns with vectors."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import numpy as np


@dataclass(frozen=True)
class T:
    """One turn to store: text, optional vector (None = still pending), who said it."""

    content: str
    vector: Sequence[float] | None = None
    speaker: str = "Ann"
    role: str = "user"
    chat_id: str = "chat-1"
    at: datetime | None = None


async def add_turns(
    pool: asyncpg.Pool, user_id: str, turns: Sequence[T], *, episode: uuid.UUID | None = None
) -> tuple[uuid.UUID, list[int]]:
    """Store ``turns`` in one episode (new unless given); return it and the message ids."""
    episode = episode or uuid.uuid4()
    base = datetime(2024, 5, 1, 12, tzinfo=UTC)
    ids = []
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING", user_id)
        await conn.execute(
            "INSERT INTO episodes (id, user_id, provider, chat_id, started_at, last_active_at) "
            "VALUES ($1, $2, 'test', $3, $4, $4) ON CONFLICT DO NOTHING",
            episode,
            user_id,
            turns[0].chat_id,
            base,
        )
        for n, t in enumerate(turns):
            ready = t.vector is not None
            ids.append(
                await conn.fetchval(
                    "INSERT INTO messages (event_id, user_id, episode_id, provider, chat_id, role, "
                    "display_name, content, external_id, occurred_at, embedding, embedding_state) "
                    "VALUES ($1, $2, $3, 'test', $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id",
                    uuid.uuid4(),
                    user_id,
                    episode,
                    t.chat_id,
                    t.role,
                    t.speaker,
                    t.content,
                    f"m-{uuid.uuid4().hex[:8]}",
                    t.at or base + timedelta(seconds=n),
                    np.asarray(t.vector, dtype=np.float32) if ready else None,
                    "ready" if ready else "pending",
                )
            )
    return episode, ids


# A user's BM25 postings (migration 0180) as the triggers keep them, and as they are
# from the stored turns and passages, computed here without the migration's functions:
# every distinct word of each document (a turn's words or a passage's, and its
# speaker's name), how often it occurs there and the document's length.
POSTINGS = """
SELECT lexeme, message_id, part, tf, dl, by_name, in_text
FROM message_postings WHERE user_id = $1
"""
POSTINGS_FROM_SCRATCH = """
SELECT x.lexeme, d.message_id, d.part, coalesce(cardinality(x.positions), 1) AS tf,
       length(d.own || d.name) AS dl, x.lexeme = ANY(tsvector_to_array(d.name)) AS by_name,
       x.lexeme = ANY(tsvector_to_array(d.own)) AS in_text
FROM (SELECT m.id AS message_id, -1 AS part, m.fts AS own,
             to_tsvector('english', coalesce(m.display_name, '')) AS name
      FROM messages m WHERE m.user_id = $1
      UNION ALL
      SELECT p.message_id, p.idx, p.fts, to_tsvector('english', coalesce(m.display_name, ''))
      FROM message_passages p JOIN messages m ON m.id = p.message_id
      WHERE p.user_id = $1) AS d,
     unnest(d.own || d.name) AS x
"""


async def postings(
    pool: asyncpg.Pool, user_id: str, *, from_scratch: bool = False
) -> set[tuple[Any, ...]]:
    """The user's postings, kept (default) or computed from the stored rows."""
    sql = POSTINGS_FROM_SCRATCH if from_scratch else POSTINGS
    return {tuple(r) for r in await pool.fetch(sql, user_id)}


async def learn(
    pool: asyncpg.Pool, user_id: str, turn: int, text: str, vector: Sequence[float]
) -> uuid.UUID:
    """A fact learned from ``turn``, stored as the extractor stores one (the one writer)."""
    from shared.memory.writer import NewItem, insert_items

    async with pool.acquire() as conn:
        written = await insert_items(
            conn,
            user_id,
            [
                NewItem(
                    type="fact",
                    content=text,
                    source="extraction",
                    source_message_id=turn,
                    vector=list(vector),
                    embedded_by=("local", "test-model"),
                )
            ],
            actor="extractor",
        )
    return written.items[0].id
