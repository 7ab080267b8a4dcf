"""Supersession: a newer memory that says the same thing replaces the older one.

Two memories conflict when they have the same owner, the same scope (personal,
or the same chat), exactly the same subjects, and cosine similarity ≥ 0.75
between vectors of the same embedding model. The older one gets
``superseded_at`` and ``superseded_by`` (the newer one's id) and leaves default
retrieval; it stays in the table for history. Different subjects never conflict.

The check needs the memory's vector. Call :func:`check_supersession` when the
vector is ready: right after storing when it was embedded inline, or when the
embedder reports ``MemoryChanged(change="embedded")``. It is idempotent and also
handles the out-of-order case (the newer memory was embedded first): the older
one is then superseded when its own vector arrives.
"""

from __future__ import annotations

import uuid

from shared.db import Conn, audit

AUDIT_ENTITY = "memory"
"""The audit log's ``entity`` for every change to a ``memory_items`` row (the one name)."""

THRESHOLD = 0.75

LOAD = """
SELECT id, user_id, scope, provider, chat_id, subjects, created_at, embedding_model,
       embedding_state, status, superseded_at
FROM memory_items WHERE id = $1
"""

# Live memories that conflict with $1: same owner, scope, chat and subject set,
# same embedding model, similar enough. ``newer`` says on which side of $1 they are.
CONFLICTS = """
WITH m AS (SELECT * FROM memory_items WHERE id = $1)
SELECT o.id, (o.created_at, o.id) > (m.created_at, m.id) AS newer,
       1 - (o.embedding <=> m.embedding) AS similarity
FROM memory_items o, m
WHERE o.user_id = m.user_id
  AND o.id <> m.id
  AND o.scope = m.scope
  AND o.provider IS NOT DISTINCT FROM m.provider
  AND o.chat_id IS NOT DISTINCT FROM m.chat_id
  AND o.subjects @> m.subjects AND o.subjects <@ m.subjects
  AND o.status = 'active'
  AND o.superseded_at IS NULL
  AND o.embedding_state = 'ready'
  AND o.embedding_model IS NOT DISTINCT FROM m.embedding_model
  AND 1 - (o.embedding <=> m.embedding) >= $2
ORDER BY o.created_at DESC, o.id DESC
"""

MARK = """
UPDATE memory_items
SET superseded_at = now(), superseded_by = $3, updated_at = now()
WHERE user_id = $1 AND id = ANY($2::uuid[]) AND superseded_at IS NULL
RETURNING id
"""

LOCK = "SELECT pg_advisory_xact_lock(hashtext('engram.supersede:' || $1))"


async def check_supersession(
    conn: Conn,
    memory_id: uuid.UUID,
    *,
    threshold: float = THRESHOLD,
    actor: str = "system",
) -> list[uuid.UUID]:
    """Mark the memories that ``memory_id`` conflicts with; return the ids marked superseded.

    Older conflicting memories are superseded by ``memory_id``. If a newer live
    memory already conflicts with it (it was embedded later than its successor),
    ``memory_id`` itself is superseded by the newest such memory. A memory that
    is missing, not active, already superseded or not yet embedded changes
    nothing (returns ``[]``); call again when its vector is ready. Runs in a
    transaction of its own (a savepoint inside the caller's).
    """
    async with conn.transaction():
        row = await conn.fetchrow(LOAD, memory_id)
        if row is None:
            return []
        user_id: str = row["user_id"]
        await conn.execute(LOCK, user_id)
        row = await conn.fetchrow(LOAD, memory_id)  # re-read under the lock
        if (
            row is None
            or row["status"] != "active"
            or row["superseded_at"] is not None
            or row["embedding_state"] != "ready"
        ):
            return []
        conflicts = await conn.fetch(CONFLICTS, memory_id, threshold)
        newer = [r for r in conflicts if r["newer"]]
        if newer:
            successor: uuid.UUID = newer[0]["id"]
            marked = await conn.fetch(MARK, user_id, [memory_id], successor)
            winner, sims = successor, {memory_id: float(newer[0]["similarity"])}
        else:
            older = [r["id"] for r in conflicts]
            marked = await conn.fetch(MARK, user_id, older, memory_id) if older else []
            winner, sims = memory_id, {r["id"]: float(r["similarity"]) for r in conflicts}
        ids = [r["id"] for r in marked]
        for old in ids:
            await audit(
                conn,
                user_id=user_id,
                actor=actor,
                action="supersede",
                entity=AUDIT_ENTITY,
                entity_id=str(old),
                details={"superseded_by": str(winner), "similarity": round(sims.get(old, 0.0), 4)},
            )
        return ids
