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
call has a deadline (retries included) and goes through its endpoint's circuit;
a user's own endpoint has its own call slots (not the shared ``parallel``), and
what it has not answered after ``inline_s`` is taken out of line: its rows get a
retry time as a lease (a crash leaves them to the retry sweep), the call goes on
in the background and the read returns. An endpoint with such a call still in
flight gets no new calls: its rows are deferred at once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from shared.embeddings import store
from shared.embeddings.base import DimensionTooLarge, Embedder, fit_to_column
from shared.embeddings.guard import GuardedEmbedder, Guards, default_guards, endpoint_key
from shared.embeddings.providers import ProviderConfig, ProviderRegistry
from shared.embeddings.store import Row
from shared.errors import ConfigError, ProviderError, ProviderUnavailable
from shared.events import EmbedKind
from shared.outbound import public_reason

log = logging.getLogger(__name__)


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
    inline_s: float | None = None  # a user endpoint's call waited for; None = to the end


class Observer:
    """Hooks for metrics; the default does nothing."""

    def provider_call(self, provider: str, size: int, seconds: float, ok: bool) -> None: ...

    def rows(self, provider: str, outcome: str, n: int) -> None: ...


async def embed_items(
    pool: asyncpg.Pool,
    items: Sequence[Item],
    configs: dict[str, ProviderConfig],
    *,
    registry: ProviderRegistry,
    options: Options,
    observer: Observer | None = None,
    guards: Guards | None = None,
) -> Outcome:
    """Embed ``items`` (each user's config in ``configs``) and store the results."""
    obs = observer or Observer()
    groups: dict[tuple[Any, ...], list[Item]] = defaultdict(list)
    total = Outcome()
    for item in items:
        config = configs[item.user_id]
        row = item.row
        if row.pending_provider is not None and (row.pending_provider, row.pending_model) != (
            config.provider,
            config.model,
        ):
            # A rebuild marked it for another model than the one now in effect; the
            # next rebuild re-marks it. Writing now would mix models.
            total.skipped += 1
            continue
        groups[config.key].append(item)

    guards = guards or default_guards()
    slots = asyncio.Semaphore(options.parallel)
    inline: list[asyncio.Task[Outcome]] = []
    own: dict[asyncio.Task[Outcome], tuple[str, str, list[Item]]] = {}
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
        apart = key is not None and config.source == "user" and options.inline_s is not None
        if apart and key is not None and guards.out_of_line(key):
            # Still answering an earlier read's call out of line: not in this read's way.
            reason = f"{key}: an earlier call is still in flight; retried later"
            inline.append(
                asyncio.create_task(_defer(pool, group, reason, options, obs, config.provider))
            )
            continue
        gate = guards.slots(key) if apart and key is not None else slots
        for i in range(0, len(group), options.batch):
            chunk = group[i : i + options.batch]
            task = asyncio.create_task(
                _guarded(
                    gate,
                    functools.partial(_embed_chunk, pool, chunk, embedder, config, options, obs),
                )
            )
            if apart and key is not None:
                own[task] = (key, config.provider, list(chunk))
            else:
                inline.append(task)
    started = time.monotonic()
    for outcome in await asyncio.gather(*inline):
        total.add(outcome)
    if own:
        wait = max(0.0, (options.inline_s or 0.0) - (time.monotonic() - started))
        done, late = await asyncio.wait(list(own), timeout=wait)
        for task in done:
            total.add(task.result())
        for task in late:
            key, provider, chunk = own[task]
            total.add(
                await _take_out_of_line(pool, task, key, provider, chunk, options, obs, guards)
            )
    return total


async def _take_out_of_line(
    pool: asyncpg.Pool,
    task: asyncio.Task[Outcome],
    key: str,
    provider: str,
    chunk: Sequence[Item],
    options: Options,
    obs: Observer,
    guards: Guards,
) -> Outcome:
    """Let ``task`` finish in the background; its rows leased until its deadline."""
    guards.detach(task, key)
    lease = options.deadline_s + options.retry_backoff_s
    await _leave_pending(pool, chunk, f"{key} is slow: embedding out of line", lease, lease)
    log.warning("%s is slow: %d row(s) taken out of line", key, len(chunk))
    obs.rows(provider, "out_of_line", len(chunk))
    return Outcome(deferred=len(chunk))


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
    try:
        vectors = await embedder.embed([it.row.text for it in todo])
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
    obs.provider_call(config.provider, len(todo), time.perf_counter() - started, True)
    fitted: list[Item] = []
    fitted_vectors: list[list[float]] = []
    native: list[int] = []
    errors: dict[Item, str] = {}
    for it, vec in zip(todo, vectors, strict=True):
        try:
            fitted_vectors.append(fit_to_column(vec, options.dim))
            fitted.append(it)
            native.append(len(vec))
        except DimensionTooLarge as exc:
            errors[it] = str(exc)
    outcome.add(
        await _store(
            pool, config, list(zip(fitted, fitted_vectors, strict=True)), native, errors, obs
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
) -> Outcome:
    """Write one chunk's vectors (one statement per table, every user's rows in it)
    and errors in one transaction."""
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
