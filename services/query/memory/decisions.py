"""The decision guard: censor decision descriptions (Nous F010.3), then record them.

This module is the censor of Nous's decision log: it refuses, rewrites or warns
about a description before :func:`record_decision` stores it through the one
writer (``shared.memory.writer``).

A description must be one factual, present-tense statement of what was decided:

- over 200 characters: rejected (:class:`InvalidRequest`, HTTP 422) with guidance;
- 120 characters is the target: a longer one is rewritten by the model when one
  is configured, else stored with a warning;
- a response blob (starts with "Here's", "Now let me", "I'll", "Let me",
  "Here is"; has a markdown header, table or code fence; starts with an emoji;
  spans several lines) is rewritten by the model to one factual sentence, or
  rejected with guidance when no model is configured;
- every such finding increments ``engram_decision_warnings_total{reason}``.
"""

from __future__ import annotations

import re
import unicodedata
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ConfigDict, Field

from shared.errors import InvalidModelOutput, InvalidRequest
from shared.memory.secrets import find_secret, redact
from shared.memory.writer import NewItem, insert_items, publish_written
from shared.streams import Publisher

MAX_CHARS = 200
TARGET_CHARS = 120

GUIDANCE = (
    "State the decision as one factual, present-tense sentence of at most "
    f"{TARGET_CHARS} characters, e.g. 'Use direct Anthropic API calls instead of Claude "
    "Agent SDK' or 'Store episode summaries as JSONB on close'; not a question, not a full "
    "response, not a markdown block."
)

_BLOB_PREFIX = re.compile(r"^\s*(here['’]s|here is|now let me|i['’]ll|let me)\b", re.I)
_HEADER = re.compile(r"(?m)^\s{0,3}#{1,6}\s")
_TABLE = re.compile(r"(?m)^\s*\|.*\|\s*$")

Rewrite = Callable[[str], Awaitable[str | None]]


class DecisionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.warnings = Counter(
            "engram_decision_warnings_total",
            "Decision descriptions that broke a rule (too long, response blob...)",
            ["reason"],
            registry=registry,
        )


class RecordedDecision(BaseModel):
    """A stored decision: its memory's id and the description stored."""

    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    description: str
    rewritten: bool = Field(description="true when the model rewrote the description")
    original: str | None = None
    """The description as given, when the model rewrote it."""
    warnings: list[str]
    """The rules the description as given broke (a rewrite fixed them)."""


def _leading_emoji(text: str) -> bool:
    s = text.lstrip()
    if not s:
        return False
    ch = s[0]
    return unicodedata.category(ch) == "So" or 0x1F000 <= ord(ch) <= 0x1FAFF


def blob_findings(text: str) -> list[str]:
    """Why ``text`` looks like a response blob rather than a decision (empty: it does not)."""
    found = []
    m = _BLOB_PREFIX.match(text)
    if m:
        found.append(f"starts with {m.group(1)!r}")
    if _HEADER.search(text):
        found.append("contains a markdown header")
    if _TABLE.search(text) or "```" in text:
        found.append("contains a markdown table or code block")
    if _leading_emoji(text):
        found.append("starts with an emoji")
    if "\n" in text.strip():
        found.append("spans several lines")
    return found


def _reason_label(finding: str) -> str:
    if finding.startswith("starts with '"):
        return "blob_prefix"
    return {
        "contains a markdown header": "markdown_header",
        "contains a markdown table or code block": "markdown_block",
        "starts with an emoji": "leading_emoji",
        "spans several lines": "multiline",
    }.get(finding, "other")


def validate_decision(text: str) -> tuple[str, list[str]]:
    """(cleaned text, findings); raises :class:`InvalidRequest` for hard failures."""
    text = text.strip()
    if not text:
        raise InvalidRequest("the decision description is empty. " + GUIDANCE)
    if len(text) > MAX_CHARS:
        raise InvalidRequest(
            f"the decision description has {len(text)} characters; the limit is {MAX_CHARS}. "
            + GUIDANCE
        )
    secret = find_secret(text)
    if secret:
        raise InvalidRequest(f"the decision description contains a {secret}; leave it out.")
    return text, blob_findings(text)


async def record_decision(
    pool: asyncpg.Pool,
    *,
    user_id: str,
    description: str,
    rationale: str | None = None,
    tags: Sequence[str] = (),
    episode_id: uuid.UUID | None = None,
    provider: str | None = None,
    chat_id: str | None = None,
    rewrite: Rewrite | None = None,
    metrics: DecisionMetrics | None = None,
    publisher: Publisher | None = None,
    actor: str = "api",
) -> RecordedDecision:
    """Validate, rewrite if needed, store as a ``decision`` memory (embedding pending).

    ``rewrite`` is the model's rewriter (``Extractor.rewrite_decision``), or None."""

    def warn(reason: str) -> None:
        if metrics is not None:
            metrics.warnings.labels(reason).inc()

    if len(description.strip()) > MAX_CHARS:
        warn("too_long")
    text, findings = validate_decision(description)
    for f in findings:
        warn(_reason_label(f))
    warnings = list(findings)
    too_long = len(text) > TARGET_CHARS
    if too_long:
        warn("over_target")
        warnings.append(f"longer than the {TARGET_CHARS}-character target")
    original: str | None = None
    if findings or too_long:
        new = None
        if rewrite is not None:
            try:
                new = await rewrite(text)
            except InvalidModelOutput as exc:
                raise InvalidRequest(
                    f"the description could not be rewritten ({exc}). " + GUIDANCE
                ) from exc
        if new is None and findings:
            raise InvalidRequest(
                "the decision description looks like a response, not a decision ("
                + "; ".join(findings)
                + "). "
                + GUIDANCE
            )
        if new is not None:
            new_text, new_findings = validate_decision(new)
            if new_findings or len(new_text) > TARGET_CHARS:
                raise InvalidRequest(
                    "the description could not be rewritten into a clean decision "
                    f"(got {new_text!r}). " + GUIDANCE
                )
            original, text = text, new_text
    data: dict[str, Any] = {"warnings": warnings}
    if rationale:
        data["rationale"] = redact(rationale.strip())
    if original is not None:
        data["original"] = redact(original)
    chat = bool(provider and chat_id)
    item = NewItem(
        type="decision",
        content=text,
        data=data,
        tags=tags,
        source="decision",
        source_context=redact(original) if original else None,
        episode_id=episode_id,
        confidence=1.0,
        scope="chat" if chat else "personal",
        provider=provider if chat else None,
        chat_id=chat_id if chat else None,
        audit={"rewritten": original is not None},
    )
    async with pool.acquire() as conn:
        written = await insert_items(conn, user_id, [item], actor=actor)
    if publisher is not None:
        await publish_written(publisher, written)
    memory_id = written.items[0].id
    return RecordedDecision(
        id=memory_id,
        description=text,
        rewritten=original is not None,
        original=original,
        warnings=warnings,
    )
