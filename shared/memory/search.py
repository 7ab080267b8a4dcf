"""Reading memories and past messages for ``recall`` and context assembly.

Visibility: a user sees their own personal memories, and the shared
(chat-scoped) memories of the chat the call happens in when they own them or
are a member of that chat (they have a session there). Archived, expired and —
unless ``include_superseded`` — superseded memories are left out.

Ranking is hybrid in one CTE: candidates come from the nearest vectors, the
full-text matches and the newest rows; each is scored 0.7 × cosine similarity
+ 0.3 × normalised text rank (text rank alone without a query vector), newer
first at equal score. Without a query vector the search is full-text only.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from shared.db import Conn, Executor
from shared.embeddings import vector_index
from shared.memory.membership import is_member as is_member  # its one home
from shared.memory.vectors import tsquery
from shared.memory.writer import Chat

# Parameters shared by the memory statements:
# $1 user, $2 query vector (or NULL), $3 query text, $4 chat provider, $5 chat id,
# $6 caller is a member of that chat, $7 subject person (or NULL),
# $8 include superseded, $9 limit, $10 embedding model of $2, $11 memory types (or NULL)
_LIVE = """
    AND m.status = 'active'
    AND (m.expires_at IS NULL OR m.expires_at > now())
    AND ($8::bool OR m.superseded_at IS NULL)
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
_SEMANTIC = f"""
semantic AS (
    SELECT m.id FROM memory_items m
    WHERE $2::vector IS NOT NULL AND m.embedding_state = 'ready' AND m.embedding_model = $10
      AND {_VISIBLE}
    ORDER BY {_NEAREST}
    LIMIT $9 * 4
),"""
# For a user whose memories are in the HNSW index (migration 0050: listed users
# only): their own through the index (naming its predicate, vector_indexed), the
# chat's shared ones, few, exactly.
_SEMANTIC_INDEXED = f"""
semantic AS (
    (SELECT m.id FROM memory_items m
     WHERE $2::vector IS NOT NULL AND m.vector_indexed AND m.embedding_state = 'ready'
       AND m.embedding_model = $10 AND m.user_id = $1 AND m.scope = 'personal' {_LIVE}
     ORDER BY {_NEAREST}
     LIMIT $9 * 4)
    UNION ALL
    (SELECT m.id FROM memory_items m
     WHERE $2::vector IS NOT NULL AND m.embedding_state = 'ready' AND m.embedding_model = $10
       AND {_CHAT} {_LIVE}
     ORDER BY (m.embedding <=> $2::vector) + 0
     LIMIT $9 * 4)
),"""

SEARCH_MEMORIES = f"""
WITH q AS (SELECT {tsquery(3)} AS tsq),
{{semantic}}
lexical AS (
    SELECT m.id FROM memory_items m, q
    WHERE m.fts @@ q.tsq AND {_VISIBLE}
    ORDER BY ts_rank_cd(m.fts, q.tsq) DESC
    LIMIT $9 * 4
),
recent AS (
    SELECT m.id FROM memory_items m WHERE {_VISIBLE}
    ORDER BY m.created_at DESC
    LIMIT $9
),
candidates AS (
    SELECT id FROM semantic UNION SELECT id FROM lexical UNION SELECT id FROM recent
),
scored AS (
    SELECT m.*,
           CASE WHEN $2::vector IS NOT NULL AND m.embedding_state = 'ready'
                     AND m.embedding_model = $10
                THEN 1 - (m.embedding <=> $2::vector) END AS similarity,
           ts_rank_cd(m.fts, q.tsq) AS text_rank
    FROM memory_items m JOIN candidates c USING (id), q
)
SELECT id, user_id, scope, provider, chat_id, theme, type, content, data, subjects, source,
       created_at, expires_at, superseded_at, superseded_by, similarity, text_rank,
       CASE WHEN $2::vector IS NULL THEN text_rank / (text_rank + 1)
            ELSE 0.7 * coalesce(similarity, 0) + 0.3 * text_rank / (text_rank + 1) END AS score
FROM scored
ORDER BY score DESC, created_at DESC
LIMIT $9
"""

ITERATIVE = "SET LOCAL hnsw.iterative_scan = relaxed_order"

# $1 user, $2 query vector, $3 the message itself (left out), $4 limit, $5 model, $6 threshold
# The nearest-neighbour walks order by the expression of migration 0010's HNSW
# index (halfvec of the column's dimension); ``{dim}`` is filled in per deployment.
SEARCH_MESSAGES_SEMANTIC = """
WITH near AS (
    SELECT id, role, content, provider, chat_id, occurred_at,
           1 - (embedding <=> $2::vector) AS similarity
    FROM messages
    WHERE user_id = $1 AND embedding_state = 'ready' AND embedding_model = $5 {indexed}
      AND role IN ('user', 'assistant') AND content <> '' AND content <> $3
    ORDER BY embedding::halfvec({dim}) <=> $2::vector::halfvec({dim})
    LIMIT $4 * 4
)
SELECT * FROM near WHERE similarity >= $6
ORDER BY round(similarity::numeric, 2) DESC, occurred_at DESC
LIMIT $4
"""

SEARCH_MESSAGES_TEXT = f"""
WITH q AS (SELECT {tsquery(2)} AS tsq)
SELECT id, role, content, provider, chat_id, occurred_at, NULL::float8 AS similarity
FROM messages, q
WHERE user_id = $1 AND fts @@ q.tsq AND role IN ('user', 'assistant') AND content <> $3
ORDER BY ts_rank_cd(fts, q.tsq) DESC, occurred_at DESC
LIMIT $4
"""


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


@dataclass(frozen=True)
class MessageHit:
    id: int
    role: str
    content: str
    provider: str
    chat_id: str
    occurred_at: datetime
    similarity: float | None


@contextlib.asynccontextmanager
async def _iterative(
    conn: Executor,
) -> AsyncIterator[Conn]:
    """A transaction where HNSW scans keep going until the user filter yields k rows."""
    if isinstance(conn, asyncpg.Pool):
        async with conn.acquire() as c, c.transaction():
            await c.execute(ITERATIVE)
            yield c
    else:
        async with conn.transaction():
            await conn.execute(ITERATIVE)
            yield conn


@functools.cache
def _sql(template: str, dim: int, indexed: bool = False) -> str:
    """``template`` for this deployment's dimension; ``indexed``: for a user whose
    rows are in the (partial) HNSW index, so the walk can use it."""
    if template is SEARCH_MEMORIES:
        template = template.replace("{semantic}", _SEMANTIC_INDEXED if indexed else _SEMANTIC)
    else:
        template = template.replace("{indexed}", "AND vector_indexed" if indexed else "")
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
) -> list[MemoryHit]:
    """The ``limit`` best visible memories for ``query`` (see the module doc)."""
    async with _iterative(conn) as c:
        indexed = vector is not None and await vector_index.uses_index(c, user_id, "memory")
        rows = await c.fetch(
            _sql(SEARCH_MEMORIES, len(vector) if vector is not None else 1, indexed),
            user_id,
            vector,
            query,
            chat.provider if chat else None,
            chat.chat_id if chat else None,
            member,
            subject,
            include_superseded,
            limit,
            model,
            types,
        )
    return [_memory(r) for r in rows]


def _memory(r: asyncpg.Record) -> MemoryHit:
    sim = r["similarity"]
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
        score=float(r["score"]),
    )


async def search_messages(
    conn: Executor,
    user_id: str,
    *,
    message: str,
    vector: list[float] | None,
    model: str | None,
    limit: int = 5,
    threshold: float = 0.3,
) -> list[MessageHit]:
    """This user's past messages like ``message``: above ``threshold`` cosine similarity
    when a vector is given, else full-text matches. The message itself is left out."""
    if vector is not None:
        async with _iterative(conn) as c:
            indexed = await vector_index.uses_index(c, user_id, "message")
            rows = await c.fetch(
                _sql(SEARCH_MESSAGES_SEMANTIC, len(vector), indexed),
                user_id,
                vector,
                message,
                limit,
                model,
                threshold,
            )
    else:
        rows = await conn.fetch(SEARCH_MESSAGES_TEXT, user_id, message, message, limit)
    return [
        MessageHit(
            id=r["id"],
            role=r["role"],
            content=r["content"],
            provider=r["provider"],
            chat_id=r["chat_id"],
            occurred_at=r["occurred_at"],
            similarity=float(r["similarity"]) if r["similarity"] is not None else None,
        )
        for r in rows
    ]


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
    }
