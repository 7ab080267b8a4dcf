"""Standing instructions and preferences in every ``auto`` context (issue 27, item 5).

What the user told the assistant to do from now on ("Always include version
numbers when I ask about libraries") and what they said they prefer ("minimal
dependencies") hold for every answer, so they reach the context whatever the
question, within a small share of the budget:

- which: the user's live ``instruction`` memories and those ``preference``
  memories that are standing ones (learned as such, ``data.standing``, or
  stored by the user or an agent; a liking the fact extractor read from a
  chat, "Caroline loves pottery", is a fact about the user that reaches the
  context by relevance, as before); superseded ones are left out, a newer one
  says what it replaced and when (the supersede path), ``as_of`` reads what
  held then;
- their order: relevance to the question among them (Ash's recall ranking,
  ``ASH_RECALL``: 0.7 x cosine + 0.3 x text rank, newer first at equal score),
  at most :data:`MAX_STANDING`: the auto context reads :data:`STANDING_READ` of
  the user's :data:`STANDING_TYPES` with that ranking and keeps what
  :func:`standing_of` keeps;
- the budget: at most 1 / :data:`STANDING_SHARE` of it (the first line always
  fits), spent right after the known people and before the turn hits
  (docs/context.md).

The rules here take any hit that says its type, its data and when it was said
(:class:`Said`: a recall hit, ``services.query.ranking.recall.MemoryHit``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from services.query.context.budget import Block, tokens

STANDING_TYPES = ["instruction", "preference"]
MAX_STANDING = 8
STANDING_SHARE = 8  # standing lines take at most 1 / STANDING_SHARE of the budget
READ = 4  # read this many times MAX_STANDING, so the fact extractor's likings cannot crowd
STANDING_READ = MAX_STANDING * READ


class Said(Protocol):
    """A memory hit as the standing rules read it."""

    @property
    def type(self) -> str: ...

    @property
    def data(self) -> Mapping[str, Any]: ...

    @property
    def valid_from(self) -> datetime | None: ...

    @property
    def created_at(self) -> datetime: ...


H = TypeVar("H", bound=Said)


def is_standing(hit: Said) -> bool:
    """An instruction, or a preference that holds for every answer (not a liking the
    fact extractor read from the chat)."""
    if hit.type == "instruction":
        return True
    return bool(hit.data.get("standing")) or "extractor" not in hit.data


def standing_of(hits: Sequence[H]) -> list[H]:
    """The standing ones among ``hits`` (the user's instructions and preferences, the
    most relevant to the message first), at most :data:`MAX_STANDING`."""
    return [h for h in hits if is_standing(h)][:MAX_STANDING]


def standing_line(hit: Said, text: str) -> str:
    """``- [instruction, 2024-03-15] Always include ...`` (the date it was said)."""
    said = hit.valid_from or hit.created_at
    return f"- [{hit.type}, {said.date().isoformat()}] {text}"


def standing_block(hits: Sequence[Said], texts: list[str]) -> Block:
    return Block(
        name="standing",
        header="## Standing Instructions and Preferences\n\nFollow these in your answer:\n",
        lines=[standing_line(h, t) for h, t in zip(hits, texts, strict=True)],
    )


def standing_cap(block: Block, budget: int) -> int:
    """At most 1 / STANDING_SHARE of the budget, but always room for the first line."""
    first = tokens(block.header) + tokens(block.footer) + 1
    first += tokens(block.lines[0]) + 1 if block.lines else 0
    return max(budget // STANDING_SHARE, first)
