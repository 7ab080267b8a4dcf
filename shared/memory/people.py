"""People a user talks about (Ash): resolution of references like "my wife" or "Sarah".

| reference        | resolution                                                   |
|------------------|--------------------------------------------------------------|
| "my wife"        | strip "my ", find by relation "wife"                         |
| "Sarah"          | find by name or alias                                        |
| "my wife Sarah"  | name "Sarah", relation "wife" (a name may also come from the |
|                  | content hint: "my wife's name is Sarah")                     |
| first mention    | create the person                                            |
| later mention    | the existing person; a newly learned name or alias is added  |

Every statement is scoped by the owner's user id.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

import asyncpg

from shared.errors import InvalidRequest

SELF_REFERENCES = frozenset({"user", "the user", "me", "myself", "i", "self"})

_NAME_IN_HINT = re.compile(
    r"(?:name is|named|called|,)\s+((?-i:[A-Z][a-z]+(?:\s[A-Z][a-z]+)?))"
)
_PAREN = re.compile(r"^(.*?)\s*\((.*?)\)\s*$")

FIND_BY_NAME = """
SELECT id, name, relation, aliases FROM people
WHERE user_id = $1
  AND (lower(name) = lower($2) OR lower($2) = ANY (SELECT lower(a) FROM unnest(aliases) a))
ORDER BY updated_at DESC LIMIT 1
"""

FIND_BY_RELATION = """
SELECT id, name, relation, aliases FROM people
WHERE user_id = $1 AND lower(relation) = lower($2) AND ($3::text IS NULL OR name IS NULL)
ORDER BY updated_at DESC LIMIT 1
"""

INSERT_PERSON = """
INSERT INTO people (user_id, name, relation, aliases) VALUES ($1, $2, $3, $4)
RETURNING id, name, relation, aliases
"""

UPDATE_PERSON = """
UPDATE people
SET name = coalesce(name, $3), relation = coalesce(relation, $4),
    aliases = ARRAY(SELECT DISTINCT a FROM unnest(aliases || $5::text[]) a),
    updated_at = now()
WHERE id = $1 AND user_id = $2
RETURNING id, name, relation, aliases
"""

KNOWN_PEOPLE = """
SELECT id, name, relation, aliases FROM people WHERE user_id = $1 ORDER BY name NULLS LAST, relation
"""


@dataclass(frozen=True)
class Person:
    id: uuid.UUID
    name: str | None
    relation: str | None
    aliases: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        if self.name and self.relation:
            return f"{self.name} ({self.relation})"
        return self.name or f"the user's {self.relation}"


@dataclass(frozen=True)
class PersonResolution:
    person_id: uuid.UUID
    created: bool
    person_name: str


def _person(row: asyncpg.Record) -> Person:
    return Person(row["id"], row["name"], row["relation"], tuple(row["aliases"] or ()))


def parse_reference(
    reference: str, content_hint: str | None = None
) -> tuple[str | None, str | None]:
    """(name, relation) of a reference: "my wife Sarah" → ("Sarah", "wife")."""
    ref = " ".join(reference.strip().split())
    m = _PAREN.match(ref)  # "Sarah (my wife)" / "my wife (Sarah)"
    if m:
        a, b = parse_reference(m.group(1)), parse_reference(m.group(2))
        return a[0] or b[0], a[1] or b[1]
    name: str | None = None
    relation: str | None = None
    low = ref.lower()
    for prefix in ("my ", "our ", "the user's ", "user's "):
        if low.startswith(prefix):
            rest = ref[len(prefix):]
            words = rest.split()
            # a trailing capitalised word (or two) is the name: "my best friend Sam Lee"
            split = len(words)
            while split > 1 and words[split - 1][:1].isupper():
                split -= 1
            relation = " ".join(words[:split]).lower().removesuffix("'s") or None
            name = " ".join(words[split:]) or None
            break
    else:
        name = ref or None
    if name is None and relation and content_hint:
        hint = _NAME_IN_HINT.search(content_hint)
        if hint:
            name = hint.group(1)
    return name, relation


async def find_person(conn: asyncpg.Connection, user_id: str, reference: str) -> Person | None:
    """The user's person a reference names, or None."""
    name, relation = parse_reference(reference)
    if name:
        row = await conn.fetchrow(FIND_BY_NAME, user_id, name)
        if row is not None:
            return _person(row)
    if relation:
        row = await conn.fetchrow(FIND_BY_RELATION, user_id, relation, None)
        if row is not None:
            return _person(row)
    row = await conn.fetchrow(FIND_BY_NAME, user_id, reference.strip())
    return _person(row) if row is not None else None


async def resolve_or_create_person(
    conn: asyncpg.Connection, user_id: str, reference: str, content_hint: str | None = None
) -> PersonResolution:
    """Find the person a reference names, or create them; learn a new name or alias.

    Call inside a transaction; concurrent resolutions for one user are serialised."""
    name, relation = parse_reference(reference, content_hint)
    if not name and not relation:
        raise InvalidRequest(f"cannot tell who {reference!r} is")
    if reference.strip().lower() in SELF_REFERENCES:
        raise InvalidRequest("the user is not one of their own people")
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext('people:' || $1))", user_id)
    row = None
    if name:
        row = await conn.fetchrow(FIND_BY_NAME, user_id, name)
        if row is not None and relation and row["relation"] and \
                row["relation"].lower() != relation:
            row = None  # "my boss Sam" is not "my brother Sam"
    if row is None and relation:
        row = await conn.fetchrow(FIND_BY_RELATION, user_id, relation, name)
    aliases = [a for a in {reference.strip(), name or "", f"my {relation}" if relation else ""}
               if a]
    if row is None:
        row = await conn.fetchrow(INSERT_PERSON, user_id, name, relation, aliases)
        assert row is not None
        p = _person(row)
        return PersonResolution(p.id, True, p.name or p.label)
    row = await conn.fetchrow(UPDATE_PERSON, row["id"], user_id, name, relation, aliases)
    assert row is not None
    p = _person(row)
    return PersonResolution(p.id, False, p.name or p.label)


async def known_people(conn: asyncpg.Connection | asyncpg.Pool, user_id: str) -> list[Person]:
    """The user's people, for the "Known People" part of a prompt."""
    return [_person(r) for r in await conn.fetch(KNOWN_PEOPLE, user_id)]
