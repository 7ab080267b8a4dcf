"""Supersession (Ash): a new memory replaces the old ones it conflicts with.

A conflict is an active, not yet superseded memory of the same user, in the
same scope (personal, or the same chat), about exactly the same subjects, with
cosine similarity >= 0.75 to the new one. Memories with different subjects are
never conflicts. Superseded memories are kept (``superseded_at`` and
``superseded_by`` set) for history; default retrieval leaves them out.
Only memories whose embedding is ``ready`` can be compared.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg

from shared.db import audit

SUPERSEDE_SIMILARITY = 0.75

SUPERSEDE = """
UPDATE memory_items m
SET superseded_at = now(), superseded_by = $2, updated_at = now()
WHERE m.user_id = $1
  AND m.id <> $2
  AND m.status = 'active'
  AND m.superseded_at IS NULL
  AND m.embedding_state = 'ready'
  AND m.scope = $4
  AND m.provider IS NOT DISTINCT FROM $5
  AND m.chat_id IS NOT DISTINCT FROM $6
  AND m.subjects @> $7::uuid[] AND m.subjects <@ $7::uuid[]
  AND m.type = ANY($8::text[])
  AND 1 - (m.embedding <=> $3) >= $9
RETURNING m.id, m.content
"""


async def supersede_conflicts(
    conn: asyncpg.Connection,
    *,
    user_id: str,
    memory_id: uuid.UUID,
    vector: Sequence[float],
    subjects: Sequence[uuid.UUID],
    types: Sequence[str],
    scope: str = "personal",
    provider: str | None = None,
    chat_id: str | None = None,
    threshold: float = SUPERSEDE_SIMILARITY,
) -> list[uuid.UUID]:
    """Mark the memories ``memory_id`` (already inserted) supersedes; return their ids.

    ``vector`` is the new memory's embedding, padded to the column's dimension."""
    rows = await conn.fetch(
        SUPERSEDE, user_id, memory_id, list(vector), scope, provider, chat_id,
        list(subjects), list(types), threshold,
    )
    for r in rows:
        await audit(
            conn, user_id=user_id, action="supersede", entity="memory_item",
            entity_id=str(r["id"]), details={"superseded_by": str(memory_id)},
        )
    return [r["id"] for r in rows]
