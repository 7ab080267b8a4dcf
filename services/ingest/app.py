"""Composition root of the ingest service."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from fastapi import FastAPI

from services.ingest import service
from services.ingest.settings import IngestSettings
from shared.events import (
    BatchResult,
    EpisodeClosed,
    EpisodeStarted,
    TurnReceived,
    episode_adapter,
    turn_adapter,
)
from shared.runtime import Runtime, add_ops_routes
from shared.stream_registry import EPISODES, INGEST, TURNS
from shared.streams import FailurePolicy
from shared.tracing import Tracing


def create_app(
    settings: IngestSettings | None = None, *, tracing: Tracing | None = None
) -> FastAPI:
    """``tracing``: the process's spans (default: as settings say; tests pass their own)."""
    settings = settings or IngestSettings()
    rt = Runtime("ingest", settings, tracing=tracing)
    window = timedelta(minutes=settings.stale_window_minutes)

    async def on_turns(batch: Sequence[TurnReceived]) -> BatchResult:
        return await service.store_turns(rt.pool, rt.publisher, batch, stale_window=window)

    async def on_episodes(
        batch: Sequence[EpisodeStarted | EpisodeClosed],
    ) -> BatchResult:
        return await service.handle_episode_events(rt.pool, rt.publisher, batch)

    # Failure policy: an outage (PostgreSQL or Redis away) waits with backoff; a
    # data error PostgreSQL raises for one entry is bisected out of its batch and
    # dead-lettered at once; anything else is dead-lettered after max_attempts.
    policy = FailurePolicy.default(settings)
    rt.consume(
        stream=TURNS,
        group=INGEST,
        adapter=turn_adapter,
        handle=on_turns,
        readers=settings.turn_readers,
        policy=policy,
    )
    rt.consume(
        stream=EPISODES,
        group=INGEST,
        adapter=episode_adapter,
        handle=on_episodes,
        policy=policy,
    )

    app = FastAPI(title="engram ingest", lifespan=rt.lifespan)
    app.state.runtime = rt
    add_ops_routes(app, rt)
    return app
