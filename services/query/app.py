"""Composition root of the query service: the agent API, tools, context, browser.

What the service serves is listed here, each part imported by name (no string
paths): :data:`ROUTERS`, the API's routers (a new route module is one more line);
:data:`BROWSER`, the memory browser's pages under ``/ui``; :data:`TOOLBOX`, the
tool table (a new tool is one more row) that ``GET /v1/tools``,
``POST /v1/tools/call`` and MCP read from ``app.state.tools``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline

from services.query.api import edges, faults, metrics, replica
from services.query.api.auth import KeyCache
from services.query.api.lean import LeanRoutes
from services.query.api.routes import (
    admin,
    archive,
    assets,
    chat_turns,
    checkpoints,
    context,
    decisions,
    embeddings,
    episodes,
    facts,
    graph_checkpoints,
    graph_store,
    index,
    jarvus,
    me,
    memory,
    messages,
    people,
    tool_calls,
    users,
    webhooks,
)
from services.query.context.theme_hints import HintCache
from services.query.embeddings.query import Resolver, default_resolver, user_query_vector
from services.query.mcp.http import mount as mount_mcp
from services.query.memory.facts import has_trigram
from services.query.memory.state import QueryState
from services.query.memory.supersede import register as register_supersession
from services.query.rpc import search as rpc
from services.query.settings import QuerySettings
from services.query.tools.context import CONTEXT_TOOL, EPISODE_RECALL_TOOL
from services.query.tools.memory import FACTS_TOOL, GUIDANCE, MEMORY_TOOL
from services.query.tools.people import RECALL_TOOL, REMEMBER_TOOL
from services.query.tools.registry import Toolbox
from services.query.ui import pages, session, settings_page
from services.query.ui.web import static_file
from services.query.webhooks.sender import Sender
from shared.embeddings import close_default_registry
from shared.errors import EngramError, InfrastructureError, InvalidRequest, NotFound
from shared.llm.jobs import Extractor, build_extractor
from shared.runtime import Runtime, add_ops_routes
from shared.tracing import TraceRequests, Tracing

log = logging.getLogger(__name__)

ROUTERS: tuple[APIRouter, ...] = (
    index.router,
    assets.router,
    me.router,
    memory.router,
    messages.router,
    facts.router,
    jarvus.router,
    checkpoints.router,
    graph_checkpoints.router,
    graph_store.router,
    chat_turns.router,
    tool_calls.router,
    users.router,
    admin.router,
    embeddings.router,
    decisions.router,
    episodes.router,
    people.router,
    context.router,
    archive.router,
    webhooks.router,
)
"""The API's routers (``services/query/api/routes/``), mounted in this order."""

BROWSER = APIRouter(prefix="/ui", include_in_schema=False)
"""The memory browser (``services/query/ui/``, docs/browser.md), mounted after the API."""
BROWSER.add_api_route("/static/{name}", static_file, methods=["GET"])
BROWSER.include_router(session.router)
BROWSER.include_router(pages.router)
BROWSER.include_router(settings_page.router)

TOOLBOX = Toolbox(
    [
        MEMORY_TOOL,
        FACTS_TOOL,
        REMEMBER_TOOL,
        RECALL_TOOL,
        CONTEXT_TOOL,
        EPISODE_RECALL_TOOL,
    ]
)
"""The tool table: ``memory`` (Nova 3.2: search, add, get, archive, list_themes),
``memory_facts`` (Navi: save, search, forget, list), ``remember`` and ``recall``
(Ash), ``context`` and ``episode_recall``; each row is a
:class:`~services.query.tools.registry.Tool` (spec, request models, handlers) from
the module of its behaviour under ``services/query/tools/``."""


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
    for router in (*ROUTERS, BROWSER):
        app.include_router(router)
    _install_error_handlers(app)
    # innermost: a checkpoint's put and get answered without FastAPI's routing (lean.py)
    app.add_middleware(LeanRoutes, fastapi=app, routes=graph_checkpoints.lean_routes())
    app.add_middleware(replica.ReplicaFallback, routing=reads)
    faults.install(app, registry=rt.metrics.registry, route_label=metrics.route_label)
    metrics.install(app, rt)
    if rt.tracing.enabled:
        # a SERVER span per request, current while the app runs (what it publishes continues it)
        app.add_middleware(TraceRequests, tracing=rt.tracing, route_of=metrics.route_label)
    mount_mcp(
        app,
        rt,
        tools=TOOLBOX,
        context=tool_calls.tool_context,
        max_body_bytes=settings.max_request_bytes,
    )
    edges.install(
        app,
        max_request_bytes=settings.max_request_bytes,
        per_path={archive.IMPORT_PATH: (settings.max_import_bytes, "ENGRAM_MAX_IMPORT_BYTES")},
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
