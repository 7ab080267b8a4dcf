"""The people a viewer's hits are about (Ash: recall's and the context's people).

Any hit that names its owner and its subjects will do (:class:`AboutPeople`: a
recall hit, ``services.query.ranking.recall.MemoryHit``), so recall and the
context both call this one rule without one importing the other.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from typing import Protocol

from shared.db import Executor
from shared.memory.people import Person, people_by_id


class AboutPeople(Protocol):
    """A hit: whose memory it is and the people it is about."""

    @property
    def owner(self) -> str: ...

    @property
    def subjects(self) -> Sequence[uuid.UUID]: ...


async def subject_people(
    conn: Executor, hits: Sequence[AboutPeople], viewer: str
) -> dict[uuid.UUID, Person]:
    """The people ``viewer``'s own hits are about. A chat's shared memory of another
    user (a member reads it) keeps its owner's person records to its owner: their
    names, relations and notes are not shown to the chat's members (issue 29.14)."""
    wanted: dict[str, set[uuid.UUID]] = defaultdict(set)
    for h in hits:
        if h.owner == viewer:
            wanted[h.owner].update(h.subjects)
    out: dict[uuid.UUID, Person] = {}
    for owner, ids in wanted.items():
        out.update(await people_by_id(conn, owner, list(ids)))
    return out
