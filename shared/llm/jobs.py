"""The extraction jobs (summary, facts, equivalence, narrative, decision rewrite).

:class:`Extractor` is what the pipeline calls; :class:`LLMExtractor` does the
jobs with a :class:`~shared.llm.client.ChatModel` (prompts from the Nous and
Navi seeds), :class:`~shared.llm.offline.OfflineExtractor` without one.
:func:`build_extractor` picks one from the settings; :class:`OfflineOnInvalid` does
a job offline when the model's output for it stays invalid.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

import httpx

from shared.errors import InvalidModelOutput
from shared.llm.client import ChatModel, LLMMetrics, OpenAIChatModel
from shared.llm.offline import OfflineExtractor
from shared.llm.schemas import (
    Contradiction,
    DecisionRewrite,
    EpisodeSummary,
    Equivalence,
    FactCandidate,
    FactList,
    Narrative,
    Observation,
)
from shared.llm.settings import LLMSettings
from shared.llm.standing import STANDING, user_lines
from shared.llm.transcript import Transcript, cut_middle

log = logging.getLogger(__name__)


class Extractor(Protocol):
    """Everything the extractor and the decision use case ask of a model."""

    @property
    def heuristic(self) -> bool: ...

    @property
    def name(self) -> str: ...

    async def summarize(self, transcript: Transcript) -> EpisodeSummary: ...

    async def extract_facts(
        self, transcript: Transcript, summary: EpisodeSummary, *, occurred_at: datetime
    ) -> list[FactCandidate]: ...

    async def extract_standing(
        self, transcript: Transcript, *, occurred_at: datetime
    ) -> list[FactCandidate]:
        """The standing instructions and preferences the user's turns state (category
        ``instruction`` or ``preference``): shared.llm.standing."""
        ...

    async def same_fact(self, a: str, b: str) -> bool: ...

    async def contradicts(self, older: str, newer: str) -> bool | None:
        """Whether ``newer`` replaces ``older``; None when this extractor cannot tell."""
        ...

    async def narrative(self, user_name: str, facts: Sequence[str]) -> str: ...

    async def observe(self, statements: Sequence[str]) -> str:
        """One observation from a cluster of related memories (consolidation)."""
        ...

    async def rewrite_decision(self, text: str) -> str | None:
        """One factual sentence, or None when this extractor cannot rewrite."""
        ...


SYSTEM = (
    "You are the memory extractor of a personal assistant. You read conversation "
    "transcripts and answer only with one JSON object, no prose, no code fences."
)

SUMMARY_PROMPT = """Given the following conversation transcript, generate a structured summary.

Transcript:
{transcript}

Return JSON:
{{
  "title": "<5-10 word descriptive title>",
  "summary": "<100-150 word prose summary>",
  "key_points": ["<point 1>", "<point 2>", ...],
  "outcome": "<resolved|partial|unresolved|informational>",
  "topics": ["<topic1>", "<topic2>", ...]
}}"""

FACTS_PROMPT = """Review the following conversation summary and transcript and extract any facts \
worth remembering long-term.

Focus on:
- User preferences (tools, formats, units, communication style)
- Project/system facts (architecture, constraints, conventions)
- People facts (roles, names, relationships)
- Rules or recurring patterns observed

Rules:
- The user is {user}. The conversation took place on {date}. Write absolute dates, never \
"yesterday" or "next week".
- Attribute each fact to who it is about: what the user says about a friend is a fact about \
the friend (subject: the friend's name or "my friend", about: "person"); a fact about the \
user has subject "user" and about "user"; a project or thing has about "other".
- Something only the assistant said is not a fact the user stated: set stated_by to \
"assistant" (tool output: "tool", source "tool_call").
- source: "user_explicit" when the user said it plainly, "tool_call" when a tool returned it, \
"auto_discovery" when observed from behaviour, otherwise "conversation".
- Never include passwords, tokens, API keys, card numbers or other secrets.

Summary: {summary}
Key Points: {key_points}

Transcript (end of the conversation):
{transcript}

Return JSON (an empty list if nothing is worth storing):
{{"facts": [
  {{
    "subject": "<who/what the fact is about>",
    "about": "<user|person|other>",
    "content": "<the fact, stated clearly>",
    "category": "<preference|technical|person|tool|concept|rule>",
    "confidence": <0.0-1.0>,
    "tags": ["<tag1>", "<tag2>"],
    "source": "<user_explicit|tool_call|auto_discovery|conversation>",
    "source_context": "<the words of the transcript it comes from>",
    "stated_by": "<user|assistant|tool>"
  }}
]}}

Only include facts that would be genuinely useful to remember across future conversations.
Skip transient, trivial, or already-known information."""

STANDING_PROMPT = """Below are the messages the user ({user}) wrote to the assistant \
on {date}. List the user's standing instructions and preferences: what they ask the \
assistant to do from now on or always (or never), and what they say they prefer, so that \
every later answer follows them.

Rules:
- An instruction holds for later answers: "Always include version numbers when I ask about \
libraries", "keep answers short from now on". A one-off request for this answer ("help me \
fix this bug", "show me an example") is not one.
- A preference is stated by the user as their own: "I prefer minimal dependencies", "I'd \
rather use Word than Google Docs". Hedged or hypothetical wording is not one.
- Write each in the third person about {user} ("Always include version numbers when {user} \
asks about libraries", "{user} prefers minimal dependencies"), at most 40 words.
- category is "instruction" or "preference"; source_context is the user's own words it \
comes from, copied exactly.
- When the user reverses an earlier preference or instruction, state the new one.
- Never include passwords, tokens, API keys, card numbers or other secrets.

The user's messages:
{messages}

Return JSON (an empty list if there are none):
{{"facts": [
  {{
    "subject": "user",
    "about": "user",
    "content": "<the instruction or preference>",
    "category": "<instruction|preference>",
    "confidence": <0.0-1.0>,
    "source": "user_explicit",
    "source_context": "<the user's words>",
    "stated_by": "user"
  }}
]}}"""

SAME_PROMPT = """Do these two statements state the same fact (one could replace the other \
without losing or changing information)?

A: {a}
B: {b}

Return JSON: {{"same": true|false, "reason": "<one short sentence>"}}"""

CONTRADICT_PROMPT = """Two statements about the same person or thing, the second one newer. \
Does the newer one contradict the older one, so that the older one is no longer true (the \
same attribute with another value, such as a new favourite colour, a move to another city, \
a liking that became a dislike)? Statements that add information, say the same thing in \
other words, or are about different things do not contradict.

Older: {older}
Newer: {newer}

Return JSON: {{"contradicts": true|false, "reason": "<one short sentence>"}}"""

NARRATIVE_PROMPT = """Write a short narrative summary (at most 150 words) of what is known \
about {user}, from these facts. Mention only what the facts say.

Facts:
{facts}

Return JSON: {{"summary": "<the narrative>"}}"""

OBSERVATION_PROMPT = """These statements were remembered separately and are related. \
Write one observation (at most 60 words) that states what they say together, in the \
third person, naming who each statement is about as the statements do. Mention only what \
the statements say; keep every sentence whole.

Statements:
{statements}

Return JSON: {{"observation": "<the observation>"}}"""

DECISION_PROMPT = """The following text was intended as a decision description but is not \
concise enough. Rewrite it as a single factual statement of max 120 characters describing \
what was decided.

Original: {description}

Return JSON: {{"decision": "<rewritten decision>"}}"""


class LLMExtractor:
    """The extraction jobs done by a chat model."""

    heuristic = False

    def __init__(self, model: ChatModel) -> None:
        self.model = model

    @property
    def name(self) -> str:
        return self.model.name

    async def summarize(self, transcript: Transcript) -> EpisodeSummary:
        return await self.model.complete_json(
            system=SYSTEM,
            user=SUMMARY_PROMPT.format(transcript=transcript.render()),
            schema=EpisodeSummary,
            purpose="summary",
        )

    async def extract_facts(
        self, transcript: Transcript, summary: EpisodeSummary, *, occurred_at: datetime
    ) -> list[FactCandidate]:
        answer = await self.model.complete_json(
            system=SYSTEM,
            user=FACTS_PROMPT.format(
                user=transcript.user_name or "the user",
                date=occurred_at.strftime("%A %d %B %Y"),
                summary=summary.summary,
                key_points=json.dumps(summary.key_points, ensure_ascii=False),
                transcript=transcript.tail(),
            ),
            schema=FactList,
            purpose="facts",
        )
        return answer.facts

    async def extract_standing(
        self, transcript: Transcript, *, occurred_at: datetime
    ) -> list[FactCandidate]:
        """Asked only when the user wrote something (their lines alone are sent); what
        the model answers in another category, or as the assistant's, is left out."""
        lines = user_lines(transcript)
        if not lines:
            return []
        answer = await self.model.complete_json(
            system=SYSTEM,
            user=STANDING_PROMPT.format(
                user=transcript.user_name or "the user",
                date=occurred_at.strftime("%A %d %B %Y"),
                messages=cut_middle("\n".join(f"- {ln.text}" for ln in lines), STANDING),
            ),
            schema=FactList,
            purpose="standing",
        )
        return [
            f
            for f in answer.facts
            if f.category in ("instruction", "preference") and f.stated_by == "user"
        ]

    async def same_fact(self, a: str, b: str) -> bool:
        answer = await self.model.complete_json(
            system=SYSTEM,
            user=SAME_PROMPT.format(a=a, b=b),
            schema=Equivalence,
            purpose="equivalence",
        )
        return answer.same

    async def contradicts(self, older: str, newer: str) -> bool | None:
        answer = await self.model.complete_json(
            system=SYSTEM,
            user=CONTRADICT_PROMPT.format(older=older, newer=newer),
            schema=Contradiction,
            purpose="contradiction",
        )
        return answer.contradicts

    async def narrative(self, user_name: str, facts: Sequence[str]) -> str:
        answer = await self.model.complete_json(
            system=SYSTEM,
            user=NARRATIVE_PROMPT.format(user=user_name, facts="\n".join(f"- {f}" for f in facts)),
            schema=Narrative,
            purpose="narrative",
        )
        return answer.summary

    async def observe(self, statements: Sequence[str]) -> str:
        answer = await self.model.complete_json(
            system=SYSTEM,
            user=OBSERVATION_PROMPT.format(statements="\n".join(f"- {s}" for s in statements)),
            schema=Observation,
            purpose="observation",
        )
        return answer.observation.strip()

    async def rewrite_decision(self, text: str) -> str | None:
        answer = await self.model.complete_json(
            system=SYSTEM,
            user=DECISION_PROMPT.format(description=text),
            schema=DecisionRewrite,
            purpose="decision",
        )
        return answer.decision.strip()


class OfflineOnInvalid:
    """An extractor whose jobs are done by ``offline`` when ``model``'s output stays
    invalid (:class:`InvalidModelOutput` after the client asked again): the episode is
    never lost to a malformed answer. Each such job is recorded in :attr:`errors`
    (``"<job>: <error>"``) and :attr:`offline_jobs`; other errors (the model
    unavailable, refused) go to the caller unchanged."""

    def __init__(self, model: Extractor, offline: Extractor) -> None:
        self.model = model
        self.offline = offline
        self.errors: list[str] = []
        self.offline_jobs: list[str] = []

    @property
    def heuristic(self) -> bool:
        return self.model.heuristic

    @property
    def name(self) -> str:
        return self.model.name

    def _invalid(self, job: str, exc: InvalidModelOutput) -> None:
        log.warning("%s; done offline", exc)
        self.errors.append(f"{job}: {exc}"[:500])
        self.offline_jobs.append(job)

    async def summarize(self, transcript: Transcript) -> EpisodeSummary:
        try:
            return await self.model.summarize(transcript)
        except InvalidModelOutput as exc:
            self._invalid("summary", exc)
            return await self.offline.summarize(transcript)

    async def extract_facts(
        self, transcript: Transcript, summary: EpisodeSummary, *, occurred_at: datetime
    ) -> list[FactCandidate]:
        try:
            return await self.model.extract_facts(transcript, summary, occurred_at=occurred_at)
        except InvalidModelOutput as exc:
            self._invalid("facts", exc)
            return await self.offline.extract_facts(transcript, summary, occurred_at=occurred_at)

    async def extract_standing(
        self, transcript: Transcript, *, occurred_at: datetime
    ) -> list[FactCandidate]:
        try:
            return await self.model.extract_standing(transcript, occurred_at=occurred_at)
        except InvalidModelOutput as exc:
            self._invalid("standing", exc)
            return await self.offline.extract_standing(transcript, occurred_at=occurred_at)

    async def same_fact(self, a: str, b: str) -> bool:
        try:
            return await self.model.same_fact(a, b)
        except InvalidModelOutput as exc:
            self._invalid("equivalence", exc)
            return await self.offline.same_fact(a, b)

    async def contradicts(self, older: str, newer: str) -> bool | None:
        try:
            return await self.model.contradicts(older, newer)
        except InvalidModelOutput as exc:
            self._invalid("contradiction", exc)
            return await self.offline.contradicts(older, newer)

    async def narrative(self, user_name: str, facts: Sequence[str]) -> str:
        try:
            return await self.model.narrative(user_name, facts)
        except InvalidModelOutput as exc:
            self._invalid("narrative", exc)
            return await self.offline.narrative(user_name, facts)

    async def observe(self, statements: Sequence[str]) -> str:
        try:
            return await self.model.observe(statements)
        except InvalidModelOutput as exc:
            self._invalid("observation", exc)
            return await self.offline.observe(statements)

    async def rewrite_decision(self, text: str) -> str | None:
        try:
            return await self.model.rewrite_decision(text)
        except InvalidModelOutput as exc:
            self._invalid("decision", exc)
            return await self.offline.rewrite_decision(text)


def build_extractor(
    settings: LLMSettings,
    *,
    metrics: LLMMetrics | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> tuple[Extractor, OpenAIChatModel | None]:
    """The model-backed extractor when a model is configured, else the offline one.

    Returns the client too (or None) so the caller can close it."""
    if not settings.llm_configured:
        return OfflineExtractor(), None
    client = OpenAIChatModel.from_settings(settings, metrics=metrics, transport=transport)
    return LLMExtractor(client), client
