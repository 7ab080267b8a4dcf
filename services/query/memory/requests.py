"""Request bodies of the agent API, shared by the HTTP routes and the tool executor.

Pydantic validates them; a bad value becomes a 422 (HTTP) or a tool error
(tool call) whose message names the field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from services.query.embeddings.query import OptionalSearchText, SearchText
from services.query.memory.checkpoints import MAX_STEP
from services.query.ranking.memories import MAX_LIMIT, SearchParams
from shared.memory.confidence import DEFAULT_CONFIDENCE, SOURCE_CONFIDENCE
from shared.memory.writer import MemoryType

Text = Annotated[str, Field(max_length=20_000)]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchIn(Body):
    query: SearchText = ""
    limit: Annotated[int, Field(ge=1, le=MAX_LIMIT, description="results, 1-50")] = 10
    theme: str | None = Field(default=None, description="only this theme (slug)")
    types: list[MemoryType] | None = Field(default=None, description="only these types")
    recency_days: Annotated[
        int | None, Field(ge=1, le=36500, description="only items newer than this many days")
    ] = None
    status: Literal["active", "archived", "any"] = Field(
        default="active", description="active (default), archived or any"
    )
    include_superseded: bool = Field(default=False, description="also items replaced by newer ones")

    def params(self, namespace: str | None = None) -> SearchParams:
        return SearchParams(
            query=self.query,
            limit=self.limit,
            theme=self.theme,
            types=tuple(self.types) if self.types else None,
            recency_days=self.recency_days,
            status=self.status,
            include_superseded=self.include_superseded,
            namespace=namespace,
        )


class AddIn(Body):
    type: MemoryType = Field(description="preference, fact, instruction, summary, other ...")
    content: Annotated[str, Field(min_length=1, max_length=20_000)]
    theme: str | None = Field(default=None, description="theme slug; omitted = 'general'")
    tags: list[Annotated[str, Field(max_length=100)]] = Field(default_factory=list, max_length=50)


class ItemIn(Body):
    item_id: str = Field(description="the memory's id")


Source = Literal["conversation", "tool_call", "auto_discovery", "user_explicit"]
CONFIDENCE_BY_SOURCE = SOURCE_CONFIDENCE
CONFIDENCE_TEXT = (
    "confidence 0-1; omitted, it follows the source: "
    + ", ".join(f"{k} {v:g}" for k, v in CONFIDENCE_BY_SOURCE.items())
    + f", otherwise {DEFAULT_CONFIDENCE:g}"
)
SortBy = Literal["category", "key", "created_at", "updated_at", "confidence"]


class FactIn(Body):
    category: Annotated[str, Field(min_length=1, max_length=100)] = Field(
        description="e.g. location, work"
    )
    key: Annotated[str, Field(min_length=1, max_length=200)] = Field(description="e.g. home_city")
    value: Annotated[str, Field(min_length=1, max_length=20_000)] = Field(
        description="the fact's value"
    )
    source: Source = "conversation"
    confidence: Annotated[float | None, Field(ge=0, le=1, description=CONFIDENCE_TEXT)] = None
    expires_days: Annotated[
        int | None, Field(ge=1, le=36500, description="forget after this many days")
    ] = None
    source_context: Annotated[
        str | None, Field(max_length=2000, description="where it was learned")
    ] = None


class FactSearchIn(Body):
    query: SearchText
    limit: Annotated[int, Field(ge=1, le=100)] = 15


class ForgetIn(Body):
    key: Annotated[str, Field(min_length=1, max_length=200)]
    category: str | None = None


class FactListIn(Body):
    limit: Annotated[int, Field(ge=1, le=500)] = 100
    offset: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0
    sort_by: SortBy = "category"
    sort_order: Literal["asc", "desc"] = "desc"
    search: Annotated[
        OptionalSearchText,
        Field(description="only facts whose key or value holds this; empty, blank or '*' = all"),
    ] = None


class SummaryIn(Body):
    summary: Annotated[str, Field(max_length=50_000)]


class ActionIn(Body):
    action: Annotated[str, Field(min_length=1, max_length=200)]
    target: Annotated[str | None, Field(max_length=2000)] = None
    url: Annotated[str | None, Field(max_length=4000)] = None
    result: Annotated[str | None, Field(max_length=2000)] = None
    timestamp: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)
    namespace: Annotated[str, Field(min_length=1, max_length=255)] = "default"


class FeedbackIn(Body):
    suggestion_id: Annotated[str, Field(min_length=1, max_length=200)]
    user_response: Annotated[str, Field(min_length=1, max_length=200)]
    notes: Annotated[str | None, Field(max_length=5000)] = None
    timestamp: str | None = None
    namespace: Annotated[str, Field(min_length=1, max_length=255)] = "default"


class WorkflowIn(Body):
    workflow_id: Annotated[str, Field(min_length=1, max_length=200)]
    steps: list[dict[str, Any]] = Field(default_factory=list, max_length=500)
    result: Annotated[str | None, Field(max_length=2000)] = None
    timestamp: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)
    store_as_procedure: bool = False
    description: Annotated[str | None, Field(max_length=5000)] = None
    namespace: Annotated[str, Field(min_length=1, max_length=255)] = "default"


class StoreIn(Body):
    text: Annotated[str, Field(min_length=1, max_length=20_000)]
    type: MemoryType = "fact"
    importance: Annotated[float, Field(ge=0, le=100)] = 1.0
    memory_id: str | None = Field(
        default=None, description="update this memory instead of adding one"
    )
    data: dict[str, Any] = Field(default_factory=dict)
    namespace: Annotated[str, Field(min_length=1, max_length=255)] = "default"


class CheckpointIn(Body):
    state: dict[str, Any]
    checkpoint_id: Annotated[str | None, Field(min_length=1, max_length=255)] = None
    parent_id: Annotated[str | None, Field(min_length=1, max_length=255)] = None
    agent_id: Annotated[str | None, Field(max_length=255)] = None
    step: Annotated[int | None, Field(ge=0, le=MAX_STEP)] = None


class AdminSearchIn(SearchIn):
    user_id: str | None = Field(
        default=None, description="one user; omitted = every user (full-text)"
    )

    @field_validator("user_id")
    @classmethod
    def _blank_is_none(cls, v: str | None) -> str | None:
        return v or None
