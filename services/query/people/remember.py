"""Ash's ``remember``: store facts with their subjects, scope and expiry, then supersede.

:func:`remember` resolves each fact's subjects to people (creating first
mentions), inserts the memories in one transaction and, when an embedder is
given and answers, stores their vectors at once and runs the supersession check
in the same transaction. Without vectors the rows stay ``pending``: the caller
publishes ``EmbedRequested`` and the check runs when the embedder reports them
ready. The caller publishes the events listed in the result after the commit.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg

from shared.errors import InfrastructureError, InvalidRequest
from shared.memory.people import Resolution, resolve_people
from shared.memory.vectors import ModelEmbedder, fit
from shared.memory.writer import (
    MEMORY_TYPES,
    Chat,
    NewItem,
    Written,
    check_type,
    insert_items,
)

log = logging.getLogger(__name__)

MAX_CONTENT = 10_000
MAX_FACTS = 100
MAX_SUBJECTS = 20
MAX_DAYS = 36_500


@dataclass(frozen=True)
class Fact:
    content: str
    subjects: Sequence[str] = ()
    expires_in_days: int | None = None
    shared: bool = False
    type: str = "fact"
    theme: str = "general"
    confidence: float | None = None
    source_context: str | None = None


@dataclass
class Stored:
    id: uuid.UUID
    content: str
    scope: str
    subjects: list[Resolution]
    created_at: datetime
    expires_at: datetime | None
    embedding_state: str
    superseded: list[uuid.UUID] = field(default_factory=list)
    confirmed: bool = False
    """It said what a live memory says: ``id`` is that memory's (see ``shared.memory.dedupe``)."""


@dataclass
class Remembered:
    memories: list[Stored]
    warning: str | None = None
    written: Written | None = None
    """What the writer stored: publish ``written.events()`` after the commit."""

    @property
    def pending(self) -> list[uuid.UUID]:
        return [m.id for m in self.memories if m.embedding_state == "pending"]

    @property
    def superseded(self) -> list[uuid.UUID]:
        return [s for m in self.memories for s in m.superseded]


def check_fact(fact: Fact, chat: Chat | None) -> None:
    """Raise InvalidRequest when ``fact`` cannot be stored as asked."""
    if not fact.content.strip():
        raise InvalidRequest("a fact needs non-empty content")
    if len(fact.content) > MAX_CONTENT:
        raise InvalidRequest(f"a fact is at most {MAX_CONTENT} characters")
    if len(fact.subjects) > MAX_SUBJECTS:
        raise InvalidRequest(f"at most {MAX_SUBJECTS} subjects per fact")
    if fact.expires_in_days is not None and not 1 <= fact.expires_in_days <= MAX_DAYS:
        raise InvalidRequest(f"expires_in_days must be between 1 and {MAX_DAYS}")
    if fact.shared and chat is None:
        raise InvalidRequest("a shared fact needs the chat it is shared in ('chat')")
    if fact.type not in MEMORY_TYPES:
        raise InvalidRequest(f"type must be one of {', '.join(MEMORY_TYPES)}")


async def embed_or_none(
    embedder: ModelEmbedder | None, texts: Sequence[str], *, dim: int
) -> tuple[list[list[float]] | None, str | None]:
    """Vectors for ``texts``, or None with the reason when the provider fails."""
    if embedder is None or not texts:
        return None, None
    try:
        vectors = await embedder.embed(list(texts))
        return [fit(v, dim) for v in vectors], None
    except InfrastructureError as exc:
        log.warning("embedding provider failed, storing memories as pending: %s", exc)
        return None, f"embedding provider unavailable ({exc}); embedding later"


async def remember(
    pool: asyncpg.Pool,
    user_id: str,
    facts: Sequence[Fact],
    *,
    chat: Chat | None = None,
    embedder: ModelEmbedder | None = None,
    embedding_dim: int = 384,
    source: str = "user",
    actor: str = "system",
) -> Remembered:
    """Store ``facts`` for ``user_id`` (in order) and supersede what they replace.

    Raises InvalidRequest for bad input (nothing is stored then). A failing
    embedder does not fail the call: the memories are stored ``pending`` and the
    result carries a warning.
    """
    if not facts:
        raise InvalidRequest("nothing to remember: give 'content' or 'facts'")
    if len(facts) > MAX_FACTS:
        raise InvalidRequest(f"at most {MAX_FACTS} facts per call")
    for fact in facts:
        check_fact(fact, chat)
    vectors, warning = await embed_or_none(embedder, [f.content for f in facts], dim=embedding_dim)
    stored: list[Stored] = []
    async with pool.acquire() as conn, conn.transaction():
        rows: list[NewItem] = []
        resolved: list[list[Resolution]] = []
        for i, fact in enumerate(facts):
            people = await resolve_people(
                conn, user_id, fact.subjects, content_hint=fact.content, actor=actor
            )
            resolved.append(people)
            vec = vectors[i] if vectors is not None else None
            shared = fact.shared and chat is not None
            rows.append(
                NewItem(
                    type=check_type(fact.type),
                    content=fact.content.strip(),
                    theme=fact.theme,
                    scope="chat" if shared else "personal",
                    provider=chat.provider if shared and chat else None,
                    chat_id=chat.chat_id if shared and chat else None,
                    subjects=[p.person.id for p in people],
                    source=source,
                    source_context=fact.source_context,
                    confidence=fact.confidence,
                    expires_in_days=fact.expires_in_days,
                    vector=vec,
                    embedded_by=(embedder.provider, embedder.model)
                    if vec is not None and embedder
                    else None,
                    audit={
                        "scope": "chat" if shared else "personal",
                        "subjects": [str(p.person.id) for p in people],
                    },
                )
            )
        written = await insert_items(conn, user_id, rows, actor=actor)
    for row, people, w in zip(rows, resolved, written.items, strict=True):
        stored.append(
            Stored(
                id=w.id,
                content=row.content,
                scope=row.scope,
                subjects=people,
                created_at=w.created_at,
                expires_at=w.expires_at,
                embedding_state=w.embedding_state,
                superseded=list(w.superseded),
                confirmed=w.confirmed,
            )
        )
    return Remembered(memories=stored, warning=warning, written=written)
