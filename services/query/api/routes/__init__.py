"""The API's routers. Each module exposes ``router``; list it here to mount it."""

from __future__ import annotations

import importlib

from fastapi import APIRouter

ROUTER_MODULES = [
    "services.query.api.routes.index",
    "services.query.api.routes.me",
    "services.query.api.routes.memory",
    "services.query.api.routes.messages",
    "services.query.api.routes.facts",
    "services.query.api.routes.jarvus",
    "services.query.api.routes.checkpoints",
    "services.query.api.routes.tool_calls",
    "services.query.api.routes.users",
    "services.query.api.routes.admin",
    "services.query.api.routes.embeddings",
    "services.query.api.routes.decisions",
    "services.query.api.routes.episodes",
    "services.query.api.routes.people",
    "services.query.api.routes.context",
    "services.query.ui",
]


def routers() -> list[APIRouter]:
    return [importlib.import_module(m).router for m in ROUTER_MODULES]
