"""Composition root of the query service."""

from __future__ import annotations

from fastapi import FastAPI

from shared.runtime import Runtime, add_ops_routes
from shared.settings import CommonSettings


def create_app(settings: CommonSettings | None = None) -> FastAPI:
    settings = settings or CommonSettings()
    rt = Runtime("query", settings)
    app = FastAPI(title="engram query", lifespan=rt.lifespan)
    app.state.runtime = rt
    add_ops_routes(app, rt)
    return app
