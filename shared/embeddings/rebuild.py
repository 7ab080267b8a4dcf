"""Rebuild-total (Nova 3.2.7) and backfill (Navi), callable from the API, the CLI and tests.

Rebuild: when a user's provider or model changes, every embeddable row of theirs
(messages, memory items active and archived, episode summaries) is set
``pending`` with the new provider/model, its old vector and error cleared, and
re-embedded. Search reads only ``ready`` rows and a vector is only written on a
row pending for the same model, so old and new vectors never meet in a search.

Backfill: rows without a vector (pending, in error, or an episode summary never
marked) are embedded with their user's current provider, in batches. Rows that
already have a vector are never touched, so running it twice does nothing new.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
from pydantic import BaseModel

from shared.db import Executor
from shared.embeddings import store
from shared.embeddings.pipeline import Item, Observer, Options, Outcome, embed_items
from shared.embeddings.providers import ProviderConfig, ProviderRegistry, default_registry
from shared.embeddings.store import TABLES
from shared.embeddings.user_settings import as_embedding_settings, resolve_config
from shared.errors import InvalidRequest
from shared.events import EmbedKind, EmbedReason, EmbedRequested, EmbedTarget
from shared.settings import CommonSettings
from shared.stream_registry import EMBED
from shared.streams import Publisher

TARGETS_PER_EVENT = 500

COUNT_ROWS = """
SELECT (SELECT count(*) FROM messages WHERE user_id = $1) AS messages,
       (SELECT count(*) FROM memory_items WHERE user_id = $1) AS memories,
       (SELECT count(*) FROM episodes WHERE user_id = $1 AND summary_text IS NOT NULL)
           AS episodes
"""

COUNT_STATES = """
SELECT (SELECT count(*) FROM messages WHERE user_id = $1 AND embedding_state = 'pending')
     + (SELECT count(*) FROM memory_items WHERE user_id = $1 AND embedding_state = 'pending')
     + (SELECT count(*) FROM episodes WHERE user_id = $1 AND embedding_state = 'pending')
           AS pending,
       (SELECT count(*) FROM messages WHERE user_id = $1 AND embedding_state = 'error')
     + (SELECT count(*) FROM memory_items WHERE user_id = $1 AND embedding_state = 'error')
     + (SELECT count(*) FROM episodes WHERE user_id = $1 AND embedding_state = 'error')
           AS errors
"""

_RESET = """
    embedding = NULL, embedding_state = 'pending', embedding_error = NULL,
    embedding_provider = $2, embedding_model = $3, embedding_dims = $4, embedded_at = NULL,
    embedding_attempts = 0, embedding_retry_at = NULL
"""
MARK_FOR_REBUILD: dict[EmbedKind, str] = {
    "message": f"UPDATE messages SET {_RESET} WHERE user_id = $1 RETURNING id",
    "memory": f"UPDATE memory_items SET {_RESET} WHERE user_id = $1 RETURNING id",
    "episode": f"""UPDATE episodes SET {_RESET}
                   WHERE user_id = $1 AND summary_text IS NOT NULL RETURNING id""",
}

RECORD_REBUILD = """
INSERT INTO embedding_rebuilds (user_id, provider, model, total, started_at, finished_at)
VALUES ($1, $2, $3, $4, now(), NULL)
ON CONFLICT (user_id) DO UPDATE SET provider = EXCLUDED.provider, model = EXCLUDED.model,
    total = EXCLUDED.total, started_at = now(), finished_at = NULL
RETURNING started_at
"""

GET_REBUILD = """
SELECT provider, model, total, started_at, finished_at FROM embedding_rebuilds WHERE user_id = $1
"""

FINISH_REBUILD = """
UPDATE embedding_rebuilds SET finished_at = now()
WHERE user_id = $1 AND finished_at IS NULL RETURNING finished_at
"""

ACTIVE_REBUILDS = "SELECT user_id, total FROM embedding_rebuilds WHERE finished_at IS NULL"

_MISSING = "embedding IS NULL AND (embedding_state IN ('pending', 'error')"
MISSING: dict[EmbedKind, str] = {
    "message": f"{_MISSING})",
    "memory": f"{_MISSING})",
    "episode": f"{_MISSING} OR embedding_state IS NULL) AND summary_text IS NOT NULL",
}


def _missing_page(kind: EmbedKind) -> str:
    t = TABLES[kind]
    return f"""
        SELECT user_id, id FROM {t.name}
        WHERE {MISSING[kind]} AND ($1::text IS NULL OR user_id = $1)
          AND ($2::{t.id_type} IS NULL OR id > $2)
        ORDER BY id LIMIT $3
    """


def _count_missing(kind: EmbedKind) -> str:
    return f"""SELECT count(*) FROM {TABLES[kind].name}
               WHERE {MISSING[kind]} AND ($1::text IS NULL OR user_id = $1)"""


def _claim(kind: EmbedKind) -> str:
    # Back to pending for the provider now in effect (metadata cleared), vector-less only.
    t = TABLES[kind]
    return f"""
        UPDATE {t.name}
        SET embedding_state = 'pending', embedding_error = NULL, embedding_provider = NULL,
            embedding_model = NULL, embedding_attempts = 0, embedding_retry_at = NULL
        WHERE user_id = $1 AND id = ANY($2::{t.id_type}[]) AND embedding IS NULL
    """


MISSING_PAGE = {k: _missing_page(k) for k in TABLES}
COUNT_MISSING = {k: _count_missing(k) for k in TABLES}
CLAIM = {k: _claim(k) for k in TABLES}


class RebuildCount(BaseModel):
    messages: int
    memories: int
    episodes: int
    total: int


class RebuildStatus(BaseModel):
    """Progress of a user's latest rebuild: ``done`` of ``total`` rows have an outcome."""

    provider: str
    model: str
    total: int
    done: int
    pending: int
    errors: int
    started_at: datetime
    finished_at: datetime | None
    running: bool


async def rebuild_count(pool: Executor, user_id: str) -> RebuildCount:
    """How many rows a rebuild of ``user_id`` would re-embed (archived items included)."""
    r = await pool.fetchrow(COUNT_ROWS, user_id)
    assert r is not None
    return RebuildCount(
        messages=r["messages"],
        memories=r["memories"],
        episodes=r["episodes"],
        total=r["messages"] + r["memories"] + r["episodes"],
    )


async def start_rebuild(
    pool: asyncpg.Pool,
    user_id: str,
    settings: CommonSettings,
    *,
    publisher: Publisher | None,
) -> RebuildStatus:
    """Mark all the user's rows pending with the provider now in effect; with a publisher,
    ask the embedder service for them (else the caller embeds them, see ``embed_missing``)."""
    config = await resolve_config(pool, user_id, settings)
    if config is None:
        raise InvalidRequest(
            "embeddings are off for this user (full-text-only): there is no provider to "
            "rebuild with"
        )
    marked: dict[EmbedKind, list[Any]] = {}
    async with pool.acquire() as conn, conn.transaction():
        for kind, sql in MARK_FOR_REBUILD.items():
            rows = await conn.fetch(sql, user_id, config.provider, config.model, config.dimensions)
            marked[kind] = [r["id"] for r in rows]
        total = sum(len(v) for v in marked.values())
        await conn.execute(RECORD_REBUILD, user_id, config.provider, config.model, total)
    if publisher is not None:
        await request_embeddings(publisher, user_id, marked, reason="rebuild")
    status = await rebuild_progress(pool, user_id)
    assert status is not None
    return status


async def reembed_rows(
    pool: asyncpg.Pool,
    user_id: str,
    settings: CommonSettings,
    ids: dict[EmbedKind, list[Any]],
    *,
    publisher: Publisher | None,
) -> RebuildStatus | None:
    """Rows written without a vector (an imported archive): embed them with the provider
    now in effect, tracked as the user's rebuild so its progress shows where a rebuild's
    does (``rebuild_progress``, ``GET /v1/embeddings/rebuild``). With a publisher the
    embedder service does the work; without one the caller runs ``embed_missing``.

    None when embeddings are off for the user (the rows stay full-text only)."""
    config = await resolve_config(pool, user_id, settings)
    if config is None:
        return None
    total = sum(len(v) for v in ids.values())
    await pool.execute(RECORD_REBUILD, user_id, config.provider, config.model, total)
    if publisher is not None and total:
        await request_embeddings(publisher, user_id, ids, reason="backfill")
    return await rebuild_progress(pool, user_id)


async def request_embeddings(
    publisher: Publisher,
    user_id: str,
    ids: dict[EmbedKind, list[Any]],
    *,
    reason: EmbedReason,
) -> None:
    targets = [EmbedTarget(kind=k, id=str(i)) for k, v in ids.items() for i in v]
    events = [
        EmbedRequested(user_id=user_id, targets=targets[i : i + TARGETS_PER_EVENT], reason=reason)
        for i in range(0, len(targets), TARGETS_PER_EVENT)
    ]
    for i in range(0, len(events), 100):
        await publisher.publish(EMBED, events[i : i + 100])


async def rebuild_progress(pool: Executor, user_id: str) -> RebuildStatus | None:
    """The user's latest rebuild (None if there never was one); finishes it when nothing
    is pending any more."""
    row = await pool.fetchrow(GET_REBUILD, user_id)
    if row is None:
        return None
    states = await pool.fetchrow(COUNT_STATES, user_id)
    assert states is not None
    counts = await rebuild_count(pool, user_id)
    pending = int(states["pending"])
    finished = row["finished_at"]
    if finished is None and pending == 0:
        finished = await pool.fetchval(FINISH_REBUILD, user_id) or row["finished_at"]
    total = max(counts.total, 0)
    return RebuildStatus(
        provider=row["provider"],
        model=row["model"],
        total=total,
        done=max(total - pending, 0),
        pending=pending,
        errors=int(states["errors"]),
        started_at=row["started_at"],
        finished_at=finished,
        running=finished is None,
    )


async def active_rebuilds(pool: asyncpg.Pool) -> list[RebuildStatus]:
    """Progress of every unfinished rebuild (for the embedder's gauges)."""
    out = []
    for r in await pool.fetch(ACTIVE_REBUILDS):
        status = await rebuild_progress(pool, r["user_id"])
        if status is not None and status.running:
            out.append(status)
    return out


@dataclass
class BackfillResult:
    total: int = 0
    ready: int = 0
    errors: int = 0
    deferred: int = 0
    skipped: int = 0  # users in full-text-only mode, or rows changed meanwhile


async def count_missing(pool: asyncpg.Pool, *, user_id: str | None = None) -> int:
    n = 0
    for sql in COUNT_MISSING.values():
        n += int(await pool.fetchval(sql, user_id) or 0)
    return n


async def embed_missing(
    pool: asyncpg.Pool,
    settings: CommonSettings,
    *,
    user_id: str | None = None,
    batch: int = 64,
    registry: ProviderRegistry | None = None,
    observer: Observer | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> BackfillResult:
    """Backfill: embed rows without a vector (all users, or one), ``batch`` at a time,
    with each user's provider now in effect. Safe to run twice."""
    s = as_embedding_settings(settings)
    reg = registry or default_registry(s)
    options = Options(dim=s.embedding_dim, batch=batch, parallel=1)
    result = BackfillResult(total=await count_missing(pool, user_id=user_id))
    for kind in TABLES:
        last: Any = None
        while True:
            page = await pool.fetch(MISSING_PAGE[kind], user_id, last, batch)
            if not page:
                break
            last = page[-1]["id"]
            outcome = await _embed_page(pool, s, kind, page, reg, options, observer)
            result.ready += outcome.ready
            result.errors += outcome.errors
            result.deferred += outcome.deferred
            result.skipped += outcome.skipped
            if on_progress is not None:
                on_progress(len(page))
    return result


async def _embed_page(
    pool: asyncpg.Pool,
    settings: CommonSettings,
    kind: EmbedKind,
    page: Sequence[asyncpg.Record],
    registry: ProviderRegistry,
    options: Options,
    observer: Observer | None,
) -> Outcome:
    by_user: dict[str, list[Any]] = defaultdict(list)
    for r in page:
        by_user[r["user_id"]].append(r["id"])
    items: list[Item] = []
    configs: dict[str, ProviderConfig] = {}
    skipped = 0
    for uid, ids in by_user.items():
        config = await resolve_config(pool, uid, settings)
        if config is None:
            skipped += len(ids)
            continue
        configs[uid] = config
        await pool.execute(CLAIM[kind], uid, ids)
        rows = await store.fetch_pending(pool, uid, kind, ids, max_chars=8000)
        items.extend(Item(uid, row) for row in rows)
    outcome = await embed_items(
        pool, items, configs, registry=registry, options=options, observer=observer
    )
    outcome.skipped += skipped
    return outcome
