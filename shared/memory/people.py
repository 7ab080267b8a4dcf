"""People a user has told the assistant about, and resolving references to them.

Ash's resolution table: "my wife" → the person whose relation is wife;
"Sarah" → by name or alias; "my wife Sarah" → one person with both. The first
mention creates the person, later mentions link to it, and every new way of
referring to them is added to ``aliases``. A missing half is taken from the fact
being stored when it says so ("my wife's name is Sarah").

Every statement is scoped by ``user_id`` (the owner). Writers take a per-owner
advisory lock inside a transaction, so two concurrent first mentions make one
person (the unique index on ``(user_id, lower(name))`` backs this up).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

from shared.db import Conn, Executor, audit
from shared.erasure import ensure_user
from shared.errors import InvalidRequest
from shared.memory.references import (
    PersonRef,
    clean,
    name_from_hint,
    relation_from_hint,
)
from shared.memory.references import parse_reference as _parse

# References to the user themself: never one of their people.
SELF_REFERENCES = frozenset({"user", "the user", "me", "myself", "i", "self"})

MAX_REFERENCE = 200

_COLUMNS = "id, user_id, name, relation, aliases, metadata, created_at, updated_at"

BY_NAME = f"""
SELECT {_COLUMNS} FROM people
WHERE user_id = $1
  AND (lower(name) = lower($2)
       OR lower($2) = ANY (SELECT lower(a) FROM unnest(aliases) AS a))
ORDER BY (lower(name) = lower($2)) DESC NULLS LAST, updated_at DESC
LIMIT 1
"""

BY_RELATION = f"""
SELECT {_COLUMNS} FROM people
WHERE user_id = $1
  AND (lower(relation) = lower($2)
       OR lower('my ' || $2) = ANY (SELECT lower(a) FROM unnest(aliases) AS a))
ORDER BY (lower(relation) = lower($2)) DESC NULLS LAST, updated_at DESC
LIMIT 1
"""

BY_IDS = f"SELECT {_COLUMNS} FROM people WHERE user_id = $1 AND id = ANY($2::uuid[])"

LIST = f"SELECT {_COLUMNS} FROM people WHERE user_id = $1 ORDER BY lower(coalesce(name, relation))"

INSERT = f"""
INSERT INTO people (user_id, name, relation, aliases)
VALUES ($1, $2, $3, $4)
RETURNING {_COLUMNS}
"""

UPDATE = f"""
UPDATE people SET name = $3, relation = $4, aliases = $5, updated_at = now()
WHERE user_id = $1 AND id = $2
RETURNING {_COLUMNS}
"""

LOCK = "SELECT pg_advisory_xact_lock(hashtext('engram.people:' || $1))"


@dataclass(frozen=True)
class Person:
    id: uuid.UUID
    user_id: str
    name: str | None
    relation: str | None
    aliases: list[str]
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime

    @property
    def label(self) -> str:
        """How context names this person: the name, else "the user's wife"."""
        if self.name:
            return self.name
        return f"the user's {self.relation}"

    def public(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "name": self.name,
            "relation": self.relation,
            "aliases": self.aliases,
            "metadata": self.metadata,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


@dataclass(frozen=True)
class Resolution:
    """The person a reference resolved to and whether this call created them."""

    person: Person
    created: bool
    reference: str
    changes: list[str] = field(default_factory=list)


def _person(row: asyncpg.Record) -> Person:
    return Person(
        id=row["id"],
        user_id=row["user_id"],
        name=row["name"],
        relation=row["relation"],
        aliases=list(row["aliases"] or []),
        metadata=dict(row["metadata"] or {}),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def check_reference(reference: str) -> PersonRef:
    """Parse a caller's reference; an empty or overlong one is an InvalidRequest."""
    if len(reference) > MAX_REFERENCE:
        raise InvalidRequest(f"a person reference is at most {MAX_REFERENCE} characters")
    if clean(reference).lower() in SELF_REFERENCES:
        raise InvalidRequest("the user is not one of their own people")
    ref = _parse(reference)
    if not ref.text or (ref.name is None and ref.relation is None):
        raise InvalidRequest(f"{reference!r} does not name a person")
    return ref


async def _lookup(conn: Executor, user_id: str, ref: PersonRef) -> Person | None:
    if ref.name:
        row = await conn.fetchrow(BY_NAME, user_id, ref.name)
        if row is not None:
            return _person(row)
        if ref.relation:
            row = await conn.fetchrow(BY_RELATION, user_id, ref.relation)
            # "my wife Sarah" links to the wife only if she has no other name yet.
            if row is not None and row["name"] is None:
                return _person(row)
        return None
    if ref.relation:
        row = await conn.fetchrow(BY_RELATION, user_id, ref.relation)
        if row is not None:
            return _person(row)
        row = await conn.fetchrow(BY_NAME, user_id, ref.text)
        return _person(row) if row is not None else None
    return None


async def find_person(conn: Executor, user_id: str, reference: str) -> Person | None:
    """The person ``reference`` names for this user, or None. Never creates anyone."""
    ref = _parse(reference)
    if not ref.text:
        return None
    return await _lookup(conn, user_id, ref)


async def list_people(conn: Executor, user_id: str) -> list[Person]:
    """The user's known people, by name."""
    return [_person(r) for r in await conn.fetch(LIST, user_id)]


async def people_by_id(
    conn: Executor, user_id: str, ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, Person]:
    if not ids:
        return {}
    rows = await conn.fetch(BY_IDS, user_id, list(set(ids)))
    return {r["id"]: _person(r) for r in rows}


def _add_alias(aliases: list[str], alias: str | None) -> list[str]:
    if alias and alias.lower() not in {a.lower() for a in aliases}:
        return [*aliases, alias]
    return aliases


async def resolve_person(
    conn: Conn,
    user_id: str,
    reference: str,
    *,
    content_hint: str | None = None,
    actor: str = "system",
) -> Resolution:
    """Find or create the person ``reference`` names; fill in what it newly tells us.

    A reference with only a relation ("my wife") takes its name from
    ``content_hint`` when the fact states it, and a name ("Sarah") its relation
    ("Sarah is my wife"). Runs in a transaction of its own (a savepoint when the
    caller already has one). Raises InvalidRequest for a reference naming nobody.
    """
    ref = check_reference(reference)
    name, relation = ref.name, ref.relation
    if name is None and relation is not None:
        name = name_from_hint(relation, content_hint)
    if relation is None and name is not None:
        relation = relation_from_hint(name, content_hint)
    async with conn.transaction():
        await ensure_user(conn, user_id)
        await conn.execute(LOCK, user_id)
        person = await _lookup(conn, user_id, PersonRef(ref.text, name, relation))
        if person is None and name is not None and relation is not None:
            # The hint's half may not fit an existing person; match on what was said.
            person = await _lookup(conn, user_id, ref)
        if person is None:
            aliases = _add_alias([ref.text], name)
            row = await conn.fetchrow(INSERT, user_id, name, relation, aliases)
            assert row is not None
            created = _person(row)
            await audit(
                conn,
                user_id=user_id,
                actor=actor,
                action="create",
                entity="person",
                entity_id=str(created.id),
                details={"name": name, "relation": relation, "reference": ref.text},
            )
            return Resolution(person=created, created=True, reference=ref.text)
        changes: list[str] = []
        new_name, new_relation = person.name, person.relation
        if new_name is None and name is not None:
            new_name = name
            changes.append("name")
        if new_relation is None and relation is not None:
            new_relation = relation
            changes.append("relation")
        aliases = _add_alias(_add_alias(person.aliases, ref.text), new_name)
        if aliases != person.aliases:
            changes.append("aliases")
        if not changes:
            return Resolution(person=person, created=False, reference=ref.text)
        row = await conn.fetchrow(UPDATE, user_id, person.id, new_name, new_relation, aliases)
        assert row is not None
        await audit(
            conn,
            user_id=user_id,
            actor=actor,
            action="update",
            entity="person",
            entity_id=str(person.id),
            details={"changed": changes, "reference": ref.text},
        )
        return Resolution(person=_person(row), created=False, reference=ref.text, changes=changes)


async def resolve_people(
    conn: Conn,
    user_id: str,
    mentions: Sequence[str],
    *,
    content_hint: str | None = None,
    actor: str = "system",
) -> list[Resolution]:
    """Resolve each mention (creating first mentions); one result per distinct person,
    in the order first mentioned. Blank mentions are skipped."""
    out: list[Resolution] = []
    seen: set[uuid.UUID] = set()
    for mention in mentions:
        if not clean(mention):
            continue
        res = await resolve_person(conn, user_id, mention, content_hint=content_hint, actor=actor)
        if res.person.id not in seen:
            seen.add(res.person.id)
            out.append(res)
    return out


# The extractor's entry points (same behaviour, its original signatures).


@dataclass(frozen=True)
class PersonResolution:
    person_id: uuid.UUID
    created: bool
    person_name: str


def parse_reference(
    reference: str, content_hint: str | None = None
) -> tuple[str | None, str | None]:
    """(name, relation) of a reference, the name possibly taken from ``content_hint``:
    "my wife Sarah" → ("Sarah", "wife"); "my wife" + "my wife's name is Sarah" → the same."""
    ref = _parse(reference)
    name = ref.name
    if name is None and ref.relation is not None:
        name = name_from_hint(ref.relation, content_hint)
    return name, ref.relation


async def resolve_or_create_person(
    conn: Conn, user_id: str, reference: str, content_hint: str | None = None
) -> PersonResolution:
    """:func:`resolve_person` in the extractor's shape (actor ``extractor``)."""
    res = await resolve_person(
        conn, user_id, reference, content_hint=content_hint, actor="extractor"
    )
    return PersonResolution(res.person.id, res.created, res.person.name or res.person.label)


async def known_people(conn: Executor, user_id: str) -> list[Person]:
    """The user's people, for the "Known People" part of a prompt."""
    return await list_people(conn, user_id)
