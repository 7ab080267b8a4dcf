"""Extractor use cases: summarise a closed episode, learn its facts.

The sweep of idle episodes is ``services.extractor.stale_sweep``.

Guarantees:
- an episode is (re-)extracted only when it is due: never extracted, or turns
  were stored after its last extraction (``turn_count`` changed, or
  ``last_active_at`` > ``extracted_at``); running twice changes nothing;
- model output that stays invalid (after the client's asks again) never loses the
  episode: that job (summary, facts, standing instructions) is done by the offline
  extractor instead, and the error is recorded in ``episodes.extraction_error`` and
  the summary's ``model_errors`` (the episode is not asked again until it has new
  turns); an unreachable database raises, so the stream retries the request later;
- a model that is unavailable (down, past its deadline or its inline wait, its
  circuit open: ``shared.guard``) never holds an episode up: it is summarised by
  the offline extractor at once, marked ``fallback``, and stays due, so the
  sweeper asks the model again once the stale window has passed;
- one user never holds up another: a read's episodes are extracted several
  users at once (``parallel``), at most ``per_user`` of one user's per read; the
  rest go to the back of the stream;
- the summary is stored with its embedding ``pending`` and an ``EmbedRequested``
  is published after the commit, as are the new facts'.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

from services.extractor.facts import FactResult, apply_plan, plan_facts
from services.extractor.metrics import ExtractorMetrics
from services.extractor.narrative import regenerate_user_summary
from services.extractor.stale_sweep import DUE
from services.extractor.standing import MAX_STANDING_PER_EPISODE, plan_standing
from shared import tracing
from shared.dates import resolve_relative_dates
from shared.errors import EngramError, InvalidModelOutput, ProviderError, ProviderUnavailable
from shared.events import BatchResult, EmbedRequested, EmbedTarget, ExtractRequested, MemoryChanged
from shared.llm.jobs import Extractor, OfflineOnInvalid
from shared.llm.offline import OfflineExtractor
from shared.llm.offline import summarize as offline_summary
from shared.llm.schemas import EpisodeSummary
from shared.llm.transcript import Transcript, from_messages
from shared.memory.secrets import redact
from shared.memory.vectors import TextEmbedder
from shared.stream_registry import EMBED, EXTRACT, MEMORIES
from shared.streams import Publisher

log = logging.getLogger(__name__)

CONSUMER = "extractor"
MIN_TURNS_FOR_SUMMARY = 3

EmbedderFor = Callable[[str], Awaitable[TextEmbedder | None]]

LOAD_EPISODE = """
SELECT e.id, e.user_id, e.status, e.started_at, e.last_active_at, e.turn_count,
       e.extracted_at, e.extracted_turn_count, e.extraction_error,
       coalesce(e.display_name, u.display_name) AS user_name,
       e.summary->>'fallback' AS fallback,
       extract(epoch FROM now() - e.extract_due_since)::float8 AS waited_s
FROM episodes e JOIN users u ON u.id = e.user_id
WHERE e.id = $1 AND e.user_id = $2
"""

LOAD_MESSAGES = """
SELECT id, role, content, tool_name, tool_args, tool_result, display_name, occurred_at
FROM messages WHERE episode_id = $1 AND user_id = $2
ORDER BY occurred_at, id
"""

SEEN = "SELECT true FROM processed_events WHERE consumer = $1 AND event_id = $2"

MARK_PROCESSED = """
INSERT INTO processed_events (event_id, consumer) VALUES ($1, $2)
ON CONFLICT DO NOTHING RETURNING true
"""

STORE_SUMMARY = """
UPDATE episodes
SET summary = $3, summary_text = $4, extracted_at = greatest(now(), last_active_at),
    extracted_turn_count = $5, extraction_error = $6,
    extract_due = turn_count IS DISTINCT FROM $5 OR $7,
    extract_due_since = CASE WHEN turn_count IS DISTINCT FROM $5 OR $7
                             THEN extract_due_since END,
    embedding_state = 'pending', embedding_error = NULL, updated_at = now()
WHERE id = $1 AND user_id = $2
"""

# (DUE, the sweep's test of "something to extract", as is_due says it here)
NOTHING_DUE = f"""
UPDATE episodes e SET extract_due = false, extract_due_since = NULL
WHERE e.id = $1 AND e.user_id = $2 AND e.extract_due AND e.status = 'closed' AND NOT {DUE}
"""


@dataclass
class Extraction:
    """What the extraction use case needs (built once by the composition root)."""

    pool: asyncpg.Pool
    publisher: Publisher
    extractor: Extractor
    embedder_for: EmbedderFor
    dim: int
    max_facts: int = 5
    metrics: ExtractorMetrics | None = None
    parallel: int = 4  # episodes extracted at once
    per_user: int = 2  # of one user's episodes per read; the rest to the back of the stream
    offline: Extractor = field(default_factory=OfflineExtractor)  # while the model is away

    def count(self, what: str, outcome: str, n: int = 1) -> None:
        if self.metrics is not None and n:
            getattr(self.metrics, what).labels(outcome).inc(n)


class EpisodeNotFound(EngramError):
    """The request names an episode this user does not have."""


def is_due(ep: asyncpg.Record | dict[str, Any]) -> bool:
    if ep["turn_count"] != ep["extracted_turn_count"] or ep["fallback"]:
        return True
    if ep["extracted_at"] is None:
        return ep["extraction_error"] is None
    return bool(ep["last_active_at"] > ep["extracted_at"])


def summary_text(s: EpisodeSummary) -> str:
    """The text that is embedded and searched: title, summary, key points, topics."""
    parts = [s.title, s.summary]
    if s.key_points:
        parts.append("Key points: " + "; ".join(s.key_points))
    if s.topics:
        parts.append("Topics: " + ", ".join(s.topics))
    return "\n".join(parts)


def _redacted(s: EpisodeSummary) -> EpisodeSummary:
    return EpisodeSummary(
        title=redact(s.title)[:200],
        summary=redact(s.summary),
        key_points=[redact(p) for p in s.key_points],
        outcome=s.outcome,
        topics=[redact(t) for t in s.topics],
    )


async def handle_requests(x: Extraction, requests: Sequence[ExtractRequested]) -> BatchResult:
    """Extract the requested episodes, ``parallel`` at once, at most ``per_user`` of one
    user's (one after the other); refuse requests naming no such episode (by their
    position in ``requests``)."""
    result = BatchResult()
    mine: dict[str, list[tuple[int, ExtractRequested]]] = defaultdict(list)
    later: list[ExtractRequested] = []
    seen: set[uuid.UUID] = set()
    for i, request in enumerate(requests):
        if request.episode_id in seen:
            x.count("episodes", "duplicate")
            continue
        seen.add(request.episode_id)
        queue = mine[request.user_id]
        if len(queue) < x.per_user:
            queue.append((i, request))
        else:
            later.append(request)
    if later:
        # The same events again, behind everyone else's: one user's backlog is
        # interleaved with other users' episodes instead of standing before them.
        await x.publisher.publish(EXTRACT, later)
        x.count("episodes", "requeued", len(later))
    slots = asyncio.Semaphore(max(1, x.parallel))

    async def one_user(queue: list[tuple[int, ExtractRequested]]) -> None:
        for i, request in queue:
            async with slots:
                try:
                    # what it publishes (summary and facts to embed) continues its trace
                    with tracing.within(request):
                        outcome = await extract_episode(x, request)
                except EpisodeNotFound as exc:
                    result.refused[i] = str(exc)
                    x.count("episodes", "rejected")
                    continue
            x.count("episodes", outcome)

    failures = [
        r
        for r in await asyncio.gather(*map(one_user, mine.values()), return_exceptions=True)
        if isinstance(r, BaseException)
    ]
    if failures:
        # Every user's work has ended (what committed is recorded as processed): the
        # first failure goes to the consumer's failure policy for the whole read.
        raise failures[0]
    return result


async def extract_episode(x: Extraction, request: ExtractRequested) -> str:
    """Summarise the episode and learn its facts if it is due; return the outcome.

    With the model unavailable, the offline extractor does it at once (``fallback``)."""
    try:
        return await _extract(x, request, x.extractor, fallback=None)
    except ProviderUnavailable as exc:
        if x.extractor.heuristic:
            raise
        log.warning(
            "episode %s: the model is unavailable (%s); summarised offline, asked again later",
            request.episode_id,
            exc,
        )
        outcome = await _extract(x, request, x.offline, fallback=str(exc)[:300])
        return "fallback" if outcome == "extracted" else outcome


async def _extract(
    x: Extraction, request: ExtractRequested, ex: Extractor, *, fallback: str | None
) -> str:
    started = time.perf_counter()
    async with x.pool.acquire() as conn:
        if await conn.fetchval(SEEN, CONSUMER, request.event_id):
            return "duplicate"
        ep = await conn.fetchrow(LOAD_EPISODE, request.episode_id, request.user_id)
        if ep is None:
            raise EpisodeNotFound(
                f"episode {request.episode_id} does not exist for user {request.user_id}"
            )
        if request.reason != "manual" and (ep["status"] == "open" or not is_due(ep)):
            await conn.execute(MARK_PROCESSED, request.event_id, CONSUMER)
            if ep["status"] == "open":
                return "open"
            # flagged by a close that added nothing (a second close, a redelivery): not
            # waiting any more, unless a turn arrived meanwhile (checked in the UPDATE)
            await conn.execute(NOTHING_DUE, request.episode_id, request.user_id)
            return "up_to_date"
        rows = await conn.fetch(LOAD_MESSAGES, request.episode_id, request.user_id)
    transcript = from_messages(rows, user_name=ep["user_name"])
    turns = int(ep["turn_count"])

    # Output that stays invalid: that job is done offline, the error recorded.
    checked = OfflineOnInvalid(ex, x.offline)
    ex = checked if not ex.heuristic else ex
    summary, method = await _summarize(ex, transcript)
    if "summary" in checked.offline_jobs:
        method = "heuristic"
    summary = _dated(summary, ep["started_at"])

    candidates = []
    if transcript.turns:
        candidates = await ex.extract_facts(transcript, summary, occurred_at=ep["started_at"])
    embedder = await x.embedder_for(request.user_id) if candidates else None
    plan = await plan_facts(
        x.pool,
        user_id=request.user_id,
        candidates=candidates,
        occurred_at=ep["started_at"],
        embedder=embedder,
        same_fact=ex.same_fact,
        dim=x.dim,
    )

    for fact in plan.store:  # each fact is linked to the message it was learned from
        line = transcript.source_of(fact.source_context)
        fact.source_message_id = line.message_id if line else None
    standing = await plan_standing(
        x.pool,
        ex,
        transcript,
        user_id=request.user_id,
        occurred_at=ep["started_at"],
        embedder_for=x.embedder_for,
        dim=x.dim,
    )

    document = {
        **summary.model_dump(),
        "method": method,
        "extractor": ex.name,
        "turns": transcript.turns,
        "minimal": method == "minimal",
    }
    if fallback is not None:
        document["fallback"] = fallback  # the model is asked again (DUE)
    model_errors = list(checked.errors)  # so far (the write may ask for contradictions)
    if model_errors:
        document["model_errors"] = model_errors  # done offline; not asked again
    error = "; ".join(model_errors)[:1000] or None
    async with x.pool.acquire() as conn, conn.transaction():
        if not await conn.fetchval(MARK_PROCESSED, request.event_id, CONSUMER):
            return "duplicate"
        await conn.execute("SELECT 1 FROM episodes WHERE id = $1 FOR UPDATE", request.episode_id)
        await conn.execute(
            STORE_SUMMARY,
            request.episode_id,
            request.user_id,
            document,
            summary_text(summary),
            turns,
            error,
            fallback is not None,
        )
        # the standing ones first: a fact of the same text then confirms the standing
        # one (a memory is one or the other, and the standing one reaches every context)
        result = await apply_plan(
            conn,
            standing,
            user_id=request.user_id,
            episode_id=request.episode_id,
            extractor_name=ex.name,
            heuristic=ex.heuristic,
            limit=MAX_STANDING_PER_EPISODE,
            contradicts=ex.contradicts,
            standing=True,
        )
        result.add(
            await apply_plan(
                conn,
                plan,
                user_id=request.user_id,
                episode_id=request.episode_id,
                extractor_name=ex.name,
                heuristic=ex.heuristic,
                limit=x.max_facts,
                contradicts=ex.contradicts,
            )
        )
    _count_facts(x, result)
    if x.metrics is not None and ep["waited_s"] is not None:
        # From the moment the episode became due (closed, or a late turn) to its summary.
        waited = float(ep["waited_s"]) + time.perf_counter() - started
        x.metrics.close_to_summary.observe(waited)
    if result.changed:
        await _refresh_narrative(x, ex, request.user_id)
    await _publish(x, request.user_id, request.episode_id, result)
    return "invalid_output" if checked.errors else "extracted"


async def _summarize(ex: Extractor, transcript: Transcript) -> tuple[EpisodeSummary, str]:
    if transcript.turns < MIN_TURNS_FOR_SUMMARY:
        return _redacted(offline_summary(transcript)), "minimal"
    summary = await ex.summarize(transcript)
    return _redacted(summary), ("heuristic" if ex.heuristic else "llm")


def _dated(s: EpisodeSummary, when: datetime) -> EpisodeSummary:
    """Relative dates ("yesterday", "last week") as dates seen from the episode's start."""
    return s.model_copy(
        update={
            "summary": _sentence_case(resolve_relative_dates(s.summary, when)),
            "key_points": [_sentence_case(resolve_relative_dates(p, when)) for p in s.key_points],
        }
    )


def _sentence_case(text: str) -> str:
    return re.sub(r"(^|[.!?]\s+)([a-z])", lambda m: m.group(1) + m.group(2).upper(), text)


def _count_facts(x: Extraction, r: FactResult) -> None:
    x.count("facts", "stored", len(r.stored))
    x.count("facts", "confirmed", len(r.confirmed))
    x.count("facts", "superseded", len(r.superseded))
    x.count("facts", "review", r.reviewed)
    x.count("facts", "dropped", r.dropped)


async def _refresh_narrative(x: Extraction, ex: Extractor, user_id: str) -> None:
    try:
        await regenerate_user_summary(x.pool, user_id, ex.narrative)
    except (InvalidModelOutput, ProviderError) as exc:
        # The facts are stored; the narrative is rebuilt at the next change.
        log.warning("narrative for a user not rebuilt: %s", exc)


async def _publish(x: Extraction, user_id: str, episode_id: uuid.UUID, result: FactResult) -> None:
    targets = [EmbedTarget(kind="episode", id=str(episode_id))]
    targets += [EmbedTarget(kind="memory", id=str(m)) for m in result.pending]
    await x.publisher.publish(EMBED, [EmbedRequested(user_id=user_id, targets=targets)])
    changes = [MemoryChanged(memory_id=m, user_id=user_id, change="added") for m in result.stored]
    # Facts stored with their vector are announced as embedded too, as the embedder would.
    changes += [
        MemoryChanged(memory_id=m, user_id=user_id, change="embedded")
        for m in result.stored
        if m not in result.pending
    ]
    changes += [
        MemoryChanged(memory_id=m, user_id=user_id, change="superseded") for m in result.superseded
    ]
    if changes:
        await x.publisher.publish(MEMORIES, changes)


WAITING = """
SELECT count(*) AS n, coalesce(extract(epoch FROM now() - min(extract_due_since)), 0)::float8 AS age
FROM episodes WHERE extract_due AND status = 'closed'
"""


async def refresh_gauges(pool: asyncpg.Pool, metrics: ExtractorMetrics) -> None:
    """Closed episodes waiting for their summary, and how long the oldest has waited."""
    row = await pool.fetchrow(WAITING)
    assert row is not None
    metrics.waiting.set(int(row["n"]))
    metrics.oldest_wait.set(float(row["age"]))
