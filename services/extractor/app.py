"""Composition root of the extractor service."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import httpx
from fastapi import FastAPI

from services.extractor import consolidation, service, stale_sweep
from services.extractor.metrics import ExtractorMetrics
from services.extractor.settings import ExtractorSettings
from shared.embeddings import close_default_registry, resolve_embedder
from shared.events import BatchResult, ExtractRequested, extract_adapter
from shared.llm.client import LLMMetrics, OpenAIChatModel
from shared.llm.jobs import build_extractor
from shared.memory.vectors import TextEmbedder
from shared.runtime import Runtime, add_ops_routes
from shared.stream_registry import EXTRACT, EXTRACTOR
from shared.streams import FailurePolicy
from shared.tracing import Tracing


def create_app(
    settings: ExtractorSettings | None = None,
    *,
    llm_transport: httpx.AsyncBaseTransport | None = None,
    embedder_for: service.EmbedderFor | None = None,
    tracing: Tracing | None = None,
) -> FastAPI:
    settings = settings or ExtractorSettings()
    rt = Runtime("extractor", settings, tracing=tracing)
    metrics = ExtractorMetrics(rt.metrics.registry)
    extractor, client = build_extractor(
        settings, metrics=LLMMetrics(rt.metrics.registry), transport=llm_transport
    )

    async def users_embedder(user_id: str) -> TextEmbedder | None:
        # The user's own provider (or the system one); None = full-text-only, where
        # dedupe falls back to identical text.
        return await resolve_embedder(rt.pool, user_id, settings)

    holder: dict[str, service.Extraction] = {}

    async def start(rt: Runtime) -> None:
        holder["x"] = service.Extraction(
            pool=rt.pool,
            publisher=rt.publisher,
            extractor=extractor,
            embedder_for=embedder_for or users_embedder,
            dim=settings.embedding_dim,
            max_facts=settings.max_facts_per_episode,
            metrics=metrics,
            parallel=settings.extract_parallel,
            per_user=settings.extract_per_user,
        )

    async def stop(rt: Runtime) -> None:
        if isinstance(client, OpenAIChatModel):
            await client.aclose()
        await close_default_registry()

    rt.on_start.append(start)
    rt.on_stop.append(stop)

    async def on_extract(batch: Sequence[ExtractRequested]) -> BatchResult:
        return await service.handle_requests(holder["x"], batch)

    idle = timedelta(minutes=settings.stale_window_minutes)

    async def sweep() -> None:
        await stale_sweep.sweep(
            rt.pool, rt.publisher, idle=idle, batch=settings.sweep_batch, metrics=metrics
        )

    started = {"first": True}

    async def consolidate() -> None:
        if started.pop("first", False):
            return  # the first run one interval after start, not at once
        await consolidation.run_due(
            rt.pool,
            extractor,
            publisher=rt.publisher,
            embedder_for=embedder_for or users_embedder,
            dim=settings.embedding_dim,
            cap=settings.memory_cap,
            min_gap=timedelta(seconds=settings.consolidate_min_gap_s),
            batch=settings.consolidate_batch,
        )

    async def gauges() -> None:
        await service.refresh_gauges(rt.pool, metrics)

    # Failure policy: an outage (PostgreSQL away) waits with backoff and is never
    # dead-lettered; the model unavailable (unreachable, timing out, 429 or 502-504
    # after the client's retries, past its deadline or inline wait, its circuit open)
    # does not reach the stream: the episode is summarised offline and asked of the
    # model again later (services/extractor/service.py); a refusal (HTTP 401/400, a
    # 500 that keeps coming) is dead-lettered with its reason once delivered
    # max_attempts times. Output that stays invalid: that job is done offline and the
    # error recorded on the episode (extraction_error), not asked again.
    rt.consume(
        stream=EXTRACT,
        group=EXTRACTOR,
        adapter=extract_adapter,
        handle=on_extract,
        batch=settings.extract_batch,
        policy=FailurePolicy.default(settings),
    )
    rt.every(settings.sweep_interval_s, sweep)
    rt.every(settings.consolidate_interval_s, consolidate)
    rt.every(5.0, gauges)

    app = FastAPI(title="engram extractor", lifespan=rt.lifespan)
    app.state.runtime = rt
    add_ops_routes(app, rt)
    return app
