"""What the extraction jobs ask a model for, as pydantic models with field descriptions.

The same models are produced by the offline extractor, so the rest of the
pipeline never knows which one ran.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Outcome = Literal["resolved", "partial", "unresolved", "informational"]
Category = Literal[
    "preference", "instruction", "technical", "person", "tool", "concept", "rule", "other"
]
Source = Literal["conversation", "tool_call", "auto_discovery", "user_explicit", "heuristic"]
About = Literal["user", "person", "other"]
StatedBy = Literal["user", "assistant", "tool"]

OUTCOMES: tuple[str, ...] = ("resolved", "partial", "unresolved", "informational")


def not_a_placeholder(v: Any) -> Any:
    """Refuse a text that is one of the prompt's ``<...>`` placeholders copied back (a
    small model fills the template in: Gemma 3 270M answered ``"title": "<5-10 word
    descriptive title>"``): an answer of the right shape that says nothing, so it is
    invalid and asked again like any other (then done offline)."""
    if isinstance(v, str) and v.strip().startswith("<"):
        raise ValueError("the prompt's placeholder copied, not an answer")
    return v


class EpisodeSummary(BaseModel):
    """Nous F010.1: the structured summary stored on an episode."""

    model_config = ConfigDict(extra="ignore")

    title: str = Field(min_length=1, max_length=200, description="5-10 word descriptive title")
    summary: str = Field(min_length=1, description="100-150 word prose summary of what happened")
    key_points: list[str] = Field(
        default_factory=list,
        description="3-5 bullet points of key outcomes or topics",
        json_schema_extra={"maxItems": 10},  # (the schema only; more are cut to 10)
    )
    outcome: Outcome = Field(
        default="informational", description="resolved | partial | unresolved | informational"
    )
    topics: list[str] = Field(
        default_factory=list,
        description="short lowercase tags for topic-based recall",
        json_schema_extra={"maxItems": 10},
    )

    _placeholder = field_validator("title", "summary")(not_a_placeholder)

    @field_validator("outcome", mode="before")
    @classmethod
    def _lower_outcome(cls, v: Any) -> Any:
        return v.strip().lower() if isinstance(v, str) else v

    @field_validator("key_points", "topics")
    @classmethod
    def _clean_list(cls, v: list[str]) -> list[str]:
        return [s.strip() for s in v if isinstance(s, str) and s.strip()][:10]


class FactCandidate(BaseModel):
    """One fact a model proposes to remember (Nous F010.4 plus Navi's source fields)."""

    model_config = ConfigDict(extra="ignore")

    subject: str = Field(
        min_length=1,
        max_length=200,
        description="who or what the fact is about: 'user', a person's name or relation "
        "('Sarah', 'my wife'), or a thing ('Nous project')",
    )
    about: About = Field(
        default="user",
        description="'user' when about the user, 'person' when about someone else, "
        "'other' for a project, system or thing",
    )
    content: str = Field(min_length=3, max_length=500, description="the fact, stated clearly")
    category: Category = Field(
        default="other",
        description="preference | instruction | technical | person | tool | concept | rule",
    )
    confidence: float | None = Field(
        default=None, ge=0, le=100, description="0.0-1.0 (leave out when unsure)"
    )
    tags: list[str] = Field(default_factory=list, description="a few short tags")
    source: Source = Field(
        default="conversation",
        description="user_explicit (the user said it plainly), tool_call (a tool returned it), "
        "auto_discovery, or conversation (inferred); heuristic: found by the offline "
        "extractor's patterns, no model involved",
    )
    source_context: str | None = Field(
        default=None, max_length=1000, description="the words in the transcript it comes from"
    )
    stated_by: StatedBy = Field(
        default="user",
        description="who stated it in the transcript: user (a person in the chat: the user "
        "or another named participant), assistant or tool",
    )
    heuristic: bool = Field(default=False, description="set by the offline extractor")

    _placeholder = field_validator("subject", "content")(not_a_placeholder)

    @field_validator("category", mode="before")
    @classmethod
    def _known_category(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = v.strip().lower()
            return (
                v
                if v
                in {"preference", "instruction", "technical", "person", "tool", "concept", "rule"}
                else "other"
            )
        return v

    @field_validator("source", mode="before")
    @classmethod
    def _known_source(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = v.strip().lower()
            known = {"tool_call", "auto_discovery", "user_explicit", "heuristic"}
            return v if v in known else "conversation"
        return v

    @field_validator("confidence")
    @classmethod
    def _scale(cls, v: float | None) -> float | None:
        # Some models answer on Navi's 0-100 scale.
        return None if v is None else (v / 100.0 if v > 1.0 else v)


class FactList(BaseModel):
    """The answer of the fact-extraction prompt (a bare array is accepted too)."""

    model_config = ConfigDict(extra="ignore")

    facts: list[FactCandidate] = Field(
        default_factory=list,
        description="facts worth remembering; empty when none",
        json_schema_extra={"maxItems": 10},  # for a grammar: a small model may not stop
    )

    @model_validator(mode="before")
    @classmethod
    def _accept_array(cls, v: Any) -> Any:
        return {"facts": v} if isinstance(v, list) else v


class Equivalence(BaseModel):
    """Whether two fact statements say the same thing."""

    same: bool = Field(description="true when both statements state the same fact")
    reason: str = Field(default="", description="one short sentence")

    _placeholder = field_validator("reason")(not_a_placeholder)


class Contradiction(BaseModel):
    """Whether a newer statement replaces an older one (supersession)."""

    contradicts: bool = Field(description="true when the older statement is no longer true")
    reason: str = Field(default="", description="one short sentence")

    _placeholder = field_validator("reason")(not_a_placeholder)


class DecisionRewrite(BaseModel):
    """Nous F010.3: a decision description rewritten as one factual sentence."""

    decision: str = Field(
        min_length=3,
        max_length=200,
        description="one factual, present-tense sentence of at most 120 characters",
    )

    _placeholder = field_validator("decision")(not_a_placeholder)


class Narrative(BaseModel):
    """Navi: the per-user narrative summary built from the user's facts."""

    summary: str = Field(min_length=1, description="a short narrative paragraph about the user")

    _placeholder = field_validator("summary")(not_a_placeholder)


class Observation(BaseModel):
    """Consolidation: one observation written from a cluster of related memories."""

    observation: str = Field(
        min_length=1, description="what the related statements say together, in whole sentences"
    )

    _placeholder = field_validator("observation")(not_a_placeholder)
