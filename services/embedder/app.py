"""Composition root of the embedder service."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from fastapi import FastAPI

from services.embedder import service
from services.embedder.metrics import EmbedderMetrics
from services.embedder.restarts import AFTER_RESTART_S, RedisRestarts
from services.embedder.settings import EmbedderSettings
from shared.embeddings.guard import guards_from
from shared.embeddings.providers import ProviderRegistry, preload
from shared.embeddings.vector_index import Indexer
from shared.events import BatchResult, EmbedRequested, embed_adapter
from shared.runtime import Runtime, add_ops_routes
from shared.stream_registry import EMBED, EMBEDDER
from shared.streams import FailurePolicy
from shared.tracing import Tracing

log = logging.getLogger(__name__)


def create_app(
    settings: EmbedderSettings | None = None,
    *,
    registry: ProviderRegistry | None = None,
    tracing: Tracing | None = None,
) -> FastAPI:
    """``registry`` and ``tracing`` are injectable (tests pass one with their own HTTP
    transport, their own span exporter)."""
    settings = settings or EmbedderSettings()
    rt = Runtime("embedder", settings, tracing=tracing)
    metrics = EmbedderMetrics(rt.metrics.registry)
    providers = registry or ProviderRegistry.from_settings(settings)
    indexer = Indexer(min_rows=settings.vector_index_min_rows)
    guards = guards_from(settings)

    async def on_embed(batch: Sequence[EmbedRequested]) -> BatchResult:
        return await service.handle_requests(
            rt.pool,
            rt.publisher,
            batch,
            settings=settings,
            registry=providers,
            metrics=metrics,
            indexer=indexer,
            guards=guards,
        )

    orphan_scan_at = 0.0  # monotonic time of the sweep's next look for orphaned rows
    restarts = RedisRestarts()

    async def retry_due() -> None:
        nonlocal orphan_scan_at
        back = await restarts.came_back(rt.redis)
        orphans = back or time.monotonic() >= orphan_scan_at
        if orphans:
            orphan_scan_at = time.monotonic() + settings.embed_orphan_after_s / 4
        if back:
            log.info("embedder: Redis came back; looking for rows whose request was lost")
        await service.retry_due(
            rt.pool,
            rt.publisher,
            settings=settings,
            registry=providers,
            metrics=metrics,
            indexer=indexer,
            guards=guards,
            orphans=orphans,
            orphan_age_s=AFTER_RESTART_S if back else None,
        )

    async def index_users() -> None:
        await indexer.run(rt.pool)

    async def gauges() -> None:
        await service.refresh_gauges(rt.pool, metrics)

    async def load_model() -> None:
        try:
            await asyncio.to_thread(preload, settings)
        except Exception:  # noqa: BLE001 - the first embed call reports it again, as an error
            log.exception("embedder: loading the local model failed")

    async def close_providers(_: Runtime) -> None:
        await guards.aclose()
        await providers.aclose()

    rt.consume(
        stream=EMBED,
        group=EMBEDDER,
        adapter=embed_adapter,
        handle=on_embed,
        batch=settings.embed_read_batch,
        linger_ms=settings.embed_linger_ms,
        readers=settings.embed_readers,
        # Provider failures never reach the stream: an outage leaves rows pending for
        # the retry sweep, a refusal marks them error (services/embedder). What does:
        # PostgreSQL or Redis away (wait with backoff), a data error (bisected out,
        # dead-lettered at once), anything else (dead-lettered after max_attempts).
        policy=FailurePolicy.default(settings),
    )
    rt.every(settings.embed_sweep_s, retry_due)
    rt.every(settings.vector_index_check_s, index_users)
    rt.every(settings.embed_gauge_s, gauges)
    rt.background.append(load_model)
    rt.on_stop.append(close_providers)

    app = FastAPI(title="engram embedder", lifespan=rt.lifespan)
    app.state.runtime = rt
    app.state.metrics = metrics
    add_ops_routes(app, rt)
    return app
