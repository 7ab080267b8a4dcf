"""The service's answers as pydantic models.

Each model names the fields a program relies on and keeps any others
(``extra="allow"``), so a newer service that adds a field does not break an
older client. ``tests/client`` checks these names against the service's own
answers.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class Me(Model):
    user_id: str | None
    admin: bool
    key_prefix: str


class MemoryHit(Model):
    id: str
    content_snippet: str
    type: str
    theme: str | None = None
    score: float
    created_at: str


class MemorySearch(Model):
    mode: str
    results: list[MemoryHit]


class MemoryAdded(Model):
    id: str
    status: str
    theme: str
    created_at: str
    confirmed: bool = False  # it repeated a live memory: ``id`` is that one's


class MemoryItem(Model):
    id: str
    content: str
    status: str
    type: str
    theme: str


class Theme(Model):
    slug: str


class Themes(Model):
    themes: list[Theme]


class Fact(Model):
    category: str | None  # None for a fact the extractor learned (no key)
    key: str | None
    value: str


class FactSaved(Model):
    pass


class FactList(Model):
    facts: list[Fact]


class Forgotten(Model):
    pass


class RememberedMemory(Model):
    id: str
    content: str
    scope: str
    subjects: list[dict[str, Any]] = Field(default_factory=list)
    superseded: list[str] = Field(default_factory=list)
    confirmed: bool = False  # it repeated a live memory: ``id`` is that one's


class Remembered(Model):
    memories: list[RememberedMemory]
    warning: str | None = None


class RecallHit(Model):
    id: str
    content: str
    scope: str | None = None
    type: str | None = None
    subjects: list[dict[str, Any]] = Field(default_factory=list)


class Recalled(Model):
    results: list[RecallHit]
    about: dict[str, Any] | None = None


class Context(Model):
    policy: str
    text: str
    tokens: int
    token_budget: int
    truncated: int = 0
    sections: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    retrieval: str = "none"
    warning: str | None = None


class EpisodeHit(Model):
    episode_id: str
    line: str
    title: str | None = None
    score: float


class EpisodeRecall(Model):
    episodes: list[EpisodeHit]
    mode: str


class EpisodeList(Model):
    episodes: list[dict[str, Any]]
    limit: int
    offset: int


class Episode(Model):
    id: str
    status: str
    turns: list[dict[str, Any]] = Field(default_factory=list)


class MessageHit(Model):
    id: int
    episode_id: str | None = None
    role: str
    content_snippet: str
    occurred_at: str
    score: float


class MessageSearch(Model):
    mode: str
    results: list[MessageHit]


class Person(Model):
    id: str
    name: str | None = None
    relation: str | None = None
    aliases: list[str] = Field(default_factory=list)


class People(Model):
    people: list[Person]


class PersonResolved(Model):
    person: Person
    created: bool


class Tools(Model):
    openai: list[dict[str, Any]] = Field(default_factory=list)
    anthropic: list[dict[str, Any]] = Field(default_factory=list)


class ToolResult(Model):
    id: str | None = None
    name: str
    is_error: bool
    result: Any = None
    error: str | None = None
    content: str


class CheckpointWrite(Model):
    task_id: str
    idx: int
    channel: str
    value: Any = None
    task_path: str = ""


class Checkpoint(Model):
    thread_id: str
    checkpoint_ns: str = ""
    checkpoint_id: str
    parent_id: str | None = None
    agent_id: str | None = None
    step: int | None = None
    state: Any = None
    created_at: str
    writes: list[CheckpointWrite] | None = None


class Checkpoints(Model):
    checkpoints: list[Checkpoint]


class WritesStored(Model):
    stored: int


class CheckpointsDeleted(Model):
    deleted: int


class ThreadCopied(Model):
    thread_id: str
    copied: int


class StoreItem(Model):
    namespace: list[str]
    key: str
    value: dict[str, Any]
    created_at: str
    updated_at: str
    score: float | None = None


class StoreItems(Model):
    items: list[StoreItem]


class StoreNamespaces(Model):
    namespaces: list[list[str]]


class StoreDeleted(Model):
    deleted: int


class TurnPublished(Model):
    event_id: str
    stream_id: str
    provider: str


class Turn(Model):
    id: int
    role: str
    content: str
    display_name: str | None = None
    external_message_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    occurred_at: str
    episode_id: str


class Turns(Model):
    turns: list[Turn]


class TurnsDeleted(Model):
    deleted: int
