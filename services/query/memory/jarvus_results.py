"""What the Jarvus use cases (:mod:`services.query.memory.jarvus`) return.

A leaf beside them: the API's response models subclass these (``api/responses.py``)
without standing on the memory search that typed retrieval runs (docs/architecture.md,
"The structure, measured").
"""

from __future__ import annotations

from typing import Any

import asyncpg
from pydantic import BaseModel, Field


def _is_none(value: object) -> bool:
    return value is None


class Stored(BaseModel):
    """What a store did: the memory's id (and the procedure's, or whether it replaced one).

    ``procedure_id`` is said only by a workflow stored as a procedure and ``updated``
    only by a plain store: each is left out of the JSON when None."""

    memory_id: str
    procedure_id: str | None = Field(default=None, exclude_if=_is_none)
    updated: bool | None = Field(default=None, exclude_if=_is_none)


class Retrieved(BaseModel):
    """One memory of typed retrieval, as stored (``data``: the event), with its score."""

    memory_id: str
    namespace: str
    type: str
    text: str
    data: dict[str, Any]
    importance: float
    score: float
    """The hybrid search's score (6 decimals); 0 for a substring or unranked match."""
    created_at: str
    last_accessed: str | None
    """ISO 8601 (as ``created_at``); None for a memory never retrieved before."""

    @classmethod
    def of(cls, r: asyncpg.Record, score: float) -> Retrieved:
        return cls(
            memory_id=str(r["id"]),
            namespace=r["namespace"],
            type=r["type"],
            text=r["content"],
            data=r["data"],
            importance=r["importance"],
            score=round(score, 6),
            created_at=r["created_at"].isoformat(),
            last_accessed=r["last_accessed_at"].isoformat() if r["last_accessed_at"] else None,
        )


class Episodes(BaseModel):
    episodes: list[Retrieved]


class Facts(BaseModel):
    """Facts and preferences."""

    facts: list[Retrieved]


class Procedures(BaseModel):
    """Procedures and workflows."""

    procedures: list[Retrieved]


class Namespace(BaseModel):
    namespace: str
    items: int
    """How many memories it holds (any status)."""
    latest: str
    """When the newest was stored (ISO 8601)."""


class Namespaces(BaseModel):
    namespaces: list[Namespace]
    """Sorted by name."""
