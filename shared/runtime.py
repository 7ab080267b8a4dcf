"""What one service process holds open, and the ops routes every service serves.

A service's composition root (``services/<name>/app.py``) builds a
:class:`Runtime`, registers its consumers, and uses :meth:`Runtime.lifespan`
as its FastAPI lifespan. Nothing connects before the lifespan starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import asyncpg
from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from shared.db import create_pool
from shared.metrics import ServiceMetrics
from shared.redis_client import RedisClient, connect_redis, make_broker
from shared.settings import CommonSettings
from shared.stream_registry import spec
from shared.streams import FailurePolicy, Handler, Publisher, ShardConsumers, StreamConsumer
from shared.tracing import Tracing

log = logging.getLogger(__name__)
T = TypeVar("T")

Hook = Callable[["Runtime"], Awaitable[None]]


class Runtime:
    """PostgreSQL pool, Redis client, FastStream broker, publisher and metrics of one process."""

    def __init__(
        self, service: str, settings: CommonSettings, *, tracing: Tracing | None = None
    ) -> None:
        self.service = service
        self.settings = settings
        # spans of this process (shared/tracing.py): as settings say, or the caller's
        self.tracing = tracing if tracing is not None else Tracing.from_settings(settings, service)
        self.metrics = ServiceMetrics(service, shards=settings.stream_shards)
        # FastStream's per-message and shutdown chatter stays quiet; its handler
        # errors (logged at ERROR) still show.
        fs_logger = logging.getLogger("faststream")
        fs_logger.setLevel(logging.WARNING)
        self.broker = make_broker(settings, logger=fs_logger)
        self.consumers: list[StreamConsumer[Any]] = []
        self.background: list[Callable[[], Coroutine[Any, Any, None]]] = []
        self.on_start: list[Hook] = []
        self.on_stop: list[Hook] = []
        self._pool: asyncpg.Pool | None = None
        self._redis: RedisClient | None = None
        self._publisher: Publisher | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    @property
    def pool(self) -> asyncpg.Pool:
        assert self._pool is not None, "runtime not started"
        return self._pool

    @property
    def redis(self) -> RedisClient:
        assert self._redis is not None, "runtime not started"
        return self._redis

    @property
    def publisher(self) -> Publisher:
        """The process's one publisher (what it publishes soon is flushed at stop)."""
        if self._publisher is None:
            self._publisher = Publisher(self.redis, self.settings, self.tracing)
        return self._publisher

    def consume(
        self,
        *,
        stream: str,
        group: str,
        adapter: TypeAdapter[T],
        handle: Handler[T],
        batch: int | None = None,
        readers: int = 1,
        linger_ms: int = 0,
        policy: FailurePolicy | None = None,
    ) -> ShardConsumers[T]:
        """Register a consumer group reader for ``stream`` (a registered stream, e.g.
        ``TURNS``, or its name) on every one of its shards: one
        :class:`~shared.streams.StreamConsumer` per shard key, each read with its own
        XREADGROUP and reclaimed, dead-lettered and trimmed on its own.

        ``policy`` says how failures are treated (outage / data / refused, and
        ``max_attempts``; see :class:`~shared.streams.FailurePolicy`); each service
        declares it where it wires the consumer.

        ``readers`` > 1 keeps that many batches in flight per shard in this process
        (each reader is its own consumer in the group), so database round trips
        overlap. ``linger_ms`` > 0 lets a read that found fewer than ``batch`` entries
        wait up to that long for more before the batch is handled."""
        registered = spec(stream)
        shards: list[StreamConsumer[T]] = []
        for shard in range(registered.shards(self.settings.stream_shards)):
            consumer = StreamConsumer(
                service=self.service,
                stream=registered,
                group=group,
                adapter=adapter,
                handle=handle,
                redis=lambda: self.redis,
                settings=self.settings,
                metrics=self.metrics,
                batch=batch,
                readers=readers,
                linger_ms=linger_ms,
                policy=policy,
                shard=shard,
                pool=lambda: self.pool,
                tracing=self.tracing,
            )
            consumer.register(self.broker)
            self.consumers.append(consumer)
            self.every(consumer.reclaim_interval_s, consumer.reclaim)
            shards.append(consumer)
        return ShardConsumers(shards)

    def every(self, seconds: float, job: Callable[[], Awaitable[object]]) -> None:
        """Run ``job`` periodically while the service runs; failures are logged, not fatal."""

        async def loop() -> None:
            while not self._stopping:
                try:
                    await job()
                except asyncio.CancelledError:
                    raise
                except Exception:  # noqa: BLE001 - a periodic job must not kill the service
                    log.exception("%s: periodic job %s failed", self.service, job)
                # A cancellation that arrived inside a client library and was swallowed
                # there still ends the loop (stop() would otherwise wait on it forever).
                task = asyncio.current_task()
                if self._stopping or (task is not None and task.cancelling()):
                    return
                await asyncio.sleep(seconds)

        self.background.append(loop)

    async def start(self) -> None:
        self._stopping = False
        s = self.settings
        self._pool = await create_pool(
            s.require_database_url(), min_size=s.db_pool_min, max_size=s.db_pool_max
        )
        self._redis = connect_redis(s)
        self._publisher = None  # made on first use, on this Redis client
        for hook in self.on_start:
            await hook(self)
        for c in self.consumers:
            await c.ensure_group()
        if self.consumers:
            self.every(5.0, self._observe)
        await self.broker.start()
        self._tasks = [asyncio.create_task(job()) for job in self.background]

    async def stop(self) -> None:
        self._stopping = True
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.broker.stop()
        if self._publisher is not None:
            await self._publisher.flush()
            await self._publisher.aclose()
        for hook in self.on_stop:
            await hook(self)
        if self._redis is not None:
            await self._redis.aclose()
        if self._pool is not None:
            await self._pool.close()
        if self.tracing.enabled:
            await asyncio.to_thread(self.tracing.flush)

    async def _observe(self) -> None:
        for c in self.consumers:
            await c.observe()

    @contextlib.asynccontextmanager
    async def lifespan(self, app: FastAPI) -> AsyncIterator[None]:
        await self.start()
        settle_heap()
        try:
            yield
        finally:
            await self.stop()
            gc.unfreeze()  # what the process held is collectable again once it stops

    async def health(self) -> dict[str, Any]:
        checks: dict[str, Any] = {}
        try:
            await self.pool.fetchval("SELECT 1")
            checks["postgres"] = "ok"
        except Exception as exc:  # noqa: BLE001 - health reports, it does not raise
            checks["postgres"] = f"error: {type(exc).__name__}"
        try:
            await self.redis.ping()
            checks["redis"] = "ok"
        except Exception as exc:  # noqa: BLE001
            checks["redis"] = f"error: {type(exc).__name__}"
        return checks


def settle_heap() -> None:
    """Leave what a started process holds (modules, the app, its models) out of the
    garbage collector's full passes (``gc.freeze``).

    A full pass walks every tracked object: ~50-60 ms in a query service, one in
    every dozen searches, which set their p95 (a 10,000-turn user: 76 ms with the
    passes, 36 ms without; docs/benchmarks.md, "Pauses of the garbage collector").
    What a request allocates is collected as before; only objects alive at start,
    which live as long as the process, are no longer walked."""
    gc.collect()
    gc.freeze()


class HealthOut(BaseModel):
    """``/health``: the service, ``ok`` or ``degraded``, and each dependency's check."""

    model_config = ConfigDict(extra="allow")

    service: str
    status: str = Field(description="ok, or degraded when a dependency does not answer")
    postgres: str
    redis: str


def add_ops_routes(app: FastAPI, runtime: Runtime) -> None:
    """``/health`` (200 when PostgreSQL and Redis answer, else 503) and ``/metrics``."""

    @app.get(
        "/health",
        tags=["ops"],
        response_model=HealthOut,
        responses={503: {"model": HealthOut, "description": "a dependency does not answer"}},
    )
    async def health() -> JSONResponse:
        checks = await runtime.health()
        ok = all(v == "ok" for v in checks.values())
        return JSONResponse(
            {"service": runtime.service, "status": "ok" if ok else "degraded", **checks},
            status_code=200 if ok else 503,
        )

    @app.get(
        "/metrics",
        tags=["ops"],
        response_class=Response,
        responses={
            200: {
                "description": "Prometheus text exposition format",
                "content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
            }
        },
    )
    async def metrics() -> Response:
        return Response(generate_latest(runtime.metrics.registry), media_type=CONTENT_TYPE_LATEST)
