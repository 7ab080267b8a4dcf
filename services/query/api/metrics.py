"""Each API request's latency by method, route and status class: the middleware and the
route label it (and the fault and trace middlewares) name requests by."""

from __future__ import annotations

import time
from collections.abc import Mapping

from fastapi import FastAPI
from prometheus_client import Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.runtime import Runtime


def install(app: FastAPI, rt: Runtime) -> None:
    """``engram_http_request_seconds`` in the runtime's registry, observed by
    :class:`RequestLatency` around the app."""
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
