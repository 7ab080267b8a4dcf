"""Ash's ``recall``: search memory, optionally about one person.

``about`` is resolved without creating anyone; a person that cannot be
resolved gives unfiltered results (Ash: "Person not found for filter → return
unfiltered results") and the result says so. A failing embedding provider
degrades to full-text search with a warning.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from services.query.embeddings.query import MAX_SEARCH_CHARS, QueryVector, embed_query
from services.query.people.subjects import subject_people
from services.query.ranking.recall import MemoryHit, hit_json, is_member, search_memories
from shared.errors import InvalidRequest
from shared.memory.people import Person, find_person
from shared.memory.vectors import ModelEmbedder
from shared.memory.writer import Chat

MAX_LIMIT = 100


@dataclass(frozen=True)
class Recalled:
    hits: list[MemoryHit]
    people: dict[uuid.UUID, Person]
    about: str | None
    person: Person | None
    query: QueryVector

    def public(self) -> dict[str, Any]:
        return {
            "results": [hit_json(h, self.people) for h in self.hits],
            "about": None
            if self.about is None
            else {
                "reference": self.about,
                "resolved": self.person is not None,
                "person": self.person.public() if self.person else None,
                "note": None
                if self.person
                else f"no known person matches {self.about!r}; results are not filtered",
            },
            "retrieval": self.query.retrieval,
            "warning": self.query.warning,
        }


async def recall(
    pool: asyncpg.Pool,
    user_id: str,
    query: str,
    *,
    about: str | None = None,
    chat: Chat | None = None,
    embedder: ModelEmbedder | None = None,
    embedding_dim: int = 384,
    include_superseded: bool = False,
    limit: int = 5,
    as_of: datetime | None = None,
) -> Recalled:
    """Search ``user_id``'s visible memories for ``query``; see the module doc."""
    if len(query) > MAX_SEARCH_CHARS:
        raise InvalidRequest(f"a query is at most {MAX_SEARCH_CHARS} characters")
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be between 1 and {MAX_LIMIT}")
    qv = await embed_query(embedder, query, dim=embedding_dim)
    person = await find_person(pool, user_id, about) if about and about.strip() else None
    member = await is_member(pool, user_id, chat) if chat else False
    hits = await search_memories(
        pool,
        user_id,
        query=query,
        vector=qv.vector,
        model=qv.model,
        chat=chat,
        member=member,
        subject=person.id if person else None,
        include_superseded=include_superseded,
        limit=limit,
        as_of=as_of,
    )
    return Recalled(
        hits=hits,
        people=await subject_people(pool, hits, user_id),
        about=about if about and about.strip() else None,
        person=person,
        query=qv,
    )
