"""The API's routers, imported by name: a new route module is one more line here.

The browser's router (``services.query.ui``) sits above the API and is mounted by
``create_app`` after these.
"""

from __future__ import annotations

from fastapi import APIRouter

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


def routers() -> list[APIRouter]:
    return list(ROUTERS)
