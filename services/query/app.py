"""Composition root of the query service: the agent API, tools, context, browser."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline
from prometheus_client import Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.query import ui
from services.query.api import edges, faults, replica
from services.query.api.auth import KeyCache
from services.query.api.routes import routers
from services.query.api.routes.archive import IMPORT_PATH
from services.query.context.theme_hints import HintCache
from services.query.embeddings.query import Resolver, default_resolver, user_query_vector
from services.query.mcp.http import mount as mount_mcp
from services.query.memory.facts import has_trigram
from services.query.memory.state import QueryState
from services.query.memory.supersede import register as register_supersession
from services.query.rpc import search as rpc
from services.query.settings import QuerySettings
from services.query.tools.memory import GUIDANCE
from services.query.tools.toolbox import TOOLBOX
from services.query.webhooks.sender import Sender
from shared.embeddings import close_default_registry
from shared.errors import EngramError, InfrastructureError, InvalidRequest, NotFound
from shared.llm.jobs import Extractor, build_extractor
from shared.runtime import Runtime, add_ops_routes
from shared.tracing import TraceRequests, Tracing

log = logging.getLogger(__name__)


def create_app(
    settings: QuerySettings | None = None,
    *,
    resolver: Resolver | None = None,
    tracing: Tracing | None = None,
) -> FastAPI:
    """The query service. ``resolver`` picks a user's embedder (default:
    ``shared.embeddings.resolve_embedder``); tests may pass their own, and their own
    ``tracing`` (default: as settings say)."""
    settings = settings or QuerySettings()
    rt = Runtime("query", settings, tracing=tracing)
    rt.on_stop.append(lambda _rt: close_default_registry())
    resolver = resolver or default_resolver
    if settings.warm_up:
        rt.on_start.append(_warm_up(resolver, settings))
    model = _model(settings, rt)
    register_supersession(rt, same=model.same_fact if model else None)
    state = QueryState.build(
        settings, resolver, rt.metrics.registry, rewrite=model.rewrite_decision if model else None
    )

    async def read_trigram(rt: Runtime) -> None:
        state.trigram = await has_trigram(rt.pool)

    rt.on_start.append(read_trigram)
    reads = replica.install(rt, settings)
    _webhook_sender(rt, settings)
    rpc.register(rt, state)
    # Swagger UI and ReDoc from the service's own files: /docs works offline
    app = FastAPIOffline(
        title="engram",
        summary="Long-term memory for chat assistants and AI agents",
        version="1",
        lifespan=rt.lifespan,
        redoc_url=None,  # routes/assets.py: ReDoc with its logo served here too
    )
    app.state.runtime = rt
    app.state.query = state
    app.state.hint_cache = HintCache(GUIDANCE)
    app.state.tools = TOOLBOX
    KeyCache(settings.key_cache_ttl_s).install(app, rt)
    app.state.reads = reads
    add_ops_routes(app, rt)
    for router in (*routers(), ui.router):
        app.include_router(router)
    _install_error_handlers(app)
    app.add_middleware(replica.ReplicaFallback, routing=reads)
    faults.install(app, registry=rt.metrics.registry, route_label=route_label)
    _install_metrics(app, rt)
    if rt.tracing.enabled:
        # a SERVER span per request, current while the app runs (what it publishes continues it)
        app.add_middleware(TraceRequests, tracing=rt.tracing, route_of=route_label)
    mount_mcp(app, rt, tools=TOOLBOX, max_body_bytes=settings.max_request_bytes)
    edges.install(
        app,
        max_request_bytes=settings.max_request_bytes,
        per_path={IMPORT_PATH: (settings.max_import_bytes, "ENGRAM_MAX_IMPORT_BYTES")},
    )
    return app


def _webhook_sender(rt: Runtime, settings: QuerySettings) -> None:
    """The webhook sender runs in every query process (they share the work)."""
    sender = Sender(settings, rt.metrics.registry)

    async def deliver() -> None:
        await sender.run(rt.pool)

    async def prune() -> None:
        await sender.prune(rt.pool)

    async def close(_: Runtime) -> None:
        await sender.close()

    rt.every(settings.webhook_poll_ms / 1000, deliver)
    rt.every(3600, prune)
    rt.on_stop.append(close)


def _model(settings: QuerySettings, rt: Runtime) -> Extractor | None:
    """The language model's jobs (decision rewrites, the duplicate band's check; its
    client closed on stop), or None when no model is configured."""
    if not settings.llm_configured:
        return None
    extractor, client = build_extractor(settings)
    if client is not None:

        async def close(_: Runtime) -> None:
            await client.aclose()

        rt.on_stop.append(close)
    return extractor


def _warm_up(resolver: Resolver, settings: QuerySettings) -> Callable[[Runtime], Awaitable[None]]:
    """Load the default embedding model before /health answers, so the first search does
    not pay for it (14 s with the local model). A failure is logged: search then degrades
    to full text as it would for any provider outage."""

    async def warm(rt: Runtime) -> None:
        started = time.perf_counter()
        vector = await user_query_vector(
            resolver, rt.pool, user_id="", settings=settings, text="warm-up"
        )
        log.info(
            "query embedding %s in %.1f s",
            "ready" if vector is not None else "unavailable",
            time.perf_counter() - started,
        )

    return warm


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(InvalidRequest)
    async def invalid(request: Request, exc: InvalidRequest) -> JSONResponse:
        return JSONResponse({"error": "invalid_request", "detail": str(exc)}, status_code=400)

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse({"error": "not_found", "detail": str(exc)}, status_code=404)

    @app.exception_handler(InfrastructureError)
    async def unavailable(request: Request, exc: InfrastructureError) -> JSONResponse:
        return JSONResponse({"error": "unavailable", "detail": str(exc)}, status_code=503)

    @app.exception_handler(EngramError)
    async def other(request: Request, exc: EngramError) -> JSONResponse:
        return JSONResponse({"error": type(exc).__name__, "detail": str(exc)}, status_code=400)


def _install_metrics(app: FastAPI, rt: Runtime) -> None:
    latency = Histogram(
        "engram_http_request_seconds",
        "API request latency by route and status class",
        ["method", "route", "status"],
        registry=rt.metrics.registry,
        buckets=(0.001, 0.0025, 0.005, 0.01, 0.015, 0.025, 0.04, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
    )
    app.state.http_latency = latency
    app.add_middleware(RequestLatency, latency=latency)


class RequestLatency:
    """ASGI middleware: each HTTP request's time into ``latency`` by method, route and
    status class. A plain ASGI wrapper rather than ``@app.middleware("http")``, whose
    ``BaseHTTPMiddleware`` runs every request in a task group of its own with memory
    streams between it and the app (~0.5 ms of CPU a search in process at load 10-12,
    less on a quiet machine). A request whose app raises is observed as a 5xx (the
    error handler outside answers it 500, ``faults.install``)."""

    def __init__(self, app: ASGIApp, *, latency: Histogram) -> None:
        self.app = app
        self.latency = latency

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        except Exception:
            status = 500  # answered by the error handler outside (faults.install)
            raise
        finally:
            self.latency.labels(scope["method"], route_label(scope), f"{status // 100}xx").observe(
                time.perf_counter() - started
            )


def route_label(scope: Mapping[str, object]) -> str:
    """The matched route's template with the prefix of the routers it was included under
    (``/ui/memories/{item_id}``): FastAPI puts the inner route in the scope, whose path
    lacks a prefix given to ``include_router``; prefixes are literal segments, so they are
    the request path's segments in front of the template's."""
    route = scope.get("route")
    template = getattr(route, "path", None)
    if not isinstance(template, str):
        return "unmatched"
    path = str(scope.get("path", ""))
    if ":path}" in template or not path.startswith("/"):
        return template
    segments = path.split("/")
    keep = len(segments) - template.count("/")
    prefix = "/".join(segments[:keep]) if keep > 1 else ""
    return prefix + template
