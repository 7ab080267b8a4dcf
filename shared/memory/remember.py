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

from shared.db import audit
from shared.errors import InfrastructureError, InvalidRequest
from shared.memory.people import Resolution, resolve_people
from shared.memory.supersession import check_supersession
from shared.memory.vectors import ModelEmbedder, fit

log = logging.getLogger(__name__)

MAX_CONTENT = 10_000
MAX_FACTS = 100
MAX_SUBJECTS = 20
MAX_DAYS = 36_500
TYPES = (
    "preference",
    "fact",
    "instruction",
    "summary",
    "procedure",
    "episode",
    "decision",
    "workflow",
    "other",
)

INSERT = """
INSERT INTO memory_items (
    user_id, scope, provider, chat_id, theme, type, content, subjects, source,
    source_context, confidence, expires_at, created_at, updated_at,
    embedding, embedding_state, embedding_provider, embedding_model, embedding_dims, embedded_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
        CASE WHEN $12::int IS NULL THEN NULL ELSE now() + make_interval(days => $12::int) END,
        clock_timestamp(), clock_timestamp(),
        $13, CASE WHEN $13::vector IS NULL THEN 'pending' ELSE 'ready' END,
        $14, $15, $16, CASE WHEN $13::vector IS NULL THEN NULL ELSE clock_timestamp() END)
RETURNING id, created_at, expires_at, embedding_state
"""

ENSURE_USER = "INSERT INTO users (id) VALUES ($1) ON CONFLICT (id) DO NOTHING"


@dataclass(frozen=True)
class Chat:
    """The chat a call happens in (``provider`` + ``chat_id``)."""

    provider: str
    chat_id: str


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


@dataclass
class Remembered:
    memories: list[Stored]
    warning: str | None = None

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
    if fact.type not in TYPES:
        raise InvalidRequest(f"type must be one of {', '.join(TYPES)}")


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
        await conn.execute(ENSURE_USER, user_id)
        for i, fact in enumerate(facts):
            people = await resolve_people(
                conn, user_id, fact.subjects, content_hint=fact.content, actor=actor
            )
            vec = vectors[i] if vectors is not None else None
            row = await conn.fetchrow(
                INSERT,
                user_id,
                "chat" if fact.shared else "personal",
                chat.provider if fact.shared and chat else None,
                chat.chat_id if fact.shared and chat else None,
                fact.theme,
                fact.type,
                fact.content.strip(),
                [p.person.id for p in people],
                source,
                fact.source_context,
                fact.confidence,
                fact.expires_in_days,
                vec,
                embedder.provider if vec is not None and embedder else None,
                embedder.model if vec is not None and embedder else None,
                len(vec) if vec is not None else None,
            )
            assert row is not None
            memory = Stored(
                id=row["id"],
                content=fact.content.strip(),
                scope="chat" if fact.shared else "personal",
                subjects=people,
                created_at=row["created_at"],
                expires_at=row["expires_at"],
                embedding_state=row["embedding_state"],
            )
            await audit(
                conn,
                user_id=user_id,
                actor=actor,
                action="create",
                entity="memory",
                entity_id=str(memory.id),
                details={
                    "scope": memory.scope,
                    "source": source,
                    "subjects": [str(p.person.id) for p in people],
                },
            )
            if vec is not None:
                memory.superseded = await check_supersession(conn, memory.id, actor=actor)
            stored.append(memory)
    return Remembered(memories=stored, warning=warning)
