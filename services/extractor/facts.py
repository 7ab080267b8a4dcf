"""Proactive fact learning (Nous F010.4 with Navi's sources and Ash's people and supersession).

Rules applied to the candidates a model (or the offline extractor) proposes:

- what only the assistant said is not a fact the user stated: held for review;
- secrets (tokens, passwords, API keys, card numbers) are dropped, never stored;
- confidence (given, else from the source: tool_call and auto_discovery 0.95,
  user_explicit 0.90, otherwise 0.70) below 0.6: held for review;
- relative dates are resolved against the episode's time;
- subjects are resolved to the user's people (a fact about a friend is about
  the friend; a fact about the user has no subjects);
- dedupe against the user's live memories about the same subjects
  (``shared.memory.dedupe``): the same text or similarity >= 0.90 confirms the
  existing one (counted in ``confirmations``, dated, its origin added to
  ``sources``); 0.80-0.90 asks the model (offline: the stated word rule); below,
  a new fact;
- at most 5 new facts per episode (the rest are held for review);
- a new fact supersedes the ones it contradicts (``shared.memory.supersession``:
  Ash's similarity and subjects, and the same attribute with another value, or
  the model's ``contradicts`` when an attribute is unknown);
- each stored fact is linked to the message it was learned from
  (``source_message_id``, when the caller found it).

Planning (model and embedding calls) happens outside any transaction;
:func:`apply_plan` writes inside the caller's transaction.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg
import numpy as np

from shared.dates import resolve_relative_dates
from shared.db import Conn
from shared.errors import EngramError, InvalidModelOutput, InvalidRequest
from shared.llm.schemas import FactCandidate
from shared.memory.confidence import by_source
from shared.memory.dedupe import CONFIRM, SameFact, confirm, is_same
from shared.memory.people import SELF_REFERENCES, resolve_or_create_person
from shared.memory.secrets import find_secret, redact
from shared.memory.supersession import Contradicts
from shared.memory.vectors import TextEmbedder, fit
from shared.memory.writer import MemoryType, NewItem, insert_items

log = logging.getLogger(__name__)

FACT_TYPES = ("fact", "preference")
MAX_FACTS_PER_EPISODE = 5
MIN_CONFIDENCE = 0.6

# The user's live personal memories of the default namespace about the same subjects
# (what a learned fact is compared with: shared.memory.dedupe's scope), nearest first.
NEAREST = """
SELECT id, content, 1 - (embedding <=> $2) AS similarity
FROM memory_items
WHERE user_id = $1 AND status = 'active' AND superseded_at IS NULL AND dedupe_key IS NOT NULL
  AND embedding_state = 'ready' AND scope = 'personal' AND namespace = 'default'
  AND subjects @> $3::uuid[] AND subjects <@ $3::uuid[]
ORDER BY embedding <=> $2
LIMIT 3
"""

# The same text (migration 0110's memory_content_key: case, spaces, end punctuation).
SAME_TEXT = """
SELECT id FROM memory_items
WHERE user_id = $1 AND status = 'active' AND superseded_at IS NULL AND dedupe_key IS NOT NULL
  AND scope = 'personal' AND namespace = 'default'
  AND memory_content_key(content) = memory_content_key($2)
  AND subjects @> $3::uuid[] AND subjects <@ $3::uuid[]
LIMIT 1
"""

# What the episode's limit counts: its facts, or (``standing``) its standing
# instructions and preferences (services.extractor.standing), each under its own.
EPISODE_FACTS = """
SELECT count(*) FROM memory_items
WHERE user_id = $1 AND episode_id = $2 AND data ? 'extractor' AND (data ? 'standing') = $3
"""

INSERT_REVIEW = """
INSERT INTO fact_reviews (user_id, episode_id, subject, content, category, confidence, source,
                          source_context, reason, data)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (user_id, episode_id, content) DO NOTHING
"""


@dataclass
class Fact:
    """A candidate after normalisation."""

    candidate: FactCandidate
    content: str
    confidence: float
    source_context: str | None
    subjects: list[uuid.UUID] = field(default_factory=list)
    vector: list[float] | None = None
    # (provider, model, dims) of ``vector`` when the embedder said who made it:
    # the fact is then stored with its embedding ready, not left for the embedder.
    embedded_by: tuple[str, str, int] | None = None
    # The ``messages`` row the fact was learned from (matched on ``source_context``).
    source_message_id: int | None = None

    @property
    def type(self) -> MemoryType:
        category = self.candidate.category
        return category if category in ("preference", "instruction") else "fact"


@dataclass
class FactPlan:
    store: list[Fact] = field(default_factory=list)
    confirm: list[tuple[uuid.UUID, Fact]] = field(default_factory=list)
    review: list[tuple[Fact, str]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # reasons only: a secret is never kept


@dataclass
class FactResult:
    stored: list[uuid.UUID] = field(default_factory=list)
    pending: list[uuid.UUID] = field(default_factory=list)  # stored without a vector
    confirmed: list[uuid.UUID] = field(default_factory=list)
    superseded: list[uuid.UUID] = field(default_factory=list)
    reviewed: int = 0
    dropped: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.stored or self.superseded)

    def add(self, other: FactResult) -> None:
        """Count ``other``'s writes in this result too."""
        self.stored += other.stored
        self.pending += other.pending
        self.confirmed += other.confirmed
        self.superseded += other.superseded
        self.reviewed += other.reviewed
        self.dropped += other.dropped


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def confidence_of(candidate: FactCandidate) -> float:
    if candidate.confidence is not None:
        return float(candidate.confidence)
    return by_source(candidate.source)


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    va, vb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    na, nb = float(np.linalg.norm(va)), float(np.linalg.norm(vb))
    return float(va @ vb) / (na * nb) if na and nb else 0.0


async def plan_facts(
    pool: asyncpg.Pool,
    *,
    user_id: str,
    candidates: Sequence[FactCandidate],
    occurred_at: datetime,
    embedder: TextEmbedder | None,
    same_fact: SameFact,
    dim: int,
) -> FactPlan:
    """Decide what happens to each candidate; creates the people the facts are about."""
    plan = FactPlan()
    kept: list[Fact] = []
    for c in candidates:
        secret = find_secret(c.content) or find_secret(c.subject)
        if secret:
            plan.dropped.append(f"contains a {secret}")
            continue
        fact = Fact(
            candidate=c,
            content=_capital(resolve_relative_dates(" ".join(c.content.split()), occurred_at)),
            confidence=confidence_of(c),
            source_context=redact(c.source_context) if c.source_context else None,
        )
        if c.stated_by == "assistant":
            plan.review.append((fact, "stated by the assistant, not by the user"))
        elif fact.confidence < MIN_CONFIDENCE:
            plan.review.append((fact, f"confidence {fact.confidence:.2f} below {MIN_CONFIDENCE}"))
        else:
            kept.append(fact)
    kept.sort(key=lambda f: -f.confidence)

    async with pool.acquire() as conn, conn.transaction():
        for fact in kept:
            c = fact.candidate
            if c.about == "person" and c.subject.strip().lower() not in SELF_REFERENCES:
                try:
                    person = await resolve_or_create_person(conn, user_id, c.subject, c.content)
                except InvalidRequest:
                    continue
                fact.subjects = [person.person_id]

    if embedder is not None and kept:
        try:
            vectors = await embedder.embed([f.content for f in kept])
            provider = getattr(embedder, "provider", None)
            model = getattr(embedder, "model", None)
            for fact, vec in zip(kept, vectors, strict=True):
                fact.vector = fit(vec, dim)
                if provider and model:
                    fact.embedded_by = (str(provider), str(model), len(vec))
        except EngramError as exc:
            # Ash: degrade gracefully; exact-text dedupe still applies.
            log.warning("facts for %s: no embeddings for dedupe (%s)", user_id, exc)

    planned: list[Fact] = []
    async with pool.acquire() as conn:
        for fact in kept:
            same = await conn.fetchval(SAME_TEXT, user_id, fact.content, fact.subjects)
            if same is not None:
                plan.confirm.append((same, fact))
                continue
            if any(
                p.content.lower() == fact.content.lower()
                and p.subjects == fact.subjects
                or (
                    p.vector
                    and fact.vector
                    and p.subjects == fact.subjects
                    and _cosine(p.vector, fact.vector) > CONFIRM
                )
                for p in planned
            ):
                plan.dropped.append("repeats another fact of this episode")
                continue
            if fact.vector is not None:
                rows = await conn.fetch(NEAREST, user_id, fact.vector, fact.subjects)
                try:
                    same = None
                    for row in rows:
                        if await is_same(
                            fact.content, row["content"], row["similarity"], same_fact
                        ):
                            same = row["id"]
                            break
                except InvalidModelOutput as exc:
                    plan.review.append((fact, f"equivalence check failed: {exc}"))
                    continue
                if same is not None:
                    plan.confirm.append((same, fact))
                    continue
            planned.append(fact)
    plan.store = planned
    return plan


async def apply_plan(
    conn: Conn,
    plan: FactPlan,
    *,
    user_id: str,
    episode_id: uuid.UUID | None,
    extractor_name: str,
    heuristic: bool,
    limit: int = MAX_FACTS_PER_EPISODE,
    contradicts: Contradicts | None = None,
    standing: bool = False,
) -> FactResult:
    """Write a plan inside the caller's transaction; ``standing``: the plan holds
    standing instructions and preferences (marked ``data.standing``, counted against
    ``limit`` apart from the episode's facts)."""
    result = FactResult(dropped=len(plan.dropped))
    reviews = list(plan.review)
    stored_before = 0
    if episode_id is not None:
        stored_before = int(await conn.fetchval(EPISODE_FACTS, user_id, episode_id, standing) or 0)
    for fact in plan.store:
        same = await conn.fetchval(SAME_TEXT, user_id, fact.content, fact.subjects)
        if same is not None:
            plan.confirm.append((same, fact))
            continue
        if stored_before + len(result.stored) >= limit:
            what = "standing instructions and preferences" if standing else "facts"
            reviews.append((fact, f"over the limit of {limit} new {what} per episode"))
            continue
        c = fact.candidate
        data = {
            "extractor": extractor_name,
            "heuristic": heuristic or c.heuristic,
            "subject": c.subject,
            "about": c.about,
            "stated_by": c.stated_by,
        }
        if standing:
            data["standing"] = True
        by = fact.embedded_by
        item = NewItem(
            type=fact.type,
            content=fact.content,
            category=c.category,
            data=data,
            tags=c.tags,
            subjects=fact.subjects,
            source=c.source,
            source_context=fact.source_context,
            episode_id=episode_id,
            confidence=fact.confidence,
            verified=True,
            vector=fact.vector if by else None,
            embedded_by=(by[0], by[1]) if by else None,
            source_message_id=fact.source_message_id,
            audit={"episode_id": str(episode_id) if episode_id else None},
        )
        written = (
            await insert_items(conn, user_id, [item], actor="extractor", contradicts=contradicts)
        ).items[0]
        if written.confirmed:
            result.confirmed.append(written.id)
            continue
        result.stored.append(written.id)
        if written.embedding_state == "pending":
            result.pending.append(written.id)
        result.superseded += written.superseded
    for memory_id, fact in plan.confirm:
        await confirm(
            conn,
            user_id,
            memory_id,
            source=fact.candidate.source,
            actor="extractor",
            episode_id=episode_id,
            message_id=fact.source_message_id,
            confidence=fact.confidence,
        )
        result.confirmed.append(memory_id)
    for fact, reason in reviews:
        c = fact.candidate
        await conn.execute(
            INSERT_REVIEW,
            user_id,
            episode_id,
            c.subject,
            fact.content,
            c.category,
            fact.confidence,
            c.source,
            fact.source_context,
            reason,
            {
                "about": c.about,
                "stated_by": c.stated_by,
                "tags": c.tags,
                "heuristic": heuristic or c.heuristic,
            },
        )
    result.reviewed = len(reviews)
    return result
