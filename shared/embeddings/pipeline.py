"""Embed rows and store the outcome: the one path used by the embedder service, the
retry sweep, backfill and inline rebuilds.

Rows that share a provider configuration go to the provider together, ``batch``
texts per call, several users' rows in one call. For each call:

- vectors are zero-padded to the column and written in bulk (rows → ``ready``);
  a vector longer than the column puts its row in ``error`` with the reason;
- the provider is unavailable (timeouts, 429, 502-504 after retries, or a user's
  configuration that cannot be used right now): rows stay ``pending`` and are
  tried again later with backoff (``embedding_retry_at``);
- the provider refuses the input (4xx, a 500 that keeps coming, a malformed
  answer): the call is split to find the rows it refuses, which go to ``error``
  with the kind of failure and its HTTP status (``shared.outbound.public_reason``),
  never the provider's body, which is only logged; the others are stored.

One user's slow endpoint never holds up another user's rows (``guard``): every
call has a deadline (retries included) and goes through its endpoint's circuit.
In the embedder (``Options.out_of_line``) a call to a user's own endpoint is not
waited for at all: its rows get a retry time as a lease (a crash leaves them to
the retry sweep), the call runs in the background in the endpoint's own call
slots (``Guards.per_endpoint``, not the shared ``parallel``) and stores its own
outcome, and the read goes on at once. Per endpoint, and per user whichever
endpoints (a user who keeps changing their URL makes a new endpoint each time),
``QUEUED_PER_SLOT`` calls per slot wait or run; rows beyond that are deferred at
once, that write also off the read (``Guards.background``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from shared.embeddings import store
from shared.embeddings.base import DimensionTooLarge, Embedder, fit_to_column
from shared.embeddings.guard import GuardedEmbedder, Guards, default_guards, endpoint_key
from shared.embeddings.passages import Passage
from shared.embeddings.providers import ProviderConfig, ProviderRegistry
from shared.embeddings.store import Row
from shared.errors import ConfigError, ProviderError, ProviderUnavailable
from shared.events import EmbedKind
from shared.outbound import public_reason

log = logging.getLogger(__name__)


SLOW_ENDPOINT = "the endpoint is slow: earlier calls are still in flight; retried later"

QUEUED_PER_SLOT = 8
"""Calls out of line per endpoint (and per user) that may wait for or hold one of its
``Guards.per_endpoint`` slots: a user's backfill of 32 x 64 texts is queued, a hanging
endpoint holds no more than that; rows beyond it are deferred at once."""


@dataclass(frozen=True)
class Item:
    user_id: str
    row: Row


@dataclass
class Outcome:
    ready: int = 0
    errors: int = 0
    deferred: int = 0
    skipped: int = 0
    memories_ready: list[tuple[str, Any]] = field(default_factory=list)

    def add(self, other: Outcome) -> None:
        self.ready += other.ready
        self.errors += other.errors
        self.deferred += other.deferred
        self.skipped += other.skipped
        self.memories_ready.extend(other.memories_ready)


@dataclass(frozen=True)
class Options:
    dim: int
    batch: int = 64
    parallel: int = 2
    retry_backoff_s: float = 5.0
    retry_max_s: float = 600.0
    deadline_s: float = 120.0  # one provider call, its retries included
    out_of_line: bool = False  # a user endpoint's calls run in the background


Late = Callable[["Outcome"], Awaitable[None]]
"""Told the outcome of a call run out of line, when it ends."""


class Observer:
    """Hooks for metrics; the default does nothing."""

    def provider_call(self, provider: str, size: int, seconds: float, ok: bool) -> None: ...

    def rows(self, provider: str, outcome: str, n: int) -> None: ...


def for_another_model(row: Row, config: ProviderConfig) -> bool:
    """Whether a rebuild marked ``row`` for another model than the one now in effect:
    writing it now would mix models; the next rebuild re-marks it."""
    return row.pending_provider is not None and (row.pending_provider, row.pending_model) != (
        config.provider,
        config.model,
    )


async def embed_items(
    pool: asyncpg.Pool,
    items: Sequence[Item],
    configs: dict[str, ProviderConfig],
    *,
    registry: ProviderRegistry,
    options: Options,
    observer: Observer | None = None,
    guards: Guards | None = None,
    late: Late | None = None,
) -> Outcome:
    """Embed ``items`` (each user's config in ``configs``) and store the results.

    Calls run out of line (``options.out_of_line``) are not in the returned outcome:
    each one's goes to ``late`` when it ends (e.g. to announce memories made ready)."""
    obs = observer or Observer()
    groups: dict[tuple[Any, ...], list[Item]] = defaultdict(list)
    total = Outcome()
    for item in items:
        config = configs[item.user_id]
        if for_another_model(item.row, config):
            total.skipped += 1
            continue
        groups[config.key].append(item)

    guards = guards or default_guards()
    slots = asyncio.Semaphore(options.parallel)
    inline: list[asyncio.Task[Outcome]] = []
    for group in groups.values():
        config = configs[group[0].user_id]
        try:
            inner = registry.embedder(config)
        except ConfigError as exc:
            inline.append(
                asyncio.create_task(_defer(pool, group, str(exc), options, obs, config.provider))
            )
            continue
        key = endpoint_key(config)
        embedder = GuardedEmbedder(inner, key, guards, deadline_s=options.deadline_s)
        apart = key is not None and config.source == "user" and options.out_of_line
        for chunk in _chunks(group, options.batch):
            work = functools.partial(_embed_chunk, pool, chunk, embedder, config, options, obs)
            if apart and key is not None:
                ran = _out_of_line(
                    pool, work, key, config.provider, chunk, options, obs, guards, late
                )
                if ran is None:
                    # The endpoint (or user) has its share out of line: its rows wait for
                    # the retry sweep, written off the read too (a read never waits for
                    # this endpoint's bookkeeping, however busy the database is).
                    guards.background(
                        asyncio.create_task(
                            _defer(pool, chunk, SLOW_ENDPOINT, options, obs, config.provider)
                        )
                    )
                    ran = Outcome(deferred=len(chunk))
                total.add(ran)
            else:
                inline.append(asyncio.create_task(_guarded(slots, work)))
    for outcome in await asyncio.gather(*inline):
        total.add(outcome)
    return total


def _chunks(group: Sequence[Item], batch: int) -> list[Sequence[Item]]:
    """``group`` in chunks of about ``batch`` texts, a long turn's passages counted
    (one turn's passages stay in its chunk: they are written with its vector)."""
    out: list[Sequence[Item]] = []
    start, texts = 0, 0
    for n, it in enumerate(group):
        if texts and texts + 1 + len(_to_embed(it)) > batch:
            out.append(group[start:n])
            start, texts = n, 0
        texts += 1 + len(_to_embed(it))
    if start < len(group):
        out.append(group[start:])
    return out


def _to_embed(it: Item) -> list[Passage]:
    """A long turn's passages to embed: all but its head (the turn's own text)."""
    return [p for p in it.row.passages if p.idx > 0]


def _out_of_line(
    pool: asyncpg.Pool,
    work: Callable[[], Coroutine[Any, Any, Outcome]],
    key: str,
    provider: str,
    chunk: Sequence[Item],
    options: Options,
    obs: Observer,
    guards: Guards,
    late: Late | None,
) -> Outcome | None:
    """Start ``work`` (a call to a user's endpoint) in the background, its rows leased
    until its deadline first; None (nothing started) when that endpoint, or that
    user, has its share of calls out of line already."""
    owners = frozenset(it.user_id for it in chunk)
    busy = max([guards.out_of_line(key)] + [guards.out_of_line_for(u) for u in owners])
    if busy >= guards.per_endpoint * QUEUED_PER_SLOT:
        return None

    async def run() -> Outcome:
        await _lease(pool, chunk, options.deadline_s + options.retry_backoff_s)
        outcome = await _guarded(guards.slots(key), work)
        if late is not None:
            await late(outcome)
        return outcome

    # counted at once, so the next chunk of this read sees it
    guards.detach(asyncio.create_task(run()), key, owners)
    obs.rows(provider, "out_of_line", len(chunk))
    return Outcome(deferred=len(chunk))


async def _lease(pool: asyncpg.Pool, items: Sequence[Item], seconds: float) -> None:
    by_target: dict[tuple[str, EmbedKind], list[Any]] = defaultdict(list)
    for it in items:
        by_target[(it.user_id, it.row.kind)].append(it.row.id)
    async with pool.acquire() as conn, conn.transaction():
        for (user_id, kind), ids in by_target.items():
            await store.lease(conn, user_id, kind, ids, seconds=seconds)


async def _guarded(
    slots: asyncio.Semaphore, work: Callable[[], Coroutine[Any, Any, Outcome]]
) -> Outcome:
    # The coroutine is made only once it holds a slot.
    async with slots:
        return await work()


async def _embed_chunk(
    pool: asyncpg.Pool,
    chunk: Sequence[Item],
    embedder: Embedder,
    config: ProviderConfig,
    options: Options,
    obs: Observer,
) -> Outcome:
    empty = [it for it in chunk if not it.row.text]
    todo = [it for it in chunk if it.row.text]
    outcome = Outcome()
    if empty:
        outcome.add(
            await _store(
                pool,
                config,
                [],
                [],
                {it: "nothing to embed: the text is empty" for it in empty},
                obs,
            )
        )
    if not todo:
        return outcome
    started = time.perf_counter()
    texts = [t for it in todo for t in (it.row.text, *(p.text for p in _to_embed(it)))]
    try:
        # a chunk holding a long turn's passages may be more texts than one call takes
        vectors = []
        for i in range(0, len(texts), options.batch):
            vectors.extend(await embedder.embed(texts[i : i + options.batch]))
        if len(vectors) != len(texts):
            raise ProviderError(f"{len(vectors)} vectors for {len(texts)} texts")
    except (ProviderUnavailable, ConfigError) as exc:
        # ConfigError: the outbound guard refused the address the name resolves to now
        obs.provider_call(config.provider, len(todo), time.perf_counter() - started, False)
        log.warning("%s %s: %s", config.provider, config.model, str(exc)[:300])
        outcome.add(await _defer(pool, todo, public_reason(exc), options, obs, config.provider))
        return outcome
    except ProviderError as exc:
        obs.provider_call(config.provider, len(todo), time.perf_counter() - started, False)
        if len(todo) > 1:
            # Find the texts it refuses: halve until they stand alone.
            mid = len(todo) // 2
            for half in (todo[:mid], todo[mid:]):
                outcome.add(await _embed_chunk(pool, half, embedder, config, options, obs))
            return outcome
        log.info("embedding refused (%s %s): %s", config.provider, config.model, str(exc)[:300])
        outcome.add(await _store(pool, config, [], [], {todo[0]: public_reason(exc)}, obs))
        return outcome
    obs.provider_call(config.provider, len(texts), time.perf_counter() - started, True)
    fitted: list[Item] = []
    fitted_vectors: list[list[float]] = []
    native: list[int] = []
    errors: dict[Item, str] = {}
    parts: dict[Item, list[tuple[Passage, list[float]]]] = {}
    at = 0
    for it in todo:
        vec = vectors[at]
        try:
            fitted_vectors.append(fit_to_column(vec, options.dim))
            extra = _to_embed(it)
            # the head passage (idx 0) is stored with the turn's own vector
            own = [vec] * (len(it.row.passages) - len(extra))
            parts[it] = [
                (p, fit_to_column(v, options.dim))
                for p, v in zip(
                    it.row.passages, own + vectors[at + 1 : at + 1 + len(extra)], strict=True
                )
            ]
            fitted.append(it)
            native.append(len(vec))
        except DimensionTooLarge as exc:
            errors[it] = str(exc)
        at += 1 + len(_to_embed(it))
    outcome.add(
        await _store(
            pool,
            config,
            list(zip(fitted, fitted_vectors, strict=True)),
            native,
            errors,
            obs,
            parts,
        )
    )
    return outcome


async def _store(
    pool: asyncpg.Pool,
    config: ProviderConfig,
    done: list[tuple[Item, list[float]]],
    native: list[int],
    errors: dict[Item, str],
    obs: Observer,
    parts: dict[Item, list[tuple[Passage, list[float]]]] | None = None,
) -> Outcome:
    """Write one chunk's vectors (one statement per table, every user's rows in it),
    a turn's passages with its own vector, and errors in one transaction."""
    by_kind: dict[EmbedKind, list[int]] = defaultdict(list)
    for n, (it, _) in enumerate(done):
        by_kind[it.row.kind].append(n)
    err_target: dict[tuple[str, EmbedKind], dict[Any, str]] = defaultdict(dict)
    for it, msg in errors.items():
        err_target[(it.user_id, it.row.kind)][it.row.id] = msg
    outcome = Outcome()
    async with pool.acquire() as conn, conn.transaction():
        for kind, idx in by_kind.items():
            written = await store.write_vectors_many(
                conn,
                kind,
                provider=config.provider,
                model=config.model,
                owners=[done[i][0].user_id for i in idx],
                ids=[done[i][0].row.id for i in idx],
                vectors=[done[i][1] for i in idx],
                native_dims=[native[i] for i in idx],
            )
            outcome.ready += len(written)
            outcome.skipped += len(idx) - len(written)
            if kind == "memory":
                outcome.memories_ready.extend(written)
            if kind == "message":
                found = {(done[i][0].user_id, done[i][0].row.id): done[i][0] for i in idx}
                await store.write_passages(
                    conn,
                    written,
                    {key: (parts or {}).get(it, []) for key, it in found.items()},
                )
        for (user_id, kind), errs in err_target.items():
            ids = await store.mark_errors(
                conn, user_id, kind, provider=config.provider, model=config.model, errors=errs
            )
            outcome.errors += len(ids)
    obs.rows(config.provider, "ready", outcome.ready)
    obs.rows(config.provider, "error", outcome.errors)
    for msg in list(errors.values())[:3]:
        log.info("embedding error (%s %s): %s", config.provider, config.model, msg[:300])
    return outcome


async def _leave_pending(
    pool: asyncpg.Pool,
    items: Sequence[Item],
    error: str,
    backoff_s: float,
    max_backoff_s: float,
) -> None:
    """Keep ``items`` pending with ``error``, retried after a backoff (store.defer)."""
    by_target: dict[tuple[str, EmbedKind], list[Any]] = defaultdict(list)
    for it in items:
        by_target[(it.user_id, it.row.kind)].append(it.row.id)
    async with pool.acquire() as conn, conn.transaction():
        for (user_id, kind), ids in by_target.items():
            await store.defer(
                conn,
                user_id,
                kind,
                ids,
                error=error,
                backoff_s=backoff_s,
                max_backoff_s=max_backoff_s,
            )


async def _defer(
    pool: asyncpg.Pool,
    items: Sequence[Item],
    error: str,
    options: Options,
    obs: Observer,
    provider: str,
) -> Outcome:
    await _leave_pending(pool, items, error, options.retry_backoff_s, options.retry_max_s)
    log.warning("provider unavailable, %d row(s) stay pending: %s", len(items), error[:300])
    obs.rows(provider, "deferred", len(items))
    return Outcome(deferred=len(items))
