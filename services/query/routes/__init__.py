"""The API's routers. Each module exposes ``router``; list it here to mount it."""

from __future__ import annotations

import importlib

from fastapi import APIRouter

ROUTER_MODULES = [
    "services.query.routes.index",
    "services.query.routes.me",
    "services.query.routes.memory",
    "services.query.routes.messages",
    "services.query.routes.facts",
    "services.query.routes.jarvus",
    "services.query.routes.checkpoints",
    "services.query.routes.tool_calls",
    "services.query.routes.users",
    "services.query.routes.admin",
    "services.query.routes.embeddings",
    "services.query.routes.decisions",
    "services.query.routes.episodes",
    "services.query.routes.people",
    "services.query.routes.context",
    "services.query.routes.assets",
    "services.query.ui",
]


def routers() -> list[APIRouter]:
    return [importlib.import_module(m).router for m in ROUTER_MODULES]
