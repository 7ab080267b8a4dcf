"""Reading memories for ``recall`` and context assembly: candidates, then ``fuse``.

Visibility: a user sees their own personal memories, and the shared
(chat-scoped) memories of the chat the call happens in when they own them or
are a member of that chat (they have a session there). Archived, expired and —
unless ``include_superseded`` — superseded memories are left out.

Candidates are the nearest vectors, the full-text matches and (under a spec
with ``recent_per_hit``) the newest rows, in one statement that reads each
one's cosine distance and ``ts_rank_cd``; ``fusion.fuse`` scores them under
the surface's spec: ``ASH_RECALL`` (0.7 x cosine similarity + 0.3 x
``rank / (rank + 1)``, newer first at equal score) for ``recall``,
``CONTEXT_MEMORIES`` for ``/v1/context``. Without a query vector the search is
full-text only.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from services.query.ranking.fusion import (
    ASH_RECALL,
    MIN_MESSAGE_SIMILARITY,
    Candidate,
    RankSpec,
    fuse,
    ranked,
)
from services.query.ranking.sql import hnsw_walk, memory_valid, or_tsquery
from shared.db import Executor
from shared.embeddings import vector_index
from shared.memory.membership import is_member as is_member  # its one home
from shared.memory.writer import Chat

# Parameters shared by the memory statements:
# $1 user, $2 query vector (or NULL), $3 query text, $4 chat provider, $5 chat id,
# $6 caller is a member of that chat, $7 subject person (or NULL),
# $8 include superseded, $9 candidates per signal, $10 embedding model of $2,
# $11 memory types (or NULL), $12 newest rows taken as candidates, $13 as_of (or NULL:
# what holds now; a time: what was valid then, superseded or expired since or not)
_LIVE = f"""
    AND m.status = 'active'
    AND {memory_valid("m", "$13", superseded="$8::bool")}
    AND ($7::uuid IS NULL OR $7::uuid = ANY (m.subjects))
    AND ($11::text[] IS NULL OR m.type = ANY ($11::text[]))
"""
_CHAT = """($5::text IS NOT NULL AND m.scope = 'chat' AND m.provider = $4 AND m.chat_id = $5
         AND (m.user_id = $1 OR $6::bool))"""
_VISIBLE = f"""
    ((m.user_id = $1 AND m.scope = 'personal')
     OR {_CHAT})
    {_LIVE}
"""
_NEAREST = "m.embedding::halfvec({dim}) <=> $2::vector::halfvec({dim})"
# A user not in the HNSW index: exactly ("+ 0" keeps the planner off the index).
_SEMANTIC = f"""
semantic AS (
    SELECT m.user_id, m.id FROM memory_items m
    WHERE $2::vector IS NOT NULL AND m.embedding_state = 'ready' AND m.embedding_model = $10
      AND {_VISIBLE}
    ORDER BY (m.embedding <=> $2::vector) + 0
    LIMIT $9
),"""
# For a user whose memories are in the HNSW index (migration 0050: listed users
# only): their own through the index (naming its predicate, vector_indexed), the
# chat's shared ones, few, exactly.
_SEMANTIC_INDEXED = f"""
semantic AS (
    (SELECT m.user_id, m.id FROM memory_items m
     WHERE $2::vector IS NOT NULL AND m.vector_indexed AND m.embedding_state = 'ready'
       AND m.embedding_model = $10 AND m.user_id = $1 AND m.scope = 'personal' {_LIVE}
     ORDER BY {_NEAREST}
     LIMIT $9)
    UNION ALL
    (SELECT m.user_id, m.id FROM memory_items m
     WHERE $2::vector IS NOT NULL AND m.embedding_state = 'ready' AND m.embedding_model = $10
       AND {_CHAT} {_LIVE}
     ORDER BY (m.embedding <=> $2::vector) + 0
     LIMIT $9)
),"""

SEARCH_MEMORIES = f"""
WITH q AS (SELECT {or_tsquery("$3")} AS tsq),
{{semantic}}
lexical AS (
    SELECT m.user_id, m.id FROM memory_items m, q
    WHERE m.fts @@ q.tsq AND {_VISIBLE}
    ORDER BY ts_rank_cd(m.fts, q.tsq) DESC
    LIMIT $9
),
recent AS (
    SELECT m.user_id, m.id FROM memory_items m WHERE $12 > 0 AND {_VISIBLE}
    ORDER BY m.created_at DESC
    LIMIT $12
),
candidates AS (
    -- with their owner: the key of a partitioned table (migration 0170)
    SELECT user_id, id FROM semantic UNION SELECT user_id, id FROM lexical
    UNION SELECT user_id, id FROM recent
)
SELECT m.id, m.user_id, m.scope, m.provider, m.chat_id, m.theme, m.type, m.content, m.data,
       m.subjects, m.source, m.created_at, m.expires_at, m.superseded_at, m.superseded_by,
       CASE WHEN $2::vector IS NOT NULL AND m.embedding_state = 'ready'
                 AND m.embedding_model = $10
            THEN (m.embedding <=> $2::vector)::float8 END AS dist,
       coalesce(ts_rank_cd(m.fts, q.tsq), 0)::float8 AS text_rank,
       m.source_message_id, s.external_id AS source_external_id,
       s.occurred_at AS source_occurred_at, s.content AS source_content,
       m.valid_from, m.valid_to, p.content AS replaced_content,
       p.valid_from AS replaced_from, p.valid_to AS replaced_to,
       p.source_message_id AS replaced_turn
FROM memory_items m JOIN candidates c USING (user_id, id)
     -- the turn the memory was learned from (the owner's own, never another user's)
     LEFT JOIN messages s ON s.id = m.source_message_id AND s.user_id = m.user_id
     -- the value it replaced (the newest of those it superseded; a duplicate merged
     -- into it said the same thing, it replaced nothing)
     LEFT JOIN LATERAL (
         SELECT o.content, o.valid_from, o.valid_to, o.source_message_id FROM memory_items o
         WHERE o.superseded_by = m.id AND o.user_id = m.user_id AND o.status <> 'merged'
         ORDER BY o.valid_from DESC, o.id DESC LIMIT 1
     ) AS p ON true, q
"""


@dataclass(frozen=True)
class SourceTurn:
    """The conversation turn a memory was learned from (``source_message_id``)."""

    id: int
    external_message_id: str | None
    occurred_at: datetime
    content: str

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "external_message_id": self.external_message_id,
            "occurred_at": self.occurred_at.isoformat(),
            "content": self.content,
        }


@dataclass(frozen=True)
class Replaced:
    """The earlier value a memory replaced: what it said and when it held."""

    content: str
    valid_from: datetime | None
    valid_to: datetime | None
    source_message_id: int | None = None  # the turn the earlier value was learned from

    def public(self) -> dict[str, Any]:
        return {
            "content": self.content,
            "valid_from": self.valid_from.isoformat() if self.valid_from else None,
            "valid_to": self.valid_to.isoformat() if self.valid_to else None,
        }


def replaced_of(r: asyncpg.Record) -> Replaced | None:
    """The value row ``r`` replaced: a superseded memory, or a fact's earlier value
    (kept in ``data.replaced`` by the writer's upsert)."""
    if r["replaced_content"] is not None:
        return Replaced(
            r["replaced_content"], r["replaced_from"], r["replaced_to"], r["replaced_turn"]
        )
    old = (r["data"] or {}).get("replaced")
    if isinstance(old, dict) and isinstance(old.get("content"), str):
        return Replaced(old["content"], _time(old.get("valid_from")), _time(old.get("valid_to")))
    return None


def _time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


@dataclass(frozen=True)
class MemoryHit:
    id: uuid.UUID
    owner: str
    scope: str
    theme: str
    type: str
    content: str
    data: dict[str, Any]
    subjects: list[uuid.UUID]
    source: str | None
    created_at: datetime
    expires_at: datetime | None
    superseded_at: datetime | None
    superseded_by: uuid.UUID | None
    similarity: float | None
    score: float
    matched: bool = False  # a word of the query is in it
    source_turn: SourceTurn | None = None  # the turn it was learned from, if known
    valid_from: datetime | None = None  # when it became true (the event time)
    valid_to: datetime | None = None  # when it stopped (superseded or expired)
    replaced: Replaced | None = None  # the value it replaced, if it replaced one

    @property
    def relevant(self) -> bool:
        """Ash's relevance: cosine similarity at least 0.3, or a word of the query."""
        return self.matched or (self.similarity or 0.0) >= MIN_MESSAGE_SIMILARITY


@functools.cache
def _sql(dim: int, indexed: bool = False) -> str:
    """The statement for this deployment's dimension; ``indexed``: for a user whose
    rows are in the (partial) HNSW index, so the walk can use it."""
    template = SEARCH_MEMORIES.replace("{semantic}", _SEMANTIC_INDEXED if indexed else _SEMANTIC)
    return template.replace("{dim}", str(dim))


async def search_memories(
    conn: Executor,
    user_id: str,
    *,
    query: str,
    vector: list[float] | None,
    model: str | None,
    chat: Chat | None = None,
    member: bool = False,
    subject: uuid.UUID | None = None,
    include_superseded: bool = False,
    types: list[str] | None = None,
    limit: int = 10,
    spec: RankSpec = ASH_RECALL,
    as_of: datetime | None = None,
) -> list[MemoryHit]:
    """The ``limit`` best visible memories for ``query`` under ``spec`` (module doc)."""
    args = (
        query,
        chat.provider if chat else None,
        chat.chat_id if chat else None,
        member,
        subject,
        include_superseded,
        spec.k(limit),
        model,
        types,
        limit * spec.recent_per_hit,
        as_of,
    )
    if vector is None:
        rows = await conn.fetch(_sql(1), user_id, None, *args)
    else:
        async with hnsw_walk(conn) as c:
            indexed = await vector_index.uses_index(c, user_id, "memory")
            rows = await c.fetch(_sql(len(vector), indexed), user_id, vector, *args)
    by_id = {r["id"]: r for r in rows}
    cands = [Candidate(r["id"], rank=r["text_rank"], distance=r["dist"]) for r in rows]
    best = ranked(
        spec,
        fuse(spec, cands),
        limit,
        tie=lambda c: (-by_id[c.id]["created_at"].timestamp(), c.id),
    )
    return [_memory(by_id[c.id], c) for c in best]


def _memory(r: asyncpg.Record, c: Candidate[uuid.UUID]) -> MemoryHit:
    sim = c.similarity
    return MemoryHit(
        id=r["id"],
        owner=r["user_id"],
        scope=r["scope"],
        theme=r["theme"],
        type=r["type"],
        content=r["content"],
        data=dict(r["data"] or {}),
        subjects=list(r["subjects"] or []),
        source=r["source"],
        created_at=r["created_at"],
        expires_at=r["expires_at"],
        superseded_at=r["superseded_at"],
        superseded_by=r["superseded_by"],
        similarity=float(sim) if sim is not None else None,
        score=c.score,
        matched=(c.rank or 0.0) > 0,
        source_turn=None
        if r["source_occurred_at"] is None
        else SourceTurn(
            r["source_message_id"],
            r["source_external_id"],
            r["source_occurred_at"],
            r["source_content"],
        ),
        valid_from=r["valid_from"],
        valid_to=r["valid_to"],
        replaced=replaced_of(r),
    )


def hit_json(hit: MemoryHit, names: dict[uuid.UUID, Any]) -> dict[str, Any]:
    """A memory as the API returns it; ``names`` maps subject ids to people."""
    subjects = []
    for sid in hit.subjects:
        p = names.get(sid)
        subjects.append(
            {
                "id": str(sid),
                "name": getattr(p, "name", None),
                "relation": getattr(p, "relation", None),
            }
        )
    return {
        "id": str(hit.id),
        "content": hit.content,
        "scope": hit.scope,
        "type": hit.type,
        "theme": hit.theme,
        "source": hit.source,
        "subjects": subjects,
        "created_at": hit.created_at.isoformat(),
        "expires_at": hit.expires_at.isoformat() if hit.expires_at else None,
        "superseded_at": hit.superseded_at.isoformat() if hit.superseded_at else None,
        "superseded_by": str(hit.superseded_by) if hit.superseded_by else None,
        "similarity": hit.similarity,
        "score": round(hit.score, 6),
        "source_turn": hit.source_turn.public() if hit.source_turn else None,
        "valid_from": hit.valid_from.isoformat() if hit.valid_from else None,
        "valid_to": hit.valid_to.isoformat() if hit.valid_to else None,
        "replaced": hit.replaced.public() if hit.replaced else None,
    }
