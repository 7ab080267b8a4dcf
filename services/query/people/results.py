"""What Ash's remember and the people routes answer, as pydantic models: the one
description of those shapes (the API's response models subclass them).

A leaf beside the use cases (it stands only on ``shared.memory.people``), so the
API's response models can import it without standing on the use cases' imports.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from pydantic.json_schema import SkipJsonSchema

from shared.memory.people import Person, Resolution


def _is_none(value: object) -> bool:
    return value is None


class Subject(BaseModel):
    """A person a memory is about."""

    id: str
    name: str | None
    relation: str | None
    # remember only (left out of the JSON when None, and out of the schema: the
    # API's subject is open): whether storing this memory first mentioned them
    created: SkipJsonSchema[bool | None] = Field(default=None, exclude_if=_is_none)


class RememberedMemory(BaseModel):
    """One memory ``remember`` stored (or confirmed)."""

    id: str
    content: str
    scope: str
    subjects: list[Subject]
    expires_at: str | None
    """ISO 8601; None for a memory that never expires."""
    embedding_state: str
    superseded: list[str]
    """The ids of the memories this one replaced."""
    confirmed: bool = Field(
        default=False,
        description="it said what a live memory says: the id is that memory's, now confirmed",
    )


class RememberedMemories(BaseModel):
    """What ``remember`` stored, and a warning when it degraded (no embedding)."""

    memories: list[RememberedMemory]
    warning: str | None


class KnownPerson(BaseModel):
    """A person the user has told the assistant about."""

    id: str
    name: str | None
    relation: str | None
    aliases: list[str] = []
    created_at: str | None = None
    updated_at: str | None = None
    # after the listed fields, and out of the schema (the API's person is open)
    metadata: SkipJsonSchema[dict[str, Any]] = Field(default_factory=dict)

    @classmethod
    def of(cls, p: Person) -> KnownPerson:
        return cls(
            id=str(p.id),
            name=p.name,
            relation=p.relation,
            aliases=p.aliases,
            created_at=p.created_at.isoformat(),
            updated_at=p.updated_at.isoformat(),
            metadata=p.metadata,
        )


class People(BaseModel):
    people: list[KnownPerson]


class ResolvedPerson(BaseModel):
    """The person a reference resolved to, whether this call created them, and what
    it changed (a name or relation learned, an alias added)."""

    person: KnownPerson
    created: bool
    changed: list[str]

    @classmethod
    def of(cls, res: Resolution) -> ResolvedPerson:
        return cls(person=KnownPerson.of(res.person), created=res.created, changed=res.changes)
