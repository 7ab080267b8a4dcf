"""The stale sweep: close idle episodes and ask again for extraction that is due.

Every ``sweep_interval_s`` the extractor closes open episodes idle for the stale
window (``ENGRAM_STALE_WINDOW_MINUTES``; ``closed_by = 'stale'``, ``closed_at`` =
the last turn) and publishes an ``ExtractRequested`` (reason ``stale``) for each,
and for every closed episode that has turns after its last extraction, whose
request was lost, or that was summarised offline while the model was unavailable.
Ingest closes stale episodes inside a turn batch on its own; this sweep covers
chats that went quiet.
"""

from __future__ import annotations

from datetime import timedelta

import asyncpg

from services.extractor.metrics import ExtractorMetrics
from shared.events import ExtractRequested
from shared.stream_registry import EXTRACT
from shared.streams import Publisher

DUE = """(e.turn_count IS DISTINCT FROM e.extracted_turn_count
          OR (e.extracted_at IS NULL AND e.extraction_error IS NULL)
          OR e.last_active_at > e.extracted_at
          OR e.summary->>'fallback' IS NOT NULL)"""  # summarised offline: ask the model

CLOSE_IDLE = """
UPDATE episodes e
SET status = 'closed', closed_at = e.last_active_at, closed_by = 'stale',
    extract_requested_at = now(), extract_due = true, extract_due_since = now(),
    updated_at = now()
FROM (SELECT id FROM episodes
      WHERE status = 'open' AND last_active_at < now() - $1::interval
      ORDER BY last_active_at LIMIT $2 FOR UPDATE SKIP LOCKED) d
WHERE e.id = d.id
RETURNING e.id, e.user_id
"""

REQUEUE_DUE = f"""
UPDATE episodes e SET extract_requested_at = now()
FROM (SELECT id FROM episodes e
      WHERE e.extract_due AND e.status = 'closed' AND e.updated_at < now() - $1::interval
        AND (e.extract_requested_at IS NULL
             OR e.extract_requested_at <= e.extracted_at  -- that request was served
             OR e.extract_requested_at < now() - $1::interval)  -- that request was lost
        AND {DUE}
      ORDER BY e.last_active_at LIMIT $2 FOR UPDATE SKIP LOCKED) d
WHERE e.id = d.id
RETURNING e.id, e.user_id
"""


async def sweep(
    pool: asyncpg.Pool,
    publisher: Publisher,
    *,
    idle: timedelta,
    batch: int = 500,
    metrics: ExtractorMetrics | None = None,
) -> list[ExtractRequested]:
    """Close episodes idle for ``idle`` and ask for extraction of every closed episode
    that has turns after its last extraction (or whose request was lost)."""
    async with pool.acquire() as conn:
        closed = await conn.fetch(CLOSE_IDLE, idle, batch)
        due = await conn.fetch(REQUEUE_DUE, idle, batch)
    requests = [
        ExtractRequested(episode_id=r["id"], user_id=r["user_id"], reason="stale")
        for r in [*closed, *due]
    ]
    if requests:
        await publisher.publish(EXTRACT, requests)
    if metrics is not None:
        metrics.swept.labels("closed").inc(len(closed))
        metrics.swept.labels("requeued").inc(len(due))
    return requests
