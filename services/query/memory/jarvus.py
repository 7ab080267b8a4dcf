"""Jarvus: action events, feedback, workflow executions, plain stores, typed retrieval.

Every store becomes a ``memory_items`` row in a namespace, with the event in
``data`` and generated search text in ``content``. Typed retrieval ranks by
relevance (the hybrid search), then importance, then recency of access, tops up
with substring matches, and marks what it returns as accessed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

import asyncpg

from services.query.embeddings.query import lists_newest
from services.query.memory import items as ms
from services.query.memory.jarvus_results import Namespace, Namespaces, Retrieved, Stored
from services.query.memory.search import memory_search
from services.query.memory.state import QueryState
from services.query.ranking.memories import SearchParams
from shared.db import audit
from shared.errors import InvalidRequest, NotFound
from shared.memory.writer import AUDIT_ENTITY, MemoryType
from shared.streams import Publisher

Kind = Literal["episodes", "facts", "procedures"]
KIND_TYPES: dict[str, tuple[str, ...]] = {
    "episodes": ("episode",),
    "facts": ("fact", "preference"),
    "procedures": ("procedure", "workflow"),
}
# Importance by event type (Jarvus 3.1); a plain store gives its own.
IMPORTANCE = {"chrome_action": 1.0, "feedback": 1.2, "workflow_execution": 1.0, "procedure": 1.5}

ROWS_BY_ID = """
SELECT id, namespace, type, content, data, importance, created_at, last_accessed_at
FROM memory_items WHERE user_id = $1 AND id = ANY($2::uuid[])
"""

# Without a query: most important, then most recently used.
# With one: rows containing it as a substring (tops up the hybrid search).
TYPED = """
SELECT id, namespace, type, content, data, importance, created_at, last_accessed_at
FROM memory_items
WHERE user_id = $1 AND type = ANY($2::text[]) AND namespace = $3 AND status = 'active'
  AND superseded_at IS NULL AND (expires_at IS NULL OR expires_at > now())
  AND ($4::text IS NULL OR content ILIKE '%' || $4 || '%')
  AND NOT (id = ANY($5::uuid[]))
ORDER BY importance DESC, last_accessed_at DESC NULLS LAST, created_at DESC, id
LIMIT $6
"""

UPDATE_STORE = """
UPDATE memory_items
SET content = $3, type = $4, importance = $5, data = $6, namespace = $7, updated_at = now(),
    embedding_state = 'pending', embedding = NULL
WHERE id = $1 AND user_id = $2
RETURNING id
"""

NAMESPACES = """
SELECT namespace, count(*) AS items, max(created_at) AS latest
FROM memory_items WHERE user_id = $1 GROUP BY namespace ORDER BY namespace
"""


def _text(*parts: object) -> str:
    return " ".join(str(p) for p in parts if p not in (None, "", {}, []))


def action_text(a: Mapping[str, Any]) -> str:
    details = json.dumps(a["details"], sort_keys=True, default=str) if a.get("details") else ""
    return _text(
        a.get("action"),
        a.get("target"),
        "on" if a.get("url") else None,
        a.get("url"),
        f"({a['result']})" if a.get("result") else None,
        details,
    )


async def _store(
    pool: asyncpg.Pool, publisher: Publisher, *, user_id: str, items: list[ms.NewMemory]
) -> list[ms.Added]:
    return await ms.add_memories(pool, publisher, user_id=user_id, items=items, actor="jarvus")


def _memory(
    type_: str, text: str, data: dict[str, Any], namespace: str, importance: float
) -> ms.NewMemory:
    return ms.NewMemory(
        type=type_,
        content=text,
        theme=data.get("type"),
        namespace=namespace,
        data=data,
        importance=importance,
    )


async def store_action(
    pool: asyncpg.Pool,
    publisher: Publisher,
    *,
    user_id: str,
    action: Mapping[str, Any],
    namespace: str = "default",
) -> Stored:
    """Store a browser/app action (its fields as given: action, target, url, ...)."""
    data = {"type": "chrome_action", **action}
    item = _memory("episode", action_text(action), data, namespace, IMPORTANCE["chrome_action"])
    added = await _store(pool, publisher, user_id=user_id, items=[item])
    return Stored(memory_id=str(added[0].id))


async def store_feedback(
    pool: asyncpg.Pool,
    publisher: Publisher,
    *,
    user_id: str,
    feedback: Mapping[str, Any],
    namespace: str = "default",
) -> Stored:
    """Store feedback on a suggestion (suggestion_id, user_response, notes, ...)."""
    data = {"type": "feedback", **feedback}
    text = _text(
        "feedback on suggestion",
        f"{feedback['suggestion_id']}:",
        feedback.get("user_response"),
        feedback.get("notes"),
    )
    item = _memory("episode", text, data, namespace, IMPORTANCE["feedback"])
    added = await _store(pool, publisher, user_id=user_id, items=[item])
    return Stored(memory_id=str(added[0].id))


async def store_workflow(
    pool: asyncpg.Pool,
    publisher: Publisher,
    *,
    user_id: str,
    workflow: Mapping[str, Any],
    namespace: str = "default",
    store_as_procedure: bool = False,
) -> Stored:
    """Store a workflow execution (workflow_id, steps, result, ...), and a procedure if asked."""
    w = workflow
    steps = "; ".join(
        _text(s.get("action"), s.get("target"), s.get("url")) for s in w.get("steps", [])
    )
    data = {"type": "workflow_execution", **w}
    text = _text(
        "workflow",
        w["workflow_id"],
        f"({w['result']})" if w.get("result") else None,
        w.get("description"),
        steps,
    )
    items = [_memory("episode", text, data, namespace, IMPORTANCE["workflow_execution"])]
    if store_as_procedure:
        procedure = {
            "type": "workflow",
            "workflow_id": w["workflow_id"],
            "steps": w.get("steps", []),
            "description": w.get("description"),
            "created_from_execution": True,
        }
        items.append(
            _memory(
                "procedure",
                _text(w.get("description"), steps),
                procedure,
                namespace,
                IMPORTANCE["procedure"],
            )
        )
    added = await _store(pool, publisher, user_id=user_id, items=items)
    if len(added) > 1:
        return Stored(memory_id=str(added[0].id), procedure_id=str(added[1].id))
    return Stored(memory_id=str(added[0].id))


async def store_plain(
    pool: asyncpg.Pool,
    publisher: Publisher,
    *,
    user_id: str,
    text: str,
    type: MemoryType = "fact",
    importance: float = 1.0,
    memory_id: str | None = None,
    data: Mapping[str, Any] | None = None,
    namespace: str = "default",
) -> Stored:
    """Store a plain memory, or with ``memory_id`` replace that one's text and data."""
    stored = {"type": type, "text": text, **(data or {})}
    if memory_id is None:
        added = await _store(
            pool,
            publisher,
            user_id=user_id,
            items=[_memory(type, text, stored, namespace, importance)],
        )
        return Stored(memory_id=str(added[0].id), updated=False)
    key = ms.parse_id(memory_id)
    async with pool.acquire() as conn, conn.transaction():
        try:
            row = await conn.fetchrow(
                UPDATE_STORE,
                key,
                user_id,
                ms.check_content(text),
                type,
                importance,
                stored,
                namespace,
            )
        except asyncpg.UniqueViolationError as exc:  # the live-content key (migration 0110)
            raise InvalidRequest("text: another live memory already says this") from exc
        if row is None:
            raise NotFound(f"no memory {memory_id}")
        await audit(
            conn,
            user_id=user_id,
            actor="jarvus",
            action="update",
            entity=AUDIT_ENTITY,
            entity_id=str(key),
            details={"type": type},
        )
    await ms.announce(publisher, user_id=user_id, ids=[key], change="added")
    return Stored(memory_id=str(key), updated=True)


async def retrieve(
    state: QueryState,
    pool: asyncpg.Pool,
    *,
    user_id: str,
    kind: Kind,
    query: str | None,
    limit: int,
    namespace: str = "default",
) -> list[Retrieved]:
    """Memories of one kind, most relevant first; marks them accessed."""
    types = KIND_TYPES[kind]
    ranked: list[tuple[float, asyncpg.Record]] = []
    if query is not None and not lists_newest(query):
        params = SearchParams(query=query, limit=limit, types=types, namespace=namespace)
        result = await memory_search(state, pool, params, user_id=user_id)
        scores = {h.id: h.score for h in result.hits}
        rows = await pool.fetch(ROWS_BY_ID, user_id, list(scores))
        ranked = [(scores[r["id"]], r) for r in rows]
        ranked.sort(key=lambda sr: (-sr[0], -sr[1]["importance"], _accessed_desc(sr[1])))
    if len(ranked) < limit:
        seen = [r["id"] for _, r in ranked]
        substring = None if lists_newest(query) else (query or "").strip()
        rows = await pool.fetch(
            TYPED,
            user_id,
            list(types),
            namespace,
            _escape(substring) if substring else None,
            seen,
            limit - len(ranked),
        )
        ranked += [(0.0, r) for r in rows]
    await ms.touch(pool, user_id=user_id, ids=[r["id"] for _, r in ranked])
    return [Retrieved.of(r, score) for score, r in ranked]


async def namespaces(pool: asyncpg.Pool, *, user_id: str) -> Namespaces:
    rows = await pool.fetch(NAMESPACES, user_id)
    return Namespaces(
        namespaces=[
            Namespace(namespace=r["namespace"], items=r["items"], latest=r["latest"].isoformat())
            for r in rows
        ]
    )


def _accessed_desc(r: asyncpg.Record) -> float:
    at = r["last_accessed_at"]
    return -at.timestamp() if at is not None else 0.0


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
