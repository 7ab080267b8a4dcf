"""Response bodies of the agent API: every route declares one, so /openapi.json
describes every answer (and the tool schemas are built from the same models).

The fields listed are the contract; a model marked :class:`Open` may carry
more keys (a use case's extra detail is passed through, never dropped).

Where a use case returns a typed result, its model is the description and the
response model subclasses it under the API's name (the schema's component name);
such a subclass has no docstring, which would become the schema's description.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from services.query.memory import checkpoints as cs
from services.query.memory import facts as fs
from services.query.memory import items as ms
from services.query.memory import jarvus_results as js
from services.query.people import results as pr
from services.query.ranking import turns as ts
from shared.memory import observations as obs


class Out(BaseModel):
    """A closed response: exactly these fields."""


class Open(BaseModel):
    """A response whose listed fields are guaranteed; further keys may follow."""

    model_config = ConfigDict(extra="allow")


# --- account, users ---------------------------------------------------------------


class MeOut(Out):
    user_id: str | None = Field(description="the key's user; null for an admin key")
    admin: bool
    key_prefix: str


class ErasedOut(Out):
    erased: bool
    rows: dict[str, int] = Field(description="rows deleted per table (cascaded ones too)")
    stream_entries: dict[str, int] = Field(
        default_factory=dict, description="the user's stream entries deleted per stream"
    )


class ReenabledOut(Out):
    reenabled: bool


# --- Nova memory ------------------------------------------------------------------


class Signals(Open):
    fts: bool | None = None
    semantic: bool | None = None


class SearchHit(Open):
    id: str
    theme: str | None = None
    type: str
    content_snippet: str
    created_at: str
    score: float
    signals: Signals


class SearchOut(Open):
    mode: str = Field(description="hybrid, fts_only, semantic_only or match_all")
    results: list[SearchHit]


class AdminSearchHit(SearchHit):
    user_id: str = Field(description="the memory's owner")


class AdminSearchOut(SearchOut):
    results: list[AdminSearchHit]  # type: ignore[assignment]


class AddedOut(ms.Added, Out):
    pass


class MemoryItemOut(Open):
    """Every column of one memory item (Nova 3.2.3)."""

    id: str
    user_id: str
    type: str
    theme: str
    content: str
    status: str
    embedding_state: str
    created_at: str
    updated_at: str


class ArchivedOut(Out):
    id: str
    status: str


class ConsolidationOut(obs.Consolidation, Out):
    pass


class DeletedOut(Out):
    id: str
    deleted: bool


class ThemeOut(Out):
    slug: str
    display_name: str | None
    description: str | None
    active_items: int


class ThemesOut(Out):
    themes: list[ThemeOut]


# --- messages ---------------------------------------------------------------------


# The use case's results (services.query.ranking.turns), under the API's names.


class MessageHitOut(ts.FoundTurn, Open):
    pass


class MessageSearchOut(ts.FoundTurns, Open):
    results: list[MessageHitOut]  # type: ignore[assignment]


# --- Navi facts -------------------------------------------------------------------
# The use cases' results (services.query.memory.facts), under the API's names.


class SavedFactOut(fs.SavedFact, Out):
    pass


class FactOut(fs.Fact, Open):
    # rendered even when None: a listed fact says "match": null (the tools leave it out)
    match: str | None = Field(default=None, description="search only: semantic, trigram...")


class FactsOut(fs.Facts, Out):
    facts: list[FactOut]  # type: ignore[assignment]


class FactPageOut(fs.FactPage, Out):
    facts: list[FactOut]  # type: ignore[assignment]


class ForgottenOut(fs.Forgotten, Out):
    pass


class SummaryOut(fs.Summary, Out):
    pass


# --- Jarvus -----------------------------------------------------------------------
# The use cases' results (services.query.memory.jarvus_results), under the API's names.


class StoredOut(js.Stored, Open):
    pass


class JarvusItemOut(js.Retrieved, Open):
    pass


class JarvusEpisodesOut(js.Episodes, Out):
    episodes: list[JarvusItemOut]  # type: ignore[assignment]


class JarvusFactsOut(js.Facts, Out):
    facts: list[JarvusItemOut]  # type: ignore[assignment]


class JarvusProceduresOut(js.Procedures, Out):
    procedures: list[JarvusItemOut]  # type: ignore[assignment]


class NamespaceOut(js.Namespace, Out):
    pass


class NamespacesOut(js.Namespaces, Out):
    namespaces: list[NamespaceOut]  # type: ignore[assignment]


# --- checkpoints ------------------------------------------------------------------
# The use cases' results (services.query.memory.checkpoints), under the API's names.


class CheckpointOut(cs.Checkpoint, Open):
    pass


class LineageOut(cs.Lineage, Out):
    lineage: list[CheckpointOut]  # type: ignore[assignment]


class CheckpointsOut(cs.Checkpoints, Out):
    checkpoints: list[CheckpointOut]  # type: ignore[assignment]


class ThreadDeletedOut(cs.ThreadDeleted, Out):
    pass


# --- episodes (Nous) --------------------------------------------------------------


class EpisodeHitOut(Open):
    episode_id: str
    user_id: str
    display_name: str | None
    line: str
    title: str | None
    score: float


class EpisodeRecallOut(Out):
    episodes: list[EpisodeHitOut]
    mode: str = Field(description="hybrid, or full_text without a query vector")


class EpisodeRowOut(Open):
    id: uuid.UUID
    provider: str
    chat_id: str
    status: str
    started_at: datetime
    last_active_at: datetime
    turn_count: int
    title: str | None = None


class EpisodeListOut(Out):
    episodes: list[EpisodeRowOut]
    limit: int
    offset: int


class TurnOut(Open):
    id: int
    role: str
    speaker: str
    content: str
    occurred_at: datetime


class EpisodeOut(EpisodeRowOut):
    user_id: str
    display_name: str
    summary: Any = None
    turns: list[TurnOut]


# --- Ash: remember, recall, people ------------------------------------------------


# The use cases' results (services.query.people.results), under the API's names.


class PersonOut(pr.KnownPerson, Open):
    pass


class SubjectOut(pr.Subject, Open):
    pass


class RememberedItemOut(pr.RememberedMemory, Open):
    subjects: list[SubjectOut]  # type: ignore[assignment]


class RememberedOut(pr.RememberedMemories, Out):
    memories: list[RememberedItemOut]  # type: ignore[assignment]


class RecalledOut(Open):
    id: str
    content: str
    scope: str
    type: str
    subjects: list[SubjectOut]
    created_at: str
    score: float


class RecallOut(Open):
    results: list[RecalledOut]
    about: dict[str, Any] | None
    retrieval: str | None = None
    warning: str | None = None


class PeopleOut(pr.People, Out):
    people: list[PersonOut]  # type: ignore[assignment]


class ResolvedPersonOut(pr.ResolvedPerson, Out):
    person: PersonOut


# --- tools ------------------------------------------------------------------------


class ToolSchemasOut(Out):
    """The formats asked for (``format``); the others are left out, never null."""

    openai: list[dict[str, Any]] = Field(default_factory=list)
    anthropic: list[dict[str, Any]] = Field(default_factory=list)


class ToolCallOut(Out):
    id: str | None
    name: str
    is_error: bool
    result: Any = None
    error: str | None = None
    content: str = Field(description="the result (or error) as text, for the model")
