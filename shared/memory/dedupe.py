"""Duplicates: a memory said again confirms the one already kept (Nous's bands).

Two live memories of the same owner, scope (personal, or the same chat),
namespace and subject set are the same memory when

- their text is the same, ignoring case, runs of white space and end punctuation
  (``memory_content_key`` in migration 0110): the writer's ``INSERT ... ON
  CONFLICT`` on the live-content key confirms the existing row, so two identical
  adds racing store one row;
- or, once both have vectors of the same model, their cosine similarity is
  ≥ :data:`CONFIRM` (0.90), or in Nous's band [:data:`ASK`, :data:`CONFIRM`) and
  the model says they state the same thing (``same``: the extractor's
  ``same_fact``), or, with no model, :func:`same_offline` says so;
- or their content words are the same and their similarity is at least
  :data:`SAME_WORDS` (0.60): "I live in Silver Spring" and "The user lives in
  Silver Spring" are 0.67 apart with the local model, below Nous's band.

In every band :func:`differ` vetoes a merge when the two evidently state
different things (another number, a negation on one side only, the same
attribute with another value): "likes window seats" and "likes aisle seats" can
be 0.9 similar.

The band check needs both vectors, which the embedder computes after the add.
:func:`merge_duplicate` runs when a memory's vector is ready (the writer, for a
memory stored with its vector; the supersession consumer, when the embedder
reports it), under the owner's lock that supersession takes, so concurrent
checks of one user are serialised. The older memory survives; the newer one is
marked ``merged`` and superseded by it (kept for history, out of retrieval) with
an audit line ``merge``, and the survivor counts it as a confirmation. Episodes (one row per
occurrence) and Navi's keyed facts (one value per key) are never merged.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from shared.db import Conn, audit
from shared.memory.supersession import AUDIT_ENTITY, LOCK, attribute_of, live_under_lock

__all__ = ["ASK", "CONFIRM", "Merged", "SameFact", "differ", "merge_duplicate", "same_offline"]

CONFIRM = 0.90
ASK = 0.80
SAME_WORDS = 0.60
"""Below Nous's band, down to here, two texts with the same content words are one memory
(the local model puts "I live in X" and "The user lives in X" at 0.67)."""
MAX_SOURCES = 50
"""A memory keeps the origins of its last 50 confirmations (``sources``)."""

SameFact = Callable[[str, str], Awaitable[bool]]
"""``same(a, b)``: whether two statements say the same thing (a model's check)."""

# What a confirmation appends to ``sources`` ($1 source, $2 actor, $3 episode, $4 message,
# $5 the memory merged, if any); the oldest falls off past MAX_SOURCES.
SOURCE_ENTRY = """jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
    'source', {0}::text, 'actor', {1}::text, 'episode_id', {2}::uuid,
    'message_id', {3}::bigint, 'memory_id', {4}::uuid,
    'at', clock_timestamp())))"""
APPEND_SOURCE = (
    "(SELECT coalesce(jsonb_agg(e ORDER BY n), '[]') FROM (SELECT e, n FROM "
    "jsonb_array_elements({sources} || {entry}) WITH ORDINALITY AS t (e, n) "
    f"ORDER BY n DESC LIMIT {MAX_SOURCES}) AS kept)"
)

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_NUMBER = re.compile(
    r"(?i)\d+(?:[.,]\d+)?|\b(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|"
    r"eleven|twelve|twenty|thirty|forty|fifty|hundred|thousand|first|second|third|fourth|"
    r"fifth|once|twice|single|double|triple|half|monday|tuesday|wednesday|thursday|friday|"
    r"saturday|sunday|weekends?|weekdays?|january|february|march|april|may|june|july|"
    r"august|september|october|november|december|today|tomorrow|yesterday|morning|"
    r"afternoon|evening|night)\b"
)
_NEGATION = re.compile(
    r"(?i)\b(?:not|no|never|n't|dislikes?|hates?|doesn't|don't|didn't|isn't|wasn't|won't|"
    r"can't|cannot|stopped|quit|no longer)\b"
)
_STOP = frozenset(
    """a an the and or but of to in on at for with from by as is am are was were be been being
    has have had do does did it its this that these those there their they them he she his
    her him i me my mine myself i'm i've i'd i'll we our you your user user's really very
    just also so too
    now currently still always usually like likes liked""".split()
)


def _stem(word: str) -> str:
    """A light stem: ``goes``/``go``, ``writes``/``write``, ``running``/``run`` meet."""
    for suffix in ("ing", "ies", "ed", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            word = word[: -len(suffix)] + ("y" if suffix == "ies" else "")
            break
    if len(word) > 2 and word.endswith("e"):
        word = word[:-1]
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiou":
        word = word[:-1]
    return word


def words_of(text: str) -> set[str]:
    """The content words of ``text``, lightly stemmed (``likes``, ``liked`` -> ``lik``)."""
    return {_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}


def differ(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` evidently state different things, however similar:
    other numbers or times (days, months, parts of the day), a negation on one side
    only, or the same attribute
    (:func:`~shared.memory.supersession.attribute_of`) with another value."""
    if {n.lower() for n in _NUMBER.findall(a)} != {n.lower() for n in _NUMBER.findall(b)}:
        return True
    if bool(_NEGATION.search(a)) != bool(_NEGATION.search(b)):
        return True
    x, y = attribute_of(a), attribute_of(b)
    return x is not None and y is not None and (_whose(x[0]), x[1]) != (_whose(y[0]), y[1])


def _whose(key: str) -> str:
    """An attribute's key with the user's own possessive dropped ("my sister", "user's
    sister": "sister")."""
    return re.sub(r"^(?:my|user's|user) ", "", key)


def same_offline(a: str, b: str) -> bool:
    """The offline rule for Nous's 0.80-0.90 band: same content words (lightly
    stemmed, stop words and self-references dropped), or one's words all within the
    other's with at most one word more, and not :func:`differ`."""
    if differ(a, b):
        return False
    wa, wb = words_of(a), words_of(b)
    if not wa or not wb:
        return False
    small, large = (wa, wb) if len(wa) <= len(wb) else (wb, wa)
    return small <= large and len(large) - len(small) <= 1


async def is_same(a: str, b: str, similarity: float, same: SameFact | None) -> str | None:
    """Which rule makes ``a`` and ``b`` one memory at ``similarity``, or None: never when
    they :func:`differ`; from 0.90 always; from :data:`SAME_WORDS` when their content
    words are the same; in [0.80, 0.90) when the model (``same``) says so, or with no
    model :func:`same_offline`."""
    if similarity < SAME_WORDS or differ(a, b):
        return None
    if similarity >= CONFIRM:
        return "similarity"
    wa = words_of(a)
    if wa and wa == words_of(b):
        return "same words"
    if similarity < ASK:
        return None
    if same is not None:
        return "model" if await same(a, b) else None
    return "offline rule" if same_offline(a, b) else None


@dataclass(frozen=True)
class Merged:
    """``merged`` was found to say what ``survivor`` says, by ``rule``."""

    survivor: uuid.UUID
    merged: uuid.UUID
    similarity: float
    rule: str


LOAD = """
SELECT id, user_id, content, created_at, status, superseded_at, embedding_state, dedupe_key
FROM memory_items WHERE id = $1
"""

# The live memories of the same owner, scope, chat, namespace and subject set nearest
# to $1 (same embedding model, similarity >= $2), most similar first.
NEAREST = """
WITH m AS (SELECT * FROM memory_items WHERE id = $1)
SELECT o.id, o.content, (o.created_at, o.id) > (m.created_at, m.id) AS newer,
       1 - (o.embedding <=> m.embedding) AS similarity
FROM memory_items o, m
WHERE o.user_id = m.user_id AND o.id <> m.id
  AND o.scope = m.scope
  AND o.provider IS NOT DISTINCT FROM m.provider
  AND o.chat_id IS NOT DISTINCT FROM m.chat_id
  AND o.namespace = m.namespace
  AND o.subjects @> m.subjects AND o.subjects <@ m.subjects
  AND o.dedupe_key IS NOT NULL
  AND o.status = 'active' AND o.superseded_at IS NULL
  AND o.embedding_state = 'ready'
  AND o.embedding_model IS NOT DISTINCT FROM m.embedding_model
  AND 1 - (o.embedding <=> m.embedding) >= $2
ORDER BY o.embedding <=> m.embedding, o.created_at, o.id
LIMIT 5
"""

MARK_MERGED = """
UPDATE memory_items
SET status = 'merged', superseded_at = now(), superseded_by = $2, updated_at = now()
WHERE id = $1 AND status = 'active' AND superseded_at IS NULL
RETURNING source, episode_id, source_message_id, created_at, confirmations, sources,
          importance, confidence, last_confirmed_at
"""

COUNT_MERGED = f"""
UPDATE memory_items m
SET confirmations = m.confirmations + 1 + $3,
    last_confirmed_at = greatest(m.last_confirmed_at, $4::timestamptz),
    sources = {APPEND_SOURCE.format(sources="m.sources", entry="$5::jsonb")},
    importance = greatest(m.importance, $6),
    confidence = greatest(m.confidence, $7),
    updated_at = now()
WHERE id = $1 AND user_id = $2
"""

# The memory a confirmation counts on: $1, or the one it was merged into (and so on).
SURVIVOR = """
WITH RECURSIVE chain (id, status, next, depth) AS (
    SELECT id, status, superseded_by, 0 FROM memory_items WHERE id = $1 AND user_id = $2
    UNION ALL
    SELECT m.id, m.status, m.superseded_by, c.depth + 1
    FROM memory_items m JOIN chain c ON m.id = c.next
    WHERE c.status = 'merged' AND c.depth < 20
)
SELECT id FROM chain ORDER BY depth DESC LIMIT 1
"""

CONFIRM_ITEM = f"""
UPDATE memory_items m
SET confirmations = m.confirmations + 1, last_confirmed_at = clock_timestamp(),
    last_verified_at = now(), updated_at = now(),
    sources = {
    APPEND_SOURCE.format(
        sources="m.sources", entry=SOURCE_ENTRY.format("$3", "$4", "$5", "$6", "NULL")
    )
},
    confidence = greatest(m.confidence, $7)
WHERE id = $1 AND user_id = $2
"""


async def confirm(
    conn: Conn,
    user_id: str,
    memory_id: uuid.UUID,
    *,
    source: str | None,
    actor: str,
    episode_id: uuid.UUID | None = None,
    message_id: int | None = None,
    confidence: float | None = None,
) -> None:
    """Count one confirmation of ``memory_id`` (said again, found the same before storing;
    or, if it was merged since, of the memory it was merged into), with an audit line
    ``confirm``. Takes the owner's lock, as :func:`merge_duplicate` does, so a merge
    cannot lose the count."""
    await conn.execute(LOCK, user_id)
    memory_id = await conn.fetchval(SURVIVOR, memory_id, user_id) or memory_id
    await conn.execute(
        CONFIRM_ITEM, memory_id, user_id, source, actor, episode_id, message_id, confidence
    )
    await audit(
        conn,
        user_id=user_id,
        actor=actor,
        action="confirm",
        entity=AUDIT_ENTITY,
        entity_id=str(memory_id),
        details={"source": source, "episode_id": str(episode_id) if episode_id else None},
    )


async def merge_duplicate(
    conn: Conn, memory_id: uuid.UUID, *, actor: str = "system", same: SameFact | None = None
) -> Merged | None:
    """If ``memory_id`` says what another live memory says, merge the newer of the two
    into the older; return what was merged (None: nothing, or not ready yet).
    Idempotent; runs in a transaction of its own (a savepoint inside the caller's)."""
    async with conn.transaction():
        row = await live_under_lock(conn, memory_id, LOAD, lambda r: r["dedupe_key"] is not None)
        if row is None:
            return None
        user_id: str = row["user_id"]
        for other in await conn.fetch(NEAREST, memory_id, SAME_WORDS):
            rule = await is_same(row["content"], other["content"], other["similarity"], same)
            if rule is None:
                continue
            survivor, merged = (
                (memory_id, other["id"]) if other["newer"] else (other["id"], memory_id)
            )
            similarity = float(other["similarity"])
            await _merge(conn, user_id, survivor, merged, similarity, rule, actor)
            return Merged(survivor, merged, similarity, rule)
        return None


async def _merge(
    conn: Conn,
    user_id: str,
    survivor: uuid.UUID,
    merged: uuid.UUID,
    similarity: float,
    rule: str,
    actor: str,
) -> None:
    gone = await conn.fetchrow(MARK_MERGED, merged, survivor)
    if gone is None:
        return
    entry: list[dict[str, Any]] = [
        {
            k: v
            for k, v in {
                "source": gone["source"],
                "actor": actor,
                "episode_id": str(gone["episode_id"]) if gone["episode_id"] else None,
                "message_id": gone["source_message_id"],
                "memory_id": str(merged),
                "at": gone["created_at"].isoformat(),
            }.items()
            if v is not None
        }
    ]
    await conn.execute(
        COUNT_MERGED,
        survivor,
        user_id,
        gone["confirmations"],
        gone["last_confirmed_at"] or gone["created_at"],
        entry + list(gone["sources"] or [])[-(MAX_SOURCES - 1) :],
        gone["importance"],
        gone["confidence"],
    )
    await audit(
        conn,
        user_id=user_id,
        actor=actor,
        action="merge",
        entity=AUDIT_ENTITY,
        entity_id=str(merged),
        details={"into": str(survivor), "similarity": round(similarity, 4), "rule": rule},
    )
