"""Ash's remember / recall request models (the chat a request is in: ``people/chat.py``).

The HTTP routes and the tools take them from here: plain pydantic models, with no
use case or query behind them.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from services.query.embeddings.query import SearchText, described
from services.query.people.chat import ChatIn
from services.query.people.remember import MAX_DAYS, Fact
from shared.dates import AS_OF_TEXT, AsOf

Subjects = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=200)]], Field(max_length=20)
]
Days = Annotated[int, Field(ge=1, le=MAX_DAYS)]


class FactIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: Annotated[str, Field(min_length=1, max_length=10_000)]
    subjects: Subjects | None = Field(
        default=None, description="who this fact is about; default: the call's 'subjects'"
    )
    expires_in_days: Days | None = None
    shared: bool | None = Field(default=None, description="visible to this chat's members")
    type: str | None = None
    theme: str | None = None


class RememberIn(BaseModel):
    """One ``content`` or a ``facts`` batch (or both: ``content`` is stored first).

    ``subjects``, ``expires_in_days``, ``shared``, ``type`` and ``theme`` at the top
    level apply to ``content`` and are the defaults of each fact in ``facts``."""

    model_config = ConfigDict(extra="forbid")

    content: Annotated[str, Field(min_length=1, max_length=10_000)] | None = Field(
        default=None, description="A single fact to remember"
    )
    facts: Annotated[list[FactIn], Field(max_length=100)] | None = Field(
        default=None, description="Batch multiple facts in one call (preferred)"
    )
    subjects: Subjects = Field(
        default_factory=list,
        description="Who this fact is about (e.g., ['Sarah'], ['my wife', 'John'])",
    )
    expires_in_days: Days | None = Field(default=None, description="Days until expiration")
    shared: bool = Field(default=False, description="True for group/team facts")
    type: str = "fact"
    theme: Annotated[str, Field(min_length=1, max_length=100)] = "general"
    chat: ChatIn | None = Field(default=None, description="the chat this call happens in")

    @model_validator(mode="after")
    def _something(self) -> RememberIn:
        if self.content is None and not self.facts:
            raise ValueError("give 'content' or a non-empty 'facts' list")
        return self

    def to_facts(self) -> list[Fact]:
        out = []
        if self.content is not None:
            out.append(
                Fact(
                    content=self.content,
                    subjects=self.subjects,
                    expires_in_days=self.expires_in_days,
                    shared=self.shared,
                    type=self.type,
                    theme=self.theme,
                )
            )
        for f in self.facts or []:
            out.append(
                Fact(
                    content=f.content,
                    subjects=f.subjects if f.subjects is not None else self.subjects,
                    expires_in_days=f.expires_in_days
                    if f.expires_in_days is not None
                    else self.expires_in_days,
                    shared=f.shared if f.shared is not None else self.shared,
                    type=f.type or self.type,
                    theme=f.theme or self.theme,
                )
            )
        return out


class RecallIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: Annotated[SearchText, Field(description=described("what to search for"))]
    about: Annotated[str, Field(max_length=200)] | None = Field(
        default=None, description="Filter to person (e.g., 'my wife', 'Sarah')"
    )
    chat: ChatIn | None = None
    limit: Annotated[int, Field(ge=1, le=100)] = 5
    include_superseded: bool = Field(
        default=False, description="also return memories a newer one replaced (history)"
    )
    as_of: AsOf | None = Field(default=None, description=AS_OF_TEXT)
