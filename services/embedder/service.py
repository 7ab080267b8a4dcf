"""Embedder use cases: embed what ``EmbedRequested`` names, retry what waited, gauges.

No FastStream, no HTTP here. Guarantees: a row gets a vector at most once per
pending period (redelivered requests find it ``ready`` and skip it); a provider
outage never loses a row (it stays ``pending`` and is retried with backoff); a
memory item that becomes ``ready`` is announced on ``memories``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import asyncpg

from services.embedder.metrics import EmbedderMetrics
from services.embedder.settings import EmbedderSettings
from shared.embeddings import rebuild, store
from shared.embeddings.guard import Guards
from shared.embeddings.pipeline import Item, Options, Outcome, embed_items, for_another_model
from shared.embeddings.providers import ProviderConfig, ProviderRegistry
from shared.embeddings.user_settings import resolve_configs
from shared.embeddings.vector_index import Indexer
from shared.errors import ConfigError
from shared.events import BatchResult, EmbedKind, EmbedRequested, MemoryChanged
from shared.stream_registry import MEMORIES
from shared.streams import Publisher

log = logging.getLogger(__name__)

Wanted = dict[str, dict[EmbedKind, set[Any]]]

NO_PROVIDER = "no embedding provider (full-text only): waits for one to be configured"
OTHER_MODEL = "marked by a rebuild for another model than the one configured: waits for a rebuild"

COUNT_STATE = {
    (t.name, state): f"SELECT count(*) FROM {t.name} WHERE embedding_state = '{state}'"
    for t in store.TABLES.values()
    for state in ("pending", "error")
}


def options(settings: EmbedderSettings) -> Options:
    # One call more than the local model's passes (one per core by default): a call
    # holds its slot while its vectors are written and committed, and without a
    # spare call a pass sat idle through every write (bench/embed under load: 8% of
    # the passes' time, 4% with the spare; docs/embeddings.md).
    return Options(
        dim=settings.embedding_dim,
        batch=settings.embed_batch_size,
        parallel=max(settings.embed_parallel, settings.embedding_local_workers + 1),
        retry_backoff_s=settings.embed_retry_backoff_s,
        retry_max_s=settings.embed_retry_max_s,
        deadline_s=settings.embedding_deadline_s,
        out_of_line=True,
    )


async def handle_requests(
    pool: asyncpg.Pool,
    publisher: Publisher,
    requests: Sequence[EmbedRequested],
    *,
    settings: EmbedderSettings,
    registry: ProviderRegistry,
    metrics: EmbedderMetrics | None = None,
    indexer: Indexer | None = None,
    guards: Guards | None = None,
) -> BatchResult:
    """Embed every pending row the requests name, texts of all requests merged per provider.

    A request naming an id that is not one is refused (by its position in ``requests``)."""
    result = BatchResult()
    wanted: Wanted = defaultdict(lambda: defaultdict(set))
    for i, request in enumerate(requests):
        parsed: list[tuple[EmbedKind, Any]] = []
        try:
            for t in request.targets:
                parsed.append((t.kind, store.parse_id(t.kind, t.id)))
        except ValueError:
            result.refused[i] = f"target {t.kind} id {t.id!r} is not a valid id"
            continue
        if request.user_id is not None:
            for kind, row_id in parsed:
                wanted[request.user_id][kind].add(row_id)
        else:
            # A request spanning users (ingest sends one per batch): each row's owner
            # comes from the row itself, so a row is only ever embedded as its owner's.
            by_kind: dict[EmbedKind, list[Any]] = defaultdict(list)
            for kind, row_id in parsed:
                by_kind[kind].append(row_id)
            for kind, ids in by_kind.items():
                for owner, row_id in await store.owners(pool, kind, ids):
                    wanted[owner][kind].add(row_id)
    await embed_wanted(
        pool,
        publisher,
        wanted,
        settings=settings,
        registry=registry,
        metrics=metrics,
        indexer=indexer,
        guards=guards,
    )
    return result


async def embed_wanted(
    pool: asyncpg.Pool,
    publisher: Publisher,
    wanted: Wanted,
    *,
    settings: EmbedderSettings,
    registry: ProviderRegistry,
    metrics: EmbedderMetrics | None = None,
    indexer: Indexer | None = None,
    guards: Guards | None = None,
    swept: bool = False,
) -> Outcome:
    """Embed the ``wanted`` rows with each user's provider. ``swept``: the rows come
    from the retry sweep, so those of a user with no provider are parked (never swept
    again until a rebuild) instead of left as they are."""
    items: list[Item] = []
    configs: dict[str, ProviderConfig] = {}
    opts = options(settings)
    # Every user's settings in one read, every table's pending rows in one read each:
    # a request from ingest names the turns of a batch, of many users.
    resolved = await resolve_configs(pool, list(wanted), settings)
    pending: dict[EmbedKind, list[tuple[str, Any]]] = defaultdict(list)
    for user_id, kinds in wanted.items():
        config = resolved[user_id]
        if isinstance(config, ConfigError):
            # The user's settings cannot be used now (e.g. the key cannot be decrypted):
            # keep their rows and try again later, with the reason on the rows.
            for kind, ids in kinds.items():
                await store.defer(
                    pool,
                    user_id,
                    kind,
                    list(ids),
                    error=str(config),
                    backoff_s=opts.retry_backoff_s,
                    max_backoff_s=opts.retry_max_s,
                )
            continue
        if config is None:
            # Full-text-only: rows stay pending until a provider is configured (its
            # rebuild asks for them again).
            if swept:
                for kind, ids in kinds.items():
                    await store.park(pool, user_id, kind, list(ids), reason=NO_PROVIDER)
            continue
        configs[user_id] = config
        for kind, ids in kinds.items():
            pending[kind].extend((user_id, i) for i in ids)
    for kind, pairs in pending.items():
        rows = await store.fetch_pending_many(
            pool,
            kind,
            pairs,
            max_chars=settings.embed_max_chars,
            passage_chars=settings.embed_passage_chars,
        )
        items.extend(Item(user_id, row) for user_id, row in rows)
    if swept:
        # Rows a rebuild marked for another model are not written (that would mix
        # models) and would stay the sweep's oldest orphans, read first by every sweep:
        # parked like rows with no provider, so they cannot crowd out newer lost
        # requests; a rebuild resets them.
        other: dict[tuple[str, EmbedKind], list[Any]] = defaultdict(list)
        kept: list[Item] = []
        for it in items:
            if for_another_model(it.row, configs[it.user_id]):
                other[(it.user_id, it.row.kind)].append(it.row.id)
            else:
                kept.append(it)
        for (user_id, kind), marked in other.items():
            await store.park(pool, user_id, kind, marked, reason=OTHER_MODEL)
        items = kept

    async def announce(outcome: Outcome) -> None:
        if outcome.memories_ready:
            await publisher.publish(
                MEMORIES,
                [
                    MemoryChanged(memory_id=mid, user_id=uid, change="embedded")
                    for uid, mid in outcome.memories_ready
                ],
            )

    # a call to a user's own endpoint runs out of line and announces its own outcome
    outcome = await embed_items(
        pool,
        items,
        configs,
        registry=registry,
        options=opts,
        observer=metrics,
        guards=guards,
        late=announce,
    )
    if indexer is not None:
        for user_id, kind in {(it.user_id, it.row.kind) for it in items}:
            indexer.note(user_id, kind)
    await announce(outcome)
    return outcome


async def retry_due(
    pool: asyncpg.Pool,
    publisher: Publisher,
    *,
    settings: EmbedderSettings,
    registry: ProviderRegistry,
    metrics: EmbedderMetrics | None = None,
    indexer: Indexer | None = None,
    guards: Guards | None = None,
    limit: int = 500,
    orphans: bool = False,
    orphan_age_s: float | None = None,
) -> Outcome:
    """Embed rows whose provider was down and whose retry time has come; with
    ``orphans``, also rows pending and untouched for ``embed_orphan_after_s`` (or
    ``orphan_age_s``: shorter, after Redis came back) with no retry time, whose
    request was lost or dead-lettered (a user's rows with no provider are parked the
    first time, so they are not looked at again)."""
    wanted: Wanted = defaultdict(lambda: defaultdict(set))
    for kind in store.TABLES:
        found = await store.due_for_retry(pool, kind, limit=limit)
        if orphans:
            age = settings.embed_orphan_after_s if orphan_age_s is None else orphan_age_s
            found += await store.orphans(pool, kind, older_than_s=age, limit=limit)
            if found:
                log.info("embedder: the sweep takes %d %s row(s)", len(found), kind)
        for user_id, row_id in found:
            wanted[user_id][kind].add(row_id)
    if not wanted:
        return Outcome()
    return await embed_wanted(
        pool,
        publisher,
        wanted,
        settings=settings,
        registry=registry,
        metrics=metrics,
        indexer=indexer,
        guards=guards,
        swept=True,
    )


async def refresh_gauges(pool: asyncpg.Pool, metrics: EmbedderMetrics) -> None:
    """Rows pending and in error per table; rebuild progress (finishing done rebuilds)."""
    for (table, state), sql in COUNT_STATE.items():
        metrics.rows_state.labels(table, state).set(int(await pool.fetchval(sql) or 0))
    active = await rebuild.active_rebuilds(pool)
    metrics.rebuilds_active.set(len(active))
    metrics.rebuild_total.set(sum(s.total for s in active))
    metrics.rebuild_remaining.set(sum(s.pending for s in active))
