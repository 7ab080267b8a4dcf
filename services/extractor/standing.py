"""Learning an episode's standing instructions and preferences (issue 27, item 5).

The extractor asks its extractor (the model when one is configured, else the
offline rule of ``shared.llm.standing``) for what the user told the assistant to
do from now on and what they said they prefer, from the user's own turns, and
plans them like any learned fact (``services.extractor.facts``: secrets dropped,
confidence, dedupe against the user's live memories, linked to the turn they
came from). They are written by the one memory writer as Nova's ``instruction``
and ``preference`` memories, marked ``data.standing``, at most
:data:`MAX_STANDING_PER_EPISODE` new ones per episode (apart from its five
facts: a long working session states several, and a fact must not crowd them
out); a newer one that sets the same instruction or preference differently
supersedes the older (``shared.memory.supersession``). ``/v1/context`` shows
them whatever the question (``services.query.context.standing``).

A model's answer that stays invalid: the extractor's offline rule states them
instead (``shared.llm.jobs.OfflineOnInvalid``); an unavailable model raises, as
the other jobs do, so the episode is summarised offline and asked again later.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

import asyncpg

from services.extractor.facts import FactPlan, plan_facts
from shared.errors import InvalidModelOutput
from shared.llm.jobs import Extractor
from shared.llm.transcript import Transcript
from shared.memory.vectors import TextEmbedder

log = logging.getLogger(__name__)

MAX_STANDING_PER_EPISODE = 10


async def plan_standing(
    pool: asyncpg.Pool,
    ex: Extractor,
    transcript: Transcript,
    *,
    user_id: str,
    occurred_at: datetime,
    embedder_for: Callable[[str], Awaitable[TextEmbedder | None]],
    dim: int,
) -> FactPlan:
    """The plan for the standing instructions and preferences the user's turns state
    (empty when there are none); each is linked to its turn."""
    try:
        candidates = await ex.extract_standing(transcript, occurred_at=occurred_at)
    except InvalidModelOutput as exc:
        log.warning("standing instructions of a user not learned: %s", exc)
        return FactPlan()
    if not candidates:
        return FactPlan()
    plan = await plan_facts(
        pool,
        user_id=user_id,
        candidates=candidates,
        occurred_at=occurred_at,
        embedder=await embedder_for(user_id),
        same_fact=ex.same_fact,
        dim=dim,
    )
    for fact in plan.store:
        line = transcript.source_of(fact.source_context)
        fact.source_message_id = line.message_id if line else None
    return plan
