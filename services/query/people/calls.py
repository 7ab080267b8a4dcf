"""Ash's remember / recall as use-case calls on their request models
(``services.query.people.models``), shared by the HTTP routes and the tool-call
endpoint (so both validate and answer the same way)."""

from __future__ import annotations

from typing import Any

import asyncpg

from services.query.people.models import RecallIn, RememberIn
from services.query.people.recall import recall
from services.query.people.remember import Remembered, remember
from services.query.people.results import RememberedMemories, RememberedMemory, Subject
from shared.memory.membership import require_member
from shared.memory.vectors import ModelEmbedder
from shared.memory.writer import publish_written
from shared.streams import Publisher


def remembered(result: Remembered) -> RememberedMemories:
    """The answer of ``remember``: each memory with the people it is about."""
    return RememberedMemories(
        memories=[
            RememberedMemory(
                id=str(m.id),
                content=m.content,
                scope=m.scope,
                subjects=[
                    Subject(
                        id=str(r.person.id),
                        name=r.person.name,
                        relation=r.person.relation,
                        created=r.created,
                    )
                    for r in m.subjects
                ],
                expires_at=m.expires_at.isoformat() if m.expires_at else None,
                embedding_state=m.embedding_state,
                superseded=[str(s) for s in m.superseded],
                confirmed=m.confirmed,
            )
            for m in result.memories
        ],
        warning=result.warning,
    )


async def do_remember(
    pool: asyncpg.Pool,
    pub: Publisher,
    user_id: str,
    body: RememberIn,
    *,
    embedder: ModelEmbedder | None,
    embedding_dim: int,
    actor: str,
) -> RememberedMemories:
    """Store, then publish what the writer returns: MemoryChanged for each new and
    superseded memory, and EmbedRequested for those left pending (their
    supersession check follows). Shared facts go only into a chat the user is a
    member of."""
    facts = body.to_facts()
    chat = body.chat.chat() if body.chat else None
    if chat is not None and any(f.shared for f in facts):
        await require_member(pool, user_id, chat)
    result = await remember(
        pool,
        user_id,
        facts,
        chat=chat,
        embedder=embedder,
        embedding_dim=embedding_dim,
        source="user",
        actor=actor,
    )
    if result.written is not None:
        await publish_written(pub, result.written)
    return remembered(result)


async def do_recall(
    pool: asyncpg.Pool,
    user_id: str,
    body: RecallIn,
    *,
    embedder: ModelEmbedder | None,
    embedding_dim: int,
) -> dict[str, Any]:
    result = await recall(
        pool,
        user_id,
        body.query,
        about=body.about,
        chat=body.chat.chat() if body.chat else None,
        embedder=embedder,
        embedding_dim=embedding_dim,
        include_superseded=body.include_superseded,
        limit=body.limit,
        as_of=body.as_of,
    )
    return result.public()
