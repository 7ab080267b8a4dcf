"""Supersession: a newer memory that contradicts an older one replaces it.

Ash's rule is the necessary condition: the same owner, the same scope
(personal, or the same chat), exactly the same subjects, and cosine similarity
≥ 0.75 between vectors of the same embedding model. What makes it sufficient is
that both give a value to the *same attribute* (Navi's category/key): "favourite
colour is red" -> "favourite colour is blue", "lives in Paris" -> "lives in
Berlin", "likes sushi" -> "hates sushi". The attribute and its value are
:func:`attribute_of` the content; a conflict is the same attribute with a
different value. Two memories with different attributes never conflict,
however similar ("loves creating art" and "loves that Melanie chose
pottery"). A near-paraphrase (same
attribute, same value) does not supersede either. When either attribute is
unknown the pair conflicts only if ``contradicts`` (a model's check, when one is
configured, asked from similarity 0.80 as Nous does) says so; without one it
does not. The model call runs inside the caller's transaction, so it is kept to
those rare undecided pairs.

The older one gets ``superseded_at`` and ``superseded_by`` (the newer one's id),
its validity closes (``valid_to``: where the newer one's ``valid_from`` starts),
and it leaves default retrieval; it stays in the table for history, and for
``as_of`` reads of what was true before the change. Different
subjects never conflict. An observation (consolidation's summary of related memories,
``services/extractor/consolidation.py``) neither supersedes nor is superseded: it
restates its evidence, it does not replace it.

The check needs the memory's vector. Call :func:`check_supersession` when the
vector is ready: right after storing when it was embedded inline, or when the
embedder reports ``MemoryChanged(change="embedded")``. It is idempotent and also
handles the out-of-order case (the newer memory was embedded first): the older
one is then superseded when its own vector arrives.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable

from asyncpg import Record

from shared.db import Conn, audit

AUDIT_ENTITY = "memory"
"""The audit log's ``entity`` for every change to a ``memory_items`` row (the one name)."""

THRESHOLD = 0.75
ASK_MODEL = 0.80  # Nous's band: a model is asked only about pairs this similar

Contradicts = Callable[[str, str], Awaitable[bool | None]]
"""``contradicts(older, newer)``: whether the newer statement replaces the older one
(None: cannot tell)."""

# Single-valued attributes: a person has one of each at a time.
_OWN = (
    r"name|nickname|age|birthday|birth ?date|job|job title|occupation|profession|role|title|"
    r"employer|company|boss|manager|email(?: address)?|phone(?: number)?|address|home ?town|"
    r"city|country|nationality|time ?zone|first language|native language|religion|height|"
    r"weight|salary|school|university|college|major|wife|husband|partner|spouse|girlfriend|"
    r"boyfriend|fianc[ée]e?|car|dog|cat|pet|team|doctor|dentist|landlord|shoe size|"
    r"(?:favou?rite|preferred|least favou?rite) [\w -]{2,30}?"
)
_POSSESSIVE = re.compile(
    rf"(?i)^(?P<who>[\w .'-]{{0,40}}?)(?:'s?|\bmy|\bthe user's|\bhis|\bher|\btheir)\s+"
    rf"(?P<attr>{_OWN})(?:'s name)?\s+(?:is|was|are|=|:|has become|became|is now|changed to)\b"
)
_SCHEDULED = re.compile(
    r"(?i)\b(?P<attr>(?:[a-z]+ )?(?:appointment|meeting|deadline|flight|interview|exam|wedding|"
    r"party|surgery|check-?up|reservation|class|trip))\s+(?:is|was|has been moved|moved)\s+"
    r"(?:on|at|to|for)\b"
)
_VERB_ATTRS = [
    (re.compile(r"(?i)\b(?:lives|living|live|moved|moves|relocated) (?:in|to)\b"), "residence"),
    (re.compile(r"(?i)\b(?:is|am|are) (?:now )?(?:based|located) in\b"), "residence"),
    (
        re.compile(r"(?i)\b(?:works|working|work|is employed|started working) (?:at|for)\b"),
        "employer",
    ),
    (re.compile(r"(?i)\b(?:works|working|work|is employed) as\b"), "occupation"),
    (re.compile(r"(?i)\b(?:is|am|are|turned|turns) \d{1,3}(?: years? old)?\b"), "age"),
    (
        re.compile(
            r"(?i)\b(?:is|am|are) (?:now )?(?:single|married|engaged|divorced|widowed|"
            r"separated|in a relationship)\b"
        ),
        "relationship status",
    ),
    (
        re.compile(r"(?i)\b(?:prefers to be called|goes by|wants to be called|is called)\b"),
        "preferred name",
    ),
    (
        re.compile(r"(?i)\b(?:is|am|are) (?:a )?(?:vegetarian|vegan|pescatarian|carnivore)\b"),
        "diet",
    ),
]
_LIKING = re.compile(
    r"(?i)\b(?:likes|loves|enjoys|adores|is a fan of|dislikes|hates|detests|can't stand|"
    r"cannot stand|does not like|doesn't like|no longer likes|is not a fan of|isn't a fan of|"
    r"has gone off|stopped liking|is allergic to|is no longer allergic to)\s+(?P<what>.+)$"
)
_ARTICLE = re.compile(r"(?i)^(?:the|a|an|some|any)\s+")
# Standing instructions (shared.llm.standing): "Always <do X> when Tim asks about <Y>":
# one instruction per occasion, so a later one for the same occasion replaces it.
_INSTRUCTION = re.compile(
    r"(?i)^(?P<do>(?:always|never|don't ever|do not ever)\s.+?)\s+(?:when(?:ever)?|every time|"
    r"each time)\s+(?P<who>[\w .'-]{1,40}?)\s+(?:asks?|needs?|wants?|requests?)\s+"
    r"(?:about|for)\s+(?P<topic>.+)$"
)
# Preferences between two things: "Tim prefers Word over Google Docs (due to ...)":
# one choice per pair, so "prefers Google Docs over Word" replaces it.
_CHOICE = re.compile(
    r"(?i)^(?P<who>[\w .'-]{0,40}?)\s*(?:now |still |really )?(?:prefers|would rather)\s+"
    r"(?:using |to use |working with |writing in )?(?P<a>.+?)\s+(?:over|rather than|"
    r"instead of|than)\s+(?:using |to use |working with |writing in )?(?P<b>.+)$"
)
_TAIL = re.compile(r"(?i)\s+(?:due to|because|since|for|as|so|which|while|to|now|when)\s.*$|,.*$")


_NEGATIVE = re.compile(
    r"(?i)^(?:dislikes|hates|detests|can't stand|cannot stand|does not like|doesn't like|"
    r"no longer likes|is not a fan of|isn't a fan of|has gone off|stopped liking)"
)


def attribute_of(content: str) -> tuple[str, str] | None:
    """The single-valued attribute a statement sets (Navi's key) and its value, or None.

    The key holds whose attribute it is, as written: "User's favorite color is
    red" -> ("user: favorite color", "red"); "Always use APA style when Tim asks
    about references" -> ("tim: instruction: references", "always use apa style");
    "Tim prefers Word over Google Docs" -> ("tim: choice: google docs | word",
    "word"); "Tim lives in Paris" -> ("tim:
    residence", "paris"); "Tim's sister lives in Rome" -> ("tim's sister:
    residence", "rome"); "Tim hates sushi" -> ("tim: liking: sushi", "no").
    Statements that add to what is known ("loves creating art", "went to a
    support group") have none."""
    text = " ".join(content.strip().rstrip(".!").split())
    m = _INSTRUCTION.search(text)
    if m:
        return f"{_who(m.group('who'))}: instruction: {_value(m.group('topic'))}", _value(
            m.group("do")
        )
    m = _CHOICE.search(text)
    if m:
        a = _value(_ARTICLE.sub("", m.group("a")))
        b = _value(_ARTICLE.sub("", _TAIL.sub("", m.group("b"))))
        if a and b and len(a.split()) <= 6 and len(b.split()) <= 6:
            pair = " | ".join(sorted((a, b)))
            return f"{_who(m.group('who'))}: choice: {pair}", a
    m = _POSSESSIVE.search(text)
    if m:
        attr = m.group("attr").lower().replace("favourite", "favorite").replace("colour", "color")
        attr = " ".join(attr.split())
        return f"{_who(m.group('who'))}: {attr}", _value(text[m.end() :])
    m = _SCHEDULED.search(text)
    if m:
        return f"{_who(text[: m.start()])}: {m.group('attr').lower()} time", _value(text[m.end() :])
    for pattern, attr in _VERB_ATTRS:
        v = pattern.search(text)
        if v:
            return f"{_who(text[: v.start()])}: {attr}", _value(text[v.end() :]) or _value(
                v.group(0)
            )
    m = _LIKING.search(text)
    if m:
        what = _ARTICLE.sub("", m.group("what").lower()).strip(" .")
        if 0 < len(what.split()) <= 4:
            verb = text[m.start() : m.start("what")].strip()
            who = _who(text[: m.start()])
            return f"{who}: liking: {what}", "no" if _NEGATIVE.match(verb) else "yes"
    return None


_FILLER = frozenset(
    "the a an now named called is am are was were years year old in at to for on of".split()
)


def _who(text: str) -> str:
    """Whose attribute: as written, with "", "I", "my" and "the user" all the user."""
    words = re.findall(r"[a-z0-9']+", text.lower())
    who = " ".join(w for w in words if w not in _FILLER and w not in ("now", "currently"))
    return "user" if who in ("", "i", "me", "my", "user", "user's") else who


def _value(text: str) -> str:
    words = re.findall(r"[a-z0-9@.]+", text.lower())
    return " ".join(w.strip(".") for w in words if w not in _FILLER)


def can_conflict(content: str, contradicts: Contradicts | None) -> bool:
    """Whether a memory so worded can conflict with any other: only through its
    attribute, or through the model when one is asked (:func:`conflict`)."""
    return contradicts is not None or attribute_of(content) is not None


WORDING = "SELECT id, content FROM memory_items WHERE id = ANY($1::uuid[])"


async def worth_checking(
    conn: Conn, ids: list[uuid.UUID], contradicts: Contradicts | None = None
) -> list[uuid.UUID]:
    """Those of ``ids`` that :func:`can_conflict` (one read for all), in their order:
    most memories set no attribute, and with no model nothing can replace them or be
    replaced by them, so their check (a lock and a scan of the owner's vectors) is
    skipped."""
    if contradicts is not None:
        return ids
    can = {r["id"] for r in await conn.fetch(WORDING, ids) if can_conflict(r["content"], None)}
    return [i for i in ids if i in can]


LOAD = """
SELECT id, user_id, scope, provider, chat_id, subjects, created_at, embedding_model,
       embedding_state, status, superseded_at, content, type
FROM memory_items WHERE id = $1
"""

# Live memories that conflict with $1: same owner, scope, chat and subject set,
# same embedding model, similar enough. ``newer`` says on which side of $1 they are.
CONFLICTS = """
WITH m AS (SELECT * FROM memory_items WHERE id = $1)
SELECT o.id, (o.created_at, o.id) > (m.created_at, m.id) AS newer,
       1 - (o.embedding <=> m.embedding) AS similarity, o.content
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
  AND o.type <> 'observation'
  AND 1 - (o.embedding <=> m.embedding) >= $2
ORDER BY o.created_at DESC, o.id DESC
"""

# Superseding closes the older one's validity where the newer one's starts (never
# before it began itself, never after it expired): "what was true on T" then reads
# the older value before the change and the newer one after (migration 0100).
MARK = """
UPDATE memory_items o
SET superseded_at = now(), superseded_by = $3, updated_at = now(),
    valid_to = least(o.expires_at, greatest(o.valid_from, n.valid_from))
FROM memory_items n
WHERE o.user_id = $1 AND o.id = ANY($2::uuid[]) AND o.superseded_at IS NULL
  AND n.id = $3 AND n.user_id = $1
RETURNING o.id
"""

LOCK = "SELECT pg_advisory_xact_lock(hashtext('engram.supersede:' || $1))"


async def live_under_lock(
    conn: Conn, memory_id: uuid.UUID, load: str, wanted: Callable[[Record], bool]
) -> Record | None:
    """The memory's row (read by ``load``), re-read under its owner's lock, when
    ``wanted`` says a check of it may change something and it is live and embedded;
    else None. The lock serialises the checks of one user (supersession, duplicates)."""
    row = await conn.fetchrow(load, memory_id)
    if row is None or not wanted(row):
        return None
    await conn.execute(LOCK, row["user_id"])
    row = await conn.fetchrow(load, memory_id)  # re-read under the lock
    if (
        row is None
        or row["status"] != "active"
        or row["superseded_at"] is not None
        or row["embedding_state"] != "ready"
    ):
        return None
    return row


async def conflict(older: str, newer: str, contradicts: Contradicts | None = None) -> bool:
    """Whether statement ``newer`` replaces ``older`` (already similar under Ash's rule):
    both set the same attribute to different values. When either attribute is unknown,
    only the model may say so (no model: no conflict)."""
    a, b = attribute_of(older), attribute_of(newer)
    if a is not None and b is not None:
        return a[0] == b[0] and a[1] != b[1]
    if contradicts is None:
        return False
    return bool(await contradicts(older, newer))


async def check_supersession(
    conn: Conn,
    memory_id: uuid.UUID,
    *,
    threshold: float = THRESHOLD,
    actor: str = "system",
    contradicts: Contradicts | None = None,
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
        row = await live_under_lock(
            conn,
            memory_id,
            LOAD,
            lambda r: r["type"] != "observation" and can_conflict(r["content"], contradicts),
        )
        if row is None:
            return []
        user_id: str = row["user_id"]
        similar = await conn.fetch(CONFLICTS, memory_id, threshold)
        conflicts = []
        for r in similar:
            first, second = (row, r) if r["newer"] else (r, row)
            ask = contradicts if r["similarity"] >= ASK_MODEL else None
            if await conflict(first["content"], second["content"], ask):
                conflicts.append(r)
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
